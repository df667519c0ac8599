// The fs tier's start-up probes of its volume (FORMAT.md L63, L102): plain
// syscalls in the namespace directory, before the I/O loop runs, each on a
// probe file of its own that it removes again.
#include <fcntl.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "fs/fs_tier_internal.h"
#include "format/layout_names.h"
#include "util/log.h"

namespace kvtier::internal {
namespace {

// Creates the probe file with O_DIRECT (O_EXCL, L63: never opens what
// someone else put there), writes one aligned page and removes it. Returns 0
// or the errno that failed; an fd that came back without O_DIRECT counts as
// EINVAL (the filesystem dropped the flag).
int ODirectProbeErrno(int ns_fd, const std::string& name) {
  const int fd = openat(ns_fd, name.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC | O_DIRECT,
                        0644);
  if (fd < 0) {
    const int err = errno;
    if (err == EINVAL) unlinkat(ns_fd, name.c_str(), 0);  // some kernels create the file before refusing
    return err;
  }
  int err = (fcntl(fd, F_GETFL) & O_DIRECT) != 0 ? 0 : EINVAL;
  if (err == 0) {
    void* page = std::aligned_alloc(4096, 4096);
    std::memset(page, 0, 4096);
    const ssize_t n = write(fd, page, 4096);
    if (n != 4096) err = n < 0 ? errno : EIO;
    std::free(page);
  }
  close(fd);
  unlinkat(ns_fd, name.c_str(), 0);
  return err;
}

}  // namespace

// FORMAT.md L63: one page written with O_DIRECT into a probe file in the
// namespace directory, then removed. Only EINVAL says the filesystem refuses
// O_DIRECT (tmpfs before 6.6, overlayfs, FUSE). Any other failure (EACCES,
// EROFS, ENOSPC, EDQUOT) says nothing about O_DIRECT, so it stays on rather
// than the tier running buffered for life: each load and store falls back to
// buffered I/O by itself where an O_DIRECT open or transfer gets EINVAL.
bool ProbeODirect(int ns_fd, const std::string& ns_dir, uint64_t suffix, bool want_direct) {
  if (!want_direct) return false;
  const int err = ODirectProbeErrno(ns_fd, format::ODirectProbeName(suffix));
  if (err == 0) return true;
  if (err == EINVAL) {
    LogWarning("O_DIRECT is refused under " + ns_dir + " (EINVAL: tmpfs, overlayfs or FUSE?): buffered I/O");
    return false;
  }
  LogWarning("the O_DIRECT probe under " + ns_dir + " failed (" + ErrnoToStatus(err, "probe").ToString() +
             "), which says nothing about O_DIRECT: it stays on, and an I/O falls back to buffered where refused");
  return true;
}

namespace {

// Sets the CRC attribute to 4 zero bytes on an open probe file and reads it
// back: some filesystems accept a set they do not keep. kUnavailable means
// user xattrs do not work here (EOPNOTSUPP, or other bytes came back).
Status SetAndReadBack(int fd, const std::string& shown) {
  const uint8_t zero[format::kCrcXattrBytes] = {};
  if (fsetxattr(fd, format::kCrcXattr, zero, sizeof zero, 0) != 0) return ErrnoToStatus(errno, "fsetxattr " + shown);
  uint8_t back[8];
  const ssize_t n = fgetxattr(fd, format::kCrcXattr, back, sizeof back);
  if (n < 0) return ErrnoToStatus(errno, "fgetxattr " + shown);
  if (n != sizeof zero || std::memcmp(back, zero, sizeof zero) != 0) {
    return Status(StatusCode::kUnavailable, "fgetxattr " + shown + " read back other bytes than were set");
  }
  return Status::Ok();
}

}  // namespace

// FORMAT.md L102, as vLLM's probe_xattr (PR #57912): ".xattr_probe_<n>.tmp"
// must take and give back the CRC attribute. kUnavailable: user xattrs do
// not work here. A probe that fails for another reason (a full volume:
// tmpfs counts xattrs against its inode space) proves nothing either way:
// it is logged and counts as working; a store that cannot set the attribute
// fails, as it would on any volume that fills up later.
Status ProbeXattr(int ns_fd, const std::string& ns_dir, uint64_t suffix) {
  const std::string name = format::XattrProbeName(suffix);
  const std::string shown = ns_dir + "/" + name;
  const int fd = openat(ns_fd, name.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  Status s = fd < 0 ? ErrnoToStatus(errno, "create " + shown) : SetAndReadBack(fd, shown);
  if (fd >= 0) {
    close(fd);
    unlinkat(ns_fd, name.c_str(), 0);
  }
  if (s.ok() || s.code() == StatusCode::kUnavailable) return s;
  LogWarning("the user-xattr probe failed (" + s.ToString() + "), which says nothing either way: checksums "
             "stay on, in the user xattr where checksum_place allows");
  return Status::Ok();
}

}  // namespace kvtier::internal
