// Proves TieredStore end to end on the host stand-in device, with real files
// and the real fs tier: chunks stored through a CPU tier ten times too small
// all reach the fs tier and load back byte-exact after a restart (warm
// restart); two stores on one root share rows; a file that vanishes cuts the
// prefix there; pinned prefixes survive eviction pressure; stores beyond the
// offloadable range or the CPU tier's capacity get clear results, not hangs;
// rows promoted from fs are not written back; a request finished while its
// store and its lookups run lets them finish, keeps no pin and no verdict;
// bad configs name the key; on a hung FUSE mount lookups are decided as
// misses, loads fail and the store closes, all in bounded time (docs/sick-volumes.md).
// Content is seeded (the seed is printed) and compared byte for byte.
#include "kvtier/tiered_store.h"

#include <gtest/gtest.h>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <random>
#include <string>

#include "support/faultfs_mount.h"
#include "support/test_support.h"
#include "staging/host_kv_cache.h"

namespace kvtier {
namespace {

using internal::HostKvCache;
using testing::TempDir;
using testing::TestSeed;

constexpr uint32_t kBlocksPerChunk = 2;
constexpr uint32_t kGpuBlocks = 64;
constexpr uint32_t kGpuBlockTokens = 16;
constexpr uint64_t kChunkTokens = kBlocksPerChunk * kGpuBlockTokens;

std::string Config(uint64_t cpu_rows, const std::string& root, const std::string& extra = "") {
  // Two tensors (2048 + 1024 bytes per page) x 2 blocks = 6144 bytes -> 8192-byte rows.
  std::string json = R"({"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": )" +
                     std::to_string(cpu_rows * 8192) + R"(, "blocks_per_chunk": 2)" + extra;
  if (!root.empty()) {
    json += R"(, "secondary_tiers": [{"type": "fs", "root_dir": ")" + root +
            R"(", "n_read_threads": 4, "n_write_threads": 4}])";
  }
  return json + "}";
}

class TieredStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = TestSeed();
    rng_.seed(seed_);
  }

  std::unique_ptr<TieredStore> Open(const std::string& config, uint64_t pinned_bytes_max = 0) {
    TieredStoreOptions options;
    options.config_json = config;
    options.engine.gpu_block_size_tokens = kGpuBlockTokens;
    options.ns.model_name = "test/model";
    options.devices = {gpu_.Registration()};
    options.pinned_bytes_max = pinned_bytes_max;
    Result<std::unique_ptr<TieredStore>> store = TieredStore::Open(options);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(store).value() : nullptr;
  }

  std::vector<OffloadKey> RandomKeys(size_t n) { return testing::RandomKeys(n, rng_); }

  // GPU blocks for chunks [0, n): chunk i uses blocks base + 2i, base + 2i + 1.
  static std::vector<uint32_t> Blocks(size_t n, uint32_t base = 0) {
    std::vector<uint32_t> blocks;
    for (uint32_t b = 0; b < n * kBlocksPerChunk; ++b) blocks.push_back(base + b);
    return blocks;
  }

  // The content of chunk `i` of the request with keys `keys` (by key, so
  // every store of a key writes the same bytes).
  static uint64_t ContentSeed(const OffloadKey& key, uint32_t sub_block) {
    uint64_t s = 0;
    std::memcpy(&s, key.hash.bytes().data(), sizeof(s));
    return s + sub_block;
  }

  void FillChunks(std::span<const OffloadKey> keys, std::span<const uint32_t> blocks) {
    for (size_t i = 0; i < keys.size(); ++i) {
      for (uint32_t j = 0; j < kBlocksPerChunk; ++j) gpu_.Fill(blocks[i * kBlocksPerChunk + j], ContentSeed(keys[i], j));
    }
  }

  bool ChunkMatches(const OffloadKey& key, std::span<const uint32_t> blocks) {
    for (uint32_t j = 0; j < kBlocksPerChunk; ++j) {
      if (!gpu_.Matches(blocks[j], ContentSeed(key, j))) return false;
    }
    return true;
  }

  // Waits for one job; results of other jobs polled meanwhile are kept for
  // their waiters (several threads may wait at once).
  TransferResult WaitJob(TieredStore* store, uint64_t job_id) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    std::vector<TransferResult> done;
    while (std::chrono::steady_clock::now() < deadline) {
      done.clear();
      store->PollFinished(&done);
      {
        std::lock_guard lock(finished_mu_);
        for (TransferResult& r : done) finished_[r.job_id] = std::move(r);
        auto it = finished_.find(job_id);
        if (it != finished_.end()) {
          TransferResult r = std::move(it->second);
          finished_.erase(it);
          return r;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ADD_FAILURE() << "job " << job_id << " did not finish";
    return {};
  }

  // Stores `keys` as request `id` in batches of `batch` chunks through GPU
  // blocks [0, 2*batch); returns how many chunks were stored (kOk).
  size_t StoreAll(TieredStore* store, uint64_t id, const std::vector<OffloadKey>& keys, size_t batch) {
    EXPECT_OK(store->StartRequest(id, RequestSpec{keys, 0, std::nullopt, 0, {}}));
    size_t stored = 0;
    for (size_t first = 0; first < keys.size(); first += batch) {
      const size_t n = std::min(batch, keys.size() - first);
      std::vector<uint32_t> blocks = Blocks(n);
      FillChunks(std::span(keys).subspan(first, n), blocks);
      Result<uint64_t> job = store->Store(id, first, blocks);
      EXPECT_TRUE(job.ok()) << job.status().ToString();
      if (!job.ok()) break;
      TransferResult r = WaitJob(store, *job);
      for (const ChunkResult& c : r.chunks) stored += c.outcome == ChunkOutcome::kOk;
      // Rows being written through are held; let them go before the next
      // batch needs their room.
      EXPECT_OK(store->WaitIdle(30000));
    }
    EXPECT_OK(store->FinishRequest(id));
    return stored;
  }

  // Looks up every chunk of `keys` as request `id` and loads the hit prefix
  // into GPU blocks [32, ...); returns the number of chunks verified.
  size_t LoadAndVerify(TieredStore* store, uint64_t id, const std::vector<OffloadKey>& keys, size_t batch,
                       std::vector<int>* sources = nullptr) {
    EXPECT_OK(store->StartRequest(id, RequestSpec{keys, 0, std::nullopt, 0, {}}));
    size_t verified = 0;
    for (size_t first = 0; first < keys.size(); first += batch) {
      Result<PrefixLookup> lookup = store->LookupWait(id, first, 20000);
      EXPECT_TRUE(lookup.ok()) << lookup.status().ToString();
      const size_t n = std::min({batch, keys.size() - first, lookup.ok() ? lookup->hit_chunks : 0});
      if (n == 0) break;
      if (sources) sources->insert(sources->end(), lookup->source_tier.begin(), lookup->source_tier.begin() + n);
      std::vector<uint32_t> blocks = Blocks(n, 32);
      TransferResult r = WaitJob(store, store->Load(id, first, blocks).value());
      const size_t ok = r.OkPrefix();
      for (size_t i = 0; i < ok; ++i) {
        verified += ChunkMatches(keys[first + i], std::span(blocks).subspan(i * kBlocksPerChunk, kBlocksPerChunk));
      }
      if (ok < n) break;
    }
    EXPECT_OK(store->FinishRequest(id));
    return verified;
  }

  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  std::mutex finished_mu_;
  std::unordered_map<uint64_t, TransferResult> finished_;
  HostKvCache gpu_{{{2048, 2560}, {1024, 0}}, kGpuBlocks};
  TempDir dir_;
};

TEST_F(TieredStoreTest, WarmRestartLoadsTenTimesTheCpuTierFromFs) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const std::vector<OffloadKey> keys = RandomKeys(160);  // CPU tier: 16 rows
  {
    auto store = Open(Config(16, dir_.path().string()));
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->row_bytes(), 8192u);
    EXPECT_EQ(store->cpu_rows(), 16u);
    EXPECT_EQ(StoreAll(store.get(), 1, keys, 8), keys.size());
    ASSERT_OK(store->WaitIdle(30000));
    const TieredStoreMetrics m = store->Metrics();
    EXPECT_EQ(m.tiers[1].rows_in, keys.size());
    EXPECT_GT(m.tiers[0].rows_evicted, 0u);
    for (const OffloadKey& key : keys) EXPECT_TRUE(std::filesystem::exists(store->secondary_tier(0).BlockPath(key)));
  }
  auto store = Open(Config(16, dir_.path().string()));  // the restart
  ASSERT_NE(store, nullptr);
  std::vector<int> sources;
  EXPECT_EQ(LoadAndVerify(store.get(), 7, keys, 8, &sources), keys.size());
  EXPECT_EQ(std::count(sources.begin(), sources.end(), 1), static_cast<long>(keys.size()));
  ASSERT_OK(store->WaitIdle(30000));
  const TieredStoreMetrics m = store->Metrics();
  EXPECT_EQ(m.tiers[1].promotions, keys.size());
  EXPECT_EQ(m.tiers[1].rows_in, 0u) << "promoted rows must not be written back";
}

