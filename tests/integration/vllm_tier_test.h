// The fixture of vllm_tier_test (vllm_tier_test.cc, vllm_tier_misuse.cc):
// an VllmTier over a 64-row region in a temp directory, seeded random row
// contents, and polling helpers with deadlines instead of sleeps. In a named
// namespace, so both files' tests share one fixture type (gtest requires it).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kvtier/vllm_tier.h"
#include "support/test_support.h"

namespace kvtier::vllm_tier_test {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

inline constexpr uint64_t kRow = 8192;
inline constexpr int64_t kRows = 64;
inline constexpr auto kDeadline = std::chrono::seconds(20);

inline constexpr char kModel[] = "kvtier-test/engine";
using testing::Key;
using testing::Spec;
// The key bytes the engine tests use.
inline constexpr testing::KeyShape kKeyShape = testing::KeyShape::Last(0xe7);

inline std::vector<OffloadKey> Keys(uint64_t first, size_t n) {
  std::vector<OffloadKey> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back(Key(first + i, kKeyShape));
  return keys;
}

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};

// Results by engine job id, so a duplicate shows as a count above one.
inline std::map<int64_t, int> CountIds(const std::vector<EngineJobResult>& results) {
  std::map<int64_t, int> counts;
  for (const EngineJobResult& r : results) ++counts[r.job_id];
  return counts;
}

class VllmTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = testing::TestSeed();
    rng_.seed(seed_);
    region_.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, kRows * kRow)));
    std::memset(region_.get(), 0, kRows * kRow);
    Result<std::unique_ptr<VllmTier>> tier = VllmTier::Open(Options(rows()));
    if (!tier.ok() && tier.status().code() == StatusCode::kUnavailable) GTEST_SKIP() << tier.status().ToString();
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    tier_ = std::move(tier).value();
  }

  VllmTierOptions Options(std::span<uint8_t> region) const {
    VllmTierOptions o;
    o.fs.tier.root_dir = root_.path().string();
    o.fs.ns = Spec(kModel, {"l0", "l1"});
    o.fs.row_bytes = kRow;
    o.fs.tier.n_read_threads = 4;
    o.fs.tier.n_write_threads = 4;
    o.rows = region;
    return o;
  }

  std::span<uint8_t> rows() { return {region_.get(), kRows * kRow}; }
  uint8_t* Row(int64_t slot) { return region_.get() + slot * kRow; }

  void FillRandom(int64_t slot) {
    for (uint64_t i = 0; i < kRow; ++i) Row(slot)[i] = static_cast<uint8_t>(rng_());
  }

  // Polls until job `id` has a result (stashing the others); fails the test
  // and returns an empty result with job_id -1 after the deadline.
  EngineJobResult WaitFor(int64_t id) {
    const Clock::time_point deadline = Clock::now() + kDeadline;
    while (Clock::now() < deadline) {
      std::vector<EngineJobResult> got;
      tier_->PollFinished(&got);
      for (EngineJobResult& r : got) stash_.push_back(std::move(r));
      for (auto it = stash_.begin(); it != stash_.end(); ++it) {
        if (it->job_id != id) continue;
        EngineJobResult r = std::move(*it);
        stash_.erase(it);
        return r;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    ADD_FAILURE() << "job " << id << " has no result after " << kDeadline.count() << " s";
    EngineJobResult none;
    none.job_id = -1;
    return none;
  }

  EngineJobResult Store(int64_t id, const std::vector<OffloadKey>& keys, const std::vector<int64_t>& slots) {
    const Status s = tier_->SubmitStore(id, keys, slots);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return WaitFor(id);
  }
  EngineJobResult Load(int64_t id, const std::vector<OffloadKey>& keys, const std::vector<int64_t>& slots) {
    const Status s = tier_->SubmitLoad(id, keys, slots);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return WaitFor(id);
  }

  // Asks until the verdict is no longer kRetry; kRetry after the deadline.
  LookupVerdict WaitVerdict(const OffloadKey& key, std::string_view request) {
    const Clock::time_point deadline = Clock::now() + kDeadline;
    LookupVerdict v = tier_->Lookup(key, request);
    while (v == LookupVerdict::kRetry && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      v = tier_->Lookup(key, request);
    }
    return v;
  }

  // Looks up every key for `request`, flushes, and expects each to be a hit.
  void ExpectAllHit(const std::vector<OffloadKey>& keys, std::string_view request) {
    for (const OffloadKey& k : keys) EXPECT_EQ(tier_->Lookup(k, request), LookupVerdict::kRetry);
    ASSERT_OK(tier_->FlushLookups());
    for (const OffloadKey& k : keys) EXPECT_EQ(WaitVerdict(k, request), LookupVerdict::kHit) << k.hash.Hex();
  }

  uint64_t LookupsChecked() const {
    const FsTierMetrics m = tier_->Metrics();
    return m.lookups_hit + m.lookups_miss;
  }

  // For SCOPED_TRACE in tests whose rows or job shapes are random.
  std::string SeedTrace() const { return "KVTIER_TEST_SEED=" + std::to_string(seed_); }

  testing::TempDir root_;
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  std::unique_ptr<uint8_t, FreeDeleter> region_;
  std::unique_ptr<VllmTier> tier_;
  std::vector<EngineJobResult> stash_;
};

}  // namespace kvtier::vllm_tier_test
