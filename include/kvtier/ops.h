// Operators' tools over a shared root_dir: du (usage per namespace), fsck
// (findings that cite layout-spec/FORMAT.md rules, optional repair) and gc
// (orphaned namespaces, capacity, temp files, corrupt files).
//
// Safe on a live shared volume: symlinks are never followed, only layout
// files (blocks, temp files, probe files, config.json, leases and the empty
// directories they leave) are ever deleted, files that appear or vanish
// during the walk are tolerated, and a root that does not look like a
// kvtier/vLLM root is refused unless `force`.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/result.h"

namespace kvtier {

struct ScanProgress {
  uint64_t files = 0;  // files seen so far
  uint64_t bytes = 0;  // their bytes
};

struct ScanOptions {
  std::string root;             // required
  int jobs = 4;                 // walker threads
  bool force = false;           // walk a root that does not look like one
  uint64_t tmp_grace_s = 3600;  // temp and probe files younger than this are in flight
  // Called from walker threads, at most every 100 ms; may be empty.
  std::function<void(const ScanProgress&)> progress;
};

struct NamespaceUsage {
  std::string dir;     // "<model>_<digest>"
  std::string model;   // model_name from config.json (or the directory's prefix)
  std::string digest;  // 12 hex characters
  bool has_config = false;
  // From config.json when it parses: tokens_per_hash, blocks_per_file, dtype,
  // tp_size, and the number of KV-cache groups (-1 / "" when unknown).
  int64_t tokens_per_hash = -1, blocks_per_file = -1, tp_size = -1, groups = -1;
  std::string dtype;
  std::vector<int64_t> ranks;  // the _r<rank> block directories
  uint64_t blocks = 0, bytes = 0, tmp_files = 0;
  int64_t newest_activity = 0, oldest_activity = 0;  // unix seconds, max(atime, mtime) of blocks
  uint64_t live_leases = 0;
};

struct DuReport {
  std::vector<NamespaceUsage> namespaces;  // sorted by dir
  uint64_t total_bytes = 0, total_blocks = 0, files_scanned = 0;
};

Result<DuReport> Du(const ScanOptions& options);

enum class FindingKind {
  kConfigMissing, kConfigTorn, kConfigDigestMismatch, kBadName, kSizeMismatch, kCrcMismatch,
  kStaleTmp, kProbeLeftover, kStrayFile, kEmptyDir,
};
std::string_view FindingKindName(FindingKind kind);

enum class RepairAction { kNone, kRemoved, kQuarantined };
std::string_view RepairActionName(RepairAction action);

struct Finding {
  FindingKind kind;
  std::string path;  // relative to the root
  std::string rule;  // "L78", ...
  RepairAction action = RepairAction::kNone;
  std::string detail;
};

struct FsckOptions : ScanOptions {
  bool repair = false;       // without it nothing changes
  bool verify_data = false;  // read every block and check its CRC32C
  uint64_t row_bytes = 0;    // expected block size; 0: each namespace's most common size
};

struct FsckReport {
  std::vector<Finding> findings;
  uint64_t files_scanned = 0, blocks_checked = 0, blocks_verified = 0;
  // e2fsck's convention: 0 clean, 1 problems repaired, 4 problems left.
  int ExitCode() const;
};

Result<FsckReport> Fsck(const FsckOptions& options);

struct GcOptions : ScanOptions {
  bool dry_run = false;
  std::optional<uint64_t> older_than_s;      // reclaim namespaces idle this long
  std::optional<uint64_t> max_bytes;         // keep block bytes under this
  std::optional<uint64_t> low_water_bytes;   // ... down to this (default max_bytes)
  std::vector<std::string> keep;             // namespace directories never touched
  uint64_t lease_ttl_s = 60;                 // leases refreshed within this are live
};

struct Reclaimed {
  std::string path;  // relative to the root
  uint64_t bytes = 0;
  std::string reason;  // orphaned_namespace, capacity, stale_tmp, corrupt
};

struct GcReport {
  bool dry_run = false;
  std::vector<Reclaimed> reclaimed;
  uint64_t bytes_reclaimed = 0, files_scanned = 0;
};

Result<GcReport> Gc(const GcOptions& options);

}  // namespace kvtier
