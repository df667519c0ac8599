// The syscall thread pool backend, and ExecuteSync.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "io/backend.h"

namespace kvtier::internal {

const char* IoOpName(IoOp op) {
  static constexpr const char* kNames[] = {"statx", "mkdir", "open", "read", "write", "fdatasync",
                                           "fsync", "fsetxattr", "fgetxattr", "close", "rename", "unlink",
                                           "touch_atime"};
  return kNames[static_cast<int>(op)];
}

uint64_t MonotonicNowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

static int64_t Ret(long r) { return r < 0 ? -errno : r; }

int64_t ExecuteSync(const IoRequest& r) {
  if (r.deadline_ns != 0 && MonotonicNowNs() > r.deadline_ns) return -ETIMEDOUT;
  switch (r.op) {
    case IoOp::kStatx:
      if (r.path == nullptr) {
        return Ret(statx(r.fd, "", AT_EMPTY_PATH, kStatxMask, static_cast<struct statx*>(r.buf)));
      }
      return Ret(statx(AT_FDCWD, r.path, 0, kStatxMask, static_cast<struct statx*>(r.buf)));
    case IoOp::kMkdir: return Ret(mkdir(r.path, r.mode));
    case IoOp::kOpen: return Ret(open(r.path, r.flags | O_CLOEXEC, r.mode));
    case IoOp::kRead: return Ret(pread(r.fd, r.buf, r.len, static_cast<off_t>(r.offset)));
    case IoOp::kWrite: return Ret(pwrite(r.fd, r.buf, r.len, static_cast<off_t>(r.offset)));
    case IoOp::kFdatasync: return Ret(fdatasync(r.fd));
    case IoOp::kFsync: return Ret(fsync(r.fd));
    case IoOp::kFsetxattr: return Ret(fsetxattr(r.fd, r.name, r.buf, r.len, 0));
    case IoOp::kFgetxattr: return Ret(fgetxattr(r.fd, r.name, r.buf, r.len));
    case IoOp::kClose: return Ret(close(r.fd));
    case IoOp::kRename: return Ret(rename(r.path, r.path2));
    case IoOp::kUnlink: return Ret(unlink(r.path));
    case IoOp::kTouchAtime: {
      const timespec times[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
      return Ret(futimens(r.fd, times));
    }
  }
  return -EINVAL;
}

namespace {

class SyncBackend final : public IoBackend {
 public:
  explicit SyncBackend(int threads) {
    for (int i = 0; i < std::max(1, threads); ++i) workers_.emplace_back([this] { Work(); });
  }
  ~SyncBackend() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  std::string_view name() const override { return "syscall-threads"; }

  Status Submit(std::span<const IoRequest> requests) override {
    {
      std::lock_guard lock(mu_);
      pending_.insert(pending_.end(), requests.begin(), requests.end());
    }
    // One waiter per request: waking every thread for each submit costs
    // dozens of context switches per block.
    for (size_t i = 0; i < requests.size(); ++i) work_cv_.notify_one();
    return Status::Ok();
  }

  size_t Reap(std::span<IoCompletion> out, int timeout_ms) override {
    std::unique_lock lock(mu_);
    auto ready = [&] { return !done_.empty() || woken_; };
    if (timeout_ms < 0) {
      done_cv_.wait(lock, ready);
    } else {
      done_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), ready);
    }
    woken_ = false;
    size_t n = 0;
    while (n < out.size() && !done_.empty()) {
      out[n++] = done_.front();
      done_.pop_front();
    }
    return n;
  }

  void Wake() override {
    {
      std::lock_guard lock(mu_);
      woken_ = true;
    }
    done_cv_.notify_all();
  }

 private:
  void Work() {
    std::unique_lock lock(mu_);
    while (true) {
      work_cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
      if (stop_) return;
      IoRequest req = pending_.front();
      pending_.pop_front();
      lock.unlock();
      IoCompletion c{req.tag, ExecuteSync(req)};
      lock.lock();
      done_.push_back(c);
      done_cv_.notify_one();
    }
  }

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<IoRequest> pending_;
  std::deque<IoCompletion> done_;
  bool stop_ = false;
  bool woken_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace

std::unique_ptr<IoBackend> MakeSyncBackend(int threads) { return std::make_unique<SyncBackend>(threads); }

}  // namespace kvtier::internal
