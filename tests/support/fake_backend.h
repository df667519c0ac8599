// FakeBackend: executes requests with real syscalls (ExecuteSync, on real
// files) and injects faults, seeded: short reads and writes, -EAGAIN/-EINTR,
// chosen errors per operation, expired deadlines (-ECANCELED, as a request
// cancelled at its deadline reports it), slow completions, and completions in shuffled order. It never
// stands in for the real path: it wraps it.
//
// It can also hold requests, as a hung mount holds them in the kernel: a
// held request is neither run nor completed until the test releases it
// (with a result of its choice, or by running it then). With StepManually()
// the I/O loop's waits no longer pass on their own: the test moves a
// ManualClock (manual_clock.h) and lets the loop run one pass with Settle(),
// so the sick-volume policy runs deterministically, without sleeping.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <vector>

#include "io/backend.h"

namespace kvtier::testing {

struct FaultPlan {
  int short_transfer_one_in = 0;  // a read/write moves fewer bytes than asked
  int eagain_one_in = 0;          // -EAGAIN (or -EINTR) without running the request
  // Fails a request of this op with -error_errno, one in error_one_in.
  internal::IoOp error_op = internal::IoOp::kStatx;
  int error_errno = 0;
  int error_one_in = 0;
  bool error_fd_only = false;  // only error_op requests on an fd (no path), e.g. fstat but not stat
  int timeout_one_in = 0;  // -ECANCELED on read/write, as a request cancelled at its deadline
  bool shuffle = false;    // completions come back in random order
  int slow_one_in = 0;     // a completion is held back for several reaps
};

class FakeBackend final : public internal::IoBackend {
 public:
  FakeBackend(uint64_t seed, FaultPlan plan) : rng_(seed), plan_(plan) {}
  std::string_view name() const override { return "fake"; }
  Status Submit(std::span<const internal::IoRequest> requests) override;
  size_t Reap(std::span<internal::IoCompletion> out, int timeout_ms) override;
  void Wake() override;

  // Every request executed, in execution order (for ordering assertions).
  std::vector<internal::IoRequest> log() const;
  int faults_injected() const;

  // Requests submitted from now on for which `which` is true are held (an
  // empty function holds none; requests already held stay held).
  using RequestFilter = std::function<bool(const internal::IoRequest&)>;
  void HoldWhere(RequestFilter which);
  // The requests held now, in submission order.
  std::vector<internal::IoRequest> held() const;
  // Completes the held requests `which` selects (all, if empty) with `res`,
  // or, with nullopt, by running them now (faults of the plan included);
  // returns how many. Their completions are reaped as any other.
  size_t Release(const RequestFilter& which, std::optional<int64_t> res);

  // From now on Reap ignores its timeout (but 0) and waits for a completion
  // or a Wake: time passes only as the test moves its clock. Not for plans
  // with slow_one_in, whose completions age per reap.
  void StepManually();
  // Wakes the loop and waits until it has run at least one whole pass (what
  // was submitted or released before is handled, on the clock's time now)
  // and waits in Reap again with nothing to do. Only while the tier runs,
  // or with `done`: returns as well once *done is true (its setter then
  // calls Wake), for a loop that may have ended.
  void Settle(const std::atomic<bool>* done = nullptr);
  // Calls of Wake() so far, and a wait until there have been `n`.
  uint64_t wakes() const;
  void AwaitWakes(uint64_t n);

 private:
  bool OneIn(int n) { return n > 0 && std::uniform_int_distribution<int>(1, n)(rng_) == 1; }
  int64_t Execute(internal::IoRequest req);
  size_t ReapManually(std::span<internal::IoCompletion> out, int timeout_ms);
  size_t TakeDone(std::span<internal::IoCompletion> out);  // mu_ held: the ready completions, and the wake

  mutable std::mutex mu_;
  std::mt19937_64 rng_;
  FaultPlan plan_;
  std::deque<internal::IoCompletion> done_;
  std::vector<std::pair<int, internal::IoCompletion>> slow_;  // (reaps left, completion)
  std::vector<internal::IoRequest> log_;
  int faults_ = 0;
  bool woken_ = false;
  RequestFilter hold_;
  std::vector<internal::IoRequest> held_;
  bool manual_ = false;
  std::condition_variable cv_;  // manual steps: a completion, a wake, or the loop waiting
  uint64_t waits_ = 0;          // times the loop began to wait with nothing to do
  uint64_t wakes_ = 0;
};

}  // namespace kvtier::testing
