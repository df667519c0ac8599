// Proves the bounded "most common size" of a namespace (SizeSummary in
// src/ops/scan.h): exact while there are at most kTracked distinct sizes
// (a tie goes to the larger size), and beyond that, with sizes in a seeded
// random order and split over merged parts as the walker threads do, it still
// finds a size held by more than 1/(kTracked + 1) of the blocks, in memory
// that does not grow with the number of distinct sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "ops/scan.h"
#include "support/test_support.h"

namespace kvtier::internal {
namespace {

TEST(SizeSummaryTest, ExactWhileFewSizes) {
  SizeSummary s;
  EXPECT_EQ(s.Mode(), 0u);
  for (int i = 0; i < 10; ++i) s.Add(8192);
  s.Add(4096, 10);
  EXPECT_EQ(s.Mode(), 8192u) << "a tie goes to the larger size";
  EXPECT_FALSE(s.All(8192));
  SizeSummary one;
  one.Add(64, 3);
  EXPECT_TRUE(one.All(64));
}

TEST(SizeSummaryTest, FindsAFrequentSizeAmongManyAfterMerges) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> sizes;
  for (uint64_t i = 0; i < 20000; ++i) sizes.push_back(1000 + i);  // 20000 sizes held once
  for (int i = 0; i < 400; ++i) sizes.push_back(8192);             // 2% of the blocks: > 1/65
  std::shuffle(sizes.begin(), sizes.end(), rng);
  SizeSummary parts[4], all;
  for (size_t i = 0; i < sizes.size(); ++i) parts[rng() % 4].Add(sizes[i]);
  for (const SizeSummary& p : parts) all.Merge(p);
  EXPECT_EQ(all.Mode(), 8192u) << "seed " << seed;
  EXPECT_FALSE(all.All(8192)) << "no longer exact";
}

}  // namespace
}  // namespace kvtier::internal
