// Proves the fs tier's `max_bytes` (vLLM PR #54327) and its space gauges on
// real files: the block directory never holds more than max_bytes once a
// store job has finished; eviction takes the least recently used block (a
// load or a lookup hit makes a block recent); at a restart recency comes
// from the files' mtimes; a batch larger than the budget, or one that could
// only fit by evicting blocks being read, fails whole (kDropped, kRejected)
// with nothing written; a block whose read is in flight is never evicted
// (a backend holds the read until the test lets it go); concurrent stores
// keep the bound and leave the index equal to the files; path_sharding
// splits the budget per root; the config parser and Open refuse bad values
// naming the key. Method: small budgets in rows of 16 KiB, the files on disk
// summed after every job; random keys and rows are seeded (seed printed).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "fs/fs_tier_internal.h"
#include "io/backend.h"
#include "kvtier/config.h"
#include "kvtier/fs_tier.h"
#include "support/gated_backend.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kRow = 16384;

constexpr char kModel[] = "capacity/model";
using testing::Key;
using testing::Spec;
// The key bytes this file's tests use.
constexpr testing::KeyShape kKeyShape = testing::KeyShape::Last(0x5c);

std::vector<OffloadKey> Keys(std::initializer_list<uint64_t> ids) {
  std::vector<OffloadKey> keys;
  for (uint64_t i : ids) keys.push_back(Key(i, kKeyShape));
  return keys;
}

// Holds the completions of reads while held: a load then stays "mid-read"
// until Release().
testing::GatedBackend::Pick Reads() {
  return [](const internal::IoRequest& r) { return r.op == internal::IoOp::kRead; };
}

// Polls `done` every millisecond; false after 20 s (a hang, not a timing).
template <class Pred>
bool Eventually(Pred done) {
  for (int i = 0; i < 20000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return done();
}

class FsTierCapacityTest : public ::testing::Test {
 protected:
  void SetUp() override { rng_.seed(testing::TestSeed()); }

  FsTierOpenOptions Options(std::optional<uint64_t> max_rows, const std::string& root_dir = "") const {
    FsTierOpenOptions o;
    o.tier.root_dir = root_dir.empty() ? root_.path().string() : root_dir;
    o.ns = Spec(kModel);
    o.row_bytes = kRow;
    o.tier.n_read_threads = 4;
    o.tier.n_write_threads = 4;
    if (max_rows) o.tier.capacity_bytes_max = *max_rows * kRow;
    return o;
  }

  // Opens a tier (with `backend` if given) and waits for its startup scan.
  std::unique_ptr<FsTier> Open(std::optional<uint64_t> max_rows,
                               std::unique_ptr<internal::IoBackend> backend = nullptr) {
    const FsTierOpenOptions o = Options(max_rows);
    Result<std::unique_ptr<FsTier>> tier =
        backend ? internal::OpenFsTierWithBackend(o, std::move(backend)) : FsTier::Open(o);
    EXPECT_TRUE(tier.ok()) << tier.status().ToString();
    if (!tier.ok()) return nullptr;
    FsTier* t = tier->get();
    EXPECT_TRUE(Eventually([&] { return t->Metrics().namespace_scan_complete == 1; }));
    return std::move(tier).value();
  }

  std::vector<std::vector<uint8_t>> Rows(size_t n) {
    std::vector<std::vector<uint8_t>> rows(n, std::vector<uint8_t>(kRow));
    for (auto& row : rows) std::generate(row.begin(), row.end(), [&] { return static_cast<uint8_t>(rng_()); });
    return rows;
  }
  uint64_t SubmitStore(FsTier* tier, const std::vector<OffloadKey>& keys) {
    auto rows = Rows(keys.size());
    rows_.insert(rows_.end(), rows.begin(), rows.end());  // kept alive until the test ends
    std::vector<std::span<const uint8_t>> spans;
    for (size_t i = rows_.size() - keys.size(); i < rows_.size(); ++i) spans.emplace_back(rows_[i]);
    return tier->SubmitStore(keys, spans).value();
  }
  JobResult Store(FsTier* tier, const std::vector<OffloadKey>& keys) {
    return testing::WaitForJob(tier, SubmitStore(tier, keys));
  }
  JobResult Load(FsTier* tier, const std::vector<OffloadKey>& keys) {
    std::vector<std::vector<uint8_t>> rows(keys.size(), std::vector<uint8_t>(kRow));
    std::vector<std::span<uint8_t>> spans(rows.begin(), rows.end());
    return testing::WaitForJob(tier, tier->SubmitLoad(keys, spans).value());
  }
  JobResult Lookup(FsTier* tier, const std::vector<OffloadKey>& keys) {
    return testing::WaitForJob(tier, tier->SubmitLookup(keys).value());
  }

  static bool Exists(FsTier* tier, const OffloadKey& key) { return fs::exists(tier->BlockPath(key)); }
  // Bytes and count of the block files (and anything else) under `dir`.
  static std::pair<uint64_t, uint64_t> OnDisk(const fs::path& dir) {
    uint64_t bytes = 0, files = 0;
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      if (!e.is_regular_file() || e.path().extension() != ".bin") continue;
      bytes += e.file_size();
      ++files;
    }
    return {bytes, files};
  }
  fs::path BlockDir(FsTier* tier, const fs::path& root) const { return root / tier->ns().block_dir_name(); }

  testing::TempDir root_;
  std::mt19937_64 rng_;
  std::vector<std::vector<uint8_t>> rows_;
};

