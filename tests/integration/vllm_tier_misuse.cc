// Proves VllmTier against misuse and races: every method racing Shutdown completes or is
// kUnavailable and each accepted job still gets exactly one result (run
// under TSan by scripts/test, as part of vllm_tier_test); Shutdown stops
// admitting jobs first, so a busy submitter cannot keep it waiting; results
// not yet polled survive Shutdown, and fs() after it is kUnavailable; a
// load never shares a row with another job's I/O and a job id stays taken
// until its result is polled; 1- and 2-byte block hashes get vLLM's paths
// and never stick in the lookup batch; lookup interest stays cheap at 10^5 requests sharing keys. Method: the
// fixture of vllm_tier_test.h, threads joined before any assertion on
// shared state, deadlines instead of sleeps, and no clock in an assertion.
#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "vllm_tier_test.h"

namespace kvtier {
namespace {

using namespace vllm_tier_test;  // NOLINT(google-build-using-namespace): the fixture and its helpers

OffloadKey ShortKey(std::vector<uint8_t> bytes) { return {BlockHash::FromBytes(bytes).value(), 0}; }

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Keys take 1..32 bytes of hash; vLLM names h[0:3]/h[3:5]_g<g>/h.bin with
// Python's clamping slices. Path code that threw on a short hash would leave
// the lookup batch holding the key queued, and every later flush would fail.
TEST_F(VllmTierTest, ShortBlockHashesGetVllmPathsAndNeverStickInTheBatch) {
  SCOPED_TRACE(SeedTrace());
  const std::vector<OffloadKey> keys = {ShortKey({0x01}), ShortKey({0x01, 0x02}), ShortKey({0xab, 0xcd, 0xef})};
  ASSERT_OK_AND_ASSIGN(std::string one, tier_->BlockPath(keys[0]));
  ASSERT_OK_AND_ASSIGN(std::string two, tier_->BlockPath(keys[1]));
  ASSERT_OK_AND_ASSIGN(std::string three, tier_->BlockPath(keys[2]));
  EXPECT_TRUE(EndsWith(one, "_r0/01/_g0/01.bin")) << one;
  EXPECT_TRUE(EndsWith(two, "_r0/010/2_g0/0102.bin")) << two;
  EXPECT_TRUE(EndsWith(three, "_r0/abc/de_g0/abcdef.bin")) << three;

  for (const OffloadKey& k : keys) EXPECT_EQ(tier_->Lookup(k, "r"), LookupVerdict::kRetry);
  ASSERT_OK(tier_->FlushLookups());
  for (const OffloadKey& k : keys) EXPECT_EQ(WaitVerdict(k, "r"), LookupVerdict::kMiss);
  for (int64_t s = 0; s < 3; ++s) FillRandom(s);
  ASSERT_TRUE(Store(1, keys, {0, 1, 2}).success);
  EXPECT_TRUE(fs::exists(one));
  ASSERT_TRUE(Load(2, keys, {10, 11, 12}).success);
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(std::memcmp(Row(i), Row(10 + i), kRow), 0) << "key " << i;
  EXPECT_FALSE(tier_->HasPendingWork());
}

// Two reads landing in one row would check the CRC of one key over the
// other's bytes and delete a valid block as corrupt.
TEST_F(VllmTierTest, ALoadNamingOneSlotTwiceIsRefused) {
  const std::vector<OffloadKey> keys = Keys(800, 2);
  const Status s = tier_->SubmitLoad(1, keys, std::vector<int64_t>{3, 3});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("slot 3"), std::string::npos) << s.ToString();
  ASSERT_OK(tier_->SubmitStore(2, keys, std::vector<int64_t>{3, 3}));  // two reads of one row are fine
  EXPECT_TRUE(WaitFor(2).success);
  std::vector<EngineJobResult> rest;
  tier_->PollFinished(&rest);
  EXPECT_TRUE(rest.empty()) << "the refused load left a result";
}

// A load may not write a row that an unpolled store
// reads (the store would write the loaded bytes under its own key) or that
// an unpolled load writes; a store may not read a row a load is writing.
TEST_F(VllmTierTest, SlotsOfJobsNotYetPolledAreRefusedToConflictingJobs) {
  FillRandom(2);
  FillRandom(4);
  const auto code = [](const Status& s) { return s.code(); };
  ASSERT_OK(tier_->SubmitStore(1, Keys(810, 1), std::vector<int64_t>{2}));
  ASSERT_OK(tier_->SubmitLoad(2, Keys(811, 1), std::vector<int64_t>{4}));
  EXPECT_EQ(code(tier_->SubmitLoad(3, Keys(812, 1), std::vector<int64_t>{2})), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(tier_->SubmitLoad(4, Keys(813, 1), std::vector<int64_t>{4})), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(tier_->SubmitStore(5, Keys(814, 1), std::vector<int64_t>{4})), StatusCode::kInvalidArgument);
  ASSERT_OK(tier_->SubmitStore(6, Keys(815, 1), std::vector<int64_t>{2}));  // stores share a row they read
  ASSERT_OK(tier_->Drain(20000));  // finished, not yet polled: still taken
  EXPECT_EQ(code(tier_->SubmitLoad(7, Keys(816, 1), std::vector<int64_t>{2})), StatusCode::kInvalidArgument);

  std::vector<EngineJobResult> results;
  tier_->PollFinished(&results);
  EXPECT_EQ(CountIds(results), (std::map<int64_t, int>{{1, 1}, {2, 1}, {6, 1}}));
  ASSERT_OK(tier_->SubmitLoad(7, Keys(810, 1), std::vector<int64_t>{4}));  // polled: free again
  ASSERT_OK(tier_->SubmitStore(8, Keys(817, 1), std::vector<int64_t>{2}));
  EXPECT_TRUE(WaitFor(7).success);
  EXPECT_EQ(std::memcmp(Row(2), Row(4), kRow), 0);
  EXPECT_TRUE(WaitFor(8).success);
}

// An id reused between a job's completion and its poll would give two
// results with one id in one poll.
TEST_F(VllmTierTest, AJobIdStaysTakenUntilItsResultIsPolled) {
  FillRandom(0);
  ASSERT_OK(tier_->SubmitStore(5, Keys(820, 1), std::vector<int64_t>{0}));
  ASSERT_OK(tier_->Drain(20000));
  const Status again = tier_->SubmitStore(5, Keys(821, 1), std::vector<int64_t>{1});
  EXPECT_EQ(again.code(), StatusCode::kInvalidArgument) << again.ToString();
  std::vector<EngineJobResult> results;
  tier_->PollFinished(&results);
  EXPECT_EQ(CountIds(results), (std::map<int64_t, int>{{5, 1}}));
  ASSERT_OK(tier_->SubmitStore(5, Keys(821, 1), std::vector<int64_t>{1}));
  EXPECT_TRUE(WaitFor(5).success);
}

// Shutdown destroys the fs tier: fs() afterwards is a clear kUnavailable,
// not a reference to the destroyed tier (it was, and the caller crashed).
TEST_F(VllmTierTest, TheFsTierAfterShutdownIsUnavailable) {
  ASSERT_OK_AND_ASSIGN(FsTier* const open_tier, tier_->fs());
  EXPECT_EQ(open_tier->Metrics().rows_stored, 0u);
  tier_->Shutdown();
  const Result<FsTier*> closed = tier_->fs();
  ASSERT_FALSE(closed.ok());
  EXPECT_EQ(closed.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(closed.status().message(), "engine tier: closed");
}

// What Shutdown drained is still polled afterwards, and the counters
// and HasPendingWork still answer.
TEST_F(VllmTierTest, ResultsNotYetPolledSurviveShutdown) {
  for (int64_t s = 0; s < 3; ++s) FillRandom(s);
  for (int64_t id = 1; id <= 3; ++id) ASSERT_OK(tier_->SubmitStore(id, Keys(830 + id, 1), std::vector<int64_t>{id - 1}));
  EXPECT_EQ(tier_->Lookup(Key(839, kKeyShape), "r"), LookupVerdict::kRetry);  // never flushed
  tier_->Shutdown();
  EXPECT_TRUE(tier_->HasPendingWork());
  std::vector<EngineJobResult> results;
  EXPECT_EQ(tier_->PollFinished(&results), 3u);
  EXPECT_EQ(CountIds(results), (std::map<int64_t, int>{{1, 1}, {2, 1}, {3, 1}}));
  EXPECT_FALSE(tier_->HasPendingWork());  // the unflushed batch went with the tier
  EXPECT_EQ(tier_->Metrics().rows_stored, 3u);
  EXPECT_EQ(tier_->PrometheusText("fs0").status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(tier_->BlockPath(Key(1, kKeyShape)).status().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(tier_->backend_name().empty());
}

// A Shutdown that waited for "no job in flight" while still admitting jobs
// would wait for ever (RSS growing) behind a thread that keeps submitting.
// The submitter stores one key again and again (each after the first is a
// cheap "exists" check), as fast as it can, until it is refused.
TEST_F(VllmTierTest, ShutdownStopsAdmissionsSoABusySubmitterCannotHoldItUp) {
  for (int64_t s = 0; s < kRows; ++s) FillRandom(s);
  const std::vector<OffloadKey> key = Keys(10000, 1);
  std::atomic<int64_t> accepted{0};
  std::atomic<bool> refused{false};
  std::thread submitter([&] {
    const Clock::time_point deadline = Clock::now() + kDeadline;
    std::vector<EngineJobResult> sink;
    for (int64_t id = 1; Clock::now() < deadline; ++id) {
      const Status s = tier_->SubmitStore(id, key, std::vector<int64_t>{id % kRows});
      if (s.code() == StatusCode::kUnavailable) return refused.store(true);
      ASSERT_OK(s);
      accepted.fetch_add(1);
      if (id % 64 == 0) tier_->PollFinished(&sink);
    }
  });
  const Clock::time_point deadline = Clock::now() + kDeadline;
  while (accepted.load() < 20 && Clock::now() < deadline) std::this_thread::yield();
  tier_->Shutdown();
  submitter.join();
  EXPECT_TRUE(refused.load()) << "the submitter ran until its deadline: Shutdown kept admitting";
  EXPECT_EQ(tier_->Stats().jobs_in_flight, 0u);
}

// One thread's view of a tier racing Shutdown: every call completes, and
// fails only with kUnavailable (or Drain's kTimedOut); `accepted` holds the
// ids of the jobs it submitted that were accepted.
struct Racer {
  std::vector<int64_t> accepted;
  std::vector<EngineJobResult> results;
  std::vector<std::string> bad;  // statuses that are neither OK nor kUnavailable
};

void Expect(Racer& r, const Status& s, const char* call) {
  if (!s.ok() && s.code() != StatusCode::kUnavailable && s.code() != StatusCode::kTimedOut) {
    r.bad.push_back(std::string(call) + ": " + s.ToString());
  }
}

// Calls every method of `tier` in turn until it is shut down. Thread `t` of
// n uses slots t, t + n, ... and ids t, t + n, ..., so its jobs conflict
// with no other thread's.
void Race(VllmTier* tier, int t, int n, std::atomic<int>* rounds, Racer* r) {
  const Clock::time_point deadline = Clock::now() + kDeadline;
  for (int64_t i = 0; Clock::now() < deadline; ++i) {
    const int64_t id = t + n * i, slot = (t + n * i) % kRows;
    const std::vector<OffloadKey> key = Keys(50000 + static_cast<uint64_t>(id), 1);
    const std::string request = "r" + std::to_string(id);
    (void)tier->Lookup(key[0], request);
    Expect(*r, tier->FlushLookups(), "FlushLookups");
    const Status submitted = i % 2 == 0 ? tier->SubmitStore(id, key, std::vector<int64_t>{slot})
                                        : tier->SubmitLoad(id, key, std::vector<int64_t>{slot});
    Expect(*r, submitted, "Submit");
    if (submitted.ok()) r->accepted.push_back(id);
    tier->PollFinished(&r->results);
    (void)tier->HasPendingWork();
    (void)tier->Stats();
    (void)tier->Metrics();
    Expect(*r, tier->PrometheusText("fs0").status(), "PrometheusText");
    Expect(*r, tier->BlockPath(key[0]).status(), "BlockPath");
    Expect(*r, tier->Drain(5), "Drain");
    tier->FinishRequest(request);
    rounds->fetch_add(1);
    if (submitted.code() == StatusCode::kUnavailable) return;
  }
  r->bad.push_back("never saw the shutdown before the deadline");
}

// metrics()/stats() racing shutdown must never dereference a destroyed fs
// tier, nor Drain wait inside a tier being destroyed. Each accepted job still gets
// exactly one result, polled before or after the shutdown.
TEST_F(VllmTierTest, EveryMethodRacingShutdownCompletesOrIsUnavailable) {
  for (int64_t s = 0; s < kRows; ++s) FillRandom(s);
  constexpr int kThreads = 3;
  std::atomic<int> rounds{0};
  std::vector<Racer> racers(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(Race, tier_.get(), t, kThreads, &rounds, &racers[t]);
  const Clock::time_point deadline = Clock::now() + kDeadline;
  while (rounds.load() < 30 && Clock::now() < deadline) std::this_thread::yield();
  std::thread second([&] { tier_->Shutdown(); });  // two at once: both return stopped
  tier_->Shutdown();
  second.join();
  for (std::thread& th : threads) th.join();

  std::vector<EngineJobResult> results;
  tier_->PollFinished(&results);
  size_t n_accepted = 0;
  std::map<int64_t, int> counts = CountIds(results);
  for (const Racer& r : racers) {
    for (const std::string& b : r.bad) ADD_FAILURE() << b;
    n_accepted += r.accepted.size();
    for (const auto& [id, n] : CountIds(r.results)) counts[id] += n;
  }
  EXPECT_GT(n_accepted, 0u);
  size_t n_results = 0;
  for (const Racer& r : racers) {
    for (int64_t id : r.accepted) EXPECT_EQ(counts[id], 1) << "job " << id;
  }
  for (const auto& [id, n] : counts) n_results += static_cast<size_t>(n);
  EXPECT_EQ(n_results, n_accepted);
  EXPECT_FALSE(tier_->HasPendingWork());
}

// Lookup interest must not be a per-key list that each Lookup scans and
// FinishRequest erases from: 16,000 requests sharing 16 keys would take
// seconds per step, and 10^5 requests x 4 shared keys ~10^10 string
// comparisons per pass (minutes); per-key sets make it ~10^6 hash operations.
// No clock here: bench/engine_lookup_bench prints the per-lookup cost.
TEST_F(VllmTierTest, LookupInterestOf100kRequestsSharingKeysIsCheap) {
  constexpr int kRequests = 100000;
  const std::vector<OffloadKey> keys = Keys(900, 4);
  std::vector<std::string> requests;
  for (int i = 0; i < kRequests; ++i) requests.push_back("req-" + std::to_string(i));
  for (const std::string& r : requests) {
    for (const OffloadKey& k : keys) ASSERT_EQ(tier_->Lookup(k, r), LookupVerdict::kRetry);
  }
  ASSERT_OK(tier_->FlushLookups());
  for (const OffloadKey& k : keys) ASSERT_EQ(WaitVerdict(k, requests[0]), LookupVerdict::kMiss);
  for (const std::string& r : requests) {  // the next step asks again
    for (const OffloadKey& k : keys) ASSERT_EQ(tier_->Lookup(k, r), LookupVerdict::kMiss);
  }
  EXPECT_EQ(tier_->Stats().lookup_cache_keys, keys.size());
  for (int i = 0; i < kRequests - 1; ++i) tier_->FinishRequest(requests[i]);
  EXPECT_EQ(tier_->Stats().lookup_cache_keys, keys.size());  // the last request keeps them
  tier_->FinishRequest(requests.back());
  EXPECT_EQ(tier_->Stats().lookup_cache_keys, 0u);
  EXPECT_EQ(LookupsChecked(), keys.size());  // one check per key for all 10^5 requests
}

}  // namespace
}  // namespace kvtier
