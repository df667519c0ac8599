// ScanTree: one parallel walk of a root_dir that classifies every entry by
// the layout rules (FORMAT.md §1, §6, §8, §9). du, fsck and gc are reports
// and actions over its result. Symlinks are never followed (they are strays).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/ops.h"

namespace kvtier::internal {

struct ScannedFile {
  std::string rel;  // path relative to the root
  uint64_t size = 0;
  int64_t mtime = 0, atime = 0;  // unix seconds
  uint64_t ino = 0, dev = 0;
  int64_t activity() const { return std::max(mtime, atime); }
};

struct NsScan {
  std::string dir;     // "<model>_<digest>"
  std::string digest;  // the 12 hex characters of the name
  bool has_ns_dir = false;
  bool has_config = false;
  std::string config_text;  // config.json bytes (when has_config)
  std::vector<int64_t> ranks;
  std::vector<ScannedFile> blocks;  // well-placed <hex>.bin files
  std::vector<ScannedFile> tmps;    // *.bin_<n>.tmp and config.json_<n>.tmp
  std::vector<ScannedFile> probes;  // .o_direct_probe_*.tmp
  std::vector<ScannedFile> leases;  // .kvtier/leases/*.lease
  std::vector<std::string> empty_dirs;
  std::vector<std::pair<std::string, std::string>> bad_names;  // path, why
  std::vector<std::string> strays;
};

struct TreeScan {
  std::map<std::string, NsScan> namespaces;  // by "<model>_<digest>"
  std::vector<std::string> root_strays;      // root entries outside any namespace
  uint64_t files = 0;
};

Result<TreeScan> ScanTree(const ScanOptions& options);

// Name rules shared with the actions.
bool IsLowerHex(std::string_view s, size_t len);
// "<prefix>_<12 hex>" -> the digest; "<ns>_r<rank>" -> the namespace and rank.
std::optional<std::string> NamespaceDigest(std::string_view name);
std::optional<std::pair<std::string, int64_t>> BlockDirOf(std::string_view name);

}  // namespace kvtier::internal
