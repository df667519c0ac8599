// Directory fds (see dir_fd.h).
#include "fs/dir_fd.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace kvtier::internal {

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) close(fd_);
}

Result<UniqueFd> OpenRootDir(const std::string& root_dir) {
  const int fd = open(root_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "open " + root_dir);
  return UniqueFd(fd);
}

Result<UniqueFd> OpenDirAt(int parent_fd, const std::string& name, const std::string& display) {
  // With O_PATH | O_NOFOLLOW a symlink would be opened itself; O_DIRECTORY
  // then refuses it (ENOTDIR), as it refuses any other non-directory.
  const int fd = openat(parent_fd, name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) return UniqueFd(fd);
  const int err = errno;
  struct stat st;
  if ((err == ENOTDIR || err == ELOOP) && fstatat(parent_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISLNK(st.st_mode)) {
      return ErrnoToStatus(ELOOP, display + " is a symlink: refused (kvtier follows no symlink below root_dir)");
    }
    return ErrnoToStatus(ENOTDIR, display + " is not a directory");
  }
  return ErrnoToStatus(err, "open " + display);
}

Status FsyncDirFd(int dir_fd, const std::string& display) {
  const int fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "open " + display);
  const int rc = fsync(fd);
  const int err = errno;
  close(fd);
  return rc == 0 ? Status::Ok() : ErrnoToStatus(err, "fsync " + display);
}

Result<UniqueFd> MakeDirAt(int parent_fd, const std::string& name, const std::string& display, bool durable) {
  const bool created = mkdirat(parent_fd, name.c_str(), 0777) == 0;
  if (!created && errno != EEXIST) return ErrnoToStatus(errno, "mkdir " + display);
  // Best effort, as before: the directory itself exists either way.
  if (created && durable) FsyncDirFd(parent_fd, display + "/..").IgnoreError();
  return OpenDirAt(parent_fd, name, display);
}

}  // namespace kvtier::internal
