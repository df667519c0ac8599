// Proves that a removal's read of a file's block-hash record (FORMAT.md
// L201, fs/hash_record_read.h) is safe on a hung mount, on both backends: an
// eviction, and a corrupt block's removal after a load, whose record read
// hangs (the mount holds its fgetxattr) are abandoned at the deadline; the
// job finishes, nothing is unlinked (the file stays until gc), and once the
// mount answers every file the reader opened is closed (no fd of a block
// file is left in the process). Method: the project's FUSE fault filesystem
// (tests/support/faultfs) under a tier publishing events (to a port nobody
// listens on), chunk files of 4 blocks, checksums in the trailer (so
// stores and loads never touch an attribute; only the record read does).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kvtier/fs_tier.h"
#include "support/faultfs_mount.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using testing::FaultFs;
constexpr uint64_t kRow = 16384;
constexpr uint32_t kTimeoutMs = 400;
constexpr int kLivenessMs = static_cast<int>(kTimeoutMs) + 5000;

// The fds of this process open on a block file (readlink of /proc/self/fd).
size_t BlockFdsOpen() {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const fs::path target = fs::read_symlink(e.path(), ec);
    if (!ec && target.extension() == ".bin") ++n;
  }
  return n;
}

template <class F>
bool Eventually(F ready, int timeout_ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!ready()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

class SickVolumeRecordsTest : public ::testing::TestWithParam<IoBackendKind> {
 protected:
  void SetUp() override {
    if (const std::string why = FaultFs::Unavailable(); !why.empty()) GTEST_SKIP() << why;
    ASSERT_OK_AND_ASSIGN(mount_, FaultFs::Mount((dir_.path() / "backing").string(), (dir_.path() / "mnt").string()));
    rng_.seed(testing::TestSeed());
  }
  void TearDown() override {
    tier_.reset();
    mount_.reset();
  }
  void Open(std::optional<uint64_t> capacity_bytes_max = std::nullopt) {
    FsTierOpenOptions o;
    o.tier.root_dir = mount_->mountpoint();
    o.tier.io_timeout_ms = kTimeoutMs;
    o.tier.io_backend = GetParam();
    o.tier.checksum_place = ChecksumPlaceKind::kTrailer;
    o.tier.capacity_bytes_max = capacity_bytes_max;
    o.tier.kv_events_config.enable_kv_cache_events = true;
    o.tier.kv_events_config.endpoint = "tcp://127.0.0.1:*";  // bound, any free port; nobody need listen
    o.ns = testing::Spec("kvtier-test/sick-records");
    o.ns.blocks_per_file = 4;
    o.row_bytes = kRow;
    auto tier = FsTier::Open(o);
    if (!tier.ok() && tier.status().code() == StatusCode::kUnavailable) GTEST_SKIP() << tier.status().ToString();
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    tier_ = std::move(tier).value();
  }
  // Stores `n` chunk files with their 4 block hashes; returns their keys.
  std::vector<OffloadKey> StoreChunks(size_t n) {
    std::vector<OffloadKey> keys;
    std::vector<std::vector<BlockHash>> hashes;
    for (size_t i = 0; i < n; ++i) {
      hashes.emplace_back();
      for (const OffloadKey& k : testing::RandomKeys(4, rng_)) hashes.back().push_back(k.hash);
      keys.push_back(OffloadKey{hashes.back().back(), 0});
    }
    testing::AlignedRows rows(n, kRow, rng_());
    const JobResult r = testing::WaitForJob(tier_.get(), tier_->SubmitStore(keys, rows.Const(), hashes).value(), kLivenessMs);
    EXPECT_EQ(r.OkPrefix(), n);
    return keys;
  }
  // The block file of `key` in the backing directory (the mount's files, unmounted).
  fs::path Backing(const OffloadKey& key) const {
    return dir_.path() / "backing" / fs::relative(tier_->BlockPath(key), mount_->mountpoint());
  }
  // Releases the mount and waits until the kernel returned every abandoned request.
  void ReleaseAndWait() {
    ASSERT_OK(mount_->Release());
    EXPECT_TRUE(Eventually([&] { return tier_->Metrics().requests_stuck == 0 && tier_->Metrics().in_flight == 0; },
                           10000));
    EXPECT_TRUE(Eventually([] { return BlockFdsOpen() == 0; }, 5000)) << BlockFdsOpen() << " block files left open";
  }

  testing::TempDir dir_;
  std::unique_ptr<FaultFs> mount_;
  std::unique_ptr<FsTier> tier_;
  std::mt19937_64 rng_;
};

TEST_P(SickVolumeRecordsTest, AnEvictionWhoseRecordReadHangsIsAbandonedAndClosesWhatItOpened) {
  Open(2 * (kRow + 4096) + 1024);  // two chunk files
  const std::vector<OffloadKey> first = StoreChunks(2);
  ASSERT_OK(mount_->Hang("xattr"));
  StoreChunks(2);  // evicts the first two; their record reads hang
  EXPECT_GE(tier_->Metrics().deadline_misses, 1u);
  ReleaseAndWait();
  for (const OffloadKey& k : first) EXPECT_TRUE(fs::exists(Backing(k))) << "an abandoned eviction unlinked";
}

TEST_P(SickVolumeRecordsTest, ACorruptBlockWhoseRecordReadHangsClosesWhatItOpenedAndStays) {
  Open();
  const std::vector<OffloadKey> keys = StoreChunks(1);
  {
    std::fstream f(Backing(keys[0]), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');  // the row no longer matches its trailer's CRC
  }
  ASSERT_OK(mount_->Hang("xattr"));
  testing::AlignedRows back(1, kRow, 0);
  const JobResult r = testing::WaitForJob(tier_.get(), tier_->SubmitLoad(keys, back.Mut()).value(), kLivenessMs);
  EXPECT_EQ(r.keys.at(0).outcome, KeyOutcome::kCorrupt) << r.keys.at(0).status.ToString();
  ReleaseAndWait();
  EXPECT_TRUE(fs::exists(Backing(keys[0]))) << "a removal abandoned in its record read unlinked";
}

INSTANTIATE_TEST_SUITE_P(Backends, SickVolumeRecordsTest, ::testing::Values(IoBackendKind::kUring, IoBackendKind::kSyscall),
                         [](const ::testing::TestParamInfo<IoBackendKind>& p) {
                           return p.param == IoBackendKind::kUring ? "Uring" : "Syscall";
                         });

}  // namespace
}  // namespace kvtier
