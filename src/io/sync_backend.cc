// The syscall thread pool backend (where the kernel refuses io_uring).
//
// Deadlines: a request is checked before it starts, and a watchdog thread
// interrupts a worker still inside its syscall when the request's deadline
// passes: pthread_kill() with a real-time signal whose handler does nothing
// and is installed without SA_RESTART, so an interruptible wait (a FIFO, a
// pipe, a FUSE request, a lock) returns EINTR, which the worker reports as
// -ETIMEDOUT. The completion is reported only once the syscall has returned,
// never before: a read still in the kernel may write the caller's buffer, and
// the caller may reuse that buffer as soon as it sees the completion. A wait
// that only a fatal signal ends (a hard NFS mount, a FUSE daemon that ignores
// interrupts) therefore holds its request until it returns, exactly as
// io_uring's cancellation cannot end such a wait either. The watchdog
// kicks again every kKickAgainNs, which also covers a signal that lands just
// before the worker enters the syscall.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <limits>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "io/backend.h"
#include "util/log.h"

namespace kvtier::internal {
namespace {

constexpr uint64_t kKickAgainNs = 10'000'000;
constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();

void IgnoreInterrupt(int) {}

// A real-time signal no one else handles, with the no-op handler installed
// once per process; -1 when every candidate is taken (deadlines are then only
// checked before a request starts). Real-time signals are used because their
// default action is to terminate, so no library expects them to arrive
// unasked, and the handler only ever receives what pthread_kill aims at our
// own workers.
int InterruptSignal() {
  static const int signo = [] {
    for (int s = SIGRTMIN + 4; s <= SIGRTMAX - 4; ++s) {
      struct sigaction old {};
      if (sigaction(s, nullptr, &old) != 0) continue;
      const bool free = (old.sa_flags & SA_SIGINFO) == 0 && old.sa_handler == SIG_DFL;
      if (!free) continue;
      struct sigaction sa {};
      sa.sa_handler = IgnoreInterrupt;
      sigemptyset(&sa.sa_mask);
      sa.sa_flags = 0;  // no SA_RESTART: the interrupted syscall must return EINTR
      if (sigaction(s, &sa, nullptr) == 0) return s;
    }
    LogWarning("no free real-time signal: the syscall backend cannot interrupt a hung syscall");
    return -1;
  }();
  return signo;
}

class SyncBackend final : public IoBackend {
 public:
  explicit SyncBackend(int threads) : signo_(InterruptSignal()), slots_(std::max(1, threads)) {}

  // Starts the workers and the watchdog. std::thread throws when the OS
  // refuses a thread (EAGAIN: a thread or memory limit); thrown from a
  // constructor with threads already running, that was std::terminate. The
  // destructor stops and joins whatever did start.
  Status Start() {
    try {
      for (Slot& slot : slots_) workers_.emplace_back([this, &slot] { Work(&slot); });
      watchdog_ = std::thread([this] { Watch(); });
    } catch (const std::system_error& e) {
      return Status(StatusCode::kUnavailable,
                    "syscall backend: the OS refused thread " + std::to_string(workers_.size() + 1) + " of " +
                        std::to_string(slots_.size() + 1) + " (" + e.what() +
                        "): lower n_read_threads + n_write_threads or raise the thread limits",
                    e.code().value());
    }
    return Status::Ok();
  }
  ~SyncBackend() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    watch_cv_.notify_all();
    for (auto& t : workers_) t.join();
    if (watchdog_.joinable()) watchdog_.join();
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
  // One worker's request in flight, as the watchdog sees it (under mu_).
  struct Slot {
    pthread_t thread{};
    bool busy = false;
    uint64_t deadline_ns = 0;
  };

  void Work(Slot* slot) {
    // Only our own signal reaches a worker: the embedding process's handlers
    // (Python installs its own without SA_RESTART) run on its threads, so a
    // syscall here returns EINTR only when the watchdog meant it.
    sigset_t set;
    sigfillset(&set);
    if (signo_ >= 0) sigdelset(&set, signo_);
    pthread_sigmask(SIG_SETMASK, &set, nullptr);
    std::unique_lock lock(mu_);
    slot->thread = pthread_self();
    while (true) {
      work_cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
      if (stop_) return;
      IoRequest req = pending_.front();
      pending_.pop_front();
      Begin(slot, req.deadline_ns);
      lock.unlock();
      int64_t res = ExecuteSync(req);
      // A stray EINTR before the deadline (a signal that cannot be masked
      // here) is not an error: the call did nothing, so run it again.
      while (res == -EINTR && (req.deadline_ns == 0 || MonotonicNowNs() < req.deadline_ns)) res = ExecuteSync(req);
      lock.lock();
      slot->busy = false;
      if (res == -EINTR && req.deadline_ns != 0 && MonotonicNowNs() >= req.deadline_ns) res = -ETIMEDOUT;
      done_.push_back({req.tag, res});
      done_cv_.notify_one();
    }
  }

  // Called with mu_ held. Wakes the watchdog only when this deadline comes
  // before the one it sleeps towards (rarely: deadlines are now + a fixed
  // timeout, so later requests have later ones).
  void Begin(Slot* slot, uint64_t deadline_ns) {
    slot->busy = true;
    slot->deadline_ns = deadline_ns;
    if (deadline_ns != 0 && signo_ >= 0 && deadline_ns < watch_next_ns_) {
      watch_next_ns_ = deadline_ns;
      watch_cv_.notify_one();
    }
  }

  // Sleeps until the earliest deadline in flight and interrupts every worker
  // past its own. Signals are sent with mu_ held, so a worker is kicked only
  // while still inside the request whose deadline passed.
  void Watch() {
    std::unique_lock lock(mu_);
    while (!stop_) {
      const uint64_t now = MonotonicNowNs();
      uint64_t next = kNever;
      for (const Slot& slot : slots_) {
        if (!slot.busy || slot.deadline_ns == 0) continue;
        if (slot.deadline_ns > now) {
          next = std::min(next, slot.deadline_ns);
          continue;
        }
        if (signo_ >= 0) pthread_kill(slot.thread, signo_);
        next = std::min(next, now + kKickAgainNs);
      }
      watch_next_ns_ = next;
      if (next == kNever) {
        watch_cv_.wait(lock);
      } else {
        watch_cv_.wait_for(lock, std::chrono::nanoseconds(next - now));
      }
    }
  }

  const int signo_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_, watch_cv_;
  std::deque<IoRequest> pending_;
  std::deque<IoCompletion> done_;
  std::vector<Slot> slots_;
  uint64_t watch_next_ns_ = kNever;
  bool stop_ = false;
  bool woken_ = false;
  std::vector<std::thread> workers_;
  std::thread watchdog_;
};

}  // namespace

Result<std::unique_ptr<IoBackend>> MakeSyncBackend(int threads) {
  auto backend = std::make_unique<SyncBackend>(threads);
  KVTIER_RETURN_IF_ERROR(backend->Start());
  return std::unique_ptr<IoBackend>(std::move(backend));
}

}  // namespace kvtier::internal
