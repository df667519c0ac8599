// The unit of work between the pure I/O scheduler and the backends that
// execute it (io_uring, a syscall thread pool, a fault-injecting fake). A
// request names one syscall; its completion carries the syscall's result in
// the liburing convention: >= 0 on success (bytes for reads and writes, an fd
// for open), -errno on failure.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>

#include <cstdint>

namespace kvtier::internal {

enum class IoOp : uint8_t {
  kStatx,      // statx(dirfd, path, flags) or, with fd >= 0 and no path, statx(fd, AT_EMPTY_PATH)
  kMkdir,      // mkdirat(dirfd, path, mode)
  kOpen,       // openat(dirfd, path, flags, mode), or openat2 with `resolve` -> fd
  kRead,       // pread(fd, buf, len, offset)
  kWrite,      // pwrite(fd, buf, len, offset)
  kFdatasync,  // fdatasync(fd)
  kFsync,      // fsync(fd)
  kFsetxattr,  // fsetxattr(fd, name, buf, len, 0)
  kFgetxattr,  // fgetxattr(fd, name, buf, len) -> value length
  kClose,      // close(fd)
  kRename,     // renameat(dirfd, path, dirfd, path2)
  kUnlink,     // unlinkat(dirfd, path, 0)
  kReadv,      // preadv(fd, (const iovec*)buf, iovcnt = len, offset)
  kWritev,     // pwritev(fd, (const iovec*)buf, iovcnt = len, offset)
  kTouchAtime, // futimens(fd, {now, omit}): explicit atime, as relatime delays it (stays last)
};

// What every kStatx asks for (STATX_TYPE: callers refuse what is not a regular file).
inline constexpr unsigned kStatxMask = STATX_TYPE | STATX_SIZE | STATX_MTIME | STATX_ATIME | STATX_INO;

struct IoRequest {
  uint64_t tag = 0;  // echoed in the completion
  IoOp op = IoOp::kStatx;
  int fd = -1;
  int dirfd = AT_FDCWD;         // path ops resolve a relative `path` (and `path2`) from here
  const char* path = nullptr;   // owned by the issuer, valid until completion
  const char* path2 = nullptr;  // kRename: the new name
  const char* name = nullptr;   // kFsetxattr / kFgetxattr: the attribute
  void* buf = nullptr;          // data, xattr value, or struct statx*
  uint32_t len = 0;
  uint64_t offset = 0;
  int flags = 0;    // kOpen: O_* flags; kStatx with a path: AT_* flags (AT_SYMLINK_NOFOLLOW)
  uint32_t mode = 0;
  // kOpen: RESOLVE_* flags (linux/openat2.h). Non-zero makes the open an
  // openat2, so that e.g. RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS keeps it
  // inside `dirfd`'s tree whatever symlinks a writer of the volume planted.
  uint64_t resolve = 0;
  uint64_t deadline_ns = 0;  // CLOCK_MONOTONIC; 0: none. Expired -> -ETIMEDOUT / -ECANCELED
};

struct IoCompletion {
  uint64_t tag = 0;
  int64_t res = 0;
};

// CLOCK_MONOTONIC in nanoseconds.
uint64_t MonotonicNowNs();

}  // namespace kvtier::internal
