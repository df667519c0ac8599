// Proves the tiered store's tier router on its own, with two real fs tiers
// on temporary directories: the first tier that does not miss answers a
// lookup, so a tier still in flight holds back a hit in a later one; a
// prefetch miss cascades to the next tier and stops after the last; a
// write-through record stores the CPU rows' bytes in the tier it names and a
// promotion loads them back byte-exact; each record is taken once, by its
// tier, and the router is idle only when all are; a submission to an unknown
// tier or of a row outside the CPU rows starts nothing and leaves the record
// to the caller; lookup and promotion counters land on the right tiers.
#include "tiered_store/tier_router.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <thread>

#include "support/test_support.h"
#include "cpu_tier/host_region.h"

namespace kvtier::internal {
namespace {

constexpr uint64_t kRowBytes = 8192;
constexpr uint32_t kRows = 8;

using testing::Key;

TEST(TierRouterTest, FirstTierThatDoesNotMissAnswers) {
  using enum TierVerdict;
  const auto route = [](std::vector<TierVerdict> v) {
    const TierRouter::Route r = TierRouter::FirstAnswer(v);
    return std::pair<TierVerdict, int>(r.verdict, r.tier);
  };
  EXPECT_EQ(route({}), std::pair(kMiss, -1)) << "no tiers";
  EXPECT_EQ(route({kMiss, kMiss}), std::pair(kMiss, -1));
  EXPECT_EQ(route({kMiss, kHit}), std::pair(kHit, 1));
  EXPECT_EQ(route({kHit, kHit}), std::pair(kHit, 0)) << "config order";
  EXPECT_EQ(route({kInFlight, kHit}), std::pair(kInFlight, 0))
      << "an earlier tier still asked holds back a later hit";
  EXPECT_EQ(route({kMiss, kUnknown}), std::pair(kInFlight, 1)) << "no verdict yet is not a miss";
}

class TierRouterFsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rng_.seed(testing::TestSeed());
    ASSERT_OK_AND_ASSIGN(region_, HostRegion::Allocate(kRows * kRowBytes));
    router_.AttachRows(region_->bytes(), kRowBytes);
    for (int t = 0; t < 2; ++t) {
      FsTierOpenOptions o;
      o.tier.root_dir = roots_[t].path().string();
      o.ns.model_name = "test/router";
      o.ns.kv_cache_groups.push_back({16, {"l0"}});
      o.row_bytes = kRowBytes;
      o.tier.n_read_threads = 2;
      o.tier.n_write_threads = 2;
      o.registered_memory = {region_->bytes()};
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<FsTier> tier, FsTier::Open(o));
      router_.AddTier("fs" + std::to_string(t), std::move(tier));
    }
  }

  std::span<uint8_t> Row(uint32_t r) { return region_->bytes().subspan(r * kRowBytes, kRowBytes); }
  void Fill(uint32_t r) {
    for (uint8_t& b : Row(r)) b = static_cast<uint8_t>(rng_());
  }

  // Submits `record` to tier t and waits for its result; the record comes
  // back through Take, as the store's progress thread gets it.
  std::pair<FsJobRecord, JobResult> Run(size_t t, FsJobRecord record) {
    EXPECT_OK(router_.Submit(t, record));
    return Finish(t);
  }
  std::pair<FsJobRecord, JobResult> Finish(size_t t) {
    std::vector<JobResult> out;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (out.empty() && std::chrono::steady_clock::now() < deadline) {
      if (router_.Poll(t, &out) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (out.size() != 1) {
      ADD_FAILURE() << "tier " << t << " finished " << out.size() << " jobs";
      return {};
    }
    std::optional<FsJobRecord> taken = router_.Take(t, out[0].job_id);
    EXPECT_TRUE(taken.has_value());
    EXPECT_FALSE(router_.Take(t, out[0].job_id).has_value()) << "taken once";
    return {taken ? std::move(*taken) : FsJobRecord{}, std::move(out[0])};
  }

  std::mt19937_64 rng_;
  testing::TempDir roots_[2];
  std::unique_ptr<HostRegion> region_;
  TierRouter router_;  // after region_: destroyed first, as in the store
};

TEST_F(TierRouterFsTest, TiersAreOrderedAndCascadeToTheNext) {
  ASSERT_EQ(router_.size(), 2u);
  EXPECT_EQ(router_.NextTier(0), std::optional<size_t>(1));
  EXPECT_EQ(router_.NextTier(1), std::nullopt) << "the last tier cascades nowhere";
  EXPECT_EQ(router_.Usage(0).name, "fs0");
  EXPECT_EQ(router_.Usage(1).name, "fs1");
  EXPECT_THROW(router_.tier(2), std::out_of_range);
  EXPECT_EQ(TierRouter().NextTier(0), std::nullopt);
}

TEST_F(TierRouterFsTest, WriteThroughLookupAndPromotionRouteToTheirTier) {
  Fill(0);
  Fill(1);
  const std::vector<uint8_t> row0(Row(0).begin(), Row(0).end());
  // Key 1 only in tier 1, key 2 in neither.
  FsJobRecord store{FsJobRecord::Kind::kWriteThrough, {Key(1)}, {0}, 0, 0, {}, {}, {}, {}};
  auto [stored_record, stored] = Run(1, store);
  EXPECT_EQ(stored_record.rows, std::vector<uint32_t>{0});
  ASSERT_EQ(stored.keys.size(), 1u);
  EXPECT_EQ(stored.keys[0].outcome, KeyOutcome::kOk) << stored.keys[0].status.ToString();
  EXPECT_EQ(router_.Usage(1).rows_in, 1u);
  EXPECT_EQ(router_.Usage(0).rows_in, 0u);

  std::vector<TierVerdict> verdicts;
  for (size_t t = 0; t < 2; ++t) {
    auto [record, looked] =
        Run(t, FsJobRecord{FsJobRecord::Kind::kLookup, {Key(1), Key(2)}, {}, 42, 0, {}, {}, {}, {}});
    EXPECT_EQ(record.request_id, 42u) << "the record says whose lookup it was";
    ASSERT_EQ(looked.keys.size(), 2u);
    EXPECT_EQ(looked.keys[1].outcome, KeyOutcome::kMiss);
    verdicts.push_back(looked.keys[0].outcome == KeyOutcome::kOk ? TierVerdict::kHit
                                                                 : TierVerdict::kMiss);
  }
  const TierRouter::Route route = TierRouter::FirstAnswer(verdicts);
  EXPECT_EQ(route.verdict, TierVerdict::kHit);
  EXPECT_EQ(route.tier, 1);

  auto [promoted_record, promoted] =
      Run(1, FsJobRecord{FsJobRecord::Kind::kPromote, {Key(1)}, {1}, 0, 7, {3}, {}, {}, {}});
  EXPECT_EQ(promoted_record.job_id, 7u);
  EXPECT_EQ(promoted_record.index, std::vector<size_t>{3});
  ASSERT_EQ(promoted.keys.size(), 1u);
  EXPECT_EQ(promoted.keys[0].outcome, KeyOutcome::kOk) << promoted.keys[0].status.ToString();
  EXPECT_TRUE(std::equal(row0.begin(), row0.end(), Row(1).begin()))
      << "row 1 holds what row 0 wrote";
  EXPECT_TRUE(router_.Idle());
}

TEST_F(TierRouterFsTest, BadSubmissionsStartNothingAndKeepTheRecord) {
  FsJobRecord record{FsJobRecord::Kind::kWriteThrough, {Key(1)}, {kRows}, 0, 0, {}, {}, {}, {}};
  EXPECT_EQ(router_.Submit(0, record).code(), StatusCode::kInvalidArgument)
      << "row beyond the region";
  EXPECT_EQ(record.keys, std::vector<OffloadKey>{Key(1)}) << "the caller still owns the record";
  record.rows = {0};
  EXPECT_EQ(router_.Submit(2, record).code(), StatusCode::kInvalidArgument) << "no tier 2";
  EXPECT_EQ(record.rows, std::vector<uint32_t>{0});
  EXPECT_TRUE(router_.Idle());
  EXPECT_FALSE(router_.Take(0, 1).has_value());
  EXPECT_FALSE(router_.Take(5, 1).has_value()) << "unknown tier";

  ASSERT_OK(router_.Submit(0, record));
  EXPECT_FALSE(router_.Idle()) << "a submitted job is running until taken";
  // Each tier numbers its own jobs (here both are job 1 of their tier), so
  // records are kept per tier.
  auto [lookup, looked] = Run(1, FsJobRecord{FsJobRecord::Kind::kLookup, {Key(1)}, {}, 1, 0, {}, {}, {}, {}});
  EXPECT_EQ(lookup.kind, FsJobRecord::Kind::kLookup);
  EXPECT_FALSE(router_.Idle()) << "taking tier 1's record leaves tier 0's";
  auto [store, stored] = Finish(0);
  EXPECT_EQ(store.kind, FsJobRecord::Kind::kWriteThrough);
  EXPECT_TRUE(router_.Idle());
}

TEST_F(TierRouterFsTest, CountersLandOnTheTiersTheRouteCrossed) {
  router_.CountLookup(1);             // fs0 missed, fs1 hit
  router_.CountLookup(std::nullopt);  // both missed
  router_.CountLookup(0);             // fs0 hit
  router_.CountPromotion(1, true);
  router_.CountPromotion(0, false);
  router_.CountPromotion(9, true);  // no such tier: ignored
  const TierUsage a = router_.Usage(0), b = router_.Usage(1);
  EXPECT_EQ(a.misses, 2u);
  EXPECT_EQ(a.hits, 1u);
  EXPECT_EQ(b.misses, 1u);
  EXPECT_EQ(b.hits, 1u);
  EXPECT_EQ(a.promotions, 0u);
  EXPECT_EQ(a.promotions_failed, 1u);
  EXPECT_EQ(b.promotions, 1u);
  EXPECT_EQ(b.promotions_failed, 0u);
  EXPECT_NE(router_.PrometheusText(1).find("tier=\"fs1\""), std::string::npos);
}

}  // namespace
}  // namespace kvtier::internal
