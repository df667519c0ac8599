// The clear of a namespace's block directory on one root, removing only what
// the layout's parsers (format/layout_names.h) call a block file (L7, L8) or
// a block's temp file (L55) in its right shard (L6), and only regular files;
// directories, symlinks and foreign names stay. No symlink is followed on the
// way (L98).
//
// Every syscall is announced as one watched call (io/io_watch.h), so that
// ClearBlockDirs can run the walk under a watch and give up on a hung mount;
// a walk abandoned by its watch makes no further call once the stuck one
// returns (ECANCELED).
#include "ops/clear_blocks.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <iterator>

#include "format/layout_names.h"
#include "io/io_watch.h"
#include "util/dir_fd.h"

namespace kvtier::internal {
namespace {

int OpenWatched(int dirfd, const std::string& name, const std::string& path, UniqueFd* out) {
  IoScope scope(path);
  return scope.cancelled() ? ECANCELED : OpenDirAt(dirfd, name, out);
}

// The whole listing (a shard directory's, bounded by the sharding); each
// batch of names and stats is one watched call.
int ListWatched(int dirfd, const std::string& path, std::vector<DirEntry>* out) {
  IoScope scope(path);
  if (scope.cancelled()) return ECANCELED;
  return ListDirChunks(dirfd, kListChunkEntries, [&](std::vector<DirEntry>& chunk) {
    scope.Step();
    std::move(chunk.begin(), chunk.end(), std::back_inserter(*out));
    return true;
  });
}

int UnlinkWatched(int dirfd, const std::string& path, const DirEntry& e, bool dir) {
  IoScope scope(path);
  return scope.cancelled() ? ECANCELED : UnlinkIfSameAt(dirfd, e.name, e.st.st_dev, e.st.st_ino, dir);
}

// A regular file named as a block (or its temp file) of this shard, that the filter accepts.
bool IsBlockFile(const DirEntry& e, std::string_view shard1, const format::Shard2& shard2,
                 const BlockNameFilter& filter) {
  if (e.stat_errno != 0 || !S_ISREG(e.st.st_mode)) return false;
  std::optional<std::string_view> hex = format::BlockFileHex(e.name);
  if (!hex) hex = format::BlockTmpHex(e.name);
  return hex && format::BlockInShard(*hex, shard1, shard2.hh) && (!filter || filter(*hex, shard2.group));
}

// What a clear removes, and whom it tells of each block file it removed.
struct ClearRules {
  const BlockNameFilter& filter;
  const BlockRemovedFn& on_removed;
};

Status ClearShard2(int shard1_fd, const std::string& shown, std::string_view shard1, const DirEntry& d,
                   const ClearRules& rules, uint64_t* removed) {
  const std::optional<format::Shard2> parsed = format::ParseShard2Name(d.name);
  if (!parsed || !S_ISDIR(d.st.st_mode)) return Status::Ok();
  UniqueFd fd;
  const std::string path = shown + "/" + d.name;
  if (int err = OpenWatched(shard1_fd, d.name, path, &fd); err != 0) {
    return err == ENOENT ? Status::Ok() : ErrnoToStatus(err, "open " + path);
  }
  std::vector<DirEntry> files;
  if (int err = ListWatched(fd.get(), path, &files); err != 0) return ErrnoToStatus(err, "list " + path);
  for (const DirEntry& f : files) {
    if (!IsBlockFile(f, shard1, *parsed, rules.filter)) continue;
    const int err = UnlinkWatched(fd.get(), path + "/" + f.name, f, /*dir=*/false);
    if (err != 0 && err != ESTALE) return ErrnoToStatus(err, "unlink " + path + "/" + f.name);
    if (err != 0) continue;
    ++*removed;
    const std::optional<std::string_view> hex = format::BlockFileHex(f.name);  // not a temp file's
    if (hex && rules.on_removed) rules.on_removed(*hex, parsed->group);
  }
  // Best effort: fails (ENOTEMPTY) where anything is left, or a store made a file meanwhile.
  (void)UnlinkWatched(shard1_fd, path, d, /*dir=*/true);
  return Status::Ok();
}

Status ClearShard1(int block_fd, const std::string& shown, const DirEntry& d, const ClearRules& rules,
                   uint64_t* removed) {
  if (!format::IsShard1Name(d.name) || !S_ISDIR(d.st.st_mode)) return Status::Ok();
  UniqueFd fd;
  const std::string path = shown + "/" + d.name;
  if (int err = OpenWatched(block_fd, d.name, path, &fd); err != 0) {
    return err == ENOENT ? Status::Ok() : ErrnoToStatus(err, "open " + path);
  }
  std::vector<DirEntry> shards;
  if (int err = ListWatched(fd.get(), path, &shards); err != 0) return ErrnoToStatus(err, "list " + path);
  for (const DirEntry& s : shards) KVTIER_RETURN_IF_ERROR(ClearShard2(fd.get(), path, d.name, s, rules, removed));
  (void)UnlinkWatched(block_fd, path, d, /*dir=*/true);
  return Status::Ok();
}

}  // namespace

Result<uint64_t> ClearBlockDir(const std::string& root_dir, const std::string& block_dir_name,
                               const BlockNameFilter& filter, const BlockRemovedFn& on_removed) {
  UniqueFd root;
  if (int err = OpenWatched(AT_FDCWD, root_dir, root_dir, &root); err != 0) {
    return ErrnoToStatus(err, "open " + root_dir);
  }
  const std::string shown = root_dir + "/" + block_dir_name;
  UniqueFd block;
  if (int err = OpenWatched(root.get(), block_dir_name, shown, &block); err != 0) {
    if (err == ENOENT) return uint64_t{0};
    return ErrnoToStatus(err, "open " + shown);
  }
  std::vector<DirEntry> entries;
  if (int err = ListWatched(block.get(), shown, &entries); err != 0) return ErrnoToStatus(err, "list " + shown);
  uint64_t removed = 0;
  const ClearRules rules{filter, on_removed};
  for (const DirEntry& d : entries) KVTIER_RETURN_IF_ERROR(ClearShard1(block.get(), shown, d, rules, &removed));
  return removed;
}

Result<uint64_t> ClearBlockDirs(const std::vector<std::string>& roots, const std::string& block_dir_name,
                                uint32_t io_timeout_ms, const BlockNameFilter& filter,
                                const BlockRemovedFn& on_removed) {
  uint64_t removed = 0;
  for (size_t i = 0; i < roots.size(); ++i) {
    // The abandoned walk of a hung mount owns its copies of the names and
    // the callbacks: the caller may be gone before it returns.
    Result<uint64_t> n = RunWatchedFor<uint64_t>(io_timeout_ms, "", [root = roots[i], block_dir_name, filter, on_removed] {
      return ClearBlockDir(root, block_dir_name, filter, on_removed);
    });
    if (!n.ok()) return roots.size() == 1 ? n : n.status().WithContext("root_dir[" + std::to_string(i) + "]");
    removed += *n;
  }
  return removed;
}

}  // namespace kvtier::internal
