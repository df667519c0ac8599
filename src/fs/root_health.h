// RootHealth: whether a root answers (docs/sick-volumes.md; its thresholds:
// sick_volume_policy.h). Pure state, no syscalls and no clock of its own:
// the I/O loop feeds it what its requests did and asks it what to do.
//
//  * up -> down after `misses_to_down` deadline misses in a row (a request
//    abandoned at its deadline, or one the backend cancelled there) with no
//    answer in between: a slow mount that answers every call keeps serving.
//  * while down, the loop fails new work at once (lookups miss, loads fail,
//    stores are dropped) and sends one probe at a time, at most every
//    probe_interval_ns; a probe that answers turns the root up again. A
//    probe stuck in the kernel is never duplicated: when the mount recovers,
//    it is that probe's late answer that brings the root back.
//
// Thread safety: the I/O thread changes it; up() may be read anywhere.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace kvtier::internal {

class RootHealth {
 public:
  RootHealth(int misses_to_down, uint64_t probe_interval_ns)
      : misses_to_down_(misses_to_down), probe_interval_ns_(probe_interval_ns) {}

  // A request got an answer from the filesystem (success or an errno other
  // than a deadline's).
  void Answered() { misses_in_row_ = 0; }
  // `n` requests missed their deadline; true when this turned the root down.
  bool Missed(size_t n, uint64_t now_ns) {
    misses_total_.fetch_add(n, std::memory_order_relaxed);
    misses_in_row_ += n;
    if (!up() || misses_in_row_ < static_cast<size_t>(misses_to_down_)) return false;
    up_.store(false, std::memory_order_release);
    down_since_ns_ = now_ns;
    last_probe_ns_ = now_ns;  // the first probe after one interval
    return true;
  }
  bool up() const { return up_.load(std::memory_order_acquire); }
  uint64_t misses_total() const { return misses_total_.load(std::memory_order_relaxed); }
  uint64_t down_since_ns() const { return down_since_ns_; }

  // Whether to send a probe now; if so, it counts as sent.
  bool ProbeDue(uint64_t now_ns) {
    if (up() || probe_in_flight_ || now_ns < last_probe_ns_ + probe_interval_ns_) return false;
    probe_in_flight_ = true;
    last_probe_ns_ = now_ns;
    return true;
  }
  bool probe_in_flight() const { return probe_in_flight_; }
  // The probe's result; true when this turned the root up.
  bool ProbeDone(bool answered, uint64_t now_ns) {
    probe_in_flight_ = false;
    last_probe_ns_ = now_ns;
    if (!answered || up()) return false;
    misses_in_row_ = 0;
    up_.store(true, std::memory_order_release);
    return true;
  }

 private:
  const int misses_to_down_;
  const uint64_t probe_interval_ns_;
  std::atomic<bool> up_{true};
  std::atomic<uint64_t> misses_total_{0};
  size_t misses_in_row_ = 0;
  uint64_t down_since_ns_ = 0, last_probe_ns_ = 0;
  bool probe_in_flight_ = false;
};

}  // namespace kvtier::internal