TEST_F(TieredStoreTest, TwoStoresOnOneRootShareRows) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const std::vector<OffloadKey> keys = RandomKeys(12);
  auto a = Open(Config(32, dir_.path().string()));
  auto b = Open(Config(32, dir_.path().string()));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(StoreAll(a.get(), 1, keys, 12), keys.size());
  ASSERT_OK(a->WaitIdle(30000));
  std::vector<int> sources;
  EXPECT_EQ(LoadAndVerify(b.get(), 1, keys, 12, &sources), keys.size());
  EXPECT_EQ(std::count(sources.begin(), sources.end(), 1), 12);
  EXPECT_EQ(b->Metrics().tiers[1].hits, 12u);
}

TEST_F(TieredStoreTest, VanishedFileEndsThePrefix) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const std::vector<OffloadKey> keys = RandomKeys(10);
  auto a = Open(Config(32, dir_.path().string()));
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(StoreAll(a.get(), 1, keys, 10), keys.size());
  ASSERT_OK(a->WaitIdle(30000));
  auto b = Open(Config(32, dir_.path().string()));
  ASSERT_NE(b, nullptr);
  ASSERT_OK(b->StartRequest(5, RequestSpec{keys, 0, std::nullopt, 0, {}}));
  // The first lookup only starts the fs existence checks (all RETRY) ...
  ASSERT_OK_AND_ASSIGN(PrefixLookup first, b->Lookup(5, 0));
  EXPECT_EQ(first.hit_chunks, 0u);
  EXPECT_TRUE(first.pending);
  ASSERT_OK(b->WaitIdle(30000));
  // ... which all said HIT; now chunk 6's file vanishes before its promotion.
  std::filesystem::remove(b->secondary_tier(0).BlockPath(keys[6]));
  ASSERT_OK_AND_ASSIGN(PrefixLookup lookup, b->LookupWait(5, 0, 20000));
  EXPECT_EQ(lookup.hit_chunks, 6u);
  EXPECT_FALSE(lookup.pending);
  EXPECT_EQ(lookup.verdicts.back(), ChunkVerdict::kMiss);
  std::vector<uint32_t> blocks = Blocks(10, 32);
  TransferResult r = WaitJob(b.get(), b->Load(5, 0, blocks).value());
  EXPECT_EQ(r.OkPrefix(), 6u);
  EXPECT_EQ(r.chunks[6].outcome, ChunkOutcome::kMiss);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_TRUE(ChunkMatches(keys[i], std::span(blocks).subspan(i * kBlocksPerChunk, kBlocksPerChunk))) << i;
  }
  EXPECT_OK(b->FinishRequest(5));
}

