// The fs tier's own directories (see tier_dirs.h).
#include "fs/tier_dirs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace kvtier::internal {

Result<UniqueFd> OpenRootDir(const std::string& root_dir) {
  UniqueFd fd;
  if (const int err = OpenDirAt(AT_FDCWD, root_dir, &fd)) return ErrnoToStatus(err, "open " + root_dir);
  return fd;
}

Result<UniqueFd> MakeTierDir(int parent_fd, const std::string& name, const std::string& display, bool durable) {
  const bool created = mkdirat(parent_fd, name.c_str(), 0777) == 0;
  if (!created && errno != EEXIST) return ErrnoToStatus(errno, "mkdir " + display);
  // Best effort: the directory itself exists either way, and a failed
  // fsync of its parent only weakens durability, which callers cannot fix.
  if (created && durable) fsync(parent_fd);
  UniqueFd fd;
  const int err = OpenDirAt(parent_fd, name, &fd);
  if (err == ELOOP) {
    return ErrnoToStatus(err, display + " is a symlink: refused (kvtier follows no symlink below root_dir)");
  }
  if (err == ENOTDIR) return ErrnoToStatus(err, display + " is not a directory");
  if (err != 0) return ErrnoToStatus(err, "open " + display);
  return fd;
}

}  // namespace kvtier::internal
