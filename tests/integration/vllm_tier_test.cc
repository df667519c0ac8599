// Proves VllmTier's per-step contract on real files in a temp directory:
// Lookup() answers kRetry until the batch that FlushLookups() submitted
// lands, then kHit / kMiss from a cache shared by requests (one existence
// check per key, dropped when the last interested request finishes); stores
// and loads move rows by slot byte-exactly; a load that fails in part reports
// which keys loaded and marks the rest kMiss, and a corrupt block is never
// reported as loaded; a successful store marks its keys kHit; invalid jobs are
// refused with kInvalidArgument and produce no result; every accepted job
// produces exactly one result, under load and with concurrent submitters and
// a poller; with enable_kv_events it keeps its stores for vLLM's
// take_events; after Shutdown nothing is accepted, and results not yet polled
// are still returned (misuse and races: vllm_tier_misuse.cc, linked into
// this binary). Method: small rows, seeded random contents and job shapes
// (seed printed; replay with KVTIER_TEST_SEED), and polling loops with
// deadlines instead of sleeps.
#include "vllm_tier_test.h"

#include <algorithm>
#include <fstream>

namespace kvtier {
namespace {

using namespace vllm_tier_test;  // NOLINT(google-build-using-namespace): the fixture and its helpers

// ---- Lookups -------------------------------------------------------------------

TEST_F(VllmTierTest, LookupRetriesUntilTheFlushedBatchLandsThenHitsOrMisses) {
  SCOPED_TRACE(SeedTrace());
  const OffloadKey stored = Key(1, kKeyShape), absent = Key(2, kKeyShape);
  FillRandom(0);
  ASSERT_TRUE(Store(10, {stored}, {0}).success);

  EXPECT_EQ(tier_->Lookup(stored, "r1"), LookupVerdict::kRetry);
  EXPECT_EQ(tier_->Lookup(absent, "r1"), LookupVerdict::kRetry);
  EXPECT_EQ(tier_->Lookup(stored, "r2"), LookupVerdict::kRetry);  // pending: joins, not re-queued
  EXPECT_EQ(tier_->Lookup(stored, "r1"), LookupVerdict::kRetry);
  EXPECT_EQ(tier_->Stats().lookups_pending, 2u);
  EXPECT_EQ(tier_->Stats().lookup_cache_keys, 2u);
  EXPECT_EQ(LookupsChecked(), 0u);  // nothing is checked before the flush

  ASSERT_OK(tier_->FlushLookups());
  EXPECT_EQ(WaitVerdict(stored, "r1"), LookupVerdict::kHit);
  EXPECT_EQ(WaitVerdict(absent, "r1"), LookupVerdict::kMiss);
  EXPECT_EQ(tier_->Lookup(stored, "r2"), LookupVerdict::kHit);
  EXPECT_EQ(LookupsChecked(), 2u);  // two keys, three askers: one check each
  EXPECT_EQ(tier_->Stats().lookups_pending, 0u);
}

TEST_F(VllmTierTest, VerdictsLiveWhileARequestThatAskedLives) {
  SCOPED_TRACE(SeedTrace());
  const OffloadKey stored = Key(1, kKeyShape), absent = Key(2, kKeyShape);
  FillRandom(0);
  ASSERT_TRUE(Store(10, {stored}, {0}).success);
  EXPECT_EQ(tier_->Lookup(stored, "r1"), LookupVerdict::kRetry);
  EXPECT_EQ(tier_->Lookup(absent, "r1"), LookupVerdict::kRetry);
  EXPECT_EQ(tier_->Lookup(stored, "r2"), LookupVerdict::kRetry);
  ASSERT_OK(tier_->FlushLookups());
  ASSERT_EQ(WaitVerdict(stored, "r1"), LookupVerdict::kHit);
  ASSERT_EQ(WaitVerdict(absent, "r1"), LookupVerdict::kMiss);

  tier_->FinishRequest("r1");
  EXPECT_EQ(tier_->Stats().lookup_cache_keys, 1u);  // `absent` had only r1
  EXPECT_EQ(tier_->Lookup(stored, "r2"), LookupVerdict::kHit);  // r2 keeps it
  EXPECT_EQ(tier_->Stats().lookups_pending, 0u);

  tier_->FinishRequest("r2");
  EXPECT_EQ(tier_->Stats().lookup_cache_keys, 0u);
  EXPECT_EQ(tier_->Lookup(stored, "r3"), LookupVerdict::kRetry);  // asked afresh
  EXPECT_EQ(tier_->Stats().lookups_pending, 1u);
  ASSERT_OK(tier_->FlushLookups());
  EXPECT_EQ(WaitVerdict(stored, "r3"), LookupVerdict::kHit);
  EXPECT_EQ(LookupsChecked(), 3u);
}

TEST_F(VllmTierTest, StoreTurnsACachedMissIntoAHit) {
  SCOPED_TRACE(SeedTrace());
  const OffloadKey key = Key(5, kKeyShape);
  EXPECT_EQ(tier_->Lookup(key, "r"), LookupVerdict::kRetry);
  ASSERT_OK(tier_->FlushLookups());
  ASSERT_EQ(WaitVerdict(key, "r"), LookupVerdict::kMiss);
  FillRandom(3);
  ASSERT_TRUE(Store(11, {key}, {3}).success);
  EXPECT_EQ(tier_->Lookup(key, "r"), LookupVerdict::kHit);
  EXPECT_EQ(tier_->Stats().lookups_pending, 0u);  // no second check was needed
}

// ---- Stores and loads -------------------------------------------------------------

TEST_F(VllmTierTest, StoreThenLoadBySlotIsByteExact) {
  SCOPED_TRACE(SeedTrace());
  const std::vector<OffloadKey> keys = Keys(100, 4);
  for (int64_t s = 0; s < 4; ++s) FillRandom(s);
  const int64_t store_id = int64_t{1} << 40, load_id = -7;  // engine ids pass through as given
  const EngineJobResult stored = Store(store_id, keys, {0, 1, 2, 3});
  EXPECT_EQ(stored.job_id, store_id);
  EXPECT_FALSE(stored.is_load);
  EXPECT_TRUE(stored.success);
  EXPECT_TRUE(stored.ok_keys.empty());
  EXPECT_EQ(stored.bytes, 4 * kRow);
  EXPECT_GT(stored.transfer_time_s, 0.0);

  const EngineJobResult loaded = Load(load_id, keys, {13, 12, 11, 10});  // reversed slots
  EXPECT_EQ(loaded.job_id, load_id);
  EXPECT_TRUE(loaded.is_load);
  EXPECT_TRUE(loaded.success);
  EXPECT_TRUE(loaded.ok_keys.empty());
  EXPECT_EQ(loaded.bytes, 4 * kRow);
  EXPECT_GT(loaded.transfer_time_s, 0.0);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(std::memcmp(Row(i), Row(13 - i), kRow), 0) << "key " << i;
}

TEST_F(VllmTierTest, PartialLoadReportsTheKeysThatLoadedAndMarksTheRestMissing) {
  SCOPED_TRACE(SeedTrace());
  const std::vector<OffloadKey> keys = Keys(200, 4);
  for (int64_t s = 0; s < 4; ++s) FillRandom(s);
  ASSERT_TRUE(Store(1, keys, {0, 1, 2, 3}).success);
  ExpectAllHit(keys, "req");
  ASSERT_OK_AND_ASSIGN(const std::string path, tier_->BlockPath(keys[2]));
  ASSERT_TRUE(fs::remove(path));

  const EngineJobResult loaded = Load(2, keys, {20, 21, 22, 23});
  EXPECT_TRUE(loaded.is_load);
  EXPECT_FALSE(loaded.success);
  EXPECT_EQ(loaded.ok_keys, (std::vector<uint32_t>{0, 1, 3}));
  EXPECT_EQ(loaded.bytes, 3 * kRow);
  EXPECT_EQ(std::memcmp(Row(3), Row(23), kRow), 0);
  EXPECT_EQ(tier_->Lookup(keys[2], "req"), LookupVerdict::kMiss);  // at once: no new check
  EXPECT_EQ(tier_->Lookup(keys[0], "req"), LookupVerdict::kHit);
  EXPECT_EQ(tier_->Stats().lookups_pending, 0u);
}

// Overwrites one byte in the middle of the file, leaving its size and xattr.
void FlipByte(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  f.seekg(kRow / 2);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(kRow / 2);
  f.write(&c, 1);
  ASSERT_TRUE(f.good()) << path;
}

TEST_F(VllmTierTest, CorruptBlockIsNeverReportedAsLoaded) {
  SCOPED_TRACE(SeedTrace());
  ASSERT_OK_AND_ASSIGN(FsTier* const fs_tier, tier_->fs());
  if (!fs_tier->xattrs_supported()) GTEST_SKIP() << "no user xattrs here, so no CRC32C to catch a flipped byte";
  const std::vector<OffloadKey> keys = Keys(300, 3);
  for (int64_t s = 0; s < 3; ++s) FillRandom(s);
  ASSERT_TRUE(Store(1, keys, {0, 1, 2}).success);
  FlipByte(fs_tier->BlockPath(keys[1]));

  const EngineJobResult loaded = Load(2, keys, {30, 31, 32});
  EXPECT_FALSE(loaded.success);
  EXPECT_EQ(loaded.ok_keys, (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(loaded.bytes, 2 * kRow);
  EXPECT_EQ(tier_->Metrics().rows_corrupt, 1u);
  EXPECT_EQ(std::memcmp(Row(0), Row(30), kRow), 0);
  EXPECT_EQ(std::memcmp(Row(2), Row(32), kRow), 0);
}

// ---- Invalid input ------------------------------------------------------------------

TEST_F(VllmTierTest, InvalidJobsAreRefusedAndProduceNoResult) {
  const std::vector<OffloadKey> two = Keys(400, 2);
  const std::vector<OffloadKey> one = Keys(410, 1);
  const auto code = [](const Status& s) { return s.code(); };
  EXPECT_EQ(code(tier_->SubmitStore(1, two, std::vector<int64_t>{0})), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(tier_->SubmitLoad(2, one, std::vector<int64_t>{kRows})), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(tier_->SubmitStore(3, one, std::vector<int64_t>{-1})), StatusCode::kInvalidArgument);
  ASSERT_OK(tier_->SubmitStore(5, one, std::vector<int64_t>{kRows - 1}));  // the last row is valid
  // Nothing polls between the two, so job 5 is still in flight.
  EXPECT_EQ(code(tier_->SubmitStore(5, two, std::vector<int64_t>{0, 1})), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(tier_->SubmitLoad(5, one, std::vector<int64_t>{0})), StatusCode::kInvalidArgument);

  ASSERT_OK(tier_->Drain(20000));
  std::vector<EngineJobResult> results;
  tier_->PollFinished(&results);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].job_id, 5);
  EXPECT_TRUE(results[0].success);
  EXPECT_EQ(tier_->Metrics().rows_stored, 1u);  // the refused jobs wrote nothing
  ASSERT_OK(tier_->SubmitLoad(5, one, std::vector<int64_t>{0}));  // its id is free again
  EXPECT_TRUE(WaitFor(5).success);
}

TEST_F(VllmTierTest, RegionThatIsNotWholeRowsIsRefused) {
  testing::TempDir other;
  VllmTierOptions o = Options(rows().subspan(0, 3 * kRow + 512));
  o.fs.tier.root_dir = other.path().string();
  Result<std::unique_ptr<VllmTier>> ragged = VllmTier::Open(o);
  ASSERT_FALSE(ragged.ok());
  EXPECT_EQ(ragged.status().code(), StatusCode::kInvalidArgument) << ragged.status().ToString();
  o.rows = {};
  Result<std::unique_ptr<VllmTier>> empty = VllmTier::Open(o);
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument) << empty.status().ToString();
}

// With enable_kv_events, VllmTier keeps its tier's stores and removals for
// vLLM's take_events (FsTier keeps them only for an opener that drains them).
TEST_F(VllmTierTest, WithKvEventsItKeepsItsStoresForTakeEvents) {
  testing::TempDir other;
  VllmTierOptions o = Options(rows());
  o.fs.tier.root_dir = other.path().string();
  o.fs.tier.enable_kv_events = true;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<VllmTier> tier, VllmTier::Open(o));
  tier_ = std::move(tier);
  const std::vector<OffloadKey> keys = Keys(900, 2);
  ASSERT_TRUE(Store(1, keys, {0, 1}).success);
  std::vector<TierKeyEvent> events = tier_->TakeKeyEvents();
  std::sort(events.begin(), events.end(), [](const auto& x, const auto& y) { return x.key.Hex() < y.key.Hex(); });
  std::vector<TierKeyEvent> want = {{keys[0], false}, {keys[1], false}};
  std::sort(want.begin(), want.end(), [](const auto& x, const auto& y) { return x.key.Hex() < y.key.Hex(); });
  EXPECT_EQ(events, want);
}

