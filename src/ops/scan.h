// ScanTree: one parallel walk of a root_dir that classifies every entry by
// the layout rules (FORMAT.md §1, §6, §8, §9). du, fsck and gc are reports
// and actions over its result. The walk holds directory fds and opens each
// component with O_NOFOLLOW: symlinks are never followed (they are strays,
// or non-files at a layout name), and no non-regular file is opened.
//
// Memory does not grow with the number of blocks: a scan keeps per-namespace
// statistics of its blocks (BlockStats), never their list; a tool that acts
// on blocks walks again with ScanVisitors (ScanAgain). What is kept in
// lists are the anomalies (temp files, strays, bad names...), which fsck
// reports one by one, each list capped (CappedList): a hostile directory of
// 10^7 stray files costs a count, not gigabytes. Directories are read in
// batches of kListChunkEntries (ListDirChunks), never whole.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <utility>
#include <thread>
#include <memory>
#include <string>
#include <vector>

#include "format/root_list.h"
#include "kvtier/ops.h"
#include "util/dir_fd.h"

namespace kvtier::internal {

struct ScannedFile {
  std::string rel;  // path relative to the root
  uint64_t size = 0;   // st_size: what a reader sees
  uint64_t bytes = 0;  // what it holds on disk: min(st_size, 512 * st_blocks); a hole holds nothing
  int64_t mtime = 0, atime = 0;  // unix seconds
  uint64_t ino = 0, dev = 0;
  mode_t mode = 0;  // st_mode (file type and permissions)
  int64_t activity() const { return std::max(mtime, atime); }
};

// The sizes most blocks of a namespace have, in bounded memory whatever their
// number: a Misra-Gries summary of kTracked counters. Exact while the
// namespace has at most kTracked distinct sizes; beyond that, any size held
// by more than 1/(kTracked + 1) of the blocks is still among the counters.
class SizeSummary {
 public:
  static constexpr size_t kTracked = 64;
  void Add(uint64_t size, uint64_t n = 1);
  void Merge(const SizeSummary& other);
  // The most common size (0 when empty); on a tie the larger one (short
  // files are torn ones).
  uint64_t Mode() const;
  // Whether every block has size `size` (false when not exact).
  bool All(uint64_t size) const { return exact_ && counts_.size() == 1 && counts_.begin()->first == size; }

 private:
  void Shrink();
  std::map<uint64_t, uint64_t> counts_;
  bool exact_ = true;
};

// What a scan keeps of a namespace's blocks.
struct BlockStats {
  uint64_t count = 0, bytes = 0;   // bytes: ScannedFile::bytes summed
  int64_t newest = 0, oldest = 0;  // activity, unix seconds (0: no block)
  // The newest activity as gc counts it at the scan's clock (CountedUse,
  // FORMAT.md L155), and the blocks dated beyond its tolerance ahead.
  int64_t newest_counted = 0;
  uint64_t far_future = 0;
  SizeSummary sizes;               // of the blocks of at most kBlockBytesMax bytes
  uint64_t oversize = 0;           // blocks larger than kBlockBytesMax (never a row, never read)
  void Add(const ScannedFile& b, int64_t now);
  void Merge(const BlockStats& other);
};

// The longest list of one kind of finding a scan keeps per namespace (and
// of the root's strays): what a report can list, ~2 MiB of paths per kind.
// Past it, findings are only counted (CappedList::more): every report counts
// them all; fsck --repair and gc act on those listed, and a later pass (which
// lists afresh) on the rest.
inline constexpr size_t kFindingsListMax = 10000;

// A list holding at most kFindingsListMax entries, counting the others.
template <class T>
class CappedList {
 public:
  // Whether `v` was listed (false: only counted).
  bool push_back(T v) {
    if (items_.size() >= kFindingsListMax) return ++more_, false;
    items_.push_back(std::move(v));
    return true;
  }
  template <class... A>
  bool emplace_back(A&&... a) { return push_back(T(std::forward<A>(a)...)); }
  void Merge(CappedList&& o) {
    for (T& v : o.items_) push_back(std::move(v));
    more_ += o.more_;
  }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  const T& front() const { return items_.front(); }
  const std::vector<T>& listed() const { return items_; }
  uint64_t more() const { return more_; }  // found but not listed
  uint64_t total() const { return items_.size() + more_; }
  bool empty() const { return total() == 0; }