TEST_F(TieredStoreTest, AHungMountDecidesLookupsFailsLoadsAndCloses) {
  if (const std::string why = testing::FaultFs::Unavailable(); !why.empty()) GTEST_SKIP() << why;
  SCOPED_TRACE("seed " + std::to_string(seed_));
  ASSERT_OK_AND_ASSIGN(auto mount, testing::FaultFs::Mount((dir_.path() / "backing").string(),
                                                           (dir_.path() / "mnt").string()));
  const std::string config = R"({"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 262144,
      "blocks_per_chunk": 2, "secondary_tiers": [{"type": "fs", "root_dir": ")" +
                             mount->mountpoint() + R"(", "io_timeout_ms": 400}]})";
  const std::vector<OffloadKey> keys = RandomKeys(4);
  auto a = Open(config);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(StoreAll(a.get(), 1, keys, 4), keys.size());
  ASSERT_OK(a->WaitIdle(30000));
  a.reset();
  auto b = Open(config);  // a fresh CPU tier: every lookup goes to the mount
  ASSERT_NE(b, nullptr);
  ASSERT_OK(mount->Hang("all"));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_OK(b->StartRequest(5, RequestSpec{keys, 0, std::nullopt, 0, {}}));
  ASSERT_OK_AND_ASSIGN(PrefixLookup lookup, b->LookupWait(5, 0, 10000));
  EXPECT_FALSE(lookup.pending) << "a lookup on the hung mount was never decided";
  EXPECT_EQ(lookup.hit_chunks, 0u);
  std::vector<uint32_t> blocks = Blocks(4, 32);
  TransferResult r = WaitJob(b.get(), b->Load(5, 0, blocks).value());
  EXPECT_EQ(r.OkPrefix(), 0u);
  EXPECT_OK(b->FinishRequest(5));
  const auto close_t0 = std::chrono::steady_clock::now();
  b.reset();
  const auto ms = [](auto since) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - since).count();
  };
  std::printf("tiered store on a hung mount: decided in %lld ms, closed in %lld ms\n",
              static_cast<long long>(ms(t0)), static_cast<long long>(ms(close_t0)));
  EXPECT_LT(ms(close_t0), 6000);
}

TEST_F(TieredStoreTest, PinnedPrefixSurvivesEvictionPressure) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  // CPU-only; 8 rows; at most 3 pinned rows.
  auto store = Open(Config(8, ""), 3 * 8192);
  ASSERT_NE(store, nullptr);
  const std::vector<OffloadKey> prefix = RandomKeys(4);
  ASSERT_OK(store->StartRequest(1, RequestSpec{prefix, 0, std::nullopt, 4 * kChunkTokens, {}}));
  std::vector<uint32_t> blocks = Blocks(4);
  FillChunks(prefix, blocks);
  TransferResult stored = WaitJob(store.get(), store->Store(1, 0, blocks).value());
  EXPECT_EQ(stored.OkPrefix(), 4u);
  EXPECT_EQ(store->Metrics().tiers[0].rows_pinned, 3u);
  EXPECT_EQ(store->Metrics().pins_refused, 1u);
  // Pressure: 40 other chunks through the 5 unpinned rows.
  EXPECT_EQ(StoreAll(store.get(), 2, RandomKeys(40), 4), 40u);
  ASSERT_OK_AND_ASSIGN(PrefixLookup lookup, store->Lookup(1, 0));
  EXPECT_EQ(lookup.hit_chunks, 3u) << "the three pinned chunks stay, the unpinned fourth was evicted";
  EXPECT_OK(store->FinishRequest(1));
  EXPECT_EQ(store->Metrics().tiers[0].rows_pinned, 0u);
  // Unpinned now: pressure evicts them too.
  EXPECT_EQ(StoreAll(store.get(), 3, RandomKeys(16), 4), 16u);
  ASSERT_OK(store->StartRequest(4, RequestSpec{prefix, 0, std::nullopt, 0, {}}));
  EXPECT_EQ(store->Lookup(4, 0)->hit_chunks, 0u);
}

