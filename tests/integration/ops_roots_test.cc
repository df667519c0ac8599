// Proves kvtier du / fsck / gc over the roots of one path_sharding tier
// (FORMAT.md L99-L101), on trees the multi-root fs tier wrote: du adds a
// namespace up over the roots; fsck finds nothing on a clean set, reports a
// block copied onto another root as wrong_root (path prefixed by its root)
// and leaves it under --repair; a list that contradicts the roots' markers
// is refused; gc reclaims a namespace only when it is idle on every root
// (then on all of them, markers included) and bounds --max-bytes per root;
// the CLI takes the same comma list. Seeded random keys; seed printed.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "kvtier/fs_tier.h"
#include "kvtier/layout.h"
#include "kvtier/ops.h"
#include <nlohmann/json.hpp>  // not through test_support.h (compile time)
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kRow = 8192;
constexpr size_t kBlocks = 30;

size_t ExpectedRoot(const std::string& hex, size_t n) {  // int.from_bytes(hash, "big") % n
  size_t r = 0;
  for (char c : hex) r = (r * 16 + static_cast<size_t>(std::stoi(std::string(1, c), nullptr, 16))) % n;
  return r;
}

class OpsRootsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rng_.seed(testing::TestSeed());
    FsTierOpenOptions o;
    for (const char* n : {"a", "b", "c"}) {
      roots_.push_back((dir_.path() / n).string());
      o.tier.root_dir += (o.tier.root_dir.empty() ? "" : ",") + roots_.back();
    }
    o.tier.path_sharding = PathSharding::kByBlockHash;
    o.ns.model_name = "test/ops-roots";
    o.ns.kv_cache_groups.push_back({16, {"l0"}});
    o.row_bytes = kRow;
    o.tier.io_backend = IoBackendKind::kSyscall;
    auto tier = FsTier::Open(o).value();
    std::vector<std::vector<uint8_t>> rows(kBlocks, std::vector<uint8_t>(kRow, 0x5a));
    std::vector<std::span<const uint8_t>> spans(rows.begin(), rows.end());
    for (size_t i = 0; i < kBlocks; ++i) {
      std::vector<uint8_t> bytes(32);
      for (auto& b : bytes) b = static_cast<uint8_t>(rng_());
      keys_.push_back({BlockHash::FromBytes(bytes).value(), 0});
    }
    ASSERT_EQ(testing::WaitForJob(tier.get(), tier->SubmitStore(keys_, spans).value()).OkPrefix(), kBlocks);
    for (const OffloadKey& k : keys_) rel_.push_back(tier->ns().BlockRelPath(k));
    ns_dir_ = tier->ns().dir_name();
  }  // the tier closes: no live lease is left

  std::string List() const { return roots_[0] + "," + roots_[1] + "," + roots_[2]; }
  fs::path BlockOn(size_t root, size_t key) const { return fs::path(roots_[root]) / rel_[key]; }
  size_t Home(size_t key) const { return ExpectedRoot(keys_[key].hash.Hex(), 3); }

  // Sets atime and mtime of everything below `root` to 2001 (idle for years).
  static void Age(const std::string& root) {
    for (auto& e : fs::recursive_directory_iterator(root)) {
      const struct timespec old[2] = {{978307200, 0}, {978307200, 0}};
      utimensat(AT_FDCWD, e.path().c_str(), old, AT_SYMLINK_NOFOLLOW);
    }
  }

  testing::TempDir dir_;
  std::mt19937_64 rng_;
  std::vector<std::string> roots_;
  std::vector<OffloadKey> keys_;
  std::vector<std::string> rel_;
  std::string ns_dir_;
};

TEST_F(OpsRootsTest, DuAddsTheNamespaceUpOverTheRoots) {
  ScanOptions o;
  o.root = List();
  const DuReport du = Du(o).value();
  ASSERT_EQ(du.namespaces.size(), 1u);
  EXPECT_EQ(du.namespaces[0].dir, ns_dir_);
  EXPECT_EQ(du.namespaces[0].blocks, kBlocks);
  EXPECT_EQ(du.namespaces[0].bytes, kBlocks * kRow);
  EXPECT_EQ(du.namespaces[0].model, "test/ops-roots");
  EXPECT_EQ(du.total_blocks, kBlocks);
  uint64_t per_root = 0;
  for (const std::string& r : roots_) {
    o.root = r;
    per_root += Du(o).value().total_blocks;
  }
  EXPECT_EQ(per_root, kBlocks);
}

