// Proves that io_backend "auto" is the backend PickBackend names for the
// root's volume, as the open tier reports it (FsTier::backend_name): the
// syscall pool on a FUSE mount (kvtier_faultfs), io_uring on a local temp
// dir; that the explicit values still win on FUSE; that a tier over a
// FUSE mount under "auto" stores and loads its blocks byte-exactly; and
// that an explicit io_uring there runs as many path calls at once as the
// tier has slots (the kernel's default bound on the ring's workers, 4 per
// CPU, held it to 8 on 2 CPUs: the test gives the tier more slots than that
// bound and counts the opens the mount holds hung at once). No timing is
// asserted: which backend is faster is measured by bench/auto_backend.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "fs/volume_kind.h"
#include "io/backend.h"
#include "kvtier/fs_tier.h"
#include "support/faultfs_mount.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

using testing::FaultFs;

constexpr uint64_t kRow = 16384;

FsTierOpenOptions Options(const std::string& root_dir, IoBackendKind kind) {
  FsTierOpenOptions o;
  o.tier.root_dir = root_dir;
  o.tier.io_backend = kind;
  o.tier.n_read_threads = 2;
  o.tier.n_write_threads = 2;
  o.ns.model_name = "kvtier-test/auto-backend";
  o.ns.kv_cache_groups.push_back({16, {"l0"}});
  o.row_bytes = kRow;
  return o;
}

// The backend name a tier opened with `kind` under `root_dir` reports.
std::string BackendOf(const std::string& root_dir, IoBackendKind kind) {
  Result<std::unique_ptr<FsTier>> tier = FsTier::Open(Options(root_dir, kind));
  EXPECT_TRUE(tier.ok()) << tier.status().ToString();
  return tier.ok() ? std::string((*tier)->backend_name()) : "";
}

bool UringAvailable() { return internal::MakeUringBackend(64).ok(); }

TEST(IoBackendAuto, ALocalTempDirRunsIoUring) {
  if (!UringAvailable()) GTEST_SKIP() << "the kernel refuses io_uring here";
  testing::TempDir dir;
  ASSERT_OK_AND_ASSIGN(internal::VolumeKind volume, internal::ClassifyVolume(dir.path().string()));
  ASSERT_TRUE(volume.local) << volume.fs_name;
  EXPECT_EQ(BackendOf(dir.path().string(), IoBackendKind::kAuto), "io_uring");
}

class IoBackendAutoFuse : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = FaultFs::Unavailable(); !why.empty()) GTEST_SKIP() << why;
    ASSERT_OK_AND_ASSIGN(mount_, FaultFs::Mount((dir_.path() / "backing").string(), (dir_.path() / "mnt").string()));
  }
  void TearDown() override { mount_.reset(); }

  testing::TempDir dir_;
  std::unique_ptr<FaultFs> mount_;
};

TEST_F(IoBackendAutoFuse, AutoRunsWhatPickBackendNamesForTheMount) {
  ASSERT_OK_AND_ASSIGN(internal::VolumeKind volume, internal::ClassifyVolume(mount_->mountpoint()));
  EXPECT_TRUE(volume.network_or_fuse) << volume.fs_name << " " << volume.mount_type;
  const IoBackendKind picked = internal::PickBackend(volume);
  if (picked == IoBackendKind::kUring && !UringAvailable()) GTEST_SKIP() << "the kernel refuses io_uring here";
  const std::string expected = picked == IoBackendKind::kUring ? "io_uring" : "syscall-threads";
  EXPECT_EQ(BackendOf(mount_->mountpoint(), IoBackendKind::kAuto), expected);
}

TEST_F(IoBackendAutoFuse, ExplicitValuesStillWin) {
  EXPECT_EQ(BackendOf(mount_->mountpoint(), IoBackendKind::kSyscall), "syscall-threads");
  if (UringAvailable()) {
    EXPECT_EQ(BackendOf(mount_->mountpoint(), IoBackendKind::kUring), "io_uring");
  }
}

TEST_F(IoBackendAutoFuse, AutoStoresAndLoadsOnTheMount) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FsTier> tier, FsTier::Open(Options(mount_->mountpoint(), IoBackendKind::kAuto)));
  std::vector<OffloadKey> keys;
  const uint64_t seed = testing::TestSeed();
  testing::AlignedRows rows(4, kRow, seed), back(4, kRow, seed + 1);
  for (uint64_t i = 0; i < 4; ++i) {
    std::vector<uint8_t> hash(32, static_cast<uint8_t>(0x30 + i));
    keys.push_back({BlockHash::FromBytes(hash).value(), 0});
  }
  EXPECT_EQ(testing::WaitForJob(tier.get(), tier->SubmitStore(keys, rows.Const()).value()).OkPrefix(), 4u);
  EXPECT_EQ(testing::WaitForJob(tier.get(), tier->SubmitLoad(keys, back.Mut()).value()).OkPrefix(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(std::memcmp(rows.Row(i).data(), back.Row(i).data(), kRow), 0) << i;
}

TEST_F(IoBackendAutoFuse, TheRingRunsAsManyOpensAtOnceAsTheTierHasSlots) {
  if (!UringAvailable()) GTEST_SKIP() << "the kernel refuses io_uring here";
  const int slots = 4 * static_cast<int>(std::max(1u, std::thread::hardware_concurrency())) + 8;
  FsTierOpenOptions o = Options(mount_->mountpoint(), IoBackendKind::kUring);
  o.tier.n_read_threads = slots;
  o.tier.io_timeout_ms = 0;  // the opens are held on purpose
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FsTier> tier, FsTier::Open(o));
  std::vector<OffloadKey> keys;
  const uint64_t seed = testing::TestSeed();
  testing::AlignedRows rows(slots, kRow, seed), back(slots, kRow, seed + 1);
  for (int i = 0; i < slots; ++i) {
    std::vector<uint8_t> hash(32, static_cast<uint8_t>(i));
    hash[31] = 0x5c;
    keys.push_back({BlockHash::FromBytes(hash).value(), 0});
  }
  ASSERT_EQ(testing::WaitForJob(tier.get(), tier->SubmitStore(keys, rows.Const()).value()).OkPrefix(),
            static_cast<size_t>(slots));
  ASSERT_TRUE(mount_->Hang("open", ".bin").ok());
  const uint64_t load = tier->SubmitLoad(keys, back.Mut()).value();
  EXPECT_TRUE(mount_->WaitHung(static_cast<size_t>(slots), 10000))
      << mount_->Hung().value_or(0) << " of " << slots << " opens in flight at once";
  ASSERT_TRUE(mount_->Release().ok());
  EXPECT_EQ(testing::WaitForJob(tier.get(), load).OkPrefix(), static_cast<size_t>(slots));
}

}  // namespace
}  // namespace kvtier
