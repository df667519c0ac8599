// Helpers shared by du, fsck and gc.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "format/layout_names.h"
#include "kvtier/ops.h"
#include "ops/gc_candidates.h"
#include "ops/gc_histogram.h"
#include "ops/scan.h"

namespace kvtier::internal {

// Leases refreshed within this many seconds are live (FORMAT.md L74).
inline constexpr uint64_t kDefaultLeaseTtlS = format::kLeaseTtlS;
using format::kLeaseRefreshS;

struct ConfigInfo {
  bool parses = false;          // a JSON object
  bool digest_matches = false;  // its fields hash to the directory's digest (L79)
  std::string model, dtype, engine, mem_layout;
  int64_t tokens_per_hash = -1, blocks_per_file = -1, tp_size = -1, groups = -1, page_size = -1;
  int64_t page_bytes = -1;   // an SGLang namespace's page file bytes (L104, L107)
  std::vector<int64_t> group_tokens;  // each group's tokens_per_block, in order (-1: not an integer)
  bool sealed = false;       // a "kvtier_seal" member (FORMAT.md L162, L180)
  std::string seal_key_id;   // its key id, 32 lowercase hex digits ("" when not one)
};

// Whether `then` (unix seconds) lies at least / at most `s` seconds before
// `now`, without overflow whatever the timestamps; s >= kDurationNeverS is
// never reached (a naive now - s would wrap negative for such values and
// turn "older than" into "newer than", inverting gc).
inline bool AgeAtLeast(int64_t now, int64_t then, uint64_t s) {
  if (s >= kDurationNeverS || then > now) return false;
  return static_cast<uint64_t>(now) - static_cast<uint64_t>(then) >= s;  // modular: exact below 2^64
}
inline bool AgeAtMost(int64_t now, int64_t then, uint64_t s) {
  return s >= kDurationNeverS || then >= now || static_cast<uint64_t>(now) - static_cast<uint64_t>(then) <= s;
}

// kInvalidArgument naming the argument: an empty root or one with a NUL,
// jobs outside 1..kScanJobsMax; for gc also a keep name that is not a bare
// directory name and low_water_bytes above max_bytes.
Status CheckScanOptions(const ScanOptions& o);
Status CheckGcOptions(const GcOptions& o);

// The three tools without their watch (ops.cc runs them under RunWatched).
Result<DuReport> DuUnwatched(const ScanOptions& options);
Result<FsckReport> FsckUnwatched(const FsckOptions& options);
Result<GcReport> GcUnwatched(const GcOptions& options);

ConfigInfo ParseConfig(const NsScan& ns);
uint64_t LiveLeases(const NsScan& ns, uint64_t ttl_s, int64_t now);
// The size most blocks of the namespace have (0 without blocks).
uint64_t MostCommonSize(const NsScan& ns);

// du, fsck and gc over one scanned root (the public functions scan first;
// fsck and gc walk it again through `first`'s root fd where they act on blocks).
DuReport DuScanned(const TreeScan& scan);
// A check of one block beyond fsck's own (several roots: the block's root).
using ExtraBlockCheck = std::function<std::optional<Finding>(const std::string& ns, const ScannedFile& block)>;
Result<FsckReport> FsckScanned(const FsckOptions& options, const TreeScan& first, const ExtraBlockCheck& extra = {});
// The first walk's use times (blocks of namespaces not kept), when gc's first
// walk made them (with max_bytes; a single root).
struct FirstWalkUse {
  explicit FirstWalkUse(uint64_t candidates_bytes_max) : candidates(candidates_bytes_max) {}
  int64_t now = 0;  // the time the buckets are relative to
  UseHistogram histogram;
  CandidateBuffer candidates;  // the oldest blocks, for a capacity trim without another walk
};
// What gc's first walk collects into `use` (blocks of namespaces not kept).
ScanVisitors FirstWalkVisitors(const GcOptions& options, FirstWalkUse* use);
// Namespaces in `no_reclaim` are never reclaimed whole (several roots decide together).
Result<GcReport> GcScanned(const GcOptions& options, const TreeScan& first, const std::set<std::string>& no_reclaim,
                           FirstWalkUse* first_use = nullptr);
// The namespaces gc would reclaim whole (L92) by what this scan shows.
std::set<std::string> OrphanedNamespaces(const GcOptions& options, const TreeScan& scan);

// Several roots of one tier (FORMAT.md L99): `root` holds a ','.
bool IsRootList(const std::string& root);
Result<DuReport> DuRoots(const ScanOptions& options);
Result<FsckReport> FsckRoots(const FsckOptions& options);
Result<GcReport> GcRoots(const GcOptions& options);

// Changes a scanned tree only through directory fds opened from its root
// one component at a time (O_NOFOLLOW), and removes a name only while it is
// still the inode that was scanned: another instance may have replaced it.
class TreeEditor {
 public:
  explicit TreeEditor(std::shared_ptr<UniqueFd> root) : root_(std::move(root)) {}
  // 0 (removed, or already gone), ESTALE (replaced meanwhile) or the errno;
  // *unlinked (if given) set true only when this call removed it.
  int Remove(const ScannedFile& f, bool* unlinked = nullptr) const;
  // The same, where `dir_fd` is the directory holding f (a walk's fd).
  int RemoveAt(int dir_fd, const ScannedFile& f, bool* unlinked = nullptr) const;
  // Removes the directory root/rel if it is empty: 0 or the errno.
  int RemoveEmptyDir(const std::string& rel) const;
  // The directory root/rel's lstat now, as a walk would list it (nullopt:
  // gone, or not a directory); Remove() of it is an rmdir of that inode.
  std::optional<ScannedFile> LookAtDir(const std::string& rel) const;
  // Opens the directory root/rel: 0 or the errno.
  int OpenDir(const std::string& rel, UniqueFd* out) const { return OpenDirPath(root_->get(), rel, out); }

 private:
  std::shared_ptr<UniqueFd> root_;
};

}  // namespace kvtier::internal
