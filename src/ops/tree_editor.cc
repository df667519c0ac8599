// TreeEditor (ops_internal.h): how du, fsck and gc change a scanned tree,
// through directory fds from its root, and only the inode they examined.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "io/io_watch.h"
#include "ops/ops_internal.h"

namespace kvtier::internal {

int TreeEditor::Remove(const ScannedFile& f, bool* unlinked) const {
  const auto [dir, name] = SplitRel(f.rel);
  IoScope io(f.rel);
  if (io.cancelled()) return ECANCELED;  // the call was abandoned at a hang: change nothing more
  UniqueFd fd;
  if (const int err = OpenDir(dir, &fd)) return err == ENOENT ? 0 : err;
  return UnlinkIfSameAt(fd.get(), name, f.dev, f.ino, S_ISDIR(f.mode), unlinked);
}

int TreeEditor::RemoveAt(int dir_fd, const ScannedFile& f, bool* unlinked) const {
  IoScope io(f.rel);
  if (io.cancelled()) return ECANCELED;
  return UnlinkIfSameAt(dir_fd, SplitRel(f.rel).second, f.dev, f.ino, S_ISDIR(f.mode), unlinked);
}

int TreeEditor::RemoveEmptyDir(const std::string& rel) const {
  const auto [dir, name] = SplitRel(rel);
  IoScope io(rel);
  if (io.cancelled()) return ECANCELED;
  UniqueFd fd;
  if (const int err = OpenDir(dir, &fd)) return err;
  return unlinkat(fd.get(), name.c_str(), AT_REMOVEDIR) == 0 ? 0 : errno;
}

std::optional<ScannedFile> TreeEditor::LookAtDir(const std::string& rel) const {
  const auto [parent, leaf] = SplitRel(rel);
  IoScope io(rel);
  UniqueFd fd;
  struct stat st;
  if (io.cancelled() || OpenDir(parent, &fd) != 0 || fstatat(fd.get(), leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
      !S_ISDIR(st.st_mode)) {
    return std::nullopt;
  }
  ScannedFile dir;
  dir.rel = rel;
  dir.mtime = st.st_mtim.tv_sec;
  dir.dev = st.st_dev, dir.ino = st.st_ino;
  dir.mode = st.st_mode;
  return dir;
}

}  // namespace kvtier::internal
