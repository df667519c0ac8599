// Clock: the time the fs tier's I/O loop decides by. Its sick-volume policy
// (abandonment at a request's deadline plus the grace, a root turned down and
// probed, queued work expired behind stuck slots, a probe awaited at close)
// and the store latencies behind backpressure all read this one clock, so a
// test can run that policy on a clock it moves by hand (ManualClock in
// tests/support) instead of sleeping. Production uses MonotonicClock().
//
// The deadlines handed to a backend (IoRequest::deadline_ns) stay on
// CLOCK_MONOTONIC: the kernel and the syscall backend enforce them.
#pragma once

#include <cstdint>

#include "io/io_request.h"

namespace kvtier::internal {

class Clock {
 public:
  virtual ~Clock() = default;
  // Nanoseconds on a clock that never goes back. Thread-safe.
  virtual uint64_t NowNs() const = 0;
};

// CLOCK_MONOTONIC (MonotonicNowNs).
class MonotonicClockSource final : public Clock {
 public:
  uint64_t NowNs() const override { return MonotonicNowNs(); }
};

// Never destroyed: an open abandoned on a hung mount (io_watch.h) may make
// its tier, and read this clock, while the process is already exiting.
inline const Clock& MonotonicClock() {
  static const MonotonicClockSource* const clock = new MonotonicClockSource;
  return *clock;
}

}  // namespace kvtier::internal
