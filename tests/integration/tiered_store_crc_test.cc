// Proves that with checksums on, TieredStore takes rows' CRC32C from their
// copies (fs/staged_crc.h; on this machine the host stand-in's copy workers,
// on a GPU host the device) and the fs tier computes and checks none itself:
//  * a store writes the very bytes a CPU-checksumming fs tier writes for the
//    same row, file and CRC attribute alike, with checksum_place auto, xattr
//    and trailer, while the tier's CRC time stays 0 and the staged CRC
//    bytes grow;
//  * rows move freely: blocks stored this way load through a plain FsTier
//    (which checks them on the CPU), and blocks a plain FsTier stored load
//    byte-exact through a TieredStore (checked after the copy to the GPU);
//  * a block corrupted on disk after its store is promoted unchecked, then
//    fails its check after the copy: the chunk is a miss with a corruption
//    status (never ok), its file is removed, the fs tier counts a corrupt
//    load (its removal adds no load nor load-latency sample), and the CPU
//    row is dropped (a new lookup misses it);
//    every chunk after it in the load is a miss too (a load serves a prefix);
//  * a row whose bytes go wrong only on the way to the GPU (injected in
//    the host stand-in) fails its check but hashes right on the CPU: the
//    chunk is kError, row and file stay, a copy fault is counted, and the
//    next load serves it; a row that passed its check is not checked again;
//  * a corrupt row that a request pins is dropped when the pin ends, so
//    the engine's fresh store of the key is written then;
//  * a GPU block id out of range fails Load and Store at once, nothing
//    started (no job to poll);
//  * a corrupt block replaced by a good one between its read and its
//    removal stays (FORMAT.md L69);
//  * checksum_blocks off, and a sealed tier (its GCM tag is the check,
//    FORMAT.md L169), stage no CRC and still load byte-exact.
// Content is seeded (the seed is printed) and compared byte for byte.
#include <gtest/gtest.h>
#include <sys/xattr.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <thread>

#include "kvtier/fs_tier.h"
#include "kvtier/tiered_store.h"
#include "staging/host_kv_cache.h"
#include "staging/stager.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using internal::HostKvCache;
using testing::TempDir;

constexpr uint32_t kBpc = 2;
constexpr uint32_t kBlockTokens = 16;
constexpr uint64_t kRowBytes = 8192;  // 2 tensors (2048 + 1024 bytes a page) x 2 blocks, rounded up

std::string Config(const std::string& root, const std::string& fs_extra = "") {
  return R"({"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": )" + std::to_string(32 * kRowBytes) +
         R"(, "blocks_per_chunk": 2, "secondary_tiers": [{"type": "fs", "root_dir": ")" + root +
         R"(", "n_read_threads": 2, "n_write_threads": 2)" + fs_extra + "}]}";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The CRC attribute's bytes (L60), or "" when the file has none.
std::string CrcXattr(const std::string& path) {
  char value[16];
  const ssize_t n = ::getxattr(path.c_str(), "user.vllm.kv_crc32c", value, sizeof value);
  return n < 0 ? std::string() : std::string(value, static_cast<size_t>(n));
}

void FlipByte(const std::string& path, uint64_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  const char c = static_cast<char>(f.get());
  f.seekp(static_cast<std::streamoff>(at));
  f.put(static_cast<char>(c ^ 0x5a));
}

class TieredStoreCrcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = testing::TestSeed();
    rng_.seed(seed_);
  }

  std::unique_ptr<TieredStore> Open(const std::string& config) {
    TieredStoreOptions options;
    options.config_json = config;
    options.engine.gpu_block_size_tokens = kBlockTokens;
    options.ns.model_name = "test/model";
    options.devices = {gpu_.Registration()};
    options.pinned_bytes_max = pinned_bytes_max_;
    Result<std::unique_ptr<TieredStore>> store = TieredStore::Open(options);
    if (!store.ok()) open_error_ = store.status();
    return store.ok() ? std::move(store).value() : nullptr;
  }

  // A plain fs tier (CPU CRCs) under `root`, as the store's namespace.
  std::unique_ptr<FsTier> OpenPlain(const std::string& root, const std::string& place = "auto") {
    FsTierOpenOptions o;
    o.tier.root_dir = root;
    o.tier.checksum_place = place == "xattr" ? ChecksumPlaceKind::kXattr
                            : place == "trailer" ? ChecksumPlaceKind::kTrailer
                                                 : ChecksumPlaceKind::kAuto;
    o.ns.model_name = "test/model";
    o.ns.blocks_per_file = kBpc;
    o.row_bytes = kRowBytes;
    Result<std::unique_ptr<FsTier>> tier = FsTier::Open(o);
    EXPECT_TRUE(tier.ok()) << tier.status().ToString();
    return tier.ok() ? std::move(tier).value() : nullptr;
  }

  // Stores rows[i] as keys[i] through a plain tier; all must be kOk.
  static void PlainStore(FsTier* tier, const std::vector<OffloadKey>& keys, const std::vector<std::string>& rows) {
    std::vector<std::span<const uint8_t>> spans;
    for (const std::string& row : rows) spans.emplace_back(reinterpret_cast<const uint8_t*>(row.data()), row.size());
    ASSERT_OK(tier->SubmitStore(keys, spans).status());
    ASSERT_OK(tier->WaitIdle(30000));
    std::vector<JobResult> done;
    tier->PollFinished(&done);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].OkPrefix(), keys.size());
  }

  std::vector<OffloadKey> RandomKeys(size_t n) { return testing::RandomKeys(n, rng_); }

  static uint64_t Content(const OffloadKey& key, uint32_t j) {
    uint64_t s = 0;
    std::memcpy(&s, key.hash.bytes().data(), sizeof s);
    return s + j;
  }

  TransferResult Wait(TieredStore* store, uint64_t job) {
    std::vector<TransferResult> done;
    for (int i = 0; i < 30000; ++i) {
      done.clear();
      store->PollFinished(&done);
      for (TransferResult& r : done) {
        if (r.job_id == job) return r;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ADD_FAILURE() << "job " << job << " did not finish";
    return {};
  }

  // Stores `keys` (seeded content by key) as request `id`; all must be kOk.
  void StoreAll(TieredStore* store, uint64_t id, const std::vector<OffloadKey>& keys) {
    ASSERT_OK(store->StartRequest(id, RequestSpec{keys, 0, std::nullopt, 0, {}}));
    std::vector<uint32_t> blocks;
    for (uint32_t b = 0; b < keys.size() * kBpc; ++b) blocks.push_back(b);
    for (size_t i = 0; i < keys.size(); ++i) {
      for (uint32_t j = 0; j < kBpc; ++j) gpu_.Fill(blocks[i * kBpc + j], Content(keys[i], j));
    }
    const TransferResult r = Wait(store, store->Store(id, 0, blocks).value());
    EXPECT_EQ(r.OkPrefix(), keys.size());
    ASSERT_OK(store->WaitIdle(30000));
    ASSERT_OK(store->FinishRequest(id));
  }

  // Looks up `keys` as request `id` and loads the hit prefix into GPU blocks
  // from 32 on; returns the load's result (chunk i in blocks 32 + 2i, 33 + 2i).
  TransferResult LookupAndLoad(TieredStore* store, uint64_t id, const std::vector<OffloadKey>& keys) {
    EXPECT_OK(store->StartRequest(id, RequestSpec{keys, 0, std::nullopt, 0, {}}));
    Result<PrefixLookup> lookup = store->LookupWait(id, 0, 20000);
    EXPECT_TRUE(lookup.ok() && !lookup->pending) << lookup.status().ToString();
    EXPECT_EQ(lookup.ok() ? lookup->hit_chunks : 0, keys.size());
    std::vector<uint32_t> blocks;
    for (uint32_t b = 0; b < keys.size() * kBpc; ++b) blocks.push_back(32 + b);
    TransferResult r = Wait(store, store->Load(id, 0, blocks).value());
    EXPECT_OK(store->WaitIdle(30000));
    EXPECT_OK(store->FinishRequest(id));
    return r;
  }

  bool ChunkLanded(const OffloadKey& key, size_t i) {
    for (uint32_t j = 0; j < kBpc; ++j) {
      if (!gpu_.Matches(static_cast<uint32_t>(32 + i * kBpc + j), Content(key, j))) return false;
    }
    return true;
  }

  uint64_t seed_ = 0;
  uint64_t pinned_bytes_max_ = 0;
  std::mt19937_64 rng_;
  Status open_error_;
  HostKvCache gpu_{{{2048, 2560}, {1024, 0}}, 64};
  TempDir dir_;
};

TEST_F(TieredStoreCrcTest, StagedStoreWritesTheCpuPathsBytesAtEveryPlace) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  for (const std::string place : {"auto", "xattr", "trailer"}) {
    SCOPED_TRACE("checksum_place " + place);
    const std::string staged_root = (dir_.path() / ("staged_" + place)).string();
    const std::string cpu_root = (dir_.path() / ("cpu_" + place)).string();
    auto store = Open(Config(staged_root, R"(, "checksum_place": ")" + place + "\""));
    if (store == nullptr && place == "xattr" && open_error_.code() == StatusCode::kUnavailable) {
      std::cout << "[  SKIPPED ] xattr: no user xattrs here: " << open_error_.ToString() << "\n";
      continue;
    }
    ASSERT_NE(store, nullptr) << open_error_.ToString();
    const std::vector<OffloadKey> keys = RandomKeys(6);
    StoreAll(store.get(), 1, keys);
    const FsTier& staged = store->secondary_tier(0);
    EXPECT_EQ(staged.Metrics().rows_stored, keys.size());
    EXPECT_EQ(staged.Metrics().checksum_ns, 0u) << "the fs tier computed CRCs on the CPU";
    EXPECT_EQ(store->Metrics().crc_staged_bytes, keys.size() * kRowBytes);

    // The same rows through a plain tier, which computes its CRCs itself.
    auto plain = OpenPlain(cpu_root, place);
    ASSERT_NE(plain, nullptr);
    EXPECT_EQ(plain->checksum_place(), staged.checksum_place());
    std::vector<std::string> rows;
    for (const OffloadKey& key : keys) rows.push_back(ReadFile(staged.BlockPath(key)).substr(0, kRowBytes));
    PlainStore(plain.get(), keys, rows);
    EXPECT_GT(plain->Metrics().checksum_ns, 0u);
    for (const OffloadKey& key : keys) {
      const std::string a = staged.BlockPath(key), b = plain->BlockPath(key);
      EXPECT_EQ(ReadFile(a), ReadFile(b)) << a;
      EXPECT_EQ(CrcXattr(a), CrcXattr(b)) << a;
      EXPECT_EQ(CrcXattr(a).empty(), staged.checksum_place() != "xattr") << a;
    }
  }
}

