// Proves the CPU tier's eviction policies follow vLLM's cpu/policies/lru.py
// and arc.py: LRU's insert/touch order and all-or-nothing eviction of ready,
// unheld, unprotected rows from the LRU end; ARC's T1/T2 placement, ghost
// lists bounded by the capacity, the exact target adaptation on ghost hits
// and the exact T1-versus-T2 eviction order; that a failed eviction changes
// nothing; and, on seeded random operation sequences, that both policies
// agree at every step with simple O(n) reference models written from the
// same rules. Also checks the policies' building blocks against standard
// containers (the evictable-row index LevelBitset against a std::set, the
// key table EntryTable against a std::map, including stable addresses) and
// the key hasher's basic properties.
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

#include "support/test_support.h"
#include "cpu_tier/arc_policy.h"
#include "cpu_tier/policy_list.h"

namespace kvtier::internal {
namespace {

using Ids = std::vector<uint64_t>;

// A 16-byte key (XXH3-sized) whose first 8 bytes are `id`; the second half
// differs too, so no test depends on which bytes the hasher reads.
OffloadKey MixedKey(uint64_t id, uint32_t group = 0) {
  uint8_t bytes[16];
  const uint64_t other = ~id * 0x9e3779b97f4a7c15ull;
  std::memcpy(bytes, &id, 8);
  std::memcpy(bytes + 8, &other, 8);
  return OffloadKey{*BlockHash::FromBytes(bytes), group};
}

uint64_t Id(const OffloadKey& key) {
  uint64_t id = 0;
  std::memcpy(&id, key.hash.bytes().data(), 8);
  return id;
}

Ids IdsOf(const std::vector<OffloadKey>& keys) {
  Ids ids;
  for (const OffloadKey& key : keys) ids.push_back(Id(key));
  return ids;
}

std::vector<OffloadKey> Keys(const Ids& ids) {
  std::vector<OffloadKey> keys;
  for (uint64_t id : ids) keys.push_back(MixedKey(id));
  return keys;
}

OffloadKeySet KeySet(const Ids& ids) {
  const std::vector<OffloadKey> keys = Keys(ids);
  return OffloadKeySet(keys.begin(), keys.end());
}

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

// ------------------------------------------------------- reference models

// Written from the rules (lru.py, arc.py) with O(n) vector scans and no
// shared code with the policies, so that a disagreement means a bug in one.
struct ModelRow {
  OffloadKey key;
  RowStatus status;
};

bool Contains(const std::vector<OffloadKey>& keys, const OffloadKey& key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}
ModelRow* FindIn(std::vector<ModelRow>& rows, const OffloadKey& key) {
  for (ModelRow& row : rows) {
    if (row.key == key) return &row;
  }
  return nullptr;
}
bool EraseRow(std::vector<ModelRow>& rows, const OffloadKey& key) {
  return std::erase_if(rows, [&](const ModelRow& r) { return r.key == key; }) > 0;
}
void MoveToEnd(std::vector<OffloadKey>& keys, const OffloadKey& key) {
  std::erase(keys, key);
  keys.push_back(key);
}
bool Eligible(const ModelRow& row, const std::vector<OffloadKey>& protect) {
  return row.status.ref_cnt == 0 && !Contains(protect, row.key);
}

class LruModel {
 public:
  explicit LruModel(size_t /*capacity*/) {}
  ModelRow* Get(const OffloadKey& key) { return FindIn(rows_, key); }
  void Insert(const OffloadKey& key, RowStatus status) { rows_.push_back({key, status}); }
  void Remove(const OffloadKey& key) { EraseRow(rows_, key); }
  void Touch(const std::vector<OffloadKey>& keys) {
    for (auto key = keys.rbegin(); key != keys.rend(); ++key) {
      if (ModelRow* row = Get(*key)) {
        const ModelRow moved = *row;
        EraseRow(rows_, *key);
        rows_.push_back(moved);
      }
    }
  }
  std::optional<EvictedRows> Evict(size_t n, const std::vector<OffloadKey>& protect) {
    EvictedRows out;
    for (const ModelRow& row : rows_) {
      if (out.size() < n && Eligible(row, protect)) out.emplace_back(row.key, row.status);
    }
    if (out.size() < n) return std::nullopt;
    for (const auto& [key, status] : out) EraseRow(rows_, key);
    return out;
  }
  void Clear() { rows_.clear(); }
  size_t size() const { return rows_.size(); }
  const OffloadKey& KeyAt(size_t i) const { return rows_[i].key; }

