// ScanTree: one parallel walk of a root_dir that classifies every entry by
// the layout rules (FORMAT.md §1, §6, §8, §9). du, fsck and gc are reports
// and actions over its result. The walk holds directory fds and opens each
// component with O_NOFOLLOW: symlinks are never followed (they are strays,
// or non-files at a layout name), and no non-regular file is opened.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <thread>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "format/root_list.h"
#include "kvtier/ops.h"
#include "util/dir_fd.h"

namespace kvtier::internal {

struct ScannedFile {
  std::string rel;  // path relative to the root
  uint64_t size = 0;
  int64_t mtime = 0, atime = 0;  // unix seconds
  uint64_t ino = 0, dev = 0;
  mode_t mode = 0;  // st_mode (file type and permissions)
  int64_t activity() const { return std::max(mtime, atime); }
};

struct NsScan {
  std::string dir;     // "<model>_<digest>"
  std::string digest;  // the 12 hex characters of the name
  bool has_ns_dir = false;
  bool has_config = false;
  std::string config_text;    // config.json bytes (when has_config and read)
  std::string config_error;   // why config.json could not be read ("" when read)
  bool config_oversize = false;  // larger than kConfigBytesMax (never read)
  ScannedFile config;            // its lstat (when has_config)
  std::vector<int64_t> ranks;
  std::vector<ScannedFile> blocks;     // well-placed <hex>.bin regular files
  std::vector<ScannedFile> non_files;  // directories, symlinks, FIFOs... at a block or config.json name
  std::vector<ScannedFile> tmps;       // <hex>.bin_<n>.tmp and config.json_<n>.tmp
  std::vector<ScannedFile> probes;     // .o_direct_probe_<n>.tmp, .xattr_probe_<n>.tmp
  std::vector<ScannedFile> leases;     // .kvtier/leases/<host>-<pid>-<n>.lease (and their .tmp)
  bool leases_known = true;            // false: .kvtier or leases/ or a lease could not be read
  std::optional<ScannedFile> root_marker;     // .kvtier/root_slot.json, a regular file (L100)
  std::optional<format::RootSlot> root_slot;  // what it says, when it parses
  std::vector<std::string> empty_dirs;
  std::vector<std::pair<std::string, std::string>> bad_names;  // path, why
  std::vector<std::string> strays;
  std::vector<ScanProblem> unreadable;  // directories or files that could not be read
};

struct TreeScan {
  std::string root;                          // as given (for messages)
  std::shared_ptr<UniqueFd> root_fd;         // the root directory every action starts from
  std::map<std::string, NsScan> namespaces;  // by "<model>_<digest>"
  std::vector<std::string> root_strays;      // root entries outside any namespace
  uint64_t files = 0;
};

Result<TreeScan> ScanTree(const ScanOptions& options);

// Starts up to n threads running fn (fewer when the system has no more).
void StartThreads(int n, const std::function<void()>& fn, std::vector<std::thread>* threads);

// Splits "a/b/c" into "a/b" and "c".
std::pair<std::string, std::string> SplitRel(const std::string& rel);

}  // namespace kvtier::internal
