// Deadlines per file-system call: the operators' tools (`--io-timeout`) and
// FsTier::Open (src/fs) run their file-system work under them. They sit in
// src/io, below both, because they know nothing of the tiers or the tools.
//
// A thread that calls into a hung mount (a network or FUSE file system whose
// server stopped answering) waits in the kernel, and no signal but SIGKILL
// gets it back. So the tools cannot time a call out from inside it: instead
// the work runs on a thread of its own, every file-system call it (and the
// walker threads it starts) makes is announced on a per-thread beacon (the
// path, and since when), and the calling thread watches the beacons. When one
// call has run longer than the deadline the watcher gives up: the call
// returns kTimedOut naming the path, and the stuck threads are abandoned.
// The deadline is per call, not per run: a large healthy volume never times
// out, however long its walk takes.
//
// An abandoned thread keeps what it holds (fds, the report under
// construction: all owned by shared state, never by the caller) until the
// kernel lets it go; then every later IoScope it opens reports cancelled(),
// and the tools turn that into ECANCELED, so nothing more is changed on the
// volume. The CLI ends the process instead (_exit: exit_group kills the
// stuck threads).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/result.h"

namespace kvtier::internal {

// What one thread is doing on the volume, as the watcher sees it.
struct IoBeacon {
  std::mutex mu;
  std::string path;                  // guarded by mu
  std::atomic<int64_t> since_ns{0};  // steady clock; 0: not in a call
};

// The beacons of one watched call's threads. Thread-safe.
class IoWatch {
 public:
  std::shared_ptr<IoBeacon> Enlist();
  bool abandoned() const { return abandoned_.load(std::memory_order_relaxed); }
  void Abandon() { abandoned_ = true; }
  // The path of a call running for longer than timeout_ns ("" when none),
  // and how long it has run.
  std::string Overdue(int64_t now_ns, int64_t timeout_ns, int64_t* age_ns);

 private:
  std::mutex mu_;
  std::vector<std::shared_ptr<IoBeacon>> beacons_;
  std::atomic<bool> abandoned_{false};
};

// Binds the calling thread to a watch (nullptr: unwatched) and names the
// root that IoScope paths are relative to, for the binding's life.
// Threads a watched call starts bind with CurrentIoWatch() and
// CurrentIoRoot() of the thread that starts them.
class IoThreadBinding {
 public:
  IoThreadBinding(std::shared_ptr<IoWatch> watch, std::string root);
  ~IoThreadBinding();
  IoThreadBinding(const IoThreadBinding&) = delete;
  IoThreadBinding& operator=(const IoThreadBinding&) = delete;

 private:
  std::shared_ptr<IoWatch> saved_watch_;
  std::shared_ptr<IoBeacon> saved_beacon_;
  std::string saved_root_;
};
std::shared_ptr<IoWatch> CurrentIoWatch();
const std::string& CurrentIoRoot();

// Sets the root of this thread's IoScope paths for the scope's life (the
// tools over several roots walk them in turn on one thread).
class IoRootScope {
 public:
  explicit IoRootScope(std::string root);
  ~IoRootScope();
  IoRootScope(const IoRootScope&) = delete;
  IoRootScope& operator=(const IoRootScope&) = delete;

 private:
  std::string saved_;
};

// Announces a file-system call on `rel` (relative to CurrentIoRoot(); an
// absolute path when the root is "") for the scope's life; declare it before
// the fds the call opens, so their close (a FUSE flush) is covered too.
// Scopes nest: leaving an inner one restarts the outer one's clock.
class IoScope {
 public:
  explicit IoScope(std::string_view rel);
  ~IoScope();
  IoScope(const IoScope&) = delete;
  IoScope& operator=(const IoScope&) = delete;
  // The watched call was abandoned: make no call, return ECANCELED.
  bool cancelled() const { return cancelled_; }
  // A further call in the same scope: restarts the clock.
  void Step();

 private:
  IoBeacon* beacon_ = nullptr;
  std::string saved_path_;
  bool outer_active_ = false;
  bool cancelled_ = false;
};

// Runs `fn` on a thread of its own under a fresh watch, rooted at `root`, and
// waits for it; returns kTimedOut, naming the path, as soon as one
// file-system call of it has run longer than timeout_ms (fn is then
// abandoned: it must own what it touches, through its captures, and since
// it may run on during the process's exit, construct no static that exit
// destroys: kvtier's are allocated and never freed). With
// timeout_ms 0 it runs fn on the calling thread, unwatched.
Status RunWatched(uint64_t timeout_ms, std::string root, std::function<void()> fn);

// Result<T> form of RunWatched: fn's result, or kTimedOut.
template <class T>
Result<T> RunWatchedFor(uint64_t timeout_ms, std::string root, std::function<Result<T>()> fn) {
  auto out = std::make_shared<std::optional<Result<T>>>();
  Status s = RunWatched(timeout_ms, std::move(root), [out, fn = std::move(fn)] { out->emplace(fn()); });
  if (!s.ok()) return s;
  return std::move(**out);
}

}  // namespace kvtier::internal