TEST_F(TieredStoreCrcTest, RowsMoveFreelyBetweenStagedAndCpuChecks) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const std::string root = (dir_.path() / "a").string(), root2 = (dir_.path() / "b").string();
  const std::vector<OffloadKey> keys = RandomKeys(5);
  std::vector<std::string> rows(keys.size(), std::string(kRowBytes, '\0'));
  {
    auto store = Open(Config(root));
    ASSERT_NE(store, nullptr) << open_error_.ToString();
    StoreAll(store.get(), 1, keys);
  }
  // Staged store -> CPU-checked load.
  auto plain = OpenPlain(root);
  ASSERT_NE(plain, nullptr);
  std::vector<std::span<uint8_t>> spans;
  for (std::string& row : rows) spans.emplace_back(reinterpret_cast<uint8_t*>(row.data()), row.size());
  ASSERT_OK(plain->SubmitLoad(keys, spans).status());
  ASSERT_OK(plain->WaitIdle(30000));
  std::vector<JobResult> done;
  plain->PollFinished(&done);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].OkPrefix(), keys.size());
  EXPECT_GT(plain->Metrics().checksum_ns, 0u) << "the plain tier checked nothing";
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(rows[i], ReadFile(plain->BlockPath(keys[i])).substr(0, kRowBytes));

  // CPU-computed store -> load checked after the copy to the GPU.
  auto plain2 = OpenPlain(root2);
  ASSERT_NE(plain2, nullptr);
  PlainStore(plain2.get(), keys, rows);
  auto store = Open(Config(root2));
  ASSERT_NE(store, nullptr) << open_error_.ToString();
  const TransferResult r = LookupAndLoad(store.get(), 2, keys);
  EXPECT_EQ(r.OkPrefix(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_TRUE(ChunkLanded(keys[i], i)) << i;
  EXPECT_EQ(store->secondary_tier(0).Metrics().checksum_ns, 0u) << "the fs tier checked CRCs on the CPU";
  EXPECT_EQ(store->Metrics().crc_staged_bytes, keys.size() * kRowBytes);
  EXPECT_EQ(store->Metrics().crc_staged_mismatches, 0u);
}

TEST_F(TieredStoreCrcTest, ACorruptBlockIsAMissRemovedAndCounted) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  for (const std::string place : {"auto", "trailer"}) {
    SCOPED_TRACE("checksum_place " + place);
    const std::string root = (dir_.path() / place).string(), extra = R"(, "checksum_place": ")" + place + "\"";
    const std::vector<OffloadKey> keys = RandomKeys(4);
    {
      auto store = Open(Config(root, extra));
      ASSERT_NE(store, nullptr) << open_error_.ToString();
      StoreAll(store.get(), 1, keys);
    }
    auto store = Open(Config(root, extra));  // a fresh CPU tier: every row comes from fs
    ASSERT_NE(store, nullptr);
    const std::string bad = store->secondary_tier(0).BlockPath(keys[2]);
    FlipByte(bad, std::uniform_int_distribution<uint64_t>(0, kRowBytes - 1)(rng_));
    const TransferResult r = LookupAndLoad(store.get(), 2, keys);
    ASSERT_EQ(r.chunks.size(), keys.size());
    EXPECT_EQ(r.chunks[2].outcome, ChunkOutcome::kMiss);
    EXPECT_EQ(r.chunks[2].status.code(), StatusCode::kCorruption) << r.chunks[2].status.ToString();
    for (size_t i : {0, 1}) {
      EXPECT_EQ(r.chunks[i].outcome, ChunkOutcome::kOk) << i;
      EXPECT_TRUE(ChunkLanded(keys[i], i)) << i;
    }
    // A load serves a prefix: the good chunk after the corrupt one is a miss.
    EXPECT_EQ(r.chunks[3].outcome, ChunkOutcome::kMiss);
    EXPECT_FALSE(fs::exists(bad)) << "the corrupt block was not removed";
    const FsTierMetrics m = store->secondary_tier(0).Metrics();
    EXPECT_EQ(m.rows_corrupt, 1u);
    uint64_t load_samples = 0;
    for (uint64_t n : m.load_latency_us) load_samples += n;
    EXPECT_EQ(load_samples, m.rows_loaded) << "the removal counted as a load";
    EXPECT_EQ(m.checksum_ns, 0u) << "the fs tier checked CRCs on the CPU";
    EXPECT_EQ(store->Metrics().crc_staged_mismatches, 1u);
    // The CPU row was dropped and the file is gone: the prefix ends there.
    ASSERT_OK(store->StartRequest(3, RequestSpec{keys, 0, std::nullopt, 0, {}}));
    ASSERT_OK_AND_ASSIGN(const PrefixLookup again, store->LookupWait(3, 0, 20000));
    EXPECT_EQ(again.hit_chunks, 2u);
    ASSERT_OK(store->FinishRequest(3));
  }
}

