// Proves, on seeded random operation sequences (small capacities with many
// ghost hits, and thousands of rows), that the CPU tier's LRU and ARC
// policies agree at every step with simple O(n) reference models written
// from the same rules as vLLM's cpu/policies/lru.py and arc.py: the rows
// each Get returns, every eviction (which rows, or its failure) and ARC's
// lists and target. The runs count what they exercised, so they cannot pass
// vacuously. Seeds come from TestSeed (printed; replay with
// KVTIER_TEST_SEED=<seed>).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cache_policy_support.h"
#include "cpu_tier/arc_policy.h"
#include "cpu_tier/cache_policy.h"
#include "support/test_support.h"

namespace kvtier::internal::policytest {
namespace {

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
}  // namespace kvtier::internal::policytest
