// Proves the fs tier on tmpfs, the filesystem of /dev/shm and of many
// containers' scratch space: rows round-trip on tmpfs with both backends, and
// on a full tmpfs (a 1 MiB one this test mounts when it runs as root; skipped
// otherwise) stores fail cleanly with no_space, leave no temp file behind,
// and loads of what was stored keep working.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "kvtier/fs_tier.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kRow = 64 * 1024;

struct Rows : testing::AlignedRows {
  Rows(size_t n, uint64_t seed) : AlignedRows(n, kRow, seed) {}
};

std::vector<OffloadKey> Keys(size_t n) {
  std::vector<OffloadKey> keys;
  for (size_t i = 0; i < n; ++i) {
    std::vector<uint8_t> b(16, 0x11);
    b[0] = static_cast<uint8_t>(i);
    b[1] = static_cast<uint8_t>(i >> 8);
    keys.push_back({BlockHash::FromBytes(b).value(), 0});
  }
  return keys;
}

std::unique_ptr<FsTier> OpenOn(const fs::path& root, IoBackendKind backend) {
  FsTierOpenOptions o;
  o.tier.root_dir = root.string();
  o.ns.model_name = "tmpfs/model";
  o.row_bytes = kRow;
  o.tier.n_read_threads = 2;
  o.tier.n_write_threads = 2;
  o.tier.io_backend = backend;
  auto tier = FsTier::Open(o);
  EXPECT_TRUE(tier.ok()) << tier.status().ToString();
  return tier.ok() ? std::move(tier).value() : nullptr;
}

JobResult Wait(FsTier* tier, uint64_t id) { return testing::WaitForJob(tier, id); }

bool HasTempFiles(const fs::path& root) {
  for (auto& e : fs::recursive_directory_iterator(root)) {
    if (e.path().extension() == ".tmp") return true;
  }
  return false;
}

TEST(FsTierTmpfs, RoundTripOnDevShm) {
  if (!fs::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  const fs::path root = fs::path("/dev/shm") / ("kvtier-test-" + std::to_string(getpid()));
  for (IoBackendKind backend : {IoBackendKind::kAuto, IoBackendKind::kSyscall}) {
    fs::remove_all(root);
    auto tier = OpenOn(root, backend);
    ASSERT_TRUE(tier);
    auto keys = Keys(8);
    Rows rows(8, testing::TestSeed()), back(8, 1);
    ASSERT_EQ(Wait(tier.get(), tier->SubmitStore(keys, rows.Const()).value()).OkPrefix(), 8u);
    ASSERT_EQ(Wait(tier.get(), tier->SubmitLoad(keys, back.Mut()).value()).OkPrefix(), 8u);
    EXPECT_EQ(std::memcmp(rows.data, back.data, 8 * kRow), 0);
    EXPECT_FALSE(HasTempFiles(root));
  }
  fs::remove_all(root);
}

class FullTmpfs : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
    if (mount("tmpfs", dir_.path().c_str(), "tmpfs", 0, "size=1m") != 0) {
      GTEST_SKIP() << "cannot mount tmpfs here: " << std::strerror(errno);
    }
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) umount2(dir_.path().c_str(), MNT_DETACH);
  }
  testing::TempDir dir_;
  bool mounted_ = false;
};

TEST_F(FullTmpfs, StoresFailCleanlyAndLoadsKeepWorking) {
  auto tier = OpenOn(dir_.path(), IoBackendKind::kAuto);
  ASSERT_TRUE(tier);
  auto keys = Keys(40);  // 40 x 64 KiB = 2.5 MiB into 1 MiB
  Rows rows(40, testing::TestSeed());
  JobResult stored = Wait(tier.get(), tier->SubmitStore(keys, rows.Const()).value());
  size_t ok = 0, no_space = 0;
  for (const auto& k : stored.keys) {
    if (k.outcome == KeyOutcome::kOk) ++ok;
    if (k.outcome == KeyOutcome::kError && k.status.code() == StatusCode::kNoSpace) ++no_space;
  }
  EXPECT_GT(ok, 0u);
  EXPECT_GT(no_space, 0u) << "a 1 MiB tmpfs cannot hold 2.5 MiB";
  EXPECT_EQ(ok + no_space, keys.size()) << "every key either stored or failed with no_space";
  EXPECT_FALSE(HasTempFiles(dir_.path())) << "a failed store must unlink its temp file";
  Rows back(40, 2);
  JobResult loaded = Wait(tier.get(), tier->SubmitLoad(keys, back.Mut()).value());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (stored.keys[i].outcome != KeyOutcome::kOk) {
      EXPECT_EQ(loaded.keys[i].outcome, KeyOutcome::kMiss) << i;
      continue;
    }
    ASSERT_EQ(loaded.keys[i].outcome, KeyOutcome::kOk) << i << ": " << loaded.keys[i].status.ToString();
    EXPECT_EQ(std::memcmp(rows.data + i * kRow, back.data + i * kRow, kRow), 0) << i;
  }
}

}  // namespace
}  // namespace kvtier