TEST_F(TieredStoreCrcTest, ACopyFaultKeepsTheRowAndItsBlock) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const std::string root = dir_.path().string();
  const std::vector<OffloadKey> keys = RandomKeys(2);
  {
    auto store = Open(Config(root));
    ASSERT_NE(store, nullptr) << open_error_.ToString();
    StoreAll(store.get(), 1, keys);
  }
  auto store = Open(Config(root));  // every row comes from fs, armed
  ASSERT_NE(store, nullptr);
  internal::HostLoadFaultsForTest() = 1;  // one landed byte flipped, the CPU row untouched
  const TransferResult r = LookupAndLoad(store.get(), 2, keys);
  internal::HostLoadFaultsForTest() = 0;
  ASSERT_EQ(r.chunks.size(), keys.size());
  size_t f = 0;
  for (; f < keys.size() && r.chunks[f].outcome == ChunkOutcome::kOk; ++f) EXPECT_TRUE(ChunkLanded(keys[f], f)) << f;
  ASSERT_LT(f, keys.size()) << "the faulty copy was served";
  EXPECT_EQ(r.chunks[f].outcome, ChunkOutcome::kError) << r.chunks[f].status.ToString();
  for (size_t i = f + 1; i < keys.size(); ++i) EXPECT_EQ(r.chunks[i].outcome, ChunkOutcome::kMiss) << i;
  for (const OffloadKey& key : keys) EXPECT_TRUE(fs::exists(store->secondary_tier(0).BlockPath(key)));
  EXPECT_EQ(store->Metrics().crc_staged_copy_faults, 1u);
  EXPECT_EQ(store->Metrics().crc_staged_mismatches, 0u);
  EXPECT_EQ(store->secondary_tier(0).Metrics().rows_corrupt, 0u);
  EXPECT_NE(store->PrometheusText().find("kvtier_cpu_crc_staged_copy_faults_total{tier=\"cpu\"} 1"), std::string::npos);
  // The row stayed in the CPU tier (still armed): the next load checks and serves it.
  const TransferResult again = LookupAndLoad(store.get(), 3, keys);
  EXPECT_EQ(again.OkPrefix(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_TRUE(ChunkLanded(keys[i], i)) << i;
  // Both rows passed their check now: a third load checks nothing.
  const uint64_t checked = store->Metrics().crc_staged_bytes;
  EXPECT_EQ(LookupAndLoad(store.get(), 4, keys).OkPrefix(), keys.size());
  EXPECT_EQ(store->Metrics().crc_staged_bytes, checked) << "a row that passed its check was checked again";
}

TEST_F(TieredStoreCrcTest, APinnedCorruptRowIsDroppedWhenThePinEnds) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const std::string root = dir_.path().string();
  const std::vector<OffloadKey> keys = RandomKeys(1);
  {
    auto store = Open(Config(root));
    ASSERT_NE(store, nullptr) << open_error_.ToString();
    StoreAll(store.get(), 1, keys);
  }
  pinned_bytes_max_ = kRowBytes;
  auto store = Open(Config(root));
  ASSERT_NE(store, nullptr);
  FlipByte(store->secondary_tier(0).BlockPath(keys[0]), 7);
  ASSERT_OK(store->StartRequest(2, RequestSpec{keys, 0, std::nullopt, kBpc * kBlockTokens, {}}));  // pins chunk 0
  ASSERT_OK_AND_ASSIGN(const PrefixLookup lookup, store->LookupWait(2, 0, 20000));
  ASSERT_EQ(lookup.hit_chunks, 1u);
  ASSERT_EQ(store->Metrics().tiers[0].rows_pinned, 1u);
  const std::vector<uint32_t> blocks = {32, 33};
  EXPECT_EQ(Wait(store.get(), store->Load(2, 0, blocks).value()).chunks[0].outcome, ChunkOutcome::kMiss);
  ASSERT_OK(store->WaitIdle(30000));
  ASSERT_OK(store->FinishRequest(2));  // the pin ends: the corrupt row goes
  StoreAll(store.get(), 3, keys);      // the engine's recomputed KV is kept, not "already cached"
  const TransferResult r = LookupAndLoad(store.get(), 4, keys);
  EXPECT_EQ(r.OkPrefix(), 1u);
  EXPECT_TRUE(ChunkLanded(keys[0], 0));
}

