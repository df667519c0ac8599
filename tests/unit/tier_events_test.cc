// Proves the fs tier's log of vLLM's channel (fs/tier_events.h, KeyEventLog):
// stores and removals come out in the order they went in, are taken once,
// and past the log's bound new ones are dropped and counted while what was
// kept stays whole; taking makes room again. Keys are seeded (printed).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "fs/tier_events.h"
#include "support/test_support.h"

namespace kvtier::internal {
namespace {

TEST(KeyEventLogTest, PastItsBoundEventsAreDroppedAndCounted) {
  KeyEventLog log(3);
  std::mt19937_64 rng(testing::TestSeed());
  const std::vector<OffloadKey> keys = testing::RandomKeys(5, rng);
  for (const OffloadKey& k : keys) log.Add(k, false);
  log.Add(keys[0], true);
  EXPECT_EQ(log.dropped(), 3u);
  EXPECT_EQ(log.Take(), (std::vector<TierKeyEvent>{{keys[0], false}, {keys[1], false}, {keys[2], false}}));
  EXPECT_TRUE(log.Take().empty()) << "taken once";
  log.Add(keys[0], true);
  EXPECT_EQ(log.Take(), (std::vector<TierKeyEvent>{{keys[0], true}}));
  EXPECT_EQ(log.dropped(), 3u);
}

TEST(KeyEventLogTest, ItsDefaultBoundIs65536) {
  KeyEventLog log;
  std::mt19937_64 rng(testing::TestSeed());
  const OffloadKey key = testing::RandomKeys(1, rng)[0];
  for (size_t i = 0; i < KeyEventLog::kEventsMax + 2; ++i) log.Add(key, i % 2 == 1);
  EXPECT_EQ(KeyEventLog::kEventsMax, 65536u);
  EXPECT_EQ(log.dropped(), 2u);
  EXPECT_EQ(log.Take().size(), KeyEventLog::kEventsMax);
}

}  // namespace
}  // namespace kvtier::internal