 private:
  std::vector<ModelRow> rows_;  // LRU first
};

class ArcModel {
 public:
  explicit ArcModel(size_t capacity) : capacity_(capacity) {}
  ModelRow* Get(const OffloadKey& key) {
    ModelRow* row = FindIn(t1_, key);
    return row != nullptr ? row : FindIn(t2_, key);
  }
  void Insert(const OffloadKey& key, RowStatus status) {
    t1_.push_back({key, status});
    std::erase(b1_, key);
    std::erase(b2_, key);
  }
  void Remove(const OffloadKey& key) {
    if (!EraseRow(t1_, key)) EraseRow(t2_, key);
  }
  void Touch(const std::vector<OffloadKey>& keys) {
    for (auto key = keys.rbegin(); key != keys.rend(); ++key) TouchOne(*key);
  }
  std::optional<EvictedRows> Evict(size_t n, const std::vector<OffloadKey>& protect);
  void Clear() { *this = ArcModel(capacity_); }
  size_t size() const { return t1_.size() + t2_.size(); }
  const OffloadKey& KeyAt(size_t i) const {
    return i < t1_.size() ? t1_[i].key : t2_[i - t1_.size()].key;
  }

  void ExpectSameState(const ArcDebugState& s) const {
    std::vector<OffloadKey> t1, t2;
    for (const ModelRow& row : t1_) t1.push_back(row.key);
    for (const ModelRow& row : t2_) t2.push_back(row.key);
    ASSERT_EQ(IdsOf(s.t1), IdsOf(t1));
    ASSERT_EQ(IdsOf(s.t2), IdsOf(t2));
    ASSERT_EQ(IdsOf(s.b1), IdsOf(b1_));
    ASSERT_EQ(IdsOf(s.b2), IdsOf(b2_));
    ASSERT_EQ(s.target_t1_size, target_);
  }

 private:
  void TouchOne(const OffloadKey& key) {
    if (ModelRow* row = FindIn(t1_, key)) {
      const ModelRow moved = *row;
      EraseRow(t1_, key);
      (moved.status.ref_cnt == -1 ? t1_ : t2_).push_back(moved);
    } else if ((row = FindIn(t2_, key)) != nullptr) {
      const ModelRow moved = *row;
      EraseRow(t2_, key);
      t2_.push_back(moved);
    } else if (Contains(b1_, key)) {
      const double delta =
          std::max(1.0, static_cast<double>(b2_.size()) / static_cast<double>(b1_.size()));
      target_ = std::min(target_ + delta, static_cast<double>(capacity_));
      MoveToEnd(b1_, key);
    } else if (Contains(b2_, key)) {
      const double delta =
          std::max(1.0, static_cast<double>(b1_.size()) / static_cast<double>(b2_.size()));
      target_ = std::max(target_ - delta, 0.0);
      MoveToEnd(b2_, key);
    }
  }

