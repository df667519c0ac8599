// Proves that opening an fs tier costs the same number of filesystem calls
// whatever its block directory holds: on a real FUSE mount (kvtier_faultfs,
// which counts every call that reaches it, no kernel caching), an open and
// close of a default-config tier over 256 blocks and over 16,384 blocks
// differ by at most a few calls (the sampler's statvfs and the lease's
// heartbeat may land on either side). And that startup_scan "on" is the
// opt-in walk: there the calls grow with the blocks. A max_bytes budget
// keeps the open as cheap on this FUSE root (FORMAT.md L140: "auto" walks
// only on a local disk). The blocks are created
// on the backing directory, not through the mount, and that directory is on
// tmpfs (/dev/shm) where there is one, to keep the test fast.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <thread>

#include "kvtier/fs_tier.h"
#include "support/faultfs_mount.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using testing::FaultFs;

constexpr uint64_t kRow = 16384;
// The open's calls that do not depend on the blocks but on timing: the
// statvfs sampler and the lease heartbeat, a call or two each.
constexpr int64_t kSlackCalls = 8;

NamespaceSpec Spec() {
  NamespaceSpec spec;
  spec.model_name = "kvtier-test/start-cost";
  spec.kv_cache_groups.push_back({16, {"l0"}});
  return spec;
}

OffloadKey Key(uint64_t i) {
  std::vector<uint8_t> bytes(32);
  for (int b = 0; b < 8; ++b) bytes[b] = static_cast<uint8_t>((i * 0x9e3779b97f4a7c15ULL) >> (8 * b));
  bytes[31] = 0x7a;
  return {BlockHash::FromBytes(bytes).value(), 0};
}

// A directory on tmpfs where /dev/shm is one (creating and removing 16,384
// files there takes a fraction of what a loaded disk takes), else in $TMPDIR.
class ShmDir {
 public:
  ShmDir() {
    std::string tmpl = "/dev/shm/kvtier-test-XXXXXX";
    if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~ShmDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

class FsTierStartCostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = FaultFs::Unavailable(); !why.empty()) GTEST_SKIP() << why;
    const fs::path backing = (shm_.path().empty() ? dir_.path() : shm_.path()) / "backing";
    ASSERT_OK_AND_ASSIGN(mount_, FaultFs::Mount(backing.string(), (dir_.path() / "mnt").string()));
  }
  void TearDown() override { mount_.reset(); }

  FsTierOpenOptions Options(StartupScan scan) const {
    FsTierOpenOptions o;
    o.tier.root_dir = mount_->mountpoint();
    o.tier.n_read_threads = 2;
    o.tier.n_write_threads = 2;
    o.tier.startup_scan = scan;
    o.tier.capacity_bytes_max = max_bytes_;
    o.ns = Spec();
    o.row_bytes = kRow;
    return o;
  }

  // The calls the mount sees from an open (and the startup scan, if any, run
  // to its end) to the close.
  int64_t OpenCloseCalls(StartupScan scan) {
    const uint64_t before = mount_->Calls("all").value();
    {
      Result<std::unique_ptr<FsTier>> tier = FsTier::Open(Options(scan));
      EXPECT_TRUE(tier.ok()) << tier.status().ToString();
      if (!tier.ok()) return -1;
      FsTier* t = tier->get();
      for (int i = 0; i < 60000 && t->Metrics().namespace_scan_complete == 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      EXPECT_EQ(t->Metrics().namespace_scan_complete, 1u);
      block_dir_ = fs::path(t->BlockPath(Key(0))).parent_path().parent_path().parent_path();
    }
    return static_cast<int64_t>(mount_->Calls("all").value() - before);
  }

  // Block files [from, to) written on the backing directory, past the mount.
  void AddBlocks(uint64_t from, uint64_t to) {
    ASSERT_FALSE(block_dir_.empty());
    const fs::path backing = fs::path(mount_->backing()) / block_dir_.lexically_relative(mount_->mountpoint());
    for (uint64_t i = from; i < to; ++i) {
      std::string hex;
      for (uint8_t b : Key(i).hash.bytes()) {
        static constexpr char kHex[] = "0123456789abcdef";
        hex += kHex[b >> 4];
        hex += kHex[b & 15];
      }
      const fs::path shard = backing / hex.substr(0, 3) / (hex.substr(3, 2) + "_g0");
      if (made_.insert(shard).second) fs::create_directories(shard);
      const int fd = open((shard / (hex + ".bin")).c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
      ASSERT_GE(fd, 0) << shard << ": " << strerror(errno);
      EXPECT_EQ(ftruncate(fd, kRow), 0);  // sparse: the walk reads sizes, never data
      close(fd);
    }
  }

  testing::TempDir dir_;
  ShmDir shm_;
  std::unique_ptr<FaultFs> mount_;
  fs::path block_dir_;
  std::set<fs::path> made_;
  std::optional<uint64_t> max_bytes_;
};

TEST_F(FsTierStartCostTest, DefaultOpenCostsTheSameCallsAt256And16384Blocks) {
  OpenCloseCalls(StartupScan::kAuto);  // creates the directories and config.json
  AddBlocks(0, 256);
  const int64_t at_256 = OpenCloseCalls(StartupScan::kAuto);
  AddBlocks(256, 16384);
  const int64_t at_16384 = OpenCloseCalls(StartupScan::kAuto);
  ASSERT_GT(at_256, 0);
  RecordProperty("calls_at_256", std::to_string(at_256));
  RecordProperty("calls_at_16384", std::to_string(at_16384));
  EXPECT_LE(std::abs(at_16384 - at_256), kSlackCalls) << "calls at open: " << at_256 << " with 256 blocks, "
                                                       << at_16384 << " with 16384";
}

TEST_F(FsTierStartCostTest, MaxBytesOpenOnAFuseRootCostsTheSameCallsAt256And16384Blocks) {
  max_bytes_ = kRow * 100000;
  OpenCloseCalls(StartupScan::kAuto);
  AddBlocks(0, 256);
  const int64_t at_256 = OpenCloseCalls(StartupScan::kAuto);
  AddBlocks(256, 16384);
  const int64_t at_16384 = OpenCloseCalls(StartupScan::kAuto);
  ASSERT_GT(at_256, 0);
  EXPECT_LE(std::abs(at_16384 - at_256), kSlackCalls) << "calls at open with max_bytes: " << at_256
                                                       << " with 256 blocks, " << at_16384 << " with 16384";
}

TEST_F(FsTierStartCostTest, StartupScanOnWalksTheBlocks) {
  OpenCloseCalls(StartupScan::kOn);
  AddBlocks(0, 64);
  const int64_t at_64 = OpenCloseCalls(StartupScan::kOn);
  AddBlocks(64, 512);
  const int64_t at_512 = OpenCloseCalls(StartupScan::kOn);
  // At least one call (a lookup) per block the walk reached.
  EXPECT_GE(at_512 - at_64, 448) << at_64 << " calls with 64 blocks, " << at_512 << " with 512";
}

}  // namespace
}  // namespace kvtier