TEST_F(TieredStoreTest, StoresOutsideTheOffloadableRangeAreSkipped) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  auto store = Open(Config(32, ""));
  ASSERT_NE(store, nullptr);
  const std::vector<OffloadKey> keys = RandomKeys(6);
  // Prompt of 3.5 chunks, max_offload_tokens 2 chunks: chunks 0-1 stored.
  ASSERT_OK(store->StartRequest(1, RequestSpec{keys, 3 * kChunkTokens + 5, 2 * kChunkTokens, 0, {}}));
  std::vector<uint32_t> blocks = Blocks(6);
  FillChunks(keys, blocks);
  TransferResult r = WaitJob(store.get(), store->Store(1, 0, blocks).value());
  ASSERT_EQ(r.chunks.size(), 6u);
  EXPECT_EQ(r.chunks[1].outcome, ChunkOutcome::kOk);
  EXPECT_EQ(r.chunks[2].outcome, ChunkOutcome::kNotOffloaded);
  // Storing the same chunks again: already cached.
  TransferResult again = WaitJob(store.get(), store->Store(1, 0, Blocks(2)).value());
  EXPECT_EQ(again.chunks[0].outcome, ChunkOutcome::kAlreadyCached);
  // offload_prompt_only: without max_offload_tokens, chunk 3 (ends past the prompt) is skipped.
  ASSERT_OK(store->StartRequest(2, RequestSpec{keys, 3 * kChunkTokens + 5, std::nullopt, 0, {}}));
  TransferResult prompt = WaitJob(store.get(), store->Store(2, 2, Blocks(2)).value());
  EXPECT_EQ(prompt.chunks[0].outcome, ChunkOutcome::kOk);
  EXPECT_EQ(prompt.chunks[1].outcome, ChunkOutcome::kNotOffloaded);
}

TEST_F(TieredStoreTest, MoreThanTheCpuTierCanHoldGetsAClearResult) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  auto store = Open(Config(4, dir_.path().string()));
  ASSERT_NE(store, nullptr);
  const std::vector<OffloadKey> keys = RandomKeys(8);
  ASSERT_OK(store->StartRequest(1, RequestSpec{keys, 0, std::nullopt, 0, {}}));
  std::vector<uint32_t> blocks = Blocks(8);
  TransferResult r = WaitJob(store.get(), store->Store(1, 0, blocks).value());
  ASSERT_EQ(r.chunks.size(), 8u);
  for (const ChunkResult& c : r.chunks) {
    EXPECT_EQ(c.outcome, ChunkOutcome::kNoSpace);
    EXPECT_NE(c.status.message().find("4 rows"), std::string::npos) << c.status.ToString();
  }
  // Stored in halves, all 8 reach fs; a fresh store's lookup of all 8 can
  // promote only 4 at a time, and says so instead of waiting forever.
  EXPECT_EQ(StoreAll(store.get(), 2, keys, 4), 8u);
  ASSERT_OK(store->WaitIdle(30000));
  auto other = Open(Config(4, dir_.path().string()));
  ASSERT_OK(other->StartRequest(3, RequestSpec{keys, 0, std::nullopt, 0, {}}));
  ASSERT_OK_AND_ASSIGN(PrefixLookup lookup, other->LookupWait(3, 0, 20000));
  EXPECT_EQ(lookup.hit_chunks, 4u);
  EXPECT_FALSE(lookup.pending);
  EXPECT_GE(other->Metrics().tiers[1].promotions_failed, 1u);
}