 private:
  std::vector<T> items_;
  uint64_t more_ = 0;
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
  BlockStats blocks;                   // of the well-placed <hex>.bin regular files
  CappedList<ScannedFile> non_files;  // directories, symlinks, FIFOs... at a block or config.json name
  // Temp files (<hex>.bin_<n>.tmp, config.json_<n>.tmp) and probe files
  // (.o_direct_probe_<n>.tmp, .xattr_probe_<n>.tmp) older than tmp_grace_s
  // when scanned: the stale ones, which fsck reports and gc removes. Only
  // they are listed, so each pass removes up to a full list of them
  // whatever number of younger ones (counted: young_tmps, young_probes).
  CappedList<ScannedFile> tmps, probes;
  uint64_t young_tmps = 0, young_probes = 0;
  CappedList<ScannedFile> leases;     // .kvtier/leases/<host>-<pid>-<n>.lease (and their .tmp)
  // The newest mtime of all temp files and of all leases, listed or not (0:
  // none): gc's orphan decision stays exact whatever the lists hold.
  int64_t tmps_newest = 0, leases_newest = 0;
  bool leases_known = true;            // false: .kvtier or leases/ or a lease could not be read
  std::optional<ScannedFile> root_marker;     // .kvtier/root_slot.json, a regular file (L100)
  std::optional<format::RootSlot> root_slot;  // what it says, when it parses
  CappedList<std::string> empty_dirs;
  CappedList<std::pair<std::string, std::string>> bad_names;  // path, why
  CappedList<std::string> strays;
  CappedList<ScanProblem> unreadable;  // directories or files that could not be read
};

struct TreeScan {
  std::string root;                          // as given (for messages)
  std::shared_ptr<UniqueFd> root_fd;         // the root directory every action starts from
  std::map<std::string, NsScan> namespaces;  // by "<model>_<digest>"
  CappedList<std::string> root_strays;       // root entries outside any namespace
  uint64_t files = 0;
};

// What a walk calls back, from the walker threads at once (each callback
// must be thread-safe). One thread walks a <hhh> directory and all it holds:
// for each <hh>_g<g> directory, `block` for each of its blocks, then
// `shard_dir` for it; then `shard_dir` for the <hhh> directory.
struct ScanVisitors {
  // A well-placed block, with the namespace's directory name and an fd of
  // the directory holding it. Returns whether the file is gone (removed).
  std::function<bool(const std::string& ns, const ScannedFile& block, int dir_fd)> block;
  // A shard directory after its contents were visited: its lstat from its
  // parent's listing (before any change), how many of the entries listed
  // are left, and an fd of its parent. Returns whether it is gone.
  std::function<bool(const std::string& ns, const ScannedFile& dir, size_t entries_left, int parent_fd)> shard_dir;
};

Result<TreeScan> ScanTree(const ScanOptions& options, const ScanVisitors& visit = {});
// Walks the root of `first` again (its fd: the same directory) with
// visitors; the result is a fresh scan of its own.
Result<TreeScan> ScanAgain(const ScanOptions& options, const TreeScan& first, const ScanVisitors& visit);

// Starts up to n threads running fn (fewer when the system has no more).
void StartThreads(int n, const std::function<void()>& fn, std::vector<std::thread>* threads);

// Splits "a/b/c" into "a/b" and "c".
std::pair<std::string, std::string> SplitRel(const std::string& rel);

}  // namespace kvtier::internal
