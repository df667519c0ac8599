// Proves the CPU tier's eviction policies follow vLLM's cpu/policies/lru.py
// and arc.py: LRU's insert/touch order and all-or-nothing eviction of ready,
// unheld, unprotected rows from the LRU end; ARC's T1/T2 placement, ghost
// lists bounded by the capacity, the exact target adaptation on ghost hits
// and the exact T1-versus-T2 eviction order; and that a failed eviction
// changes nothing. Also checks the policies' building blocks against
// standard containers (the evictable-row index LevelBitset against a
// std::set, the key table EntryTable against a std::map, including stable
// addresses) and the key hasher's basic properties. The agreement with
// reference models on random operations is cache_policy_model_test's.
#include "cpu_tier/cache_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <unordered_set>
#include <vector>

#include "cache_policy_support.h"
#include "support/test_support.h"
#include "cpu_tier/arc_policy.h"
#include "cpu_tier/policy_list.h"

namespace kvtier::internal::policytest {
namespace {

// The evicted ids, or nullopt when the eviction failed.
std::optional<Ids> Evict(CachePolicy& policy, size_t n, const Ids& protect = {}) {
  std::optional<EvictedRows> rows = policy.Evict(n, KeySet(protect));
  if (!rows) return std::nullopt;
  Ids ids;
  for (const auto& [key, status] : *rows) ids.push_back(Id(key));
  return ids;
}

// The CPU tier's moves, through the pointer Get() returns and the hooks.
void InsertReady(CachePolicy& policy, const Ids& ids) {
  for (uint64_t id : ids) {
    policy.Insert(MixedKey(id), RowStatus{-1, static_cast<uint32_t>(id)});
    policy.Get(MixedKey(id))->ref_cnt = 0;
    policy.MarkEvictable(MixedKey(id));
  }
}
void InsertPending(CachePolicy& policy, const Ids& ids) {
  for (uint64_t id : ids) policy.Insert(MixedKey(id), RowStatus{-1, static_cast<uint32_t>(id)});
}
void Hold(CachePolicy& policy, uint64_t id) {
  RowStatus* status = policy.Get(MixedKey(id));
  ASSERT_NE(status, nullptr);
  if (status->ref_cnt++ == 0) policy.MarkNonEvictable(MixedKey(id));
}
void Release(CachePolicy& policy, uint64_t id) {
  RowStatus* status = policy.Get(MixedKey(id));
  ASSERT_NE(status, nullptr);
  if (--status->ref_cnt == 0) policy.MarkEvictable(MixedKey(id));
}
void Touch(CachePolicy& policy, const Ids& ids) {
  const std::vector<OffloadKey> keys = Keys(ids);
  policy.Touch(keys);
}

std::unique_ptr<CachePolicy> Lru() { return MakeCachePolicy(EvictionPolicy::kLru, 100); }
std::unique_ptr<CachePolicy> Arc(size_t capacity = 100) {
  return MakeCachePolicy(EvictionPolicy::kArc, capacity);
}

ArcDebugState ArcState(const CachePolicy& policy) {
  std::optional<ArcDebugState> state = GetArcDebugState(policy);
  EXPECT_TRUE(state.has_value());
  return state.value_or(ArcDebugState{});
}

// ----------------------------------------------------------------- hasher

TEST(OffloadKeyHasher, EqualKeysEqualHashesAndEveryFieldCounts) {
  const OffloadKeyHasher hash;
  EXPECT_EQ(hash(MixedKey(7)), hash(MixedKey(7)));
  EXPECT_NE(hash(MixedKey(7)), hash(MixedKey(7, 1)));  // group_idx
  const uint8_t one[1] = {1};
  const uint8_t one_zero[2] = {1, 0};
  EXPECT_NE(hash(OffloadKey{*BlockHash::FromBytes(one), 0}),
            hash(OffloadKey{*BlockHash::FromBytes(one_zero), 0}));  // length
  std::unordered_set<size_t> seen;
  for (uint64_t id = 0; id < 10000; ++id) seen.insert(hash(MixedKey(id)) % (1u << 20));
  EXPECT_GT(seen.size(), 9800u);  // ~48 collisions expected in 2^20 buckets
}

// ----------------------------------------------------------------- bitset

TEST(LevelBitset, FindFromMatchesOrderedSet) {
  const uint64_t seed = kvtier::testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  for (size_t bits : {1u, 64u, 65u, 4096u, 4097u, 300000u}) {
    LevelBitset set;
    set.Reset(bits);
    std::set<size_t> model;
    for (int step = 0; step < 20000; ++step) {
      const size_t i = rng() % bits;
      if (rng() % 3 != 0) {
        set.Set(i);
        model.insert(i);
      } else {
        set.Clear(i);
        model.erase(i);
      }
      const size_t from = rng() % bits;
      auto it = model.lower_bound(from);
      ASSERT_EQ(set.FindFrom(from), it == model.end() ? LevelBitset::kNone : *it)
          << "bits " << bits << " step " << step;
    }
  }
}

// ------------------------------------------------------------ entry table

TEST(EntryTable, MatchesAMapUnderChurnAndKeepsAddresses) {
  const uint64_t seed = kvtier::testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  EntryTable table(4);  // grows many times
  std::map<uint64_t, PolicyEntry*> model;
  for (int step = 0; step < 200000; ++step) {
    // Few distinct keys early, more later: long probe runs, then growth.
    const uint64_t id = rng() % (step < 100000 ? 300 : 30000);
    auto it = model.find(id);
    if (rng() % 3 == 0) {
      auto [entry, inserted] = table.FindOrInsert(MixedKey(id));
      ASSERT_EQ(inserted, it == model.end());
      if (inserted) {
        ASSERT_EQ(entry->key, MixedKey(id));
        ASSERT_EQ(entry->status.ref_cnt, -1);  // a fresh entry, even if recycled
        entry->status.row = static_cast<uint32_t>(id);
        model[id] = entry;
      } else {
        ASSERT_EQ(entry, it->second);
      }
    } else if (rng() % 2 == 0 && it != model.end()) {
      table.Erase(it->second);
      model.erase(it);
    } else {
      PolicyEntry* found = table.Find(MixedKey(id));
      ASSERT_EQ(found, it == model.end() ? nullptr : it->second) << "step " << step;
      if (found != nullptr) {
        ASSERT_EQ(found->status.row, id);
      }
    }
    ASSERT_EQ(table.size(), model.size());
  }
  for (const auto& [id, entry] : model) ASSERT_EQ(table.Find(MixedKey(id)), entry);
  ASSERT_FALSE(model.empty());
  table.Reset(0);
  EXPECT_EQ(table.size(), 0u);
  EXPECT_EQ(table.Find(MixedKey(model.begin()->first)), nullptr);
}

// -------------------------------------------------------------------- LRU

TEST(LruPolicy, EvictsInInsertOrder) {
  auto lru = Lru();
  InsertReady(*lru, {1, 2, 3, 4, 5});
  lru->Insert(MixedKey(6), RowStatus{0, 6});  // inserted ready: evictable at once
  EXPECT_EQ(lru->size(), 6u);
  EXPECT_EQ(Evict(*lru, 2), (Ids{1, 2}));
  EXPECT_EQ(Evict(*lru, 4), (Ids{3, 4, 5, 6}));
  EXPECT_EQ(lru->size(), 0u);
  EXPECT_EQ(lru->Get(MixedKey(1)), nullptr);
}

TEST(LruPolicy, TouchProcessesKeysInReverseSoTheFirstIsMostRecent) {
  auto lru = Lru();
  InsertReady(*lru, {1, 2, 3, 4, 5});
  Touch(*lru, {2, 99, 4});  // 99 is absent: ignored
  EXPECT_EQ(Evict(*lru, 5), (Ids{1, 3, 5, 4, 2}));
}

TEST(LruPolicy, SkipsNotReadyHeldAndProtectedRows) {
  auto lru = Lru();
  InsertPending(*lru, {1});
  InsertReady(*lru, {2, 3, 4, 5, 6});
  Hold(*lru, 2);
  EXPECT_EQ(Evict(*lru, 2, {3}), (Ids{4, 5}));
  EXPECT_EQ(Evict(*lru, 1), (Ids{3}));
  EXPECT_EQ(Evict(*lru, 2), std::nullopt);  // only 6 is evictable
  Release(*lru, 2);
  EXPECT_EQ(Evict(*lru, 2), (Ids{2, 6}));
  EXPECT_NE(lru->Get(MixedKey(1)), nullptr);
}

TEST(LruPolicy, ReleasedRowKeepsItsPlaceInTheOrder) {
  auto lru = Lru();
  InsertReady(*lru, {1, 2, 3, 4});
  Hold(*lru, 1);
  Hold(*lru, 1);
  Hold(*lru, 3);
  Release(*lru, 1);  // still held once
  EXPECT_EQ(Evict(*lru, 1), (Ids{2}));
  Release(*lru, 1);
  Release(*lru, 3);
  EXPECT_EQ(Evict(*lru, 3), (Ids{1, 3, 4}));
}

TEST(LruPolicy, FailedEvictionChangesNothing) {
  auto lru = Lru();
  InsertReady(*lru, {1, 2, 3, 4});
  Hold(*lru, 2);
  EXPECT_EQ(Evict(*lru, 4), std::nullopt);
  EXPECT_EQ(Evict(*lru, 3, {1}), std::nullopt);  // protection makes it short
  EXPECT_EQ(lru->size(), 4u);
  EXPECT_EQ(Evict(*lru, 3), (Ids{1, 3, 4}));
}

TEST(LruPolicy, EvictZeroReturnsEmpty) {
  auto lru = Lru();
  EXPECT_EQ(Evict(*lru, 0), Ids{});
  InsertPending(*lru, {1});
  EXPECT_EQ(Evict(*lru, 0), Ids{});
  EXPECT_EQ(Evict(*lru, 1), std::nullopt);
}

TEST(LruPolicy, RemoveAndClear) {
  auto lru = Lru();
  InsertReady(*lru, {1, 2, 3});
  lru->Remove(MixedKey(2));
  lru->Remove(MixedKey(42));  // absent: ignored
  EXPECT_EQ(lru->Get(MixedKey(2)), nullptr);
  EXPECT_EQ(lru->size(), 2u);
  EXPECT_EQ(Evict(*lru, 2), (Ids{1, 3}));
  InsertReady(*lru, {4, 5});
  lru->Clear();
  EXPECT_EQ(lru->size(), 0u);
  EXPECT_EQ(lru->Get(MixedKey(4)), nullptr);
  EXPECT_EQ(Evict(*lru, 1), std::nullopt);
  InsertReady(*lru, {6});
  EXPECT_EQ(Evict(*lru, 1), (Ids{6}));
}

TEST(LruPolicy, GetPointerSurvivesGrowthAndOtherRemovals) {
  for (auto policy : {EvictionPolicy::kLru, EvictionPolicy::kArc}) {
    auto p = MakeCachePolicy(policy, 4);
    InsertPending(*p, {1});
    RowStatus* status = p->Get(MixedKey(1));
    ASSERT_NE(status, nullptr);
    Ids many;
    for (uint64_t id = 100; id < 20000; ++id) many.push_back(id);
    InsertReady(*p, many);                      // rehashes, compactions
    ASSERT_TRUE(Evict(*p, 10000).has_value());  // ghosts come and go (ARC)
    for (uint64_t id = 15000; id < 20000; ++id) p->Remove(MixedKey(id));
    EXPECT_EQ(p->Get(MixedKey(1)), status);
    status->ref_cnt = 0;
    p->MarkEvictable(MixedKey(1));
    EXPECT_EQ(p->Get(MixedKey(1))->ref_cnt, 0);
    EXPECT_EQ(p->Get(MixedKey(1))->row, 1u);
  }
}

// -------------------------------------------------------------------- ARC

TEST(ArcPolicy, InsertGoesToT1) {
  auto arc = Arc();
  InsertReady(*arc, {1, 2});
  InsertPending(*arc, {3});
  const ArcDebugState s = ArcState(*arc);
  EXPECT_EQ(IdsOf(s.t1), (Ids{1, 2, 3}));
  EXPECT_TRUE(s.t2.empty());
  EXPECT_EQ(s.target_t1_size, 0.0);
  EXPECT_EQ(arc->size(), 3u);
  EXPECT_FALSE(GetArcDebugState(*Lru()).has_value());
}

TEST(ArcPolicy, TouchPromotesReadyT1RowsToT2) {
  auto arc = Arc();
  InsertReady(*arc, {1, 2, 3, 4});
  Hold(*arc, 4);
  Touch(*arc, {4, 1});  // held but ready: promoted too; 4 ends most recent
  ArcDebugState s = ArcState(*arc);
  EXPECT_EQ(IdsOf(s.t1), (Ids{2, 3}));
  EXPECT_EQ(IdsOf(s.t2), (Ids{1, 4}));
  Release(*arc, 4);
  // Target 0: T1 first, then T2.
  EXPECT_EQ(Evict(*arc, 4), (Ids{2, 3, 1, 4}));
  s = ArcState(*arc);
  EXPECT_EQ(IdsOf(s.b1), (Ids{2, 3}));
  EXPECT_EQ(IdsOf(s.b2), (Ids{1, 4}));
  EXPECT_EQ(arc->Get(MixedKey(1)), nullptr);  // ghosts are not rows
}

TEST(ArcPolicy, TouchOfNotReadyRowMovesItToT1sMruEnd) {
  auto arc = Arc();
  InsertPending(*arc, {1});
  InsertReady(*arc, {2, 3});
  Touch(*arc, {1});
  ArcDebugState s = ArcState(*arc);
  EXPECT_EQ(IdsOf(s.t1), (Ids{2, 3, 1}));
  EXPECT_TRUE(s.t2.empty());
  // Ready now: the next touch promotes it; T2 rows move to its MRU end.
  arc->Get(MixedKey(1))->ref_cnt = 0;
  arc->MarkEvictable(MixedKey(1));
  Touch(*arc, {1});
  Touch(*arc, {2});
  Touch(*arc, {1});
  s = ArcState(*arc);
  EXPECT_EQ(IdsOf(s.t1), (Ids{3}));
  EXPECT_EQ(IdsOf(s.t2), (Ids{2, 1}));
}

// Leaves ghosts b1 in B1 and b2 in B2 (oldest first), no rows, target 0.
void MakeGhosts(CachePolicy& arc, const Ids& b1, const Ids& b2) {
  InsertReady(arc, b2);
  for (uint64_t id : b2) Touch(arc, {id});
  ASSERT_EQ(Evict(arc, b2.size()), b2);
  InsertReady(arc, b1);
  ASSERT_EQ(Evict(arc, b1.size()), b1);
  const ArcDebugState s = ArcState(arc);
  ASSERT_EQ(IdsOf(s.b1), b1);
  ASSERT_EQ(IdsOf(s.b2), b2);
  ASSERT_EQ(s.target_t1_size, 0.0);
}

TEST(ArcPolicy, GhostHitsAdaptTheTargetByTheRatioOfGhostListSizes) {
  auto arc = Arc();
  MakeGhosts(*arc, {10, 11, 12}, {20, 21});
  Touch(*arc, {10});  // B1 hit: + max(1, 2/3) = 1
  EXPECT_EQ(ArcState(*arc).target_t1_size, 1.0);
  EXPECT_EQ(IdsOf(ArcState(*arc).b1), (Ids{11, 12, 10}));  // moved to B1's MRU end
  Touch(*arc, {11});                                       // + 1
  EXPECT_EQ(ArcState(*arc).target_t1_size, 2.0);
  Touch(*arc, {20});  // B2 hit: - max(1, 3/2) = 1.5
  EXPECT_EQ(ArcState(*arc).target_t1_size, 0.5);
  EXPECT_EQ(IdsOf(ArcState(*arc).b2), (Ids{21, 20}));
  Touch(*arc, {21});  // - 1.5, floored at 0
  EXPECT_EQ(ArcState(*arc).target_t1_size, 0.0);

  auto arc2 = Arc();
  MakeGhosts(*arc2, {10, 11}, {20, 21, 22});
  Touch(*arc2, {10});  // + max(1, 3/2) = 1.5
  EXPECT_EQ(ArcState(*arc2).target_t1_size, 1.5);
  Touch(*arc2, {22, 11});  // reverse: 11 (+1.5 = 3.0), then 22 (- max(1, 2/3) = 2.0)
  EXPECT_EQ(ArcState(*arc2).target_t1_size, 2.0);
}

TEST(ArcPolicy, TargetIsCappedAtCapacity) {
  auto arc = Arc(4);
  MakeGhosts(*arc, {10}, {20, 21, 22, 23});
  Touch(*arc, {10});  // + max(1, 4/1) = 4 = capacity
  EXPECT_EQ(ArcState(*arc).target_t1_size, 4.0);
  Touch(*arc, {10});
  EXPECT_EQ(ArcState(*arc).target_t1_size, 4.0);
}

TEST(ArcPolicy, EvictionSplitsBetweenT1AndT2ByTheTarget) {
  auto arc = Arc();
  MakeGhosts(*arc, {100, 101}, {});
  Touch(*arc, {100});
  Touch(*arc, {101});  // target 2
  InsertReady(*arc, {1, 2, 3, 4, 5});
  Touch(*arc, {4});
  Touch(*arc, {5});  // T1 = [1 2 3], T2 = [4 5]
  // |T1| 3 >= 2: T1; 2 >= 2: T1; 1 < 2: T2.
  EXPECT_EQ(Evict(*arc, 3), (Ids{1, 2, 4}));
  const ArcDebugState s = ArcState(*arc);
  EXPECT_EQ(IdsOf(s.b1), (Ids{100, 101, 1, 2}));
  EXPECT_EQ(IdsOf(s.b2), (Ids{4}));
  EXPECT_EQ(IdsOf(s.t1), (Ids{3}));
  EXPECT_EQ(IdsOf(s.t2), (Ids{5}));
}

TEST(ArcPolicy, BelowTargetT1IsNotAFallbackButT2IsForT1) {
  auto arc = Arc();
  MakeGhosts(*arc, {100, 101, 102}, {});
  Touch(*arc, {100, 101, 102});  // target 3
  InsertReady(*arc, {1, 2});
  // |T1| 2 < 3 and T2 is empty: arc.py gives up although T1 has rows.
  EXPECT_EQ(Evict(*arc, 1), std::nullopt);
  EXPECT_EQ(IdsOf(ArcState(*arc).t1), (Ids{1, 2}));
  // At or above the target, a T1 without candidates falls back to T2.
  InsertReady(*arc, {3, 4});
  Touch(*arc, {4});  // T1 = [1 2 3], T2 = [4]
  EXPECT_EQ(Evict(*arc, 1, {1, 2, 3}), (Ids{4}));
}

TEST(ArcPolicy, GhostListsAreTrimmedToCapacity) {
  auto arc = Arc(2);
  InsertReady(*arc, {1, 2, 3, 4});
  EXPECT_EQ(Evict(*arc, 4), (Ids{1, 2, 3, 4}));
  ArcDebugState s = ArcState(*arc);
  EXPECT_EQ(IdsOf(s.b1), (Ids{3, 4}));
  Touch(*arc, {1});  // trimmed away: no ghost hit
  EXPECT_EQ(ArcState(*arc).target_t1_size, 0.0);
  Touch(*arc, {3});
  EXPECT_EQ(ArcState(*arc).target_t1_size, 1.0);
  // Re-inserting a ghost makes it a T1 row and drops the ghost.
  InsertReady(*arc, {4});
  s = ArcState(*arc);
  EXPECT_EQ(IdsOf(s.b1), (Ids{3}));
  EXPECT_EQ(IdsOf(s.t1), (Ids{4}));
}

TEST(ArcPolicy, InsertTakesTheKeyOutOfEitherGhostList) {
  auto arc = Arc();
  MakeGhosts(*arc, {10, 11}, {20, 21});
  InsertPending(*arc, {11, 20});
  const ArcDebugState s = ArcState(*arc);
  EXPECT_EQ(IdsOf(s.t1), (Ids{11, 20}));
  EXPECT_EQ(IdsOf(s.b1), (Ids{10}));
  EXPECT_EQ(IdsOf(s.b2), (Ids{21}));
  EXPECT_EQ(arc->Get(MixedKey(20))->ref_cnt, -1);
}

TEST(ArcPolicy, FailedEvictionChangesNothing) {
  auto arc = Arc(3);
  MakeGhosts(*arc, {100, 101}, {200});
  Touch(*arc, {100});
  InsertReady(*arc, {1, 2, 3, 4});
  Touch(*arc, {3});
  Hold(*arc, 3);  // T1 = [1 2 4], T2 = [3 (held)]
  const ArcDebugState before = ArcState(*arc);
  EXPECT_EQ(Evict(*arc, 4), std::nullopt);  // 3 evictable rows
  // Takes 1 and 2 from T1 virtually, then finds nothing in T1 or T2.
  EXPECT_EQ(Evict(*arc, 3, {4}), std::nullopt);
  const ArcDebugState after = ArcState(*arc);
  EXPECT_EQ(after.t1, before.t1);
  EXPECT_EQ(after.t2, before.t2);
  EXPECT_EQ(after.b1, before.b1);
  EXPECT_EQ(after.b2, before.b2);
  EXPECT_EQ(after.target_t1_size, before.target_t1_size);
  EXPECT_EQ(arc->size(), 4u);
  EXPECT_EQ(Evict(*arc, 3), (Ids{1, 2, 4}));
}

TEST(ArcPolicy, RemoveDropsRowsButNotGhosts) {
  auto arc = Arc();
  MakeGhosts(*arc, {100}, {});
  InsertReady(*arc, {1, 2});
  Touch(*arc, {2});
  arc->Remove(MixedKey(1));
  arc->Remove(MixedKey(2));
  arc->Remove(MixedKey(100));
  const ArcDebugState s = ArcState(*arc);
  EXPECT_TRUE(s.t1.empty());
  EXPECT_TRUE(s.t2.empty());
  EXPECT_EQ(IdsOf(s.b1), (Ids{100}));
  EXPECT_EQ(arc->size(), 0u);
}

TEST(ArcPolicy, ClearForgetsEverythingIncludingTheTarget) {
  auto arc = Arc();
  MakeGhosts(*arc, {100, 101}, {200});
  Touch(*arc, {100});
  InsertReady(*arc, {1, 2});
  Touch(*arc, {2});
  ASSERT_GT(ArcState(*arc).target_t1_size, 0.0);
  arc->Clear();
  const ArcDebugState s = ArcState(*arc);
  EXPECT_TRUE(s.t1.empty() && s.t2.empty() && s.b1.empty() && s.b2.empty());
  EXPECT_EQ(s.target_t1_size, 0.0);
  EXPECT_EQ(arc->size(), 0u);
  EXPECT_EQ(arc->Get(MixedKey(1)), nullptr);
  Touch(*arc, {101});  // no longer a ghost
  EXPECT_EQ(ArcState(*arc).target_t1_size, 0.0);
  EXPECT_EQ(Evict(*arc, 0), Ids{});
}

}  // namespace
}  // namespace kvtier::internal::policytest