TEST_F(FsTierCapacityTest, BudgetHoldsAfterEveryStoreJob) {
  auto tier = Open(8);
  ASSERT_TRUE(tier);
  std::uniform_int_distribution<uint64_t> id(0, 40);
  for (int job = 0; job < 40; ++job) {
    const std::vector<OffloadKey> keys = Keys({id(rng_), id(rng_), id(rng_)});
    const JobResult r = Store(tier.get(), keys);
    for (const KeyResult& k : r.keys) {
      ASSERT_TRUE(k.outcome == KeyOutcome::kOk || k.outcome == KeyOutcome::kSkippedExists) << k.status.ToString();
    }
    const auto [bytes, files] = OnDisk(BlockDir(tier.get(), root_.path()));
    ASSERT_LE(bytes, 8 * kRow) << "after job " << job;
    const FsTierMetrics m = tier->Metrics();
    EXPECT_EQ(m.namespace_bytes, bytes);
    EXPECT_EQ(m.namespace_blocks, files);
  }
  EXPECT_GT(tier->Metrics().capacity_evicted_blocks, 0u);
  EXPECT_EQ(tier->Metrics().capacity_bytes_max, 8 * kRow);
}

TEST_F(FsTierCapacityTest, EvictsLeastRecentlyUsedAndHitsMakeBlocksRecent) {
  auto tier = Open(4);
  ASSERT_TRUE(tier);
  for (uint64_t i = 0; i < 4; ++i) ASSERT_EQ(Store(tier.get(), Keys({i})).OkPrefix(), 1u);
  ASSERT_EQ(Load(tier.get(), Keys({0})).OkPrefix(), 1u);    // 0 is now more recent than 1, 2, 3
  ASSERT_EQ(Lookup(tier.get(), Keys({1})).OkPrefix(), 1u);  // and 1 too
  ASSERT_EQ(Store(tier.get(), Keys({4})).OkPrefix(), 1u);   // evicts 2
  EXPECT_FALSE(Exists(tier.get(), Key(2, kKeyShape)));
  ASSERT_EQ(Store(tier.get(), Keys({5})).OkPrefix(), 1u);  // evicts 3
  EXPECT_FALSE(Exists(tier.get(), Key(3, kKeyShape)));
  for (uint64_t i : {0, 1, 4, 5}) EXPECT_TRUE(Exists(tier.get(), Key(i, kKeyShape))) << i;
  EXPECT_EQ(tier->Metrics().capacity_evicted_blocks, 2u);
}

