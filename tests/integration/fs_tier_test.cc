// Proves the fs tier on real files, once per backend (io_uring and the
// syscall pool): stores land at vLLM's paths with a CRC32C xattr and no temp
// files left; loads return the bytes exactly; an existing file is skipped; a
// missing file is a miss; a short file, a longer file and a file whose bytes
// no longer match its CRC are never returned (short and bad-CRC ones are
// removed); lookups report presence; backpressure drops stores, never loads;
// config.json holds vLLM's exact bytes; rows that are not page-aligned keep
// O_DIRECT through staging rows (bounce_loads on and off) and a corrupt one
// never reaches the caller's pieces. Seeded random rows; seed printed.
#include <gtest/gtest.h>
#include <sys/xattr.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <tuple>
#include <cstring>

#include "kvtier/fs_tier.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kRow = 16384;

struct AlignedRow {
  AlignedRow() : data(static_cast<uint8_t*>(std::aligned_alloc(4096, kRow))) {}
  ~AlignedRow() { std::free(data); }
  AlignedRow(AlignedRow&& o) noexcept : data(std::exchange(o.data, nullptr)) {}
  std::span<uint8_t> span() { return {data, kRow}; }
  uint8_t* data;
};

struct AlignedBuffer {
  explicit AlignedBuffer(uint64_t bytes) : data(static_cast<uint8_t*>(std::aligned_alloc(4096, bytes))) {}
  ~AlignedBuffer() { std::free(data); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  uint8_t* data;
};

constexpr char kModel[] = "test/model";
using testing::Key;
using testing::Spec;
// The key bytes this file's tests use.
constexpr testing::KeyShape kKeyShape = testing::KeyShape::Last(0xaa);

class FsTierTest : public ::testing::TestWithParam<IoBackendKind> {
 protected:
  void SetUp() override {
    rng_.seed(testing::TestSeed());
    FsTierOpenOptions o;
    o.tier.root_dir = root_.path().string();
    o.ns = Spec(kModel, {"l0", "l1"});
    o.row_bytes = kRow;
    o.tier.n_read_threads = 4;
    o.tier.n_write_threads = 4;
    o.tier.io_backend = GetParam();
    auto tier = FsTier::Open(o);
    if (!tier.ok() && tier.status().code() == StatusCode::kUnavailable) GTEST_SKIP() << tier.status().ToString();
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    tier_ = std::move(tier).value();
  }

  std::vector<AlignedRow> RandomRows(size_t n) {
    std::vector<AlignedRow> rows(n);
    for (auto& r : rows) for (uint64_t i = 0; i < kRow; ++i) r.data[i] = static_cast<uint8_t>(rng_());
    return rows;
  }

  JobResult Wait(uint64_t id) { return testing::WaitForJob(tier_.get(), id); }

  JobResult Store(const std::vector<OffloadKey>& keys, std::vector<AlignedRow>& rows) {
    std::vector<std::span<const uint8_t>> spans;
    for (auto& r : rows) spans.emplace_back(r.data, kRow);
    return Wait(tier_->SubmitStore(keys, spans).value());
  }
  JobResult Load(const std::vector<OffloadKey>& keys, std::vector<AlignedRow>& rows) {
    std::vector<std::span<uint8_t>> spans;
    for (auto& r : rows) spans.push_back(r.span());
    return Wait(tier_->SubmitLoad(keys, spans).value());
  }