  size_t capacity_;
  double target_ = 0;
  std::vector<ModelRow> t1_, t2_;  // LRU first
  std::vector<OffloadKey> b1_, b2_;
};

std::optional<EvictedRows> ArcModel::Evict(size_t n, const std::vector<OffloadKey>& protect) {
  if (n == 0) return EvictedRows{};
  std::vector<std::pair<ModelRow, bool>> chosen;  // (row, from T1)
  int64_t virtual_t1 = static_cast<int64_t>(t1_.size());
  size_t i1 = 0, i2 = 0;
  while (chosen.size() < n) {
    if (virtual_t1 >= static_cast<int64_t>(target_)) {
      while (i1 < t1_.size() && !Eligible(t1_[i1], protect)) ++i1;
      if (i1 < t1_.size()) {
        chosen.emplace_back(t1_[i1++], true);
        --virtual_t1;
        continue;
      }
    }
    while (i2 < t2_.size() && !Eligible(t2_[i2], protect)) ++i2;
    if (i2 == t2_.size()) return std::nullopt;
    chosen.emplace_back(t2_[i2++], false);
  }
  EvictedRows out;
  for (const auto& [row, from_t1] : chosen) {
    out.emplace_back(row.key, row.status);
    EraseRow(from_t1 ? t1_ : t2_, row.key);
    (from_t1 ? b1_ : b2_).push_back(row.key);
  }
  while (b1_.size() > capacity_) b1_.erase(b1_.begin());
  while (b2_.size() > capacity_) b2_.erase(b2_.begin());
  return out;
}

// ------------------------------------------------------ randomized driver

struct RandomConfig {
  size_t capacity = 8;
  size_t universe = 28;  // distinct keys; more than the capacity: ghost hits
  int steps = 4000;
  size_t prefill = 0;   // ready rows inserted first, about half of them held
  int check_every = 1;  // compare every key's Get (and ARC's state) this often
  size_t max_evict = 6;
  bool clear = true;  // now and then Clear() both
};

std::string Describe(const std::optional<EvictedRows>& rows) {
  if (!rows) return "nullopt";
  std::string out;
  for (const auto& [key, status] : *rows) {
    out += std::to_string(Id(key)) + "/" + std::to_string(key.group_idx) + " ref " +
           std::to_string(status.ref_cnt) + " row " + std::to_string(status.row) + "; ";
  }
  return out;
}

// What a run exercised, so that the randomized tests cannot pass vacuously.
struct RandomStats {
  int evictions = 0;  // successful, n > 0
  int failed_evictions = 0;
  int arc_target_moves = 0;  // steps after which ARC's target changed
  int arc_t2_rows = 0;       // checks that saw rows in T2
};

// Plays the CPU tier against the policy and the model at once: every change
// of ref_cnt goes through Get() and the hooks on one side, the model's rows
// on the other.
template <class Model>
class RandomDriver {
 public:
  RandomDriver(EvictionPolicy kind, const RandomConfig& config, uint64_t seed)
      : config_(config),
        rng_(seed),
        policy_(MakeCachePolicy(kind, config.capacity)),
        model_(config.capacity) {
    for (uint64_t id = 0; id < config.universe; ++id)
      keys_.push_back(MixedKey(id, static_cast<uint32_t>(id % 3)));
  }

  const RandomStats& stats() const { return stats_; }

  void Run() {
    Prefill();
    for (int step = 0; step < config_.steps && !::testing::Test::HasFatalFailure(); ++step) {
      SCOPED_TRACE(::testing::Message() << "step " << step);
      Step();
      ASSERT_EQ(policy_->size(), model_.size());
      if (step % config_.check_every == 0) CheckAll();
    }
    if (!::testing::Test::HasFatalFailure()) Drain();
  }

 private:
  const OffloadKey& RandomKey() { return keys_[rng_() % keys_.size()]; }
  size_t Below(size_t n) { return static_cast<size_t>(rng_() % n); }

  void Prefill() {
    for (size_t i = 0; i < config_.prefill && i < keys_.size(); ++i) {
      const RowStatus status{Below(2) == 0 ? 1 : 0, row_++};
      policy_->Insert(keys_[i], status);
      model_.Insert(keys_[i], status);
    }
  }

  void Step() {
    const size_t op = Below(100);
    if (op < 22) return InsertOp();
    if (op < 36) return ChangeRef(-1, 0);  // a write completes
    if (op < 46) return ChangeRef(0, +1);  // a reader takes a ready row
    if (op < 56) return ChangeRef(1, -1);  // a reader lets go
    if (op < 60) return RemoveOp();
    if (op < 75) return TouchOp();
    if (op < 97) return EvictOp();
    if (op < 99) return SpuriousHookOp();
    if (config_.clear && Below(10) == 0) {
      policy_->Clear();
      model_.Clear();
    }
  }

