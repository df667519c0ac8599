// The io_uring backend. Every request becomes one SQE; an eventfd poll lets
// Wake() end a blocking Reap. Deadlines are kept here, not in the ring: Reap
// waits no longer than the nearest one and cancels (ASYNC_CANCEL) a request
// still in flight when it passes. A linked timeout per request cost one more
// SQE, an armed timer and its completion for every syscall, about 7 % of a
// store's CPU and 10-20 % of a load's (measured with bench/fio_compare.sh),
// to bound the rare hung one.
// Opcodes the running kernel does not support (found by probing) run inline
// with plain syscalls, so an older kernel loses speed, not function. Opens
// with RESOLVE_* flags are OPENAT2 SQEs: the kernel applies them during its
// own path walk, at no extra request.
#include <liburing.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <queue>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "io/backend.h"
#include "util/log.h"

namespace kvtier::internal {
namespace {

// Not ~0: liburing reserves that (LIBURING_UDATA_TIMEOUT) for its own wait
// timeouts on kernels without IORING_FEAT_EXT_ARG (< 5.11) and drops such
// completions, which would lose a wake-up. Scheduler tags count up from 0.
constexpr uint64_t kWakeTag = ~uint64_t{0} - 2;
constexpr uint64_t kCancelTag = ~uint64_t{0} - 1;

int UringOpcode(IoOp op) {
  switch (op) {
    case IoOp::kStatx: return IORING_OP_STATX;
    case IoOp::kMkdir: return IORING_OP_MKDIRAT;
    case IoOp::kOpen: return IORING_OP_OPENAT;
    case IoOp::kRead: return IORING_OP_READ;
    case IoOp::kWrite: return IORING_OP_WRITE;
    case IoOp::kReadv: return IORING_OP_READV;
    case IoOp::kWritev: return IORING_OP_WRITEV;
    case IoOp::kFdatasync:
    case IoOp::kFsync: return IORING_OP_FSYNC;
    case IoOp::kFsetxattr: return IORING_OP_FSETXATTR;
    case IoOp::kFgetxattr: return IORING_OP_FGETXATTR;
    case IoOp::kClose: return IORING_OP_CLOSE;
    case IoOp::kRename: return IORING_OP_RENAMEAT;
    case IoOp::kUnlink: return IORING_OP_UNLINKAT;
    case IoOp::kTouchAtime: return -1;  // no io_uring opcode: runs inline
  }
  return -1;
}

// A registered region: the iovec index and its bounds.
struct FixedRegion {
  uintptr_t begin, end;
  int index;
};

// `how` is where an openat2's open_how lives until the kernel has consumed
// the SQE (nullptr for every other request).
void Prep(io_uring_sqe* sqe, const IoRequest& r, open_how* how) {
  switch (r.op) {
    case IoOp::kStatx:
      if (r.path == nullptr) {
        io_uring_prep_statx(sqe, r.fd, "", AT_EMPTY_PATH, kStatxMask, static_cast<struct statx*>(r.buf));
      } else {
        io_uring_prep_statx(sqe, r.dirfd, r.path, r.flags, kStatxMask, static_cast<struct statx*>(r.buf));
      }
      break;
    case IoOp::kMkdir: io_uring_prep_mkdirat(sqe, r.dirfd, r.path, r.mode); break;
    case IoOp::kOpen:
      if (how != nullptr) {
        io_uring_prep_openat2(sqe, r.dirfd, r.path, how);
      } else {
        io_uring_prep_openat(sqe, r.dirfd, r.path, r.flags | O_CLOEXEC, r.mode);
      }
      break;
    case IoOp::kRead: io_uring_prep_read(sqe, r.fd, r.buf, r.len, r.offset); break;
    case IoOp::kWrite: io_uring_prep_write(sqe, r.fd, r.buf, r.len, r.offset); break;
    case IoOp::kReadv: io_uring_prep_readv(sqe, r.fd, static_cast<const iovec*>(r.buf), r.len, r.offset); break;
    case IoOp::kWritev: io_uring_prep_writev(sqe, r.fd, static_cast<const iovec*>(r.buf), r.len, r.offset); break;
    case IoOp::kFdatasync: io_uring_prep_fsync(sqe, r.fd, IORING_FSYNC_DATASYNC); break;
    case IoOp::kFsync: io_uring_prep_fsync(sqe, r.fd, 0); break;
    case IoOp::kFsetxattr:
      io_uring_prep_fsetxattr(sqe, r.fd, r.name, static_cast<const char*>(r.buf), 0, r.len);
      break;
    case IoOp::kFgetxattr: io_uring_prep_fgetxattr(sqe, r.fd, r.name, static_cast<char*>(r.buf), r.len); break;
    case IoOp::kClose: io_uring_prep_close(sqe, r.fd); break;
    case IoOp::kRename: io_uring_prep_renameat(sqe, r.dirfd, r.path, r.dirfd, r.path2, 0); break;
    case IoOp::kUnlink: io_uring_prep_unlinkat(sqe, r.dirfd, r.path, 0); break;
    case IoOp::kTouchAtime: io_uring_prep_nop(sqe); break;  // never reached: not "supported"
  }
}

// The deadlines of the requests in the ring: a min-heap with lazy removal
// (a completed request's entry is dropped when it reaches the top). Tags are
// never reused, so a stale entry cannot match a later request. One request
// stuck for its whole deadline pins the top while thousands complete behind
// it, so the heap is rebuilt from the live entries when stale ones outnumber
// them: memory stays proportional to the requests in flight.
class DeadlineSet {
 public:
  void Add(uint64_t tag, uint64_t deadline_ns) {
    if (heap_.size() > 2 * live_.size() + 1024) Rebuild();
    heap_.push({deadline_ns, tag});
    live_.emplace(tag, deadline_ns);
  }
  void Done(uint64_t tag) {
    if (!live_.empty()) live_.erase(tag);
  }
  // The tag of a live request whose deadline is at or before now.
  bool Peek(uint64_t now_ns, uint64_t* tag) {
    DropStale();
    if (heap_.empty() || heap_.top().first > now_ns) return false;
    *tag = heap_.top().second;
    return true;
  }
  // timeout_ms (-1: none), shortened to reach the nearest deadline.
  int WaitMs(int timeout_ms, uint64_t now_ns) {
    DropStale();
    if (heap_.empty()) return timeout_ms;
    const uint64_t at = heap_.top().first;
    const uint64_t ms = at > now_ns ? (at - now_ns + 999'999) / 1'000'000 : 0;
    const int capped = static_cast<int>(std::min<uint64_t>(ms, 60'000));
    return timeout_ms < 0 ? capped : std::min(timeout_ms, capped);
  }

 private:
  using Entry = std::pair<uint64_t, uint64_t>;  // deadline, tag
  using Heap = std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>>;
  void DropStale() {
    while (!heap_.empty() && !live_.contains(heap_.top().second)) heap_.pop();
  }
  void Rebuild() {
    std::vector<Entry> entries;
    entries.reserve(live_.size());
    for (const auto& [tag, deadline] : live_) entries.push_back({deadline, tag});
    heap_ = Heap(std::greater<Entry>(), std::move(entries));
  }
  Heap heap_;
  std::unordered_map<uint64_t, uint64_t> live_;  // tag -> deadline
};

class UringBackend final : public IoBackend {
 public:
  ~UringBackend() override {
    if (ring_ok_) io_uring_queue_exit(&ring_);
    if (event_fd_ >= 0) close(event_fd_);
  }
  std::string_view name() const override { return "io_uring"; }

  explicit UringBackend(UringOptions options) : options_(options) {}

  Status Init(unsigned entries) {
    int rc = io_uring_queue_init(entries, &ring_, 0);
    if (rc < 0) {
      return Status(StatusCode::kUnavailable, "io_uring_queue_init refused a ring", -rc);
    }
    ring_ok_ = true;
    if (options_.workers_max > 0) {
      // Kernels before 5.15 lack the call (EINVAL): their bounds stay, which is slower, not wrong.
      unsigned workers[2] = {options_.workers_max, options_.workers_max};
      (void)io_uring_register_iowq_max_workers(&ring_, workers);
    }
    io_uring_probe* probe = io_uring_get_probe_ring(&ring_);
    for (int op = 0; op <= static_cast<int>(IoOp::kTouchAtime); ++op) {
      const int opcode = UringOpcode(static_cast<IoOp>(op));
      supported_[op] = probe != nullptr && opcode >= 0 && io_uring_opcode_supported(probe, opcode);
    }
    const bool have_cancel = probe != nullptr && io_uring_opcode_supported(probe, IORING_OP_ASYNC_CANCEL);
    have_openat2_ = probe != nullptr && io_uring_opcode_supported(probe, IORING_OP_OPENAT2);
    if (probe) io_uring_free_probe(probe);
    if (!have_cancel) return Status(StatusCode::kUnavailable, "io_uring lacks ASYNC_CANCEL");
    KVTIER_RETURN_IF_ERROR(CheckAllAsync());
    event_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (event_fd_ < 0) return ErrnoToStatus(errno, "eventfd");
    ArmWake();
    Flush();
    return Status::Ok();
  }

  Status RegisterBuffers(std::span<const std::span<uint8_t>> regions) override {
    // The kernel caps one registered buffer at 1 GiB, so split large regions.
    constexpr size_t kMaxIovec = size_t{1} << 30;
    std::vector<iovec> iovecs;
    for (const auto& region : regions) {
      for (size_t at = 0; at < region.size(); at += kMaxIovec) {
        iovecs.push_back({region.data() + at, std::min(kMaxIovec, region.size() - at)});
      }
    }
    if (iovecs.empty()) return Status::Ok();
    int rc = io_uring_register_buffers(&ring_, iovecs.data(), static_cast<unsigned>(iovecs.size()));
    if (rc < 0) return Status(StatusCode::kUnavailable, "io_uring_register_buffers", -rc);
    for (size_t i = 0; i < iovecs.size(); ++i) {
      auto begin = reinterpret_cast<uintptr_t>(iovecs[i].iov_base);
      fixed_.push_back({begin, begin + iovecs[i].iov_len, static_cast<int>(i)});
    }
    return Status::Ok();
  }
  uint64_t fixed_buffer_ios() const override { return fixed_ios_.load(std::memory_order_relaxed); }

  // Never fails a request it has queued: SQEs the kernel did not take yet
  // stay in the ring and go with the next Flush (Reap flushes too).
  Status Submit(std::span<const IoRequest> requests) override {
    // An openat2's open_how is read by the kernel when it consumes the SQE;
    // keep them until every queued SQE has been consumed. A deque keeps
    // their addresses stable while it grows.
    if (io_uring_sq_ready(&ring_) == 0) hows_.clear();
    const uint64_t now = MonotonicNowNs();
    for (const IoRequest& r : requests) {
      if (r.deadline_ns != 0 && r.deadline_ns <= now && r.op != IoOp::kClose) {  // a close always runs
        inline_done_.push_back({r.tag, -ETIMEDOUT});  // never started, as in the syscall backend
        continue;
      }
      if (!supported_[static_cast<int>(r.op)] || RunsInline(r)) {
        inline_done_.push_back({r.tag, ExecuteSync(r)});
        continue;
      }
      if (io_uring_sq_space_left(&ring_) < 1) Flush();
      if (io_uring_sq_space_left(&ring_) < 1) {
        // The kernel holds every slot (completion queue backed up). The
        // scheduler retries -EAGAIN, after the next reap has made room.
        inline_done_.push_back({r.tag, -EAGAIN});
        continue;
      }
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      Prep(sqe, r, OpenHow(r));
      UseFixedBuffer(sqe, r);
      io_uring_sqe_set_data64(sqe, r.tag);
      if (options_.force_async) sqe->flags |= IOSQE_ASYNC;
      if (r.deadline_ns != 0) deadlines_.Add(r.tag, r.deadline_ns);
    }
    Flush();
    return Status::Ok();
  }

  size_t Reap(std::span<IoCompletion> out, int timeout_ms) override {
    size_t n = 0;
    while (n < out.size() && !inline_done_.empty()) {
      out[n++] = inline_done_.front();
      inline_done_.pop_front();
    }
    CancelExpired();
    if (io_uring_sq_ready(&ring_) > 0) Flush();  // what an earlier Submit could not hand over
    if (n == 0 && !WaitForCqe(deadlines_.WaitMs(timeout_ms, MonotonicNowNs()))) {
      CancelExpired();
      return 0;
    }
    io_uring_cqe* cqe;
    while (n < out.size() && io_uring_peek_cqe(&ring_, &cqe) == 0) {
      const uint64_t tag = io_uring_cqe_get_data64(cqe);
      const int64_t res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      if (tag == kCancelTag) continue;  // the cancel's own completion (its target reports itself)
      if (tag == kWakeTag) {
        uint64_t value;
        while (read(event_fd_, &value, sizeof value) > 0) {
        }
        ArmWake();
        Flush();  // a failed re-arm only delays a later wake-up
        continue;
      }
      deadlines_.Done(tag);
      // Our own cancel ends a request with -ECANCELED, or -EINTR when a
      // worker was running it: either way its deadline passed.
      const bool cancelled = !cancelled_.empty() && cancelled_.erase(tag) > 0;
      out[n++] = {tag, cancelled && (res == -EINTR || res == -ECANCELED) ? -ETIMEDOUT : res};
    }
    return n;
  }

  void Wake() override {
    const uint64_t one = 1;
    ssize_t rc = write(event_fd_, &one, sizeof one);
    (void)rc;  // EAGAIN means a wake-up is already pending
  }

 private:
  // With force_async every request must be one the ring runs in its workers:
  // an opcode this kernel lacks would run inline, on the I/O thread, and
  // on a network filesystem hang it with the server (the fs tier then runs
  // the syscall pool instead). kTouchAtime is never issued there.
  Status CheckAllAsync() const {
    if (!options_.force_async) return Status::Ok();
    for (int op = 0; op < static_cast<int>(IoOp::kTouchAtime); ++op) {
      if (!supported_[op]) {
        return Status(StatusCode::kUnavailable, "this kernel's io_uring lacks opcode " +
                                                    std::to_string(UringOpcode(static_cast<IoOp>(op))) +
                                                    ", which would run on the I/O thread");
      }
    }
    if (!have_openat2_) return Status(StatusCode::kUnavailable, "this kernel's io_uring lacks OPENAT2");
    return Status::Ok();
  }

  // Turns a read or write into READ_FIXED / WRITE_FIXED when its buffer lies
  // inside one registered region.
  void UseFixedBuffer(io_uring_sqe* sqe, const IoRequest& r) {
    if (fixed_.empty() || (r.op != IoOp::kRead && r.op != IoOp::kWrite)) return;
    const auto begin = reinterpret_cast<uintptr_t>(r.buf);
    for (const FixedRegion& region : fixed_) {
      if (begin < region.begin || begin + r.len > region.end) continue;
      if (r.op == IoOp::kRead) {
        io_uring_prep_read_fixed(sqe, r.fd, r.buf, r.len, r.offset, region.index);
      } else {
        io_uring_prep_write_fixed(sqe, r.fd, r.buf, r.len, r.offset, region.index);
      }
      io_uring_sqe_set_data64(sqe, r.tag);
      fixed_ios_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }

  // statx and fgetxattr on an open fd never wait for the disk (the inode is
  // in memory), but io_uring always hands them to a kernel worker thread,
  // which costs more than the syscall: run them here.
  // An openat2 also runs here on a kernel whose ring lacks OPENAT2 (5.5),
  // where ExecuteSync walks the path itself.
  // With inline_metadata, so do the directory and xattr changes that
  // io_uring always hands to a worker (see MakeUringBackend).
  bool RunsInline(const IoRequest& r) const {
    if (options_.inline_metadata && (r.op == IoOp::kMkdir || r.op == IoOp::kRename || r.op == IoOp::kUnlink ||
                                     r.op == IoOp::kFsetxattr)) {
      return true;
    }
    if (options_.inline_fd_metadata && ((r.op == IoOp::kStatx && r.path == nullptr) || r.op == IoOp::kFgetxattr)) {
      return true;
    }
    return r.op == IoOp::kOpen && r.resolve != 0 && !have_openat2_;
  }

  // The open_how of an openat2, kept (like the timeouts) until the kernel has
  // consumed every queued SQE; nullptr for a plain request.
  open_how* OpenHow(const IoRequest& r) {
    if (r.op != IoOp::kOpen || r.resolve == 0) return nullptr;
    return &hows_.emplace_back(OpenHowOf(r));
  }

  // Waits for one CQE; false on timeout or wake-only traffic.
  bool WaitForCqe(int timeout_ms) {
    io_uring_cqe* cqe;
    if (timeout_ms < 0) return io_uring_wait_cqe(&ring_, &cqe) == 0;
    if (timeout_ms == 0) return io_uring_peek_cqe(&ring_, &cqe) == 0;
    __kernel_timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1000000LL};
    return io_uring_wait_cqe_timeout(&ring_, &cqe, &ts) == 0;
  }

  // Cancels every request whose deadline has passed. The target completes
  // with -ECANCELED (or -EINTR when a kernel worker was running it); a full
  // submission queue postpones a cancel to the next Reap.
  void CancelExpired() {
    uint64_t tag;
    bool queued = false;
    while (deadlines_.Peek(MonotonicNowNs(), &tag)) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) {
        Flush();
        sqe = io_uring_get_sqe(&ring_);
        if (sqe == nullptr) return;
      }
      io_uring_prep_cancel64(sqe, tag, 0);
      io_uring_sqe_set_data64(sqe, kCancelTag);
      deadlines_.Done(tag);
      cancelled_.insert(tag);
      queued = true;
    }
    if (queued) Flush();
  }

  void ArmWake() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {
      Flush();
      sqe = io_uring_get_sqe(&ring_);
    }
    io_uring_prep_poll_add(sqe, event_fd_, POLLIN);
    io_uring_sqe_set_data64(sqe, kWakeTag);
  }