  testing::TempDir root_;
  std::mt19937_64 rng_;
  std::unique_ptr<FsTier> tier_;
};

std::vector<OffloadKey> Keys(size_t n, uint64_t base = 0) {
  std::vector<OffloadKey> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back(Key(base + i, kKeyShape));
  return keys;
}

bool NoTempFiles(const fs::path& root) {
  for (auto& e : fs::recursive_directory_iterator(root)) {
    if (e.path().extension() == ".tmp") return false;
  }
  return true;
}

TEST_P(FsTierTest, StoreThenLoadIsByteExactAtVllmPaths) {
  auto keys = Keys(40);
  auto rows = RandomRows(40);
  JobResult stored = Store(keys, rows);
  ASSERT_EQ(stored.OkPrefix(), 40u) << stored.keys[stored.OkPrefix()].status.ToString();
  EXPECT_EQ(tier_->backend_name(), GetParam() == IoBackendKind::kUring ? "io_uring" : "syscall-threads");
  for (auto& k : keys) {
    const std::string path = tier_->BlockPath(k);
    EXPECT_EQ(fs::file_size(path), kRow);
    EXPECT_NE(path.find(tier_->ns().block_dir_name() + "/" + k.hash.Hex().substr(0, 3) + "/" +
                        k.hash.Hex().substr(3, 2) + "_g0/" + k.hash.Hex() + ".bin"), std::string::npos);
    if (tier_->xattrs_supported()) {
      uint8_t crc[4];
      EXPECT_EQ(getxattr(path.c_str(), "user.vllm.kv_crc32c", crc, 4), 4);
    }
  }
  EXPECT_TRUE(NoTempFiles(root_.path()));
  auto back = RandomRows(40);
  JobResult loaded = Load(keys, back);
  ASSERT_EQ(loaded.OkPrefix(), 40u) << loaded.keys[loaded.OkPrefix()].status.ToString();
  for (size_t i = 0; i < 40; ++i) EXPECT_EQ(std::memcmp(rows[i].data, back[i].data, kRow), 0) << i;
  EXPECT_EQ(testing::ReadFileOrDie(root_.path() / tier_->ns().ConfigRelPath()), tier_->ns().config_json());
  FsTierMetrics m = tier_->Metrics();
  EXPECT_EQ(m.rows_stored, 40u);
  EXPECT_EQ(m.rows_loaded, 40u);
  EXPECT_EQ(m.bytes_loaded, 40 * kRow);
}

TEST_P(FsTierTest, ExistingFilesAreSkippedAndMissesAreNotErrors) {
  auto keys = Keys(4);
  auto rows = RandomRows(4);
  ASSERT_EQ(Store(keys, rows).OkPrefix(), 4u);
  auto other = RandomRows(4);
  JobResult again = Store(keys, other);
  for (auto& r : again.keys) EXPECT_EQ(r.outcome, KeyOutcome::kSkippedExists);
  auto back = RandomRows(6);
  auto with_missing = Keys(6);
  JobResult loaded = Load(with_missing, back);
  EXPECT_EQ(loaded.OkPrefix(), 4u);
  EXPECT_EQ(loaded.keys[4].outcome, KeyOutcome::kMiss);
  EXPECT_EQ(std::memcmp(back[0].data, rows[0].data, kRow), 0);  // the first writer's bytes stayed
  auto lookups = Wait(tier_->SubmitLookup(with_missing).value());
  EXPECT_EQ(lookups.OkPrefix(), 4u);
  EXPECT_EQ(lookups.keys[5].outcome, KeyOutcome::kMiss);
}

TEST_P(FsTierTest, CorruptFilesAreNeverReturned) {
  auto keys = Keys(3);
  auto rows = RandomRows(3);
  ASSERT_EQ(Store(keys, rows).OkPrefix(), 3u);
  fs::resize_file(tier_->BlockPath(keys[0]), kRow / 2);  // torn: short
  fs::resize_file(tier_->BlockPath(keys[1]), kRow + 4096);  // longer than a row
  {
    std::fstream f(tier_->BlockPath(keys[2]), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1234);
    f.put(static_cast<char>(rows[2].data[1234] ^ 0x40));  // bit flip, xattr unchanged
  }
  auto back = RandomRows(3);
  JobResult loaded = Load(keys, back);
  EXPECT_EQ(loaded.keys[0].outcome, KeyOutcome::kCorrupt);
  EXPECT_EQ(loaded.keys[1].outcome, KeyOutcome::kCorrupt);
  EXPECT_FALSE(fs::exists(tier_->BlockPath(keys[0])));  // short files are removed, as vLLM does
  EXPECT_TRUE(fs::exists(tier_->BlockPath(keys[1])));   // longer ones are left alone (FORMAT.md L66)
  if (tier_->xattrs_supported()) {
    EXPECT_EQ(loaded.keys[2].outcome, KeyOutcome::kCorrupt) << loaded.keys[2].status.ToString();
    EXPECT_FALSE(fs::exists(tier_->BlockPath(keys[2])));
  }
  EXPECT_GE(tier_->Metrics().rows_corrupt, 2u);
}

TEST_P(FsTierTest, VllmWrittenFilesWithoutCrcAreAcceptedOnSize) {
  auto keys = Keys(1);
  auto rows = RandomRows(1);
  const fs::path path = tier_->BlockPath(keys[0]);
  fs::create_directories(path.parent_path());
  testing::WriteFileOrDie(path, std::string(reinterpret_cast<char*>(rows[0].data), kRow));
  auto back = RandomRows(1);
  JobResult loaded = Load(keys, back);
  ASSERT_EQ(loaded.keys[0].outcome, KeyOutcome::kOk) << loaded.keys[0].status.ToString();
  EXPECT_EQ(std::memcmp(back[0].data, rows[0].data, kRow), 0);
}

TEST_P(FsTierTest, BadSubmissionsAreRejected) {
  auto keys = Keys(2);
  auto rows = RandomRows(1);
  std::vector<std::span<const uint8_t>> spans = {{rows[0].data, kRow}};
  EXPECT_EQ(tier_->SubmitStore(keys, spans).status().code(), StatusCode::kInvalidArgument);
  std::vector<std::span<const uint8_t>> wrong = {{rows[0].data, 100}, {rows[0].data, 100}};
  EXPECT_EQ(tier_->SubmitStore(keys, wrong).status().code(), StatusCode::kInvalidArgument);
}

TEST_P(FsTierTest, PrometheusTextNamesEveryCounter) {
  auto keys = Keys(2);
  auto rows = RandomRows(2);
  ASSERT_EQ(Store(keys, rows).OkPrefix(), 2u);
  std::string text = tier_->PrometheusText("fs0");
  EXPECT_NE(text.find("kvtier_fs_rows_stored_total{tier=\"fs0\"} 2"), std::string::npos) << text;
  EXPECT_NE(text.find("kvtier_fs_store_latency_seconds_count{tier=\"fs0\"} 2"), std::string::npos) << text;
  EXPECT_NE(text.find("kvtier_fs_checksum_seconds_total{tier=\"fs0\"} "), std::string::npos) << text;
  if (tier_->xattrs_supported()) {
    EXPECT_GT(tier_->Metrics().checksum_ns, 0u) << "two stored rows were checksummed";
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, FsTierTest,
                         ::testing::Values(IoBackendKind::kUring, IoBackendKind::kSyscall),
                         [](const auto& param) { return param.param == IoBackendKind::kUring ? "uring" : "syscall"; });

// Rows that are not page-aligned (64 bytes past a page, as torch's CPU
// allocations; pieces at odd addresses and of odd lengths) keep O_DIRECT
// through the tier's staging rows, with bounce_loads on and off, on both
// backends: byte-exact both ways, counted in staged_ios, while aligned rows
// are not staged; a block whose bytes no longer match its CRC is never
// copied into the caller's pieces.
class FsTierStagedTest : public ::testing::TestWithParam<std::tuple<IoBackendKind, bool>> {
 protected:
  void SetUp() override {
    FsTierOpenOptions o;
    o.tier.root_dir = root_.path().string();
    o.ns = Spec(kModel, {"l0", "l1"});
    o.row_bytes = kRow;
    o.tier.io_backend = std::get<0>(GetParam());
    o.tier.bounce_loads = std::get<1>(GetParam()) ? BounceLoads::kOn : BounceLoads::kOff;
    auto tier = FsTier::Open(o);
    if (!tier.ok() && tier.status().code() == StatusCode::kUnavailable) GTEST_SKIP() << tier.status().ToString();
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    tier_ = std::move(tier).value();
    if (!tier_->o_direct()) GTEST_SKIP() << "this filesystem refuses O_DIRECT: nothing to stage";
  }
  // Cuts kRows rows out of `arena`, 64 bytes past its page-aligned start:
  // row 0 one piece, row 1 [K, V] halves, row 2 uneven pieces (vectored).
  static std::vector<std::vector<std::span<uint8_t>>> Cut(uint8_t* arena) {
    const std::vector<std::vector<uint64_t>> cuts = {{kRow}, {kRow / 2, kRow / 2}, {100, 5000, 3, kRow - 5103}};
    std::vector<std::vector<std::span<uint8_t>>> rows;
    uint8_t* at = arena + 64;
    for (const auto& cut : cuts) {
      rows.emplace_back();
      for (uint64_t len : cut) rows.back().emplace_back(at, len), at += len;
    }
    return rows;
  }
  static std::vector<std::vector<std::span<const uint8_t>>> Const(
      const std::vector<std::vector<std::span<uint8_t>>>& rows) {
    std::vector<std::vector<std::span<const uint8_t>>> out;
    for (const auto& r : rows) out.emplace_back(r.begin(), r.end());
    return out;
  }
  static constexpr size_t kRows = 3;
  static constexpr uint64_t kArenaBytes = kRows * kRow + 4096;

  testing::TempDir root_;
  std::unique_ptr<FsTier> tier_;
};

TEST_P(FsTierStagedTest, UnalignedRowsRoundTripWithODirect) {
  std::mt19937_64 rng(testing::TestSeed());
  AlignedBuffer src(kArenaBytes), dst(kArenaBytes);
  for (uint64_t i = 0; i < kArenaBytes; ++i) src.data[i] = static_cast<uint8_t>(rng());
  auto keys = Keys(kRows);
  JobResult stored = testing::WaitForJob(tier_.get(), tier_->SubmitStorePieces(keys, Const(Cut(src.data))).value());
  ASSERT_EQ(stored.OkPrefix(), kRows) << stored.keys[stored.OkPrefix()].status.ToString();
  for (size_t i = 0; i < kRows; ++i) {
    const std::string file = testing::ReadFileOrDie(tier_->BlockPath(keys[i]));
    ASSERT_EQ(file.size(), kRow);
    EXPECT_EQ(std::memcmp(file.data(), src.data + 64 + i * kRow, kRow), 0) << "row " << i;
  }
  EXPECT_EQ(tier_->Metrics().staged_ios, kRows) << "every unaligned store must be staged and written O_DIRECT";
  JobResult loaded = testing::WaitForJob(tier_.get(), tier_->SubmitLoadPieces(keys, Cut(dst.data)).value());
  ASSERT_EQ(loaded.OkPrefix(), kRows) << loaded.keys[loaded.OkPrefix()].status.ToString();
  EXPECT_EQ(std::memcmp(src.data + 64, dst.data + 64, kRows * kRow), 0);
  EXPECT_EQ(tier_->Metrics().staged_ios, 2 * kRows);
  // An aligned row takes the direct path, no staging copy.
  std::vector<std::span<const uint8_t>> aligned = {{src.data, kRow}};
  auto key = Keys(1, 100);
  ASSERT_EQ(testing::WaitForJob(tier_.get(), tier_->SubmitStore(key, aligned).value()).OkPrefix(), 1u);
  std::vector<std::span<uint8_t>> into = {{dst.data, kRow}};
  ASSERT_EQ(testing::WaitForJob(tier_.get(), tier_->SubmitLoad(key, into).value()).OkPrefix(), 1u);
  EXPECT_EQ(std::memcmp(src.data, dst.data, kRow), 0);
  EXPECT_EQ(tier_->Metrics().staged_ios, 2 * kRows) << "aligned rows are never staged";
  EXPECT_TRUE(NoTempFiles(root_.path()));
}

TEST_P(FsTierStagedTest, CorruptStagedLoadNeverTouchesTheCallersPieces) {
  if (!tier_->xattrs_supported()) GTEST_SKIP() << "no CRC xattrs here";
  std::mt19937_64 rng(testing::TestSeed());
  AlignedBuffer src(kArenaBytes), dst(kArenaBytes);
  for (uint64_t i = 0; i < kArenaBytes; ++i) src.data[i] = static_cast<uint8_t>(rng());
  auto keys = Keys(kRows);
  ASSERT_EQ(testing::WaitForJob(tier_.get(), tier_->SubmitStorePieces(keys, Const(Cut(src.data))).value()).OkPrefix(),
            kRows);
  for (size_t i = 0; i < kRows; ++i) {
    std::fstream f(tier_->BlockPath(keys[i]), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(kRow - 7);
    f.put(static_cast<char>(src.data[64 + i * kRow + kRow - 7] ^ 0x40));  // bit flip, xattr unchanged
  }
  std::memset(dst.data, 0xee, kArenaBytes);
  JobResult loaded = testing::WaitForJob(tier_.get(), tier_->SubmitLoadPieces(keys, Cut(dst.data)).value());
  for (size_t i = 0; i < kRows; ++i) {
    EXPECT_EQ(loaded.keys[i].outcome, KeyOutcome::kCorrupt) << i << ": " << loaded.keys[i].status.ToString();
    EXPECT_FALSE(fs::exists(tier_->BlockPath(keys[i])));
  }
  for (uint64_t i = 0; i < kArenaBytes; ++i) ASSERT_EQ(dst.data[i], 0xee) << "byte " << i << " was written";
}

INSTANTIATE_TEST_SUITE_P(BackendsAndBounce, FsTierStagedTest,
                         ::testing::Combine(::testing::Values(IoBackendKind::kUring, IoBackendKind::kSyscall),
                                            ::testing::Bool()),
                         [](const auto& param) {
                           return std::string(std::get<0>(param.param) == IoBackendKind::kUring ? "uring" : "syscall") +
                                  (std::get<1>(param.param) ? "_bounce" : "_nobounce");
                         });

TEST(FsTierRegistered, RowsInRegisteredMemoryUseFixedBuffers) {
  testing::TempDir root;
  constexpr size_t kRows = 8;
  uint8_t* region = static_cast<uint8_t*>(std::aligned_alloc(4096, kRows * 2 * kRow));
  std::mt19937_64 rng(testing::TestSeed());
  for (size_t i = 0; i < kRows * kRow; ++i) region[i] = static_cast<uint8_t>(rng());
  FsTierOpenOptions o;
  o.tier.root_dir = root.path().string();
  o.ns = Spec(kModel, {"l0", "l1"});
  o.row_bytes = kRow;
  o.tier.io_backend = IoBackendKind::kUring;
  o.registered_memory = {std::span<uint8_t>(region, kRows * 2 * kRow)};
  auto opened = FsTier::Open(o);
  if (!opened.ok() && opened.status().code() == StatusCode::kUnavailable) GTEST_SKIP() << opened.status().ToString();
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto tier = std::move(opened).value();
  auto keys = Keys(kRows);
  std::vector<std::span<const uint8_t>> out;
  std::vector<std::span<uint8_t>> in;
  for (size_t i = 0; i < kRows; ++i) {
    out.emplace_back(region + i * kRow, kRow);
    in.emplace_back(region + (kRows + i) * kRow, kRow);
  }
  std::vector<JobResult> done;
  const uint64_t store = tier->SubmitStore(keys, out).value();
  ASSERT_OK(tier->WaitIdle(10000));
  const uint64_t load = tier->SubmitLoad(keys, in).value();
  ASSERT_OK(tier->WaitIdle(10000));
  tier->PollFinished(&done);
  ASSERT_EQ(done.size(), 2u);
  for (auto& r : done) EXPECT_EQ(r.OkPrefix(), kRows) << (r.job_id == store ? "store" : "load");
  (void)load;
  EXPECT_EQ(std::memcmp(region, region + kRows * kRow, kRows * kRow), 0);
  EXPECT_GE(tier->Metrics().fixed_buffer_ios, 2 * kRows) << "reads and writes must use the registered region";
  tier.reset();
  std::free(region);
}

TEST(FsTierDurability, FileAndFullModesStoreAndLoad) {
  for (Durability d : {Durability::kFile, Durability::kFull}) {
    testing::TempDir root;
    FsTierOpenOptions o;
    o.tier.root_dir = root.path().string();
    o.ns = Spec(kModel, {"l0", "l1"});
    o.row_bytes = kRow;
    o.tier.durability = d;
    ASSERT_OK_AND_ASSIGN(auto tier, FsTier::Open(o));
    AlignedRow row, back;
    std::memset(row.data, 0x5c, kRow);
    std::vector<OffloadKey> keys = {Key(1, kKeyShape)};
    std::vector<std::span<const uint8_t>> out = {{row.data, kRow}};
    std::vector<std::span<uint8_t>> in = {back.span()};
    ASSERT_OK_AND_ASSIGN(uint64_t store, tier->SubmitStore(keys, out));
    ASSERT_OK(tier->WaitIdle(10000));
    ASSERT_OK_AND_ASSIGN(uint64_t load, tier->SubmitLoad(keys, in));
    ASSERT_OK(tier->WaitIdle(10000));
    std::vector<JobResult> done;
    tier->PollFinished(&done);
    ASSERT_EQ(done.size(), 2u);
    for (auto& r : done) EXPECT_EQ(r.OkPrefix(), 1u) << (r.job_id == store ? "store " : "load ") << r.keys[0].status.ToString();
    (void)load;
    EXPECT_EQ(std::memcmp(row.data, back.data, kRow), 0);
  }
}

TEST(FsTierOpen, BadOptionsAndUnwritableRootsAreClearErrors) {
  FsTierOpenOptions o;
  o.ns = Spec(kModel, {"l0", "l1"});
  o.row_bytes = kRow;
  EXPECT_EQ(FsTier::Open(o).status().code(), StatusCode::kInvalidArgument);  // no root
  testing::TempDir root;
  o.tier.root_dir = root.path().string();
  o.tier.stores_while_loading_max = -1;
  auto negative = FsTier::Open(o);
  EXPECT_EQ(negative.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(negative.status().message().find("stores_while_loading_max"), std::string::npos)
      << negative.status().ToString();
  o.tier.stores_while_loading_max = 0;
  o.tier.root_dir = "/dev/null/invalid_path";
  auto bad = FsTier::Open(o);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("/dev/null/invalid_path"), std::string::npos) << bad.status().ToString();
}

}  // namespace
}  // namespace kvtier
