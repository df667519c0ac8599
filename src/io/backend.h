// IoBackend: executes IoRequests and reports IoCompletions. Backends hold no
// policy: ordering, priorities and retries live in the scheduler.
//
// Thread safety: Submit and Reap are called from the I/O thread only;
// Wake may be called from any thread, to end a blocking Reap early.
#pragma once

#include <linux/openat2.h>

#include <memory>
#include <cstdint>
#include <span>
#include <string_view>

#include "io/io_request.h"
#include "kvtier/result.h"

namespace kvtier::internal {

class IoBackend {
 public:
  virtual ~IoBackend() = default;
  virtual std::string_view name() const = 0;
  // Queues the requests; every one of them completes exactly once, through
  // Reap, even when it cannot be started (with -errno). A non-OK status is
  // informational only.
  virtual Status Submit(std::span<const IoRequest> requests) = 0;
  // Moves up to out.size() completions into `out`; waits up to timeout_ms
  // (-1: until a completion or Wake) when none is ready. Returns the count.
  virtual size_t Reap(std::span<IoCompletion> out, int timeout_ms) = 0;
  virtual void Wake() = 0;
  // Registers memory that later reads and writes may target, so the kernel
  // maps it once instead of per I/O (io_uring fixed buffers). Call before the
  // first Submit. Backends without the feature return kUnavailable.
  virtual Status RegisterBuffers(std::span<const std::span<uint8_t>> regions) {
    (void)regions;
    return Status(StatusCode::kUnavailable, "this backend has no registered buffers");
  }
  // Reads and writes that used a registered buffer.
  virtual uint64_t fixed_buffer_ios() const { return 0; }
};

// A pool of `threads` threads running plain syscalls (the fallback where the
// kernel refuses io_uring). A deadline is checked before a request starts,
// and a syscall still running when it passes is interrupted with a signal
// (-ETIMEDOUT); one in a wait that only a fatal signal ends completes when
// it returns, as with io_uring (see sync_backend.cc). kUnavailable (with the
// errno) when the OS refuses a thread; the threads already started are
// stopped, so a refusal never terminates the process.
Result<std::unique_ptr<IoBackend>> MakeSyncBackend(int threads);

// Which requests the io_uring backend runs as plain syscalls on the
// submitting thread during Submit, instead of in the kernel's workers.
struct UringOptions {
  // kMkdir, kRename, kUnlink and kFsetxattr (the fs tier's `inline_metadata`
  // option says when that pays).
  bool inline_metadata = false;
  // kStatx of an open fd and kFgetxattr: on a local filesystem the inode is
  // in memory and a worker hand-off costs more than the call; on a network
  // filesystem (FUSE, NFS) either may wait for the server, which must never
  // stall the I/O thread.
  bool inline_fd_metadata = true;
  // Every request goes to the kernel's workers (IOSQE_ASYNC) instead of
  // being tried on the submitting thread first. On FUSE an O_DIRECT write
  // issued from the submitter waits there for the server, and a file's
  // first poll check sends a synchronous FUSE_POLL: on a network filesystem
  // io_uring_submit itself could hang the I/O thread.
  bool force_async = false;
  // The most kernel workers the ring may run at once, for bounded work
  // (reads and writes of regular files) and for unbounded work (opens,
  // renames, statx...); 0 keeps the kernel's bounds. The kernel bounds
  // bounded work at 4 workers per CPU by default: on a network or FUSE
  // filesystem, where each request sleeps a round trip in its worker, that
  // (8 on 2 CPUs) rather than the tier's slots limits the requests in flight.
  unsigned workers_max = 0;
};

// io_uring with `entries` submission slots. kUnavailable when the kernel
// refuses a ring (seccomp, kernel.io_uring_disabled, ENOSYS).
Result<std::unique_ptr<IoBackend>> MakeUringBackend(unsigned entries, UringOptions options = {});

// Executes one request synchronously with plain syscalls (shared by the
// syscall backend and by test fakes).
int64_t ExecuteSync(const IoRequest& req);

// The openat2 arguments of a kOpen with `resolve` set (O_CLOEXEC added).
open_how OpenHowOf(const IoRequest& req);

}  // namespace kvtier::internal
