// ExecuteSync: one IoRequest as plain syscalls (the syscall backend's
// workers, io_uring's inline ops, and test fakes), plus the monotonic clock.
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <string_view>

#include "io/backend.h"

namespace kvtier::internal {

uint64_t MonotonicNowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

namespace {

int64_t Ret(long r) { return r < 0 ? -errno : r; }

// Whether openat2(2) can be called: kernels before 5.6 lack it (ENOSYS), and
// some container seccomp profiles refuse it (EPERM). Probed once on "/".
bool HaveOpenat2() {
  static const bool have = [] {
    open_how how{};
    how.flags = O_PATH | O_CLOEXEC;
    const long fd = syscall(SYS_openat2, AT_FDCWD, "/", &how, sizeof how);
    if (fd < 0) return false;
    close(static_cast<int>(fd));
    return true;
  }();
  return have;
}

// openat2's RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS by hand, where the kernel
// has no openat2: every directory is opened from the previous one with
// O_NOFOLLOW, the last name too, and ".." or an absolute path is refused
// (EXDEV, as openat2 does). A symlinked directory fails with ENOTDIR rather
// than ELOOP. The tier's paths are short relative ones, so the walk is a few
// syscalls, and only on kernels that old.
int64_t OpenByWalk(int dirfd, const char* path, int flags, mode_t mode) {
  std::string_view rest(path);
  if (rest.starts_with('/')) return -EXDEV;
  int cur = dirfd;
  auto release = [&] {
    if (cur != dirfd) close(cur);
  };
  for (size_t slash; (slash = rest.find('/')) != std::string_view::npos; rest.remove_prefix(slash + 1)) {
    const std::string name(rest.substr(0, slash));
    if (name.empty() || name == ".") continue;
    if (name == "..") {
      release();
      return -EXDEV;
    }
    const int next = openat(cur, name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const int err = errno;
    release();
    if (next < 0) return -err;
    cur = next;
  }
  if (rest == "..") {
    release();
    return -EXDEV;
  }
  const std::string leaf = rest.empty() ? "." : std::string(rest);
  const int64_t res = Ret(openat(cur, leaf.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode));
  release();
  return res;
}

int64_t Open(const IoRequest& r) {
  if (r.resolve == 0) return Ret(openat(r.dirfd, r.path, r.flags | O_CLOEXEC, r.mode));
  if (!HaveOpenat2()) return OpenByWalk(r.dirfd, r.path, r.flags, r.mode);
  const open_how how = OpenHowOf(r);
  return Ret(syscall(SYS_openat2, r.dirfd, r.path, &how, sizeof how));
}

}  // namespace

open_how OpenHowOf(const IoRequest& r) {
  open_how how{};
  how.flags = static_cast<uint64_t>(r.flags | O_CLOEXEC);
  const bool creates = (r.flags & O_CREAT) != 0 || (r.flags & O_TMPFILE) == O_TMPFILE;
  how.mode = creates ? r.mode : 0;  // openat2 refuses a mode that nothing uses
  how.resolve = r.resolve;
  return how;
}

int64_t ExecuteSync(const IoRequest& r) {
  if (r.deadline_ns != 0 && MonotonicNowNs() > r.deadline_ns) return -ETIMEDOUT;
  switch (r.op) {
    case IoOp::kStatx:
      if (r.path == nullptr) {
        return Ret(statx(r.fd, "", AT_EMPTY_PATH, kStatxMask, static_cast<struct statx*>(r.buf)));
      }
      return Ret(statx(r.dirfd, r.path, r.flags, kStatxMask, static_cast<struct statx*>(r.buf)));
    case IoOp::kMkdir: return Ret(mkdirat(r.dirfd, r.path, r.mode));
    case IoOp::kOpen: return Open(r);
    case IoOp::kRead: return Ret(pread(r.fd, r.buf, r.len, static_cast<off_t>(r.offset)));
    case IoOp::kWrite: return Ret(pwrite(r.fd, r.buf, r.len, static_cast<off_t>(r.offset)));
    case IoOp::kReadv:
      return Ret(preadv(r.fd, static_cast<const iovec*>(r.buf), static_cast<int>(r.len), static_cast<off_t>(r.offset)));
    case IoOp::kWritev:
      return Ret(pwritev(r.fd, static_cast<const iovec*>(r.buf), static_cast<int>(r.len), static_cast<off_t>(r.offset)));
    case IoOp::kFdatasync: return Ret(fdatasync(r.fd));
    case IoOp::kFsync: return Ret(fsync(r.fd));
    case IoOp::kFsetxattr: return Ret(fsetxattr(r.fd, r.name, r.buf, r.len, 0));
    case IoOp::kFgetxattr: return Ret(fgetxattr(r.fd, r.name, r.buf, r.len));
    case IoOp::kClose: return Ret(close(r.fd));
    case IoOp::kRename: return Ret(renameat(r.dirfd, r.path, r.dirfd, r.path2));
    case IoOp::kUnlink: return Ret(unlinkat(r.dirfd, r.path, 0));
    case IoOp::kTouchAtime: {
      const timespec times[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
      return Ret(futimens(r.fd, times));
    }
  }
  return -EINVAL;
}

}  // namespace kvtier::internal
