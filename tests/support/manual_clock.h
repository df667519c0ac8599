// ManualClock: a Clock (io/clock.h) that moves only when the test moves it,
// for driving the fs tier's sick-volume policy without sleeping (with
// FakeBackend::StepManually, fake_backend.h).
#pragma once

#include <atomic>
#include <cstdint>

#include "io/clock.h"

namespace kvtier::testing {

class ManualClock final : public internal::Clock {
 public:
  // Starts well above 0: the scheduler reads an issue time of 0 as "not
  // issued yet".
  uint64_t NowNs() const override { return now_ns_.load(); }
  void AdvanceNs(uint64_t ns) { now_ns_ += ns; }
  void AdvanceMs(uint64_t ms) { AdvanceNs(ms * 1'000'000); }

 private:
  std::atomic<uint64_t> now_ns_{uint64_t{1000} * 1'000'000'000};
};

}  // namespace kvtier::testing