// ---- One result per job ---------------------------------------------------------------

struct StoreJob {
  int64_t id = 0;
  std::vector<OffloadKey> keys;
  std::vector<int64_t> slots;
};

// `n` store jobs of 1..4 fresh keys (numbered from first_key) on random slots,
// with ids first_id, first_id + 3, ...
std::vector<StoreJob> RandomStoreJobs(std::mt19937_64& rng, int n, int64_t first_id, uint64_t first_key) {
  std::vector<StoreJob> jobs(n);
  uint64_t next_key = first_key;
  for (int i = 0; i < n; ++i) {
    jobs[i].id = first_id + 3 * i;
    const size_t n_keys = 1 + rng() % 4;
    jobs[i].keys = Keys(next_key, n_keys);
    next_key += n_keys;
    for (size_t k = 0; k < n_keys; ++k) jobs[i].slots.push_back(static_cast<int64_t>(rng() % kRows));
  }
  return jobs;
}

void ExpectOneSuccessfulResultEach(const std::vector<StoreJob>& jobs, const std::vector<EngineJobResult>& results) {
  EXPECT_EQ(results.size(), jobs.size());
  const std::map<int64_t, int> counts = CountIds(results);
  for (const StoreJob& j : jobs) EXPECT_EQ(counts.count(j.id) ? counts.at(j.id) : 0, 1) << "job " << j.id;
  std::map<int64_t, size_t> n_keys;
  for (const StoreJob& j : jobs) n_keys[j.id] = j.keys.size();
  for (const EngineJobResult& r : results) {
    EXPECT_FALSE(r.is_load) << r.job_id;
    EXPECT_TRUE(r.success) << r.job_id;
    if (n_keys.contains(r.job_id)) {
      EXPECT_EQ(r.bytes, n_keys[r.job_id] * kRow) << r.job_id;
    }
  }
}