  // Hands queued SQEs to the kernel; retries EINTR. On EBUSY/EAGAIN (the
  // completion queue is backed up) or any other error, what is left stays
  // queued for the next call: nothing queued is ever dropped or failed twice.
  void Flush() {
    while (true) {
      int rc = io_uring_submit(&ring_);
      if (rc == -EINTR) continue;
      if (rc < 0 && rc != -EBUSY && rc != -EAGAIN && !submit_error_logged_) {
        submit_error_logged_ = true;
        LogError(ErrnoToStatus(-rc, "io_uring_submit").ToString() + " (will retry)");
      }
      return;
    }
  }

  io_uring ring_{};
  const UringOptions options_;
  bool ring_ok_ = false;
  int event_fd_ = -1;
  bool supported_[static_cast<int>(IoOp::kTouchAtime) + 1] = {};
  DeadlineSet deadlines_;
  std::unordered_set<uint64_t> cancelled_;  // tags cancelled at their deadline, until they complete
  std::deque<open_how> hows_;
  bool have_openat2_ = false;
  bool submit_error_logged_ = false;
  std::deque<IoCompletion> inline_done_;
  std::vector<FixedRegion> fixed_;
  // Written by the I/O thread, read by Metrics() from any thread.
  std::atomic<uint64_t> fixed_ios_{0};
};

}  // namespace

Result<std::unique_ptr<IoBackend>> MakeUringBackend(unsigned entries, UringOptions options) {
  auto backend = std::make_unique<UringBackend>(options);
  KVTIER_RETURN_IF_ERROR(backend->Init(entries));
  return std::unique_ptr<IoBackend>(std::move(backend));
}

}  // namespace kvtier::internal