  void InsertOp() {
    const OffloadKey& key = RandomKey();
    if (model_.Get(key) != nullptr) return;  // the tier inserts absent keys only
    const RowStatus status{Below(5) == 0 ? 0 : -1, row_++};
    policy_->Insert(key, status);
    model_.Insert(key, status);
  }

  // Picks a row whose ref_cnt is `from` (1: any held row) and adds `delta`,
  // calling the hook the tier would call.
  // Few rows are scanned whole, many sampled (model lookups are O(rows)).
  void ChangeRef(int32_t from, int32_t delta) {
    const size_t rows = model_.size();
    if (rows == 0) return;
    const size_t start = Below(rows);
    const size_t tries = std::min<size_t>(rows, 64);
    for (size_t i = 0; i < tries; ++i) {
      const OffloadKey key = model_.KeyAt(rows <= 64 ? (start + i) % rows : Below(rows));
      ModelRow* row = model_.Get(key);
      if (row == nullptr || (from == 1 ? row->status.ref_cnt < 1 : row->status.ref_cnt != from))
        continue;
      RowStatus* status = policy_->Get(key);
      ASSERT_NE(status, nullptr);
      const int32_t before = status->ref_cnt;
      status->ref_cnt = from == -1 ? 0 : before + delta;
      row->status.ref_cnt = status->ref_cnt;
      if (status->ref_cnt == 0) policy_->MarkEvictable(key);
      if (before == 0) policy_->MarkNonEvictable(key);
      return;
    }
  }

  void RemoveOp() {
    const OffloadKey& key = RandomKey();
    policy_->Remove(key);
    model_.Remove(key);
  }

  void TouchOp() {
    std::vector<OffloadKey> keys(Below(9));
    for (OffloadKey& key : keys) key = RandomKey();
    policy_->Touch(keys);
    model_.Touch(keys);
  }

  void EvictOp() {
    const size_t n = Below(20) == 0 ? Below(3 * config_.max_evict) : Below(config_.max_evict);
    std::vector<OffloadKey> protect(Below(4));
    for (OffloadKey& key : protect) key = RandomKey();
    const std::optional<EvictedRows> got =
        policy_->Evict(n, OffloadKeySet(protect.begin(), protect.end()));
    const std::optional<EvictedRows> want = model_.Evict(n, protect);
    ASSERT_EQ(Describe(got), Describe(want)) << "Evict(" << n << ")";
    if (!want) ++stats_.failed_evictions;
    if (want && n > 0) ++stats_.evictions;
  }

  // Hooks re-read ref_cnt, so a call that changes nothing must change nothing.
  void SpuriousHookOp() {
    const OffloadKey& key = RandomKey();
    if (Below(2) == 0) {
      policy_->MarkEvictable(key);
    } else {
      policy_->MarkNonEvictable(key);
    }
  }

  void CheckAll() {
    for (const OffloadKey& key : keys_) {
      const RowStatus* got = policy_->Get(key);
      const ModelRow* want = model_.Get(key);
      ASSERT_EQ(got != nullptr, want != nullptr) << "key " << Id(key);
      if (got == nullptr) continue;
      ASSERT_EQ(got->ref_cnt, want->status.ref_cnt) << "key " << Id(key);
      ASSERT_EQ(got->row, want->status.row) << "key " << Id(key);
    }
    if constexpr (std::is_same_v<Model, ArcModel>) {
      std::optional<ArcDebugState> state = GetArcDebugState(*policy_);
      ASSERT_TRUE(state.has_value());
      model_.ExpectSameState(*state);
      if (state->target_t1_size != last_target_) ++stats_.arc_target_moves;
      if (!state->t2.empty()) ++stats_.arc_t2_rows;
      last_target_ = state->target_t1_size;
    }
  }