TEST_F(TieredStoreCrcTest, AGpuBlockOutOfRangeStartsNothing) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const std::string root = dir_.path().string();
  const std::vector<OffloadKey> keys = RandomKeys(2);
  {
    auto store = Open(Config(root));
    ASSERT_NE(store, nullptr) << open_error_.ToString();
    StoreAll(store.get(), 1, {keys[0]});
  }
  auto store = Open(Config(root));
  ASSERT_NE(store, nullptr);
  StoreAll(store.get(), 1, {keys[1]});  // chunk 1: a row from the GPU, chunk 0 promoted armed below
  ASSERT_OK(store->StartRequest(2, RequestSpec{keys, 0, std::nullopt, 0, {}}));
  ASSERT_OK_AND_ASSIGN(const PrefixLookup lookup, store->LookupWait(2, 0, 20000));
  ASSERT_EQ(lookup.hit_chunks, keys.size());
  const uint32_t bad = gpu_.num_blocks();
  const std::vector<uint32_t> blocks = {32, 33, 34, bad};
  EXPECT_EQ(store->Load(2, 0, blocks).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Store(2, 0, blocks).status().code(), StatusCode::kInvalidArgument);
  ASSERT_OK(store->WaitIdle(30000));
  std::vector<TransferResult> done;
  EXPECT_EQ(store->PollFinished(&done), 0u) << "a job started with a bad GPU block id";
  ASSERT_OK(store->FinishRequest(2));
  const TransferResult r = LookupAndLoad(store.get(), 3, keys);
  EXPECT_EQ(r.OkPrefix(), keys.size());
}

