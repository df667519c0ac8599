// Directory-fd primitives for walking and editing a tree that others can
// write: every step is relative to an open directory, no symlink is ever
// followed (O_NOFOLLOW at each component), and removals check that a name
// still refers to the inode that was examined. Errors are errno values so
// callers can tell "a symlink or not a directory" (ELOOP, ENOTDIR) from
// "cannot read" (EACCES, EIO) from "gone" (ENOENT).
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::internal {

// An owned file descriptor (closed on destruction; move-only).
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();

 private:
  int fd_ = -1;
};

// Opens the single component `name` under `dirfd` as a directory: 0, or the
// errno (ELOOP for a symlink, ENOTDIR for a file). AT_FDCWD takes a path the
// operator gave (followed as given).
int OpenDirAt(int dirfd, const std::string& name, UniqueFd* out);
// Opens "a/b/c" below `dirfd` one component at a time, as OpenDirAt does.
int OpenDirPath(int dirfd, std::string_view rel, UniqueFd* out);

struct DirEntry {
  std::string name;
  struct stat st;      // lstat of the entry (st_mode 0 when it failed)
  int stat_errno = 0;  // why the lstat failed (ENOENT: vanished meanwhile)
};
// Lists `dirfd` (without "." and ".."), each entry lstat'ed: 0 or the errno
// of opening or reading the directory. Holds the whole listing: only for
// directories whose size the caller bounds; ListDirChunks for the others.
int ListDir(int dirfd, std::vector<DirEntry>* out);

// The entries ListDirChunks holds at once in the scans of du, fsck and gc:
// ~1024 names and stats (~200 KiB), whatever a directory holds, so
// memory never grows with a directory's size.
inline constexpr size_t kListChunkEntries = 1024;
// Lists `dirfd` as ListDir does, in batches of at most `chunk` entries (>= 1)
// handed to on_chunk, which may consume them (the vector is cleared after
// each call) and returns false to stop: memory holds one batch whatever the
// directory's size. A batch is never empty, so a directory is empty exactly
// when on_chunk is never called. The directory is read while on_chunk runs:
// it may remove entries already handed to it (readdir then neither repeats
// nor skips the others, POSIX readdir); one created meanwhile may or may not
// be listed. 0, ECANCELED when on_chunk stopped, or the errno of opening or
// reading the directory (after the batches read before the error).
int ListDirChunks(int dirfd, size_t chunk, const std::function<bool(std::vector<DirEntry>&)>& on_chunk);

// Opens `name` under `dirfd` for reading data only if it is a regular file:
// O_NOFOLLOW | O_NONBLOCK (a FIFO cannot block the open), then fstat. With
// `no_atime` it asks for O_NOATIME and falls back where the kernel refuses it
// (EPERM: not the owner); *atime_kept says which one it got. 0 or the errno
// (EINVAL for "not a regular file").
int OpenRegularAt(int dirfd, const std::string& name, bool no_atime, UniqueFd* out, struct stat* st,
                  bool* atime_kept = nullptr);

// Removes `name` under `dirfd` if it is still the inode (dev, ino): 0, the
// errno, or ESTALE when another inode took its place meanwhile. ENOENT counts
// as removed (0). `dir` removes an (empty) directory. *unlinked (if given)
// is set true only when this call's unlink removed it (not found gone).
int UnlinkIfSameAt(int dirfd, const std::string& name, uint64_t dev, uint64_t ino, bool dir = false,
                   bool* unlinked = nullptr);

}  // namespace kvtier::internal
