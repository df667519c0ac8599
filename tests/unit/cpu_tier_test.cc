// Proves the CPU tier's bookkeeping as vLLM's CPUOffloadingManager: writes
// allocate not-ready rows (fresh rows first, then freed ones), present keys
// are skipped, eviction is all or nothing and never takes a key of the same
// batch, an extra protected set or a held row; failed writes free their rows;
// store_threshold filters stores by lookup count within an LRU tracker;
// Discard drops an unheld key at once and a held one (pinned, being copied)
// at its last release, so a later store of the key is written, not skipped.
#include "cpu_tier/cpu_tier.h"

#include <gtest/gtest.h>

#include <set>

#include "support/test_support.h"

namespace kvtier::internal {
namespace {

using testing::Key;

std::vector<OffloadKey> Keys(uint8_t from, uint8_t to) {
  std::vector<OffloadKey> keys;
  for (uint8_t n = from; n < to; ++n) keys.push_back(Key(n));
  return keys;
}

TEST(CpuTierTest, WritesAllocateNotReadyRowsUntilCompleted) {
  CpuTier cpu(EvictionPolicy::kLru, 4, 0, 100);
  std::optional<PreparedWrite> w = cpu.PrepareWrite(Keys(0, 3), false);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->rows, (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(cpu.Lookup(Key(0)), CpuVerdict::kHitPending);
  EXPECT_FALSE(cpu.ReadyRow(Key(0)));
  EXPECT_EQ(cpu.write_pending_rows(), 3u);
  cpu.CompleteWrite(Keys(0, 2), true);
  cpu.CompleteWrite(Keys(2, 3), false);  // the failed write frees row 2
  EXPECT_EQ(cpu.Lookup(Key(0)), CpuVerdict::kHit);
  EXPECT_EQ(cpu.ReadyRow(Key(1)), 1u);
  EXPECT_EQ(cpu.Lookup(Key(2)), CpuVerdict::kMiss);
  EXPECT_EQ(cpu.used_rows(), 2u);
  EXPECT_EQ(cpu.evictable_rows(), 2u);
  // Row 3 is still fresh; then the freed row 2 is reused.
  w = cpu.PrepareWrite(Keys(5, 7), false);
  ASSERT_TRUE(w);
  EXPECT_EQ(std::set<uint32_t>(w->rows.begin(), w->rows.end()), (std::set<uint32_t>{2, 3}));
}

TEST(CpuTierTest, PresentKeysAndDuplicatesAreSkipped) {
  CpuTier cpu(EvictionPolicy::kLru, 4, 0, 100);
  ASSERT_TRUE(cpu.PrepareWrite(Keys(0, 1), false));
  const std::vector<OffloadKey> batch = {Key(0), Key(1), Key(1)};
  std::optional<PreparedWrite> w = cpu.PrepareWrite(batch, false);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->disposition, (std::vector<WriteDisposition>{WriteDisposition::kPresent, WriteDisposition::kAllocated,
                                                           WriteDisposition::kPresent}));
  EXPECT_EQ(w->keys.size(), 1u);
}

TEST(CpuTierTest, EvictionIsAllOrNothingAndSparesHeldAndProtectedRows) {
  CpuTier cpu(EvictionPolicy::kLru, 4, 0, 100);
  ASSERT_TRUE(cpu.PrepareWrite(Keys(0, 4), false));
  cpu.CompleteWrite(Keys(0, 4), true);
  const std::vector<OffloadKey> held = {Key(0)};
  cpu.Acquire(held);
  // Three new keys need three evictions; only keys 1-3 are evictable, and
  // key 3 is protected: nothing may change.
  OffloadKeySet protect = {Key(3)};
  EXPECT_FALSE(cpu.PrepareWrite(Keys(10, 13), false, &protect));
  EXPECT_EQ(cpu.counters().allocations_failed, 1u);
  for (uint8_t n = 0; n < 4; ++n) EXPECT_EQ(cpu.Lookup(Key(n)), CpuVerdict::kHit) << int(n);
  // Two fit: keys 1 and 2 go (LRU order), the held key 0 and protected 3 stay.
  std::optional<PreparedWrite> w = cpu.PrepareWrite(Keys(10, 12), false, &protect);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->evicted, Keys(1, 3));
  EXPECT_EQ(cpu.Lookup(Key(0)), CpuVerdict::kHit);
  EXPECT_EQ(cpu.Lookup(Key(3)), CpuVerdict::kHit);
  cpu.Release(held);
  EXPECT_EQ(cpu.evictable_rows(), 2u);
}

TEST(CpuTierTest, AKeyOfTheBatchIsNeverEvictedForIt) {
  CpuTier cpu(EvictionPolicy::kArc, 2, 0, 100);
  ASSERT_TRUE(cpu.PrepareWrite(Keys(0, 2), false));
  cpu.CompleteWrite(Keys(0, 2), true);
  // Key 0 is in the batch (present, skipped); key 5 needs a row: only key 1 may go.
  const std::vector<OffloadKey> batch = {Key(0), Key(5)};
  std::optional<PreparedWrite> w = cpu.PrepareWrite(batch, false);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->evicted, Keys(1, 2));
}