TEST_F(TieredStoreTest, PrefetchWarmsTheCpuTier) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const std::vector<OffloadKey> keys = RandomKeys(6);
  {
    auto store = Open(Config(16, dir_.path().string()));
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(StoreAll(store.get(), 1, keys, 6), 6u);
  }
  auto store = Open(Config(16, dir_.path().string()));
  std::vector<OffloadKey> wanted = keys;
  wanted.push_back(RandomKeys(1)[0]);  // never stored
  TransferResult r = WaitJob(store.get(), store->Prefetch(wanted).value());
  EXPECT_EQ(r.OkPrefix(), 6u);
  EXPECT_EQ(r.chunks[6].outcome, ChunkOutcome::kMiss);
  ASSERT_OK(store->StartRequest(2, RequestSpec{keys, 0, std::nullopt, 0, {}}));
  ASSERT_OK_AND_ASSIGN(PrefixLookup lookup, store->Lookup(2, 0));
  EXPECT_EQ(lookup.hit_chunks, 6u);
  EXPECT_FALSE(lookup.pending) << "prefetched rows are CPU hits at once";
}

// FinishRequest while the request's store copy and fs lookups are running:
// the jobs still report (to the request id they were started for), nothing
// stays pinned whichever finishes first (FinishRequest usually wins the first
// race; the second forces the copy first), the id is unknown until started
// again, and a restarted id asks the tiers afresh.
TEST_F(TieredStoreTest, FinishingARequestLetsItsJobsFinish) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const std::vector<OffloadKey> keys = RandomKeys(4);
  auto store = Open(Config(16, dir_.path().string()), 8 * 8192);
  ASSERT_NE(store, nullptr);
  ASSERT_OK(store->StartRequest(1, RequestSpec{keys, 0, std::nullopt, 4 * kChunkTokens, {}}));
  std::vector<uint32_t> blocks = Blocks(4);
  FillChunks(keys, blocks);
  ASSERT_OK_AND_ASSIGN(const uint64_t job, store->Store(1, 0, blocks));
  ASSERT_OK(store->FinishRequest(1));
  TransferResult stored = WaitJob(store.get(), job);
  EXPECT_EQ(stored.request_id, 1u);
  EXPECT_EQ(stored.OkPrefix(), 4u);
  ASSERT_OK(store->WaitIdle(30000));
  EXPECT_EQ(store->Metrics().tiers[0].rows_pinned, 0u) << "a finished request holds no pin";
  // The other order, forced: the copy finishes (and pins) first.
  const std::vector<OffloadKey> more = RandomKeys(4);
  ASSERT_OK(store->StartRequest(3, RequestSpec{more, 0, std::nullopt, 4 * kChunkTokens, {}}));
  FillChunks(more, blocks);
  EXPECT_EQ(WaitJob(store.get(), store->Store(3, 0, blocks).value()).OkPrefix(), 4u);
  EXPECT_EQ(store->Metrics().tiers[0].rows_pinned, 4u);
  ASSERT_OK(store->FinishRequest(3));
  EXPECT_EQ(store->Metrics().tiers[0].rows_pinned, 0u);
  EXPECT_EQ(store->Store(1, 0, blocks).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->Lookup(1, 0).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->FinishRequest(1).code(), StatusCode::kNotFound);

  auto other = Open(Config(16, dir_.path().string()));
  ASSERT_NE(other, nullptr);
  ASSERT_OK(other->StartRequest(2, RequestSpec{keys, 0, std::nullopt, 0, {}}));
  ASSERT_OK_AND_ASSIGN(PrefixLookup first, other->Lookup(2, 0));
  EXPECT_EQ(first.verdicts.front(), ChunkVerdict::kRetry) << "fs lookups started";
  ASSERT_OK(other->FinishRequest(2));
  ASSERT_OK(other->WaitIdle(30000));  // the finished request's lookups still complete
  ASSERT_OK(other->StartRequest(2, RequestSpec{keys, 0, std::nullopt, 0, {}}));
  ASSERT_OK_AND_ASSIGN(PrefixLookup again, other->Lookup(2, 0));
  EXPECT_EQ(again.verdicts.front(), ChunkVerdict::kRetry) << "the old request's verdicts are gone";
  ASSERT_OK_AND_ASSIGN(PrefixLookup found, other->LookupWait(2, 0, 20000));
  EXPECT_EQ(found.hit_chunks, 4u);
  EXPECT_EQ(found.source_tier, (std::vector<int>{1, 1, 1, 1}));
}