TEST_F(FsTierCapacityTest, RestartSeedsRecencyFromMtimes) {
  std::vector<std::string> paths;
  {
    auto unbounded = Open(std::nullopt);
    ASSERT_TRUE(unbounded);
    ASSERT_EQ(Store(unbounded.get(), Keys({0, 1, 2, 3, 4, 5})).OkPrefix(), 6u);
    for (uint64_t i = 0; i < 6; ++i) paths.push_back(unbounded->BlockPath(Key(i, kKeyShape)));
  }
  // Oldest first: 3, 0, 5, 1, 2, 4 (store order says nothing any more).
  const int age_s[] = {500, 300, 200, 600, 100, 400};
  for (int i = 0; i < 6; ++i) {
    struct timespec times[2] = {{time(nullptr) - age_s[i], 0}, {time(nullptr) - age_s[i], 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, paths[i].c_str(), times, 0), 0);
  }
  auto tier = Open(6);
  ASSERT_TRUE(tier);
  EXPECT_EQ(tier->Metrics().namespace_blocks, 6u);
  EXPECT_EQ(tier->Metrics().namespace_bytes, 6 * kRow);
  ASSERT_EQ(Store(tier.get(), Keys({6, 7})).OkPrefix(), 2u);
  EXPECT_FALSE(Exists(tier.get(), Key(3, kKeyShape)));
  EXPECT_FALSE(Exists(tier.get(), Key(0, kKeyShape)));
  for (uint64_t i : {1, 2, 4, 5, 6, 7}) EXPECT_TRUE(Exists(tier.get(), Key(i, kKeyShape))) << i;
}

TEST_F(FsTierCapacityTest, OversizedBatchFailsWholeWithNothingWritten) {
  auto tier = Open(2);
  ASSERT_TRUE(tier);
  ASSERT_EQ(Store(tier.get(), Keys({0})).OkPrefix(), 1u);
  const JobResult r = Store(tier.get(), Keys({10, 11, 12}));
  ASSERT_EQ(r.keys.size(), 3u);
  for (const KeyResult& k : r.keys) {
    EXPECT_EQ(k.outcome, KeyOutcome::kDropped);
    EXPECT_EQ(k.status.code(), StatusCode::kRejected);
    EXPECT_NE(k.status.message().find("larger than max_bytes"), std::string::npos) << k.status.ToString();
  }
  for (uint64_t i : {10, 11, 12}) EXPECT_FALSE(Exists(tier.get(), Key(i, kKeyShape)));
  EXPECT_TRUE(Exists(tier.get(), Key(0, kKeyShape)));  // nothing evicted for a refused batch
  for (const auto& e : fs::recursive_directory_iterator(root_.path())) EXPECT_NE(e.path().extension(), ".tmp");
  const FsTierMetrics m = tier->Metrics();
  EXPECT_EQ(m.capacity_refused_rows, 3u);
  EXPECT_EQ(m.rows_dropped, 3u);
  EXPECT_EQ(m.namespace_blocks, 1u);
}

TEST_F(FsTierCapacityTest, BlockBeingReadIsNotEvicted) {
  auto owned = std::make_unique<testing::GatedBackend>(Reads());
  testing::GatedBackend* gate = owned.get();
  auto tier = Open(2, std::move(owned));
  ASSERT_TRUE(tier);
  ASSERT_EQ(Store(tier.get(), Keys({0})).OkPrefix(), 1u);
  const std::vector<uint8_t> row0 = rows_.back();
  ASSERT_EQ(Store(tier.get(), Keys({1})).OkPrefix(), 1u);
  gate->Hold();
  std::vector<uint8_t> back(kRow);
  std::vector<std::span<uint8_t>> spans{back};
  const uint64_t load = tier->SubmitLoad(Keys({0}), spans).value();
  ASSERT_TRUE(Eventually([&] { return gate->held() == 1; }));
  // 0 is the least recent but mid-read: 1 goes instead.
  ASSERT_EQ(Store(tier.get(), Keys({2})).OkPrefix(), 1u);
  EXPECT_TRUE(Exists(tier.get(), Key(0, kKeyShape)));
  EXPECT_FALSE(Exists(tier.get(), Key(1, kKeyShape)));
  gate->Release();
  ASSERT_EQ(testing::WaitForJob(tier.get(), load).OkPrefix(), 1u);
  EXPECT_EQ(back, row0);
}

