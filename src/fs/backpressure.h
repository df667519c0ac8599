// The store-latency detector behind an fs tier's BackpressureOptions
// (fs_tier_options.h): an exponential moving average of seconds per MiB with
// hysteresis. A tier without backpressure options never trips.
// Engine thread only, except pressured(), which any thread may read.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>

#include "kvtier/fs_tier_options.h"

namespace kvtier::internal {

class StoreLatencyDetector {
 public:
  explicit StoreLatencyDetector(const std::optional<BackpressureOptions>& options)
      : enabled_(options.has_value()), options_(options.value_or(BackpressureOptions{})) {}

  // One completed store of `bytes` that took `latency_ns`.
  void Add(uint64_t bytes, uint64_t latency_ns) {
    if (!enabled_ || bytes == 0) return;
    const double sample = (static_cast<double>(latency_ns) * 1e-9) / (static_cast<double>(bytes) / (1 << 20));
    ema_ = samples_ == 0 ? sample : options_.ema_alpha * sample + (1 - options_.ema_alpha) * ema_;
    ++samples_;
    if (samples_ < options_.warmup_completions) return;
    if (!pressured_ && ema_ > options_.high_water_s_per_mib) pressured_ = true;
    if (pressured_ && ema_ < options_.low_water_s_per_mib) pressured_ = false;
  }
  bool pressured() const { return pressured_; }
  double ema() const { return ema_; }

 private:
  bool enabled_;
  BackpressureOptions options_;
  double ema_ = 0;
  uint64_t samples_ = 0;
  std::atomic<bool> pressured_{false};
};

}  // namespace kvtier::internal