TEST_F(TieredStoreTest, MetricsExposeEveryTierOnce) {
  auto store = Open(Config(16, dir_.path().string()));
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(StoreAll(store.get(), 1, RandomKeys(4), 4), 4u);
  ASSERT_OK(store->WaitIdle(30000));
  const std::string text = store->PrometheusText();
  EXPECT_NE(text.find("kvtier_cpu_rows{tier=\"cpu\"} 16"), std::string::npos) << text;
  EXPECT_NE(text.find("kvtier_fs_rows_stored_total{tier=\"fs0\"} 4"), std::string::npos) << text;
  size_t types = 0;
  for (size_t at = text.find("# TYPE kvtier_tier_hits_total"); at != std::string::npos;
       at = text.find("# TYPE kvtier_tier_hits_total", at + 1)) {
    ++types;
  }
  EXPECT_EQ(types, 1u);
}

// Four engine threads share one store and one CPU tier far smaller than
// their keys: overlapping stores, lookups and loads of the same keys run at
// once (and under TSan in CI); every loaded chunk is byte-exact.
TEST_F(TieredStoreTest, ConcurrentRequestsShareTiersSafely) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  auto store = Open(Config(12, dir_.path().string()));
  ASSERT_NE(store, nullptr);
  const std::vector<OffloadKey> pool = RandomKeys(40);
  std::atomic<size_t> verified{0}, loaded{0};
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed_ + t);
      const uint32_t base = t * 16;  // each thread owns GPU blocks [base, base + 16)
      for (uint64_t round = 0; round < 30; ++round) {
        // A request of 4 consecutive pool keys (so requests overlap).
        const size_t at = rng() % (pool.size() - 4);
        const std::vector<OffloadKey> keys(pool.begin() + at, pool.begin() + at + 4);
        const uint64_t id = (uint64_t{t} + 1) << 32 | (round + 1);
        if (!store->StartRequest(id, RequestSpec{keys, 0, std::nullopt, 0, {}}).ok()) return;
        Result<PrefixLookup> lookup = store->LookupWait(id, 0, 20000);
        const size_t hits = lookup.ok() ? lookup->hit_chunks : 0;
        std::vector<uint32_t> blocks = Blocks(4, base);
        if (hits > 0) {
          std::vector<uint32_t> load(blocks.begin(), blocks.begin() + hits * kBlocksPerChunk);
          TransferResult r = WaitJob(store.get(), store->Load(id, 0, load).value());
          for (size_t i = 0; i < r.OkPrefix(); ++i) {
            ++loaded;
            verified += ChunkMatches(keys[i], std::span(load).subspan(i * kBlocksPerChunk, kBlocksPerChunk));
          }
        }
        FillChunks(keys, blocks);
        WaitJob(store.get(), store->Store(id, 0, blocks).value());
        EXPECT_OK(store->FinishRequest(id));
      }
    });
  }
  for (std::thread& th : threads) th.join();
  ASSERT_OK(store->WaitIdle(30000));
  EXPECT_GT(loaded.load(), 0u);
  EXPECT_EQ(verified.load(), loaded.load());
}

TEST_F(TieredStoreTest, BadConfigNamesTheKey) {
  TieredStoreOptions options;
  options.engine.gpu_block_size_tokens = kGpuBlockTokens;
  options.ns.model_name = "m";
  options.devices = {gpu_.Registration()};
  options.config_json = R"({"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 65536, "bogus": 1})";
  Result<std::unique_ptr<TieredStore>> bad = TieredStore::Open(options);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bogus"), std::string::npos) << bad.status().ToString();
  options.config_json = R"({"cpu_bytes_to_use": 4096, "blocks_per_chunk": 2})";
  bad = TieredStore::Open(options);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cpu_bytes_to_use"), std::string::npos) << bad.status().ToString();
  options.config_json = Config(4, "");
  options.devices[0].tensors[0].page_stride_bytes = 16;  // below the page size
  bad = TieredStore::Open(options);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status().ToString();
}

}  // namespace
}  // namespace kvtier