TEST_F(FsTierCapacityTest, BatchThatOnlyFitsByEvictingBlocksBeingReadFails) {
  auto owned = std::make_unique<testing::GatedBackend>(Reads());
  testing::GatedBackend* gate = owned.get();
  auto tier = Open(2, std::move(owned));
  ASSERT_TRUE(tier);
  ASSERT_EQ(Store(tier.get(), Keys({0, 1})).OkPrefix(), 2u);
  gate->Hold();
  std::vector<std::vector<uint8_t>> back(2, std::vector<uint8_t>(kRow));
  std::vector<std::span<uint8_t>> spans(back.begin(), back.end());
  const uint64_t load = tier->SubmitLoad(Keys({0, 1}), spans).value();
  ASSERT_TRUE(Eventually([&] { return gate->held() == 2; }));
  const JobResult r = Store(tier.get(), Keys({2}));
  ASSERT_EQ(r.keys.size(), 1u);
  EXPECT_EQ(r.keys[0].outcome, KeyOutcome::kDropped);
  EXPECT_NE(r.keys[0].status.message().find("being read or written"), std::string::npos) << r.keys[0].status.ToString();
  EXPECT_FALSE(Exists(tier.get(), Key(2, kKeyShape)));
  gate->Release();
  EXPECT_EQ(testing::WaitForJob(tier.get(), load).OkPrefix(), 2u);
  EXPECT_EQ(Store(tier.get(), Keys({2})).OkPrefix(), 1u);  // nothing read now: it fits
}

TEST_F(FsTierCapacityTest, ConcurrentStoresKeepTheBoundAndTheIndexMatchesTheFiles) {
  auto tier = Open(8);
  ASSERT_TRUE(tier);
  constexpr int kThreads = 4, kJobs = 30;
  std::vector<std::vector<std::vector<OffloadKey>>> batches(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    std::uniform_int_distribution<uint64_t> id(t * 1000, t * 1000 + 20);  // disjoint per thread
    for (int j = 0; j < kJobs; ++j) batches[t].push_back(Keys({id(rng_), id(rng_)}));
  }
  rows_ = Rows(kThreads * kJobs * 2);
  std::vector<std::vector<std::span<const uint8_t>>> spans(kThreads * kJobs);
  for (size_t i = 0; i < spans.size(); ++i) spans[i] = {rows_[2 * i], rows_[2 * i + 1]};
  std::atomic<int> submitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int j = 0; j < kJobs; ++j) {
        if (tier->SubmitStore(batches[t][j], spans[t * kJobs + j]).ok()) ++submitted;
        std::this_thread::yield();
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE(tier->WaitIdle(60000).ok());
  std::vector<JobResult> results;
  tier->PollFinished(&results);
  ASSERT_EQ(results.size(), static_cast<size_t>(submitted.load()));
  size_t ok = 0;
  for (const JobResult& r : results) {
    for (const KeyResult& k : r.keys) {
      EXPECT_NE(k.outcome, KeyOutcome::kError) << k.status.ToString();
      ok += k.outcome == KeyOutcome::kOk;
    }
  }
  EXPECT_GT(ok, 0u);
  const auto [bytes, files] = OnDisk(BlockDir(tier.get(), root_.path()));
  EXPECT_LE(bytes, 8 * kRow);
  EXPECT_EQ(tier->Metrics().namespace_bytes, bytes);
  EXPECT_EQ(tier->Metrics().namespace_blocks, files);
}

