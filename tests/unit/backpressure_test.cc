// Proves the store-latency detector: no verdict before the warm-up count, an
// EMA with the configured weight, pressure entered above the high water mark
// and left only below the low water mark (hysteresis), and nothing at all
// without backpressure options.
#include <gtest/gtest.h>

#include "fs/backpressure.h"

namespace kvtier::internal {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kMs = 1000000;  // ns

TEST(StoreLatencyDetector, WarmupEmaAndHysteresis) {
  BackpressureOptions o;
  o.high_water_s_per_mib = 0.005;
  o.low_water_s_per_mib = 0.001;
  o.ema_alpha = 0.5;
  o.warmup_completions = 3;
  StoreLatencyDetector d(o);
  d.Add(kMiB, 20 * kMs);  // 0.020 s/MiB
  d.Add(kMiB, 20 * kMs);
  EXPECT_FALSE(d.pressured()) << "two samples are still warm-up";
  d.Add(kMiB, 20 * kMs);
  EXPECT_TRUE(d.pressured());
  EXPECT_NEAR(d.ema(), 0.020, 1e-9);
  d.Add(2 * kMiB, 4 * kMs);  // 0.002 s/MiB: ema 0.011, still above low water
  EXPECT_NEAR(d.ema(), 0.011, 1e-9);
  EXPECT_TRUE(d.pressured());
  for (int i = 0; i < 3; ++i) d.Add(kMiB, 1 * kMs / 10);  // 0.0001 s/MiB
  EXPECT_LT(d.ema(), 0.005);
  EXPECT_TRUE(d.pressured()) << "between the marks the state holds (ema " << d.ema() << ")";
  for (int i = 0; i < 3; ++i) d.Add(kMiB, 1 * kMs / 10);
  EXPECT_FALSE(d.pressured()) << "below the low water mark pressure ends (ema " << d.ema() << ")";
}

TEST(StoreLatencyDetector, DisabledNeverTrips) {
  StoreLatencyDetector d(std::nullopt);
  for (int i = 0; i < 10; ++i) d.Add(kMiB, 1000 * kMs);
  EXPECT_FALSE(d.pressured());
}

}  // namespace
}  // namespace kvtier::internal
