// The unit of work between the pure I/O scheduler and the backends that
// execute it (io_uring, a syscall thread pool, a fault-injecting fake). A
// request names one syscall; its completion carries the syscall's result in
// the liburing convention: >= 0 on success (bytes for reads and writes, an fd
// for open), -errno on failure.
#pragma once

#include <sys/stat.h>

#include <cstdint>

namespace kvtier::internal {

enum class IoOp : uint8_t {
  kStatx,      // statx(path) or, with fd >= 0 and no path, statx(fd, AT_EMPTY_PATH)
  kMkdir,      // mkdir(path, mode)
  kOpen,       // open(path, flags, mode) -> fd
  kRead,       // pread(fd, buf, len, offset)
  kWrite,      // pwrite(fd, buf, len, offset)
  kFdatasync,  // fdatasync(fd)
  kFsync,      // fsync(fd)
  kFsetxattr,  // fsetxattr(fd, name, buf, len, 0)
  kFgetxattr,  // fgetxattr(fd, name, buf, len) -> value length
  kClose,      // close(fd)
  kRename,     // rename(path, path2)
  kUnlink,     // unlink(path)
  kTouchAtime, // futimens(fd, {now, omit}): explicit atime, as relatime delays it
};

const char* IoOpName(IoOp op);

// What every kStatx asks for.
inline constexpr unsigned kStatxMask = STATX_SIZE | STATX_MTIME | STATX_ATIME | STATX_INO;

struct IoRequest {
  uint64_t tag = 0;  // echoed in the completion
  IoOp op = IoOp::kStatx;
  int fd = -1;
  const char* path = nullptr;   // owned by the issuer, valid until completion
  const char* path2 = nullptr;  // kRename: the new name
  const char* name = nullptr;   // kFsetxattr / kFgetxattr: the attribute
  void* buf = nullptr;          // data, xattr value, or struct statx*
  uint32_t len = 0;
  uint64_t offset = 0;
  int flags = 0;
  uint32_t mode = 0;
  uint64_t deadline_ns = 0;  // CLOCK_MONOTONIC; 0: none. Expired -> -ETIMEDOUT / -ECANCELED
};

struct IoCompletion {
  uint64_t tag = 0;
  int64_t res = 0;
};

// CLOCK_MONOTONIC in nanoseconds.
uint64_t MonotonicNowNs();

}  // namespace kvtier::internal