  // Lets every row go and evicts one at a time: the full order must match.
  void Drain() {
    for (const OffloadKey& key : keys_) {
      ModelRow* row = model_.Get(key);
      if (row == nullptr || row->status.ref_cnt == 0) continue;
      policy_->Get(key)->ref_cnt = 0;
      row->status.ref_cnt = 0;
      policy_->MarkEvictable(key);
    }
    while (model_.size() > 0) {
      const std::optional<EvictedRows> got = policy_->Evict(1, {});
      const std::optional<EvictedRows> want = model_.Evict(1, {});
      ASSERT_EQ(Describe(got), Describe(want)) << "draining";
      if (!want) break;  // ARC: T1 below its target and T2 empty
    }
    CheckAll();
  }

  RandomConfig config_;
  std::mt19937_64 rng_;
  std::unique_ptr<CachePolicy> policy_;
  Model model_;
  std::vector<OffloadKey> keys_;
  uint32_t row_ = 0;
  RandomStats stats_;
  double last_target_ = 0;
};

template <class Model>
RandomStats RunRandomRounds(EvictionPolicy kind, int rounds, RandomConfig (*config_of)(int)) {
  const uint64_t seed = kvtier::testing::TestSeed();
  RandomStats total;
  for (int round = 0; round < rounds && !::testing::Test::HasFatalFailure(); ++round) {
    SCOPED_TRACE(::testing::Message() << "KVTIER_TEST_SEED=" << seed << " round " << round);
    RandomDriver<Model> driver(kind, config_of(round), seed + static_cast<uint64_t>(round));
    driver.Run();
    total.evictions += driver.stats().evictions;
    total.failed_evictions += driver.stats().failed_evictions;
    total.arc_target_moves += driver.stats().arc_target_moves;
    total.arc_t2_rows += driver.stats().arc_t2_rows;
  }
  return total;
}

RandomConfig SmallConfig(int round) {
  RandomConfig config;
  config.capacity = 2 + 3 * static_cast<size_t>(round);
  config.universe = 3 * config.capacity + 4;
  return config;
}

// Thousands of rows: several bitset levels, compactions, long held runs.
RandomConfig LargeConfig(int /*round*/) {
  RandomConfig config;
  config.capacity = 3000;
  config.universe = 7000;
  config.prefill = 5000;
  config.steps = 3000;
  config.check_every = 1000;
  config.max_evict = 16;
  config.clear = false;
  return config;
}

TEST(LruPolicy, MatchesReferenceModelOnRandomOperations) {
  // Typical: ~2100 evictions, ~3800 failed ones.
  const RandomStats stats = RunRandomRounds<LruModel>(EvictionPolicy::kLru, 8, SmallConfig);
  EXPECT_GT(stats.evictions, 1000);
  EXPECT_GT(stats.failed_evictions, 500);
}

TEST(ArcPolicy, MatchesReferenceModelOnRandomOperations) {
  // Typical: ~2000 evictions, ~3800 failed, ~2600 target moves, ~25000 checks with T2 rows.
  const RandomStats stats = RunRandomRounds<ArcModel>(EvictionPolicy::kArc, 8, SmallConfig);
  EXPECT_GT(stats.evictions, 1000);
  EXPECT_GT(stats.failed_evictions, 500);
  EXPECT_GT(stats.arc_target_moves, 1000);
  EXPECT_GT(stats.arc_t2_rows, 8000);
}

TEST(LruPolicy, MatchesReferenceModelWithThousandsOfRows) {
  const RandomStats stats = RunRandomRounds<LruModel>(EvictionPolicy::kLru, 1, LargeConfig);
  EXPECT_GT(stats.evictions, 150);  // typical: ~380
}

TEST(ArcPolicy, MatchesReferenceModelWithThousandsOfRows) {
  const RandomStats stats = RunRandomRounds<ArcModel>(EvictionPolicy::kArc, 1, LargeConfig);
  EXPECT_GT(stats.evictions, 150);  // typical: ~380
}

}  // namespace
}  // namespace kvtier::internal