TEST(CpuTierTest, StoreThresholdCountsLookupsInABoundedTracker) {
  CpuTier cpu(EvictionPolicy::kLru, 8, 2, 2);
  EXPECT_EQ(cpu.Lookup(Key(0)), CpuVerdict::kMiss);
  std::optional<PreparedWrite> w = cpu.PrepareWrite(Keys(0, 1), true);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->disposition[0], WriteDisposition::kBelowThreshold);
  EXPECT_EQ(cpu.Lookup(Key(0)), CpuVerdict::kMiss);  // second lookup: passes now
  // Two other keys push key 0 out of the 2-entry tracker, then it passes no more.
  const std::vector<OffloadKey> once = {Key(0)};
  EXPECT_EQ(cpu.PrepareWrite(once, true)->disposition[0], WriteDisposition::kAllocated);
  cpu.CompleteWrite(once, false);
  (void)cpu.Lookup(Key(1));
  (void)cpu.Lookup(Key(2));
  EXPECT_EQ(cpu.PrepareWrite(once, true)->disposition[0], WriteDisposition::kBelowThreshold);
  EXPECT_EQ(cpu.counters().stores_skipped_threshold, 2u);
  // Promotions are never filtered.
  EXPECT_EQ(cpu.PrepareWrite(once, false)->disposition[0], WriteDisposition::kAllocated);
}

TEST(CpuTierTest, DiscardDropsAHeldKeyAtItsLastRelease) {
  CpuTier cpu(EvictionPolicy::kLru, 4, 0, 100);
  ASSERT_TRUE(cpu.PrepareWrite(Keys(0, 2), false));
  cpu.CompleteWrite(Keys(0, 2), true);
  EXPECT_TRUE(cpu.Discard(Key(1)));  // no reader: dropped now
  EXPECT_EQ(cpu.Lookup(Key(1)), CpuVerdict::kMiss);
  const std::vector<OffloadKey> held = {Key(0)};
  cpu.Acquire(held);  // a pin
  cpu.Acquire(held);  // and a copy in flight
  EXPECT_FALSE(cpu.Discard(Key(0)));
  EXPECT_EQ(cpu.ReadyRow(Key(0)), 0u) << "a held row was dropped under its readers";
  cpu.Release(held);
  EXPECT_TRUE(cpu.Contains(Key(0)));
  cpu.Release(held);  // the last reader: dropped now
  EXPECT_FALSE(cpu.Contains(Key(0)));
  EXPECT_EQ(cpu.used_rows(), 0u);
  EXPECT_EQ(cpu.evictable_rows(), 0u);
  std::optional<PreparedWrite> w = cpu.PrepareWrite(held, false);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->disposition, (std::vector<WriteDisposition>{WriteDisposition::kAllocated}));
}

}  // namespace
}  // namespace kvtier::internal
