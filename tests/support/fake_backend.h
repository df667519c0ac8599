// FakeBackend: executes requests with real syscalls (ExecuteSync, on real
// files) and injects faults, seeded: short reads and writes, -EAGAIN/-EINTR,
// chosen errors per operation, expired deadlines (-ECANCELED, as a request
// cancelled at its deadline reports it), slow completions, and completions in shuffled order. It never
// stands in for the real path: it wraps it.
#pragma once

#include <deque>
#include <functional>
#include <mutex>
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

 private:
  bool OneIn(int n) { return n > 0 && std::uniform_int_distribution<int>(1, n)(rng_) == 1; }
  int64_t Execute(internal::IoRequest req);

  mutable std::mutex mu_;
  std::mt19937_64 rng_;
  FaultPlan plan_;
  std::deque<internal::IoCompletion> done_;
  std::vector<std::pair<int, internal::IoCompletion>> slow_;  // (reaps left, completion)
  std::vector<internal::IoRequest> log_;
  int faults_ = 0;
  bool woken_ = false;
};

}  // namespace kvtier::testing
