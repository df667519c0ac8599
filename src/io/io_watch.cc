// Per-thread beacons and the watcher of RunWatched (see io_watch.h).
#include "io/io_watch.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <system_error>
#include <thread>
#include <utility>


namespace kvtier::internal {
namespace {

thread_local std::shared_ptr<IoWatch> t_watch;
thread_local std::shared_ptr<IoBeacon> t_beacon;
thread_local std::string t_root;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string TimedOutMessage(const std::string& path, int64_t age_ns, uint64_t timeout_ms) {
  char text[160];
  std::snprintf(text, sizeof text, ": no answer from the file system for %.1f s (io timeout %.1f s): the mount may be hung",
                static_cast<double>(age_ns) / 1e9, static_cast<double>(timeout_ms) / 1e3);
  return path + text;
}

}  // namespace

std::shared_ptr<IoBeacon> IoWatch::Enlist() {
  auto beacon = std::make_shared<IoBeacon>();
  std::lock_guard lock(mu_);
  beacons_.push_back(beacon);
  return beacon;
}

std::string IoWatch::Overdue(int64_t now_ns, int64_t timeout_ns, int64_t* age_ns) {
  std::lock_guard lock(mu_);
  for (const auto& b : beacons_) {
    const int64_t since = b->since_ns.load();
    if (since == 0 || now_ns - since <= timeout_ns) continue;
    *age_ns = now_ns - since;
    std::lock_guard path_lock(b->mu);
    return b->path.empty() ? "(unknown path)" : b->path;
  }
  return "";
}

IoThreadBinding::IoThreadBinding(std::shared_ptr<IoWatch> watch, std::string root)
    : saved_watch_(std::move(t_watch)), saved_beacon_(std::move(t_beacon)), saved_root_(std::move(t_root)) {
  t_beacon = watch ? watch->Enlist() : nullptr;
  t_watch = std::move(watch);
  t_root = std::move(root);
}

IoThreadBinding::~IoThreadBinding() {
  t_watch = std::move(saved_watch_);
  t_beacon = std::move(saved_beacon_);
  t_root = std::move(saved_root_);
}

std::shared_ptr<IoWatch> CurrentIoWatch() { return t_watch; }
const std::string& CurrentIoRoot() { return t_root; }

IoRootScope::IoRootScope(std::string root) : saved_(std::exchange(t_root, std::move(root))) {}
IoRootScope::~IoRootScope() { t_root = std::move(saved_); }

IoScope::IoScope(std::string_view rel) {
  if (!t_beacon) return;
  cancelled_ = t_watch->abandoned();
  beacon_ = t_beacon.get();
  std::string path = t_root.empty() ? std::string(rel)
                     : rel.empty()  ? t_root
                                    : t_root + "/" + std::string(rel);
  std::lock_guard lock(beacon_->mu);
  saved_path_ = std::exchange(beacon_->path, std::move(path));
  outer_active_ = beacon_->since_ns.exchange(NowNs()) != 0;
}

IoScope::~IoScope() {
  if (beacon_ == nullptr) return;
  std::lock_guard lock(beacon_->mu);
  beacon_->path = std::move(saved_path_);
  beacon_->since_ns = outer_active_ ? NowNs() : 0;
}

void IoScope::Step() {
  if (beacon_ != nullptr) beacon_->since_ns = NowNs();
}

namespace {

struct Done {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
};

// Starts fn on a thread bound to `watch`; false when no thread can be made.
bool StartWorker(std::shared_ptr<IoWatch> watch, std::shared_ptr<Done> done, std::string root,
                 std::function<void()> fn, std::thread* out) {
  try {
    *out = std::thread([watch = std::move(watch), done = std::move(done), root = std::move(root), fn = std::move(fn)] {
      {
        IoThreadBinding bind(watch, root);
        fn();
      }
      std::lock_guard lock(done->mu);
      done->done = true;
      done->cv.notify_all();
    });
    return true;
  } catch (const std::system_error&) {
    return false;
  }
}

}  // namespace

Status RunWatched(uint64_t timeout_ms, std::string root, std::function<void()> fn) {
  if (timeout_ms == 0) {
    IoRootScope scope(std::move(root));
    fn();
    return Status::Ok();
  }
  auto watch = std::make_shared<IoWatch>();
  auto done = std::make_shared<Done>();
  std::thread worker;
  if (!StartWorker(watch, done, std::move(root), std::move(fn), &worker)) {
    return Status(StatusCode::kUnavailable, "cannot start a thread to watch the file-system calls");
  }
  // Poll often enough to notice a hang within a tenth of the deadline.
  const auto poll = std::chrono::milliseconds(std::clamp<uint64_t>(timeout_ms / 10, 5, 200));
  const int64_t timeout_ns = static_cast<int64_t>(std::min<uint64_t>(timeout_ms, uint64_t{1} << 40)) * 1000000;
  std::unique_lock lock(done->mu);
  while (!done->cv.wait_for(lock, poll, [&] { return done->done; })) {
    int64_t age_ns = 0;
    const std::string path = watch->Overdue(NowNs(), timeout_ns, &age_ns);
    if (path.empty()) continue;
    watch->Abandon();
    lock.unlock();
    worker.detach();  // stuck in the kernel: it ends when the mount answers (or with the process)
    return Status(StatusCode::kTimedOut, TimedOutMessage(path, age_ns, timeout_ms));
  }
  lock.unlock();
  worker.join();
  return Status::Ok();
}

}  // namespace kvtier::internal
