// Proves the max_bytes bookkeeping (src/fs/capacity_index.h) without files:
// a reservation counts at once and is released only when nothing was
// written (kDropped), kept on kError (the PR's partial-write rule); a key
// listed twice in a batch or already listed needs no new bytes and stays
// unevictable until its last writer ends; pinned and written keys are never
// victims; a refused batch changes nothing; Gone and Used keep the index in
// step with what loads and lookups found; Seed never overrides a live entry
// and orders by mtime. Method: a budget of a few 100-byte rows and the
// index's own counters, checked after every call.
#include "fs/capacity_index.h"

#include <gtest/gtest.h>

namespace kvtier::internal {
namespace {

constexpr uint64_t kRow = 100;

CapacityKey K(uint8_t i) {
  CapacityKey key;
  key.hash[0] = i;
  key.size = 32;
  return key;
}

TEST(CapacityIndex, ReservationIsReleasedOnlyWhenNothingWasWritten) {
  CapacityIndex index(3 * kRow);
  ASSERT_TRUE(index.Reserve(std::vector{K(1), K(2)}, kRow).status.ok());
  EXPECT_EQ(index.bytes(), 2 * kRow);
  index.StoreDone(K(1), KeyOutcome::kDropped);  // nothing written: released
  index.StoreDone(K(2), KeyOutcome::kError);    // may be partly written: kept
  EXPECT_EQ(index.bytes(), kRow);
  EXPECT_EQ(index.blocks(), 1u);
}

TEST(CapacityIndex, RepeatedAndListedKeysNeedNoBytesAndStayProtected) {
  CapacityIndex index(2 * kRow);
  ASSERT_TRUE(index.Reserve(std::vector{K(1), K(1)}, kRow).status.ok());
  EXPECT_EQ(index.bytes(), kRow);
  index.StoreDone(K(1), KeyOutcome::kOk);
  // One writer of K(1) is still running: a batch that needs its room is refused.
  CapacityIndex::Admission a = index.Reserve(std::vector{K(2), K(3)}, kRow);
  EXPECT_FALSE(a.status.ok());
  EXPECT_EQ(a.status.code(), StatusCode::kRejected);
  EXPECT_EQ(index.refused_rows(), 2u);
  index.StoreDone(K(1), KeyOutcome::kSkippedExists);
  a = index.Reserve(std::vector{K(2), K(3)}, kRow);
  ASSERT_TRUE(a.status.ok()) << a.status.ToString();
  ASSERT_EQ(a.victims.size(), 1u);
  EXPECT_EQ(a.victims[0], K(1));
  EXPECT_EQ(index.bytes(), 2 * kRow);
  EXPECT_EQ(index.evicted_blocks(), 1u);
}

TEST(CapacityIndex, PinnedBlocksAreSkippedAndARefusalChangesNothing) {
  CapacityIndex index(2 * kRow);
  ASSERT_TRUE(index.Reserve(std::vector{K(1), K(2)}, kRow).status.ok());
  index.StoreDone(K(1), KeyOutcome::kOk);
  index.StoreDone(K(2), KeyOutcome::kOk);
  index.Pin(K(1));
  index.Pin(K(2));
  EXPECT_FALSE(index.Reserve(std::vector{K(3)}, kRow).status.ok());
  EXPECT_EQ(index.blocks(), 2u);
  index.Unpin(K(2));
  CapacityIndex::Admission a = index.Reserve(std::vector{K(3)}, kRow);
  ASSERT_TRUE(a.status.ok());
  ASSERT_EQ(a.victims.size(), 1u);
  EXPECT_EQ(a.victims[0], K(2));  // K(1) is older but pinned
  EXPECT_FALSE(index.Reserve(std::vector{K(4), K(5), K(6)}, kRow).status.ok());  // larger than the budget
}

TEST(CapacityIndex, UsedGoneAndSeedFollowWhatTheTierSaw) {
  CapacityIndex index(10 * kRow);
  index.Seed(std::vector{ScannedBlock{K(1), 50, 3000}, ScannedBlock{K(2), 70, 1000}, ScannedBlock{K(3), 90, 2000}});
  EXPECT_EQ(index.bytes(), 210u);
  index.Used(K(4), kRow);  // unknown: added
  EXPECT_EQ(index.blocks(), 4u);
  index.Gone(K(1));
  EXPECT_EQ(index.bytes(), 160u + kRow);
  ASSERT_TRUE(index.Reserve(std::vector{K(5)}, kRow).status.ok());
  index.Gone(K(5));  // a store of it runs: kept
  index.Seed(std::vector{ScannedBlock{K(5), 1, 1}});  // listed: not replaced
  EXPECT_EQ(index.blocks(), 4u);
  // Fill the budget: the oldest mtime (K(2)) goes first, then K(3).
  CapacityIndex::Admission a = index.Reserve(std::vector{K(6), K(7), K(8), K(9), K(10), K(11), K(12), K(13)}, kRow);
  ASSERT_TRUE(a.status.ok()) << a.status.ToString();
  ASSERT_EQ(a.victims.size(), 2u);
  EXPECT_EQ(a.victims[0], K(2));
  EXPECT_EQ(a.victims[1], K(3));
  EXPECT_LE(index.bytes(), 10 * kRow);
}

}  // namespace
}  // namespace kvtier::internal
