// Proves gc's histogram of use times (src/ops/gc_histogram.h) is what
// docs/ops.md states: every age up to 2^64-1 s falls in exactly one bucket,
// whose range [LowestAgeS, LowestAgeS + WidthS) holds it; buckets grow with
// age; a bucket is 1 s wide under 128 s and at most 1/64 of its ages beyond;
// and CutFor picks the youngest bucket at which the oldest bytes reach the need.
// A use time more than the tolerance ahead of now falls with the oldest
// (FORMAT.md L155), within it with now.
#include <gtest/gtest.h>

#include <ctime>
#include <random>

#include "ops/gc_histogram.h"
#include "support/test_support.h"

namespace kvtier::internal {
namespace {

TEST(UseHistogramTest, EveryAgeFallsInTheBucketThatHoldsIt) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  const int64_t now = INT64_MAX;
  int last = -1;
  for (uint64_t age = 0; age < 5000; ++age) {  // the linear range and the first octaves, in order
    const int b = UseHistogram::Bucket(now, now - static_cast<int64_t>(age));
    EXPECT_GE(b, last) << age;
    last = b;
  }
  for (int i = 0; i < 100000; ++i) {
    const uint64_t age = rng() >> (rng() % 64);
    if (age > static_cast<uint64_t>(INT64_MAX)) continue;
    const int b = UseHistogram::Bucket(now, now - static_cast<int64_t>(age));
    ASSERT_GE(b, 0);
    ASSERT_LT(b, UseHistogram::kBuckets);
    const uint64_t lo = UseHistogram::LowestAgeS(b), width = UseHistogram::WidthS(b);
    EXPECT_LE(lo, age) << "seed " << seed << " age " << age;
    EXPECT_LT(age - lo, width) << "seed " << seed << " age " << age;
    EXPECT_LE(width, std::max<uint64_t>(1, lo / 64)) << "seed " << seed << " age " << age;
  }
  EXPECT_EQ(UseHistogram::Bucket(100, 200), 0) << "a use within the tolerance ahead counts as now";
  // FORMAT.md L155: further ahead it counts as the epoch, older than a block used an hour ago.
  const int64_t t = 1800000000;
  EXPECT_EQ(UseHistogram::Bucket(t, t + 300), 0);
  EXPECT_EQ(UseHistogram::Bucket(t, t + 301), UseHistogram::Bucket(t, 0));
  EXPECT_EQ(UseHistogram::Bucket(t, INT64_MAX), UseHistogram::Bucket(t, 0));
  EXPECT_GT(UseHistogram::Bucket(t, t + 2275110190), UseHistogram::Bucket(t, t - 3600));
  // A run that started 1000 s ago sees a block written just now: not dated ahead, but used "now".
  const int64_t wall = std::time(nullptr);
  EXPECT_EQ(UseHistogram::Bucket(wall - 1000, wall), 0);
  EXPECT_EQ(UseHistogram::Bucket(INT64_MAX, INT64_MIN), UseHistogram::kBuckets - 1);
}

TEST(UseHistogramTest, CutIsTheYoungestBucketReachingTheNeed) {
  UseHistogram h;
  h.Add(10, 100);
  h.Add(500, 50);
  h.Add(3000, 25);
  EXPECT_EQ(h.CutFor(0).bucket, -1);
  EXPECT_EQ(h.CutFor(25).bucket, 3000);
  EXPECT_EQ(h.CutFor(26).bucket, 500);
  EXPECT_EQ(h.CutFor(26).older_bytes, 25u);
  EXPECT_EQ(h.CutFor(175).bucket, 10);
  EXPECT_EQ(h.CutFor(175).older_bytes, 75u);
  EXPECT_EQ(h.CutFor(1000).older_bytes, 175u) << "more than there is: every bucket";
}

}  // namespace
}  // namespace kvtier::internal