TEST_F(TieredStoreCrcTest, ABlockReplacedAfterItsReadIsNotRemoved) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const std::string root = dir_.path().string();
  const std::vector<OffloadKey> keys = RandomKeys(3);
  {
    auto store = Open(Config(root));
    ASSERT_NE(store, nullptr) << open_error_.ToString();
    StoreAll(store.get(), 1, keys);
  }
  auto store = Open(Config(root));
  ASSERT_NE(store, nullptr);
  const std::string path = store->secondary_tier(0).BlockPath(keys[1]);
  const std::string good = ReadFile(path);
  const std::string crc = CrcXattr(path);
  FlipByte(path, 100);
  // The lookup promotes the corrupt row (unchecked) into the CPU tier ...
  ASSERT_OK(store->StartRequest(2, RequestSpec{keys, 0, std::nullopt, 0, {}}));
  ASSERT_OK_AND_ASSIGN(const PrefixLookup lookup, store->LookupWait(2, 0, 20000));
  ASSERT_EQ(lookup.hit_chunks, keys.size());
  ASSERT_OK(store->WaitIdle(30000));
  // ... then another writer renames a good block over the file read.
  const std::string tmp = path + "_1.tmp";
  std::ofstream(tmp, std::ios::binary) << good;
  if (!crc.empty()) {
    ASSERT_EQ(::setxattr(tmp.c_str(), "user.vllm.kv_crc32c", crc.data(), crc.size(), 0), 0);
  }
  fs::rename(tmp, path);
  std::vector<uint32_t> blocks;
  for (uint32_t b = 0; b < keys.size() * kBpc; ++b) blocks.push_back(32 + b);
  const TransferResult r = Wait(store.get(), store->Load(2, 0, blocks).value());
  ASSERT_OK(store->WaitIdle(30000));
  ASSERT_OK(store->FinishRequest(2));
  ASSERT_EQ(r.chunks.size(), keys.size());
  EXPECT_EQ(r.chunks[1].outcome, ChunkOutcome::kMiss);
  EXPECT_EQ(store->Metrics().crc_staged_mismatches, 1u);
  EXPECT_EQ(store->secondary_tier(0).Metrics().rows_corrupt, 1u);
  ASSERT_TRUE(fs::exists(path)) << "the good block renamed over the corrupt one was removed";
  EXPECT_EQ(ReadFile(path), good);
}

TEST_F(TieredStoreCrcTest, ChecksumsOffStageNoCrc) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const std::string root = dir_.path().string();
  const std::vector<OffloadKey> keys = RandomKeys(3);
  {
    auto store = Open(Config(root, R"(, "checksum_blocks": false)"));
    ASSERT_NE(store, nullptr) << open_error_.ToString();
    StoreAll(store.get(), 1, keys);
    EXPECT_EQ(store->Metrics().crc_staged_bytes, 0u);
  }
  auto store = Open(Config(root, R"(, "checksum_blocks": false)"));
  ASSERT_NE(store, nullptr);
  const TransferResult r = LookupAndLoad(store.get(), 2, keys);
  EXPECT_EQ(r.OkPrefix(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_TRUE(ChunkLanded(keys[i], i)) << i;
  EXPECT_EQ(store->Metrics().crc_staged_bytes, 0u);
}

TEST_F(TieredStoreCrcTest, ASealedTierKeepsItsOwnCheck) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const std::string key = (dir_.path() / "seal.key").string();
  testing::WriteKeyFileOrDie(key, "a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebfc0\n");
  const std::string config = Config((dir_.path() / "root").string(), R"(, "seal_key_file": ")" + key + "\"");
  const std::vector<OffloadKey> keys = RandomKeys(3);
  {
    auto store = Open(config);
    ASSERT_NE(store, nullptr) << open_error_.ToString();
    EXPECT_EQ(store->secondary_tier(0).checksum_place(), "seal");
    StoreAll(store.get(), 1, keys);
    EXPECT_EQ(store->Metrics().crc_staged_bytes, 0u);
  }
  auto store = Open(config);
  ASSERT_NE(store, nullptr);
  const TransferResult r = LookupAndLoad(store.get(), 2, keys);
  EXPECT_EQ(r.OkPrefix(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_TRUE(ChunkLanded(keys[i], i)) << i;
  EXPECT_EQ(store->Metrics().crc_staged_bytes, 0u);
}

}  // namespace
}  // namespace kvtier