TEST_F(OpsRootsTest, FsckReportsABlockOnTheWrongRootAndRepairLeavesIt) {
  FsckOptions o;
  o.root = List();
  const FsckReport clean = Fsck(o).value();
  EXPECT_TRUE(clean.findings.empty()) << clean.findings[0].path << " " << FindingKindName(clean.findings[0].kind);
  EXPECT_EQ(clean.blocks_checked, kBlocks);
  const size_t home = Home(0), other = (home + 1) % 3;
  fs::create_directories(BlockOn(other, 0).parent_path());
  fs::copy_file(BlockOn(home, 0), BlockOn(other, 0));
  o.repair = true;
  const FsckReport r = Fsck(o).value();
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].kind, FindingKind::kWrongRoot);
  EXPECT_EQ(r.findings[0].rule, "L101");
  EXPECT_EQ(r.findings[0].path, BlockOn(other, 0).string());
  EXPECT_NE(r.findings[0].detail.find("root_dir[" + std::to_string(home) + "]"), std::string::npos) << r.findings[0].detail;
  EXPECT_EQ(r.findings[0].action, RepairAction::kNone);
  EXPECT_TRUE(fs::exists(BlockOn(other, 0)));
  EXPECT_EQ(r.ExitCode(), 4);
}

TEST_F(OpsRootsTest, AListThatContradictsTheMarkersIsRefused) {
  FsckOptions o;
  o.root = roots_[1] + "," + roots_[0] + "," + roots_[2];
  o.repair = true;
  const auto r = Fsck(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("holds root 1 of 3"), std::string::npos) << r.status().message();
  GcOptions g;
  g.root = roots_[0] + "," + roots_[1];
  g.older_than_s = 0;
  EXPECT_FALSE(Gc(g).ok());
  for (size_t k = 0; k < kBlocks; ++k) EXPECT_TRUE(fs::exists(BlockOn(Home(k), k))) << k;
}

TEST_F(OpsRootsTest, GcReclaimsANamespaceOnlyWhenEveryRootIsIdle) {
  for (const std::string& r : roots_) Age(r);
  size_t fresh = 0;
  while (Home(fresh) != 2) ++fresh;
  utimensat(AT_FDCWD, BlockOn(2, fresh).c_str(), nullptr, 0);  // used just now, on root 2 only
  GcOptions o;
  o.root = List();
  o.older_than_s = 86400;
  const GcReport kept = Gc(o).value();
  EXPECT_TRUE(kept.reclaimed.empty()) << kept.reclaimed[0].path;
  for (const std::string& r : roots_) EXPECT_TRUE(fs::exists(fs::path(r) / ns_dir_ / ".kvtier/root_slot.json"));
  Age(roots_[2]);
  const GcReport gone = Gc(o).value();
  EXPECT_GE(gone.bytes_reclaimed, kBlocks * kRow);  // and each root's config.json and marker
  for (const std::string& r : roots_) {
    EXPECT_FALSE(fs::exists(fs::path(r) / ns_dir_)) << r;  // the marker went with its namespace
    EXPECT_FALSE(fs::exists(fs::path(r) / (ns_dir_ + "_r0"))) << r;
  }
}

TEST_F(OpsRootsTest, GcBoundsEachRootByItself) {
  GcOptions o;
  o.root = List();
  o.max_bytes = 2 * kRow;
  const GcReport r = Gc(o).value();
  size_t left = 0;
  for (size_t root = 0; root < 3; ++root) {
    size_t here = 0, had = 0;
    for (size_t k = 0; k < kBlocks; ++k) {
      if (Home(k) != root) continue;
      ++had;
      here += fs::exists(BlockOn(root, k)) ? 1 : 0;
    }
    EXPECT_EQ(here, std::min<size_t>(had, 2)) << "root " << root;
    left += here;
  }
  EXPECT_EQ(r.reclaimed.size(), kBlocks - left);
}

TEST_F(OpsRootsTest, TheCliTakesTheCommaList) {
  const fs::path cli = testing::CliPath();
  const auto du = testing::RunCommand({cli.string(), "du", List(), "--json"});
  ASSERT_EQ(du.exit_code, 0) << du.err;
  const auto j = nlohmann::json::parse(du.out);
  EXPECT_EQ(j["total_blocks"], kBlocks) << du.out;
  const size_t home = Home(3), other = (home + 2) % 3;
  fs::create_directories(BlockOn(other, 3).parent_path());
  fs::copy_file(BlockOn(home, 3), BlockOn(other, 3));
  const auto fsck = testing::RunCommand({cli.string(), "fsck", List()});
  EXPECT_EQ(fsck.exit_code, 4) << fsck.out << fsck.err;
  EXPECT_NE(fsck.out.find("wrong_root"), std::string::npos) << fsck.out;
  const auto bad = testing::RunCommand({cli.string(), "du", roots_[0] + ",," + roots_[1]});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("empty"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace kvtier
