// Directory-fd primitives (dir_fd.h).
#include "util/dir_fd.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>

namespace kvtier::internal {

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

int UniqueFd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

int OpenDirAt(int dirfd, const std::string& name, UniqueFd* out) {
  // The operator's own root path is followed as given; every component
  // below it is opened without following a symlink.
  const int nofollow = dirfd == AT_FDCWD ? 0 : O_NOFOLLOW;
  const int fd = ::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | nofollow);
  if (fd < 0) return errno;
  *out = UniqueFd(fd);
  return 0;
}

int OpenDirPath(int dirfd, std::string_view rel, UniqueFd* out) {
  UniqueFd cur;
  int at = dirfd;
  while (!rel.empty()) {
    const size_t slash = rel.find('/');
    const std::string part(rel.substr(0, slash));
    rel = slash == std::string_view::npos ? std::string_view() : rel.substr(slash + 1);
    if (part.empty() || part == "." || part == "..") return EINVAL;  // never leaves the tree
    UniqueFd next;
    if (const int err = OpenDirAt(at, part, &next)) return err;
    cur = std::move(next);
    at = cur.get();
  }
  if (!cur.valid()) {  // empty rel: the directory itself
    const int fd = ::fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return errno;
    cur = UniqueFd(fd);
  }
  *out = std::move(cur);
  return 0;
}

int ListDir(int dirfd, std::vector<DirEntry>* out) {
  out->clear();
  return ListDirChunks(dirfd, kListChunkEntries, [out](std::vector<DirEntry>& batch) {
    out->insert(out->end(), std::make_move_iterator(batch.begin()), std::make_move_iterator(batch.end()));
    return true;
  });
}

int ListDirChunks(int dirfd, size_t chunk, const std::function<bool(std::vector<DirEntry>&)>& on_chunk) {
  // readdir consumes its fd: list through a fresh open of "." so the
  // caller's fd keeps its own position and stays usable.
  const int fd = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::fdopendir(fd), &::closedir);
  if (dir == nullptr) {
    const int err = errno;
    ::close(fd);
    return err;
  }
  chunk = std::max<size_t>(chunk, 1);
  std::vector<DirEntry> batch;
  batch.reserve(chunk);
  errno = 0;
  while (dirent* e = ::readdir(dir.get())) {
    const std::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    DirEntry entry{std::string(name), {}, 0};
    if (::fstatat(fd, e->d_name, &entry.st, AT_SYMLINK_NOFOLLOW) != 0) {
      entry.stat_errno = errno;
      entry.st.st_mode = 0;
    }
    batch.push_back(std::move(entry));
    if (batch.size() == chunk) {
      if (!on_chunk(batch)) return ECANCELED;
      batch.clear();
    }
    errno = 0;
  }
  const int err = errno;  // readdir returns nullptr with errno set on failure
  if (!batch.empty() && !on_chunk(batch)) return ECANCELED;
  return err;
}

int OpenRegularAt(int dirfd, const std::string& name, bool no_atime, UniqueFd* out, struct stat* st,
                  bool* atime_kept) {
  const int flags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
  int fd = no_atime ? ::openat(dirfd, name.c_str(), flags | O_NOATIME) : -1;
  if (no_atime && fd < 0 && errno != EPERM) return errno;
  const bool kept = fd >= 0;
  if (fd < 0) fd = ::openat(dirfd, name.c_str(), flags);
  if (fd < 0) return errno;
  UniqueFd owned(fd);
  if (::fstat(fd, st) != 0) return errno;
  if (!S_ISREG(st->st_mode)) return EINVAL;
  if (atime_kept != nullptr) *atime_kept = kept;
  *out = std::move(owned);
  return 0;
}

int UnlinkIfSameAt(int dirfd, const std::string& name, uint64_t dev, uint64_t ino, bool dir, bool* unlinked) {
  struct stat st;
  if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return errno == ENOENT ? 0 : errno;
  if (st.st_dev != dev || st.st_ino != ino) return ESTALE;  // replaced meanwhile: leave it
  if (::unlinkat(dirfd, name.c_str(), dir ? AT_REMOVEDIR : 0) != 0) return errno == ENOENT ? 0 : errno;
  if (unlinked != nullptr) *unlinked = true;
  return 0;
}

}  // namespace kvtier::internal