TEST_F(VllmTierTest, EveryJobGetsExactlyOneResultAfterDrain) {
  SCOPED_TRACE(SeedTrace());
  for (int64_t s = 0; s < kRows; ++s) FillRandom(s);
  const std::vector<StoreJob> jobs = RandomStoreJobs(rng_, 200, -100, 1000);
  for (const StoreJob& j : jobs) ASSERT_OK(tier_->SubmitStore(j.id, j.keys, j.slots));
  ASSERT_OK(tier_->Drain(20000));
  EXPECT_EQ(tier_->Stats().jobs_in_flight, 0u);

  std::vector<EngineJobResult> results;
  tier_->PollFinished(&results);
  ExpectOneSuccessfulResultEach(jobs, results);
  std::vector<EngineJobResult> again;
  EXPECT_EQ(tier_->PollFinished(&again), 0u);
  EXPECT_TRUE(again.empty());
  EXPECT_FALSE(tier_->HasPendingWork());
}

// Polls until `want` results arrived or the deadline passed.
// The other calls a polling engine thread makes run meanwhile too.
std::vector<EngineJobResult> PollUntil(VllmTier* tier, size_t want) {
  std::vector<EngineJobResult> results;
  const Clock::time_point deadline = Clock::now() + kDeadline;
  while (results.size() < want && Clock::now() < deadline) {
    if (tier->PollFinished(&results) == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
    (void)tier->HasPendingWork();
    (void)tier->Stats();
  }
  return results;
}

TEST_F(VllmTierTest, ConcurrentSubmittersAndAPollerLoseAndDuplicateNothing) {
  SCOPED_TRACE(SeedTrace());
  for (int64_t s = 0; s < kRows; ++s) FillRandom(s);
  std::vector<StoreJob> a = RandomStoreJobs(rng_, 100, 0, 5000);   // ids 0, 3, 6, ...
  std::vector<StoreJob> b = RandomStoreJobs(rng_, 100, 1, 10000);  // ids 1, 4, 7, ...
  std::atomic<int> refused{0};
  const auto submit_all = [&](const std::vector<StoreJob>& jobs) {
    for (const StoreJob& j : jobs) {
      if (!tier_->SubmitStore(j.id, j.keys, j.slots).ok()) refused.fetch_add(1);
    }
  };
  std::vector<EngineJobResult> results;
  std::thread poller([&] { results = PollUntil(tier_.get(), a.size() + b.size()); });
  std::thread ta(submit_all, std::cref(a)), tb(submit_all, std::cref(b));
  ta.join();
  tb.join();
  poller.join();
  EXPECT_EQ(refused.load(), 0);
  ASSERT_OK(tier_->Drain(20000));
  std::vector<EngineJobResult> late;
  tier_->PollFinished(&late);
  EXPECT_TRUE(late.empty()) << late.size() << " results beyond the expected ones";

  std::vector<StoreJob> all = a;
  all.insert(all.end(), b.begin(), b.end());
  ExpectOneSuccessfulResultEach(all, results);
  EXPECT_FALSE(tier_->HasPendingWork());
}

// ---- Shutdown -----------------------------------------------------------------------------

TEST_F(VllmTierTest, ShutdownDrainsThenRefusesEverything) {
  SCOPED_TRACE(SeedTrace());
  const std::vector<OffloadKey> keys = Keys(600, 2);
  FillRandom(0);
  FillRandom(1);
  ASSERT_TRUE(Store(1, {keys[0]}, {0}).success);
  ASSERT_OK_AND_ASSIGN(const std::string second_path, tier_->BlockPath(keys[1]));
  ASSERT_OK(tier_->SubmitStore(2, std::vector<OffloadKey>{keys[1]}, std::vector<int64_t>{1}));
  tier_->Shutdown();
  EXPECT_TRUE(fs::exists(second_path));  // the store in flight finished first

  EXPECT_EQ(tier_->Lookup(keys[0], "r"), LookupVerdict::kMiss);
  EXPECT_EQ(tier_->FlushLookups().code(), StatusCode::kUnavailable);
  EXPECT_EQ(tier_->SubmitStore(3, keys, std::vector<int64_t>{2, 3}).code(), StatusCode::kUnavailable);
  EXPECT_EQ(tier_->SubmitLoad(4, keys, std::vector<int64_t>{2, 3}).code(), StatusCode::kUnavailable);
  EXPECT_OK(tier_->Drain(1000));
  tier_->Shutdown();  // a second Shutdown is harmless
}

TEST_F(VllmTierTest, NothingIsPolledAfterShutdownOnceResultsWereTaken) {
  SCOPED_TRACE(SeedTrace());
  FillRandom(0);
  ASSERT_TRUE(Store(1, Keys(700, 1), {0}).success);
  tier_->Shutdown();
  std::vector<EngineJobResult> results;
  EXPECT_EQ(tier_->PollFinished(&results), 0u);
  EXPECT_TRUE(results.empty());
  EXPECT_FALSE(tier_->HasPendingWork());
  EXPECT_EQ(tier_->SubmitStore(2, Keys(701, 1), std::vector<int64_t>{0}).code(), StatusCode::kUnavailable);
  EXPECT_EQ(tier_->PollFinished(&results), 0u);  // a refused job leaves no result either
}

}  // namespace
}  // namespace kvtier
