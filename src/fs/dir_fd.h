// Directory fds for the fs tier's own files outside the block tree
// (namespace setup, config.json, the O_DIRECT probe, leases). root_dir is
// the operator's and used as given (L1); below it, on a volume that others
// may write, each level is opened from its parent's fd with O_NOFOLLOW, so a
// planted symlink is refused with a Status naming the path, never followed,
// and later *at() calls stay in the directory that was checked.
#pragma once

#include <string>
#include <utility>

#include "kvtier/result.h"

namespace kvtier::internal {

// An owned file descriptor, closed on destruction; -1 when empty.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

// root_dir itself, following symlinks in it (the operator chose the path):
// an O_PATH directory fd.
Result<UniqueFd> OpenRootDir(const std::string& root_dir);

// The directory `name` (one component) in `parent_fd`, never through a
// symlink: an O_PATH directory fd. `display` names it in errors.
Result<UniqueFd> OpenDirAt(int parent_fd, const std::string& name, const std::string& display);

// mkdirat (an existing directory is fine), then OpenDirAt. With `durable`,
// the parent is fsynced when the directory was created here.
Result<UniqueFd> MakeDirAt(int parent_fd, const std::string& name, const std::string& display, bool durable);

// fsync of a directory held as an O_PATH fd (reopened read-only through ".").
Status FsyncDirFd(int dir_fd, const std::string& display);

}  // namespace kvtier::internal