TEST_F(FsTierCapacityTest, PathShardingSplitsTheBudgetPerRoot) {
  const fs::path a = root_.path() / "a", b = root_.path() / "b";
  FsTierOpenOptions o = Options(8, a.string() + "," + b.string());
  o.tier.path_sharding = PathSharding::kByBlockHash;
  Result<std::unique_ptr<FsTier>> opened = FsTier::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  FsTier* tier = opened->get();
  ASSERT_TRUE(Eventually([&] { return tier->Metrics().namespace_scan_complete == 1; }));
  EXPECT_EQ(tier->Metrics().capacity_bytes_max, 8 * kRow);
  // The root is the hash as a big-endian integer mod 2 (L99): the last byte's parity.
  for (uint64_t i = 0; i < 24; ++i) {
    OffloadKey key = Key(i, kKeyShape);
    std::vector<uint8_t> bytes(key.hash.bytes().begin(), key.hash.bytes().end());
    bytes[31] = static_cast<uint8_t>(i);
    key.hash = BlockHash::FromBytes(bytes).value();
    ASSERT_EQ(Store(tier, {key}).OkPrefix(), 1u) << i;
  }
  for (const fs::path& root : {a, b}) EXPECT_LE(OnDisk(BlockDir(tier, root)).first, 4 * kRow) << root;
  EXPECT_EQ(tier->Metrics().namespace_blocks, 8u);
}

TEST_F(FsTierCapacityTest, UnboundedTierCountsItsNamespaceAndSamplesTheVolume) {
  auto tier = Open(std::nullopt);
  ASSERT_TRUE(tier);
  ASSERT_EQ(Store(tier.get(), Keys({0, 1, 2})).OkPrefix(), 3u);
  const FsTierMetrics m = tier->Metrics();
  EXPECT_EQ(m.namespace_blocks, 3u);
  EXPECT_EQ(m.namespace_bytes, 3 * kRow);
  EXPECT_EQ(m.capacity_bytes_max, 0u);
  ASSERT_TRUE(Eventually([&] { return tier->Metrics().volume_free_bytes > 0; }));
  EXPECT_GT(tier->Metrics().volume_used_bytes, 0u);
  const std::string text = tier->PrometheusText("t");
  EXPECT_NE(text.find("kvtier_fs_namespace_blocks{tier=\"t\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE kvtier_fs_volume_free_bytes gauge"), std::string::npos);
  EXPECT_NE(text.find("# TYPE kvtier_fs_capacity_evicted_blocks_total counter"), std::string::npos);
}

TEST(FsTierCapacityConfig, MaxBytesIsParsedAndBadValuesAreRefusedNamingTheKey) {
  Result<FsTierOptions> absent = ParseFsTierConfig(R"({"root_dir": "/x"})");
  ASSERT_TRUE(absent.ok());
  EXPECT_FALSE(absent->capacity_bytes_max.has_value());
  Result<FsTierOptions> null = ParseFsTierConfig(R"({"root_dir": "/x", "max_bytes": null})");
  ASSERT_TRUE(null.ok());
  EXPECT_FALSE(null->capacity_bytes_max.has_value());
  Result<FsTierOptions> set = ParseFsTierConfig(R"({"root_dir": "/x", "max_bytes": 1073741824})");
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(set->capacity_bytes_max, uint64_t{1} << 30);
  for (const char* bad : {"0", "-1", "1.5", "\"10GiB\"", "true", "[1]", "18446744073709551616"}) {
    Result<FsTierOptions> r = ParseFsTierConfig(std::string(R"({"root_dir": "/x", "max_bytes": )") + bad + "}");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("'max_bytes'"), std::string::npos) << r.status().ToString();
  }
  Result<FsTierOptions> typo = ParseFsTierConfig(R"({"root_dir": "/x", "max_byte": 1})");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("max_bytes"), std::string::npos) << typo.status().ToString();
}

TEST_F(FsTierCapacityTest, OpenRefusesABudgetBelowOneBlockPerRoot) {
  FsTierOpenOptions o = Options(std::nullopt);
  o.tier.capacity_bytes_max = kRow - 1;
  Result<std::unique_ptr<FsTier>> one = FsTier::Open(o);
  ASSERT_FALSE(one.ok());
  EXPECT_EQ(one.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(one.status().message().find("max_bytes"), std::string::npos) << one.status().ToString();
  o = Options(std::nullopt, (root_.path() / "a").string() + "," + (root_.path() / "b").string());
  o.tier.path_sharding = PathSharding::kByBlockHash;
  o.tier.capacity_bytes_max = kRow;  // half a row per root
  Result<std::unique_ptr<FsTier>> two = FsTier::Open(o);
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("over 2 roots"), std::string::npos) << two.status().ToString();
}

}  // namespace
}  // namespace kvtier
