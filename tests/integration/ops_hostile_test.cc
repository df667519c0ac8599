// Proves du / fsck / gc stay safe on a root that others can write:
// a symlinked .kvtier cannot lead fsck --repair's quarantine out of the root;
// gc keeps a namespace whose leases it cannot read (as another user, and when
// the lease directory is not a directory) and du / gc exit 8 on unreadable
// parts; gc deletes only names that match the layout exactly; a directory,
// FIFO or symlink at a block name is a finding that --repair removes (a
// non-empty directory stays); --verify-data and a huge sparse config.json run
// in bounded memory under an address-space limit; --verify-data leaves atime
// alone so gc still sees an idle namespace as idle; and a deeply nested
// config.json does not crash the tools. The CLI is run as a real process.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "kvtier/fs_tier.h"
#include "kvtier/ops.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kRow = 8192;

using testing::Key;
// The key bytes this file's tests use.
constexpr testing::KeyShape kKeyShape = testing::KeyShape::Fill(0x5a);

class OpsHostileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Another user must be able to reach the root for the setpriv cases.
    fs::permissions(root_.path(), fs::perms::all, fs::perm_options::replace);
  }
  // Stores n rows in namespace "org/<model>" and returns their paths relative to the root.
  std::vector<std::string> Write(const std::string& model, size_t n) {
    FsTierOpenOptions o;
    o.tier.root_dir = root_.path().string();
    o.ns.model_name = "org/" + model;
    o.ns.kv_cache_groups.push_back({16, {"l0"}});
    o.row_bytes = kRow;
    auto tier = FsTier::Open(o).value();
    ns_ = tier->ns().dir_name();
    std::vector<OffloadKey> keys;
    std::vector<std::vector<uint8_t>> rows(n, std::vector<uint8_t>(kRow, 0x33));
    std::vector<std::span<const uint8_t>> spans(rows.begin(), rows.end());
    for (size_t i = 0; i < n; ++i) keys.push_back(Key(i, kKeyShape));
    EXPECT_TRUE(tier->SubmitStore(keys, spans).ok());
    EXPECT_TRUE(tier->WaitIdle(10000).ok());
    std::vector<std::string> paths;
    for (auto& k : keys) paths.push_back(fs::relative(tier->BlockPath(k), root_.path()).string());
    return paths;
  }
  fs::path P(const std::string& rel) const { return root_.path() / rel; }
  void Age(const std::string& rel, int64_t seconds) {
    const timespec ts{time(nullptr) - seconds, 0};
    const timespec times[2] = {ts, ts};
    ASSERT_EQ(utimensat(AT_FDCWD, P(rel).c_str(), times, AT_SYMLINK_NOFOLLOW), 0) << rel;
  }
  // The CLI, optionally as user nobody (setpriv) or under an address-space cap (prlimit).
  testing::CommandResult Cli(std::vector<std::string> args, const std::string& as = "", const std::string& mem = "") {
    args.insert(args.begin(), testing::CliPath().string());
    if (!mem.empty()) args.insert(args.begin(), {"/usr/bin/prlimit", "--as=" + mem, "--"});
    if (!as.empty()) args.insert(args.begin(), {"/usr/bin/setpriv", "--reuid=" + as, "--regid=" + as, "--clear-groups"});
    return testing::RunCommand(args);
  }
  static bool CanDropToNobody() { return geteuid() == 0 && access("/usr/bin/setpriv", X_OK) == 0; }
  void ChownTree(uid_t uid) {
    for (const auto& e : fs::recursive_directory_iterator(root_.path())) ASSERT_EQ(lchown(e.path().c_str(), uid, uid), 0);
  }

  testing::TempDir root_;
  std::string ns_;
};

TEST_F(OpsHostileTest, RepairNeverQuarantinesThroughASymlinkedMetaDirectory) {
  Write("a", 1);
  testing::TempDir outside;
  fs::remove_all(P(ns_ + "/.kvtier"));
  fs::create_directory_symlink(outside.path(), P(ns_ + "/.kvtier"));
  testing::WriteFileOrDie(P(ns_ + "/config.json"), "{\"model_name\": ");  // torn
  FsckOptions o;
  o.root = root_.path().string();
  o.repair = true;
  ASSERT_OK_AND_ASSIGN(FsckReport r, Fsck(o));
  EXPECT_TRUE(fs::is_empty(outside.path())) << "quarantine/ was created outside the root";
  EXPECT_TRUE(fs::exists(P(ns_ + "/config.json")));
  bool torn_left = false;
  for (const Finding& f : r.findings) torn_left |= f.kind == FindingKind::kConfigTorn && f.action == RepairAction::kNone;
  EXPECT_TRUE(torn_left);
  EXPECT_EQ(r.ExitCode(), 4);
}

TEST_F(OpsHostileTest, GcKeepsANamespaceWhoseLeaseDirectoryIsNotADirectory) {
  auto paths = Write("a", 2);
  for (const auto& p : paths) Age(p, 30 * 86400);
  fs::remove_all(P(ns_ + "/.kvtier/leases"));
  testing::WriteFileOrDie(P(ns_ + "/.kvtier/leases"), "");  // ENOTDIR for every reader
  GcOptions o;
  o.root = root_.path().string();
  o.older_than_s = 86400;
  ASSERT_OK_AND_ASSIGN(GcReport r, Gc(o));
  EXPECT_TRUE(r.reclaimed.empty());
  for (const auto& p : paths) EXPECT_TRUE(fs::exists(P(p))) << p;
  ASSERT_EQ(r.kept.size(), 1u);
  EXPECT_EQ(r.kept[0].path, ns_);
  EXPECT_EQ(r.ExitCode(), 8);
}

TEST_F(OpsHostileTest, AsAnotherUserGcFailsClosedAndDuExitsEightOnUnreadableParts) {
  if (!CanDropToNobody()) GTEST_SKIP() << "needs root and setpriv to run the tools as another user";
  auto paths = Write("a", 3);
  for (const auto& p : paths) Age(p, 30 * 86400);
  ChownTree(65534);
  // The instances' leases (umask 077, another uid), and one shard nobody cannot read.
  ASSERT_EQ(chown(P(ns_ + "/.kvtier/leases").c_str(), 0, 0), 0);
  fs::permissions(P(ns_ + "/.kvtier/leases"), fs::perms::owner_all, fs::perm_options::replace);
  const std::string shard = paths[0].substr(0, paths[0].find('/', paths[0].find('/') + 1));
  auto gc = Cli({"gc", root_.path().string(), "--older-than", "1d", "--json"}, "65534");
  EXPECT_EQ(gc.exit_code, 8) << gc.out << gc.err;
  for (const auto& p : paths) EXPECT_TRUE(fs::exists(P(p))) << "gc reclaimed a namespace whose leases it cannot read";
  auto doc = nlohmann::json::parse(gc.out);
  EXPECT_EQ(doc["kept"].size(), 1u) << gc.out;
  ASSERT_EQ(chown(P(shard).c_str(), 0, 0), 0);
  fs::permissions(P(shard), fs::perms::owner_all, fs::perm_options::replace);
  auto du = Cli({"du", root_.path().string()}, "65534");
  EXPECT_EQ(du.exit_code, 8) << du.out << du.err;
  EXPECT_NE(du.out.find("unreadable: " + shard), std::string::npos) << du.out;
  EXPECT_NE(du.out.find("?"), std::string::npos) << "LEASES shows unknown: " << du.out;
}

TEST_F(OpsHostileTest, GcDeletesOnlyExactLayoutNames) {
  auto paths = Write("a", 1);
  const std::string shard = paths[0].substr(0, paths[0].rfind('/'));
  const std::string hex = paths[0].substr(paths[0].rfind('/') + 1, 64);
  const std::vector<std::string> look_alikes = {
      shard + "/notes.bin_5.tmp", shard + "/" + hex + ".bin_007.tmp", shard + "/" + hex + ".bin_99999999999999999999.tmp",
      shard + "/" + hex + ".bin_-1.tmp", ns_ + "/.o_direct_probe_backup", ns_ + "/.o_direct_probe_x.tmp",
      ns_ + "/config.json_1.tmp.keep", ns_ + "/.xattr_probe_.tmp"};
  const std::vector<std::string> layout = {shard + "/" + hex + ".bin_5.tmp", ns_ + "/.o_direct_probe_123.tmp",
                                           ns_ + "/.xattr_probe_9.tmp", ns_ + "/config.json_42.tmp"};
  for (const auto& rel : look_alikes) testing::WriteFileOrDie(P(rel), "mine"), Age(rel, 7200);
  for (const auto& rel : layout) testing::WriteFileOrDie(P(rel), "tmp"), Age(rel, 7200);
  GcOptions o;
  o.root = root_.path().string();
  ASSERT_OK_AND_ASSIGN(GcReport r, Gc(o));
  for (const auto& rel : look_alikes) EXPECT_TRUE(fs::exists(P(rel))) << "gc deleted a non-layout name: " << rel;
  for (const auto& rel : layout) EXPECT_FALSE(fs::exists(P(rel))) << "gc kept a stale layout temp file: " << rel;
  EXPECT_EQ(r.reclaimed.size(), layout.size());
}

TEST_F(OpsHostileTest, NonFilesAtBlockNamesAreFindingsThatRepairRemoves) {
  auto paths = Write("a", 5);
  testing::TempDir outside;
  testing::WriteFileOrDie(outside.path() / "same-size", std::string(kRow, 'x'));
  for (int i = 0; i < 4; ++i) fs::remove(P(paths[i]));
  ASSERT_EQ(mkfifo(P(paths[0]).c_str(), 0644), 0);
  fs::create_directory(P(paths[1]));
  fs::create_directories(P(paths[2]) / "inside");
  fs::create_symlink(outside.path() / "same-size", P(paths[3]));
  fs::remove(P(ns_ + "/config.json"));
  ASSERT_EQ(mkfifo(P(ns_ + "/config.json").c_str(), 0644), 0);
  FsckOptions o;
  o.root = root_.path().string();
  o.verify_data = true;
  ASSERT_OK_AND_ASSIGN(FsckReport found, Fsck(o));
  std::set<std::string> flagged;
  for (const Finding& f : found.findings) {
    if (f.kind == FindingKind::kNotRegular) flagged.insert(f.path);
  }
  EXPECT_EQ(flagged, (std::set<std::string>{paths[0], paths[1], paths[2], paths[3], ns_ + "/config.json"}));
  o.repair = true;
  ASSERT_OK_AND_ASSIGN(FsckReport repaired, Fsck(o));
  for (int i : {0, 1, 3}) EXPECT_FALSE(fs::exists(fs::symlink_status(P(paths[i])))) << paths[i];
  EXPECT_TRUE(fs::exists(P(paths[2]) / "inside")) << "a non-empty directory is left for the operator";
  EXPECT_TRUE(fs::exists(outside.path() / "same-size"));
  EXPECT_TRUE(fs::exists(P(paths[4])));
}

TEST_F(OpsHostileTest, VerifyAndHugeConfigRunInBoundedMemory) {
  auto paths = Write("a", 1);
  // Two 768 MiB sparse "blocks" (more than the 512 MiB address-space cap) with a CRC attribute, and a 1 TiB sparse config.json.
  const std::string shard = paths[0].substr(0, paths[0].rfind('/'));
  for (char c : {'1', '2'}) {
    const fs::path big = P(shard + "/" + paths[0].substr(paths[0].rfind('/') + 1, 63) + c + ".bin");
    testing::WriteFileOrDie(big, "");
    fs::resize_file(big, uint64_t{768} << 20);
    const uint8_t crc[4] = {1, 2, 3, 4};
    ASSERT_EQ(setxattr(big.c_str(), "user.vllm.kv_crc32c", crc, 4, 0), 0);
    // An hour old: a mismatch found through holes is judged only past 60 s (FORMAT.md L109).
    fs::last_write_time(big, fs::file_time_type::clock::now() - std::chrono::hours(1));
  }
  fs::resize_file(P(ns_ + "/config.json"), uint64_t{1} << 40);
  auto fsck = Cli({"fsck", root_.path().string(), "--verify-data", "--json"}, "", "536870912");
  ASSERT_EQ(fsck.exit_code, 4) << fsck.err;
  auto doc = nlohmann::json::parse(fsck.out);
  std::multiset<std::string> kinds;
  for (const auto& f : doc["findings"]) kinds.insert(f["kind"].get<std::string>());
  EXPECT_EQ(kinds.count("crc_mismatch"), 2u) << fsck.out;
  EXPECT_EQ(kinds.count("config_torn"), 1u) << fsck.out;
  auto du = Cli({"du", root_.path().string()}, "", "536870912");
  EXPECT_EQ(du.exit_code, 0) << du.err;
}

TEST_F(OpsHostileTest, VerifyDataLeavesAtimeSoGcStillSeesIdleData) {
  auto paths = Write("a", 2);
  for (const auto& p : paths) Age(p, 30 * 86400);
  auto verify = Cli({"fsck", root_.path().string(), "--verify-data"});
  ASSERT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  struct stat st;
  ASSERT_EQ(stat(P(paths[0]).c_str(), &st), 0);
  EXPECT_LT(st.st_atime, time(nullptr) - 29 * 86400) << "--verify-data moved a block's atime";
  auto gc = Cli({"gc", root_.path().string(), "--older-than", "7d", "--dry-run", "--json"});
  ASSERT_EQ(gc.exit_code, 0) << gc.err;
  EXPECT_EQ(nlohmann::json::parse(gc.out)["reclaimed"].size(), 3u) << "2 blocks and config.json: " << gc.out;
}

TEST_F(OpsHostileTest, DeeplyNestedConfigDoesNotCrashTheTools) {
  Write("a", 1);
  testing::WriteFileOrDie(P(ns_ + "/config.json"), "{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}");
  for (const char* cmd : {"du", "fsck", "gc"}) {
    auto r = Cli({cmd, root_.path().string(), "--json"});
    EXPECT_LT(r.exit_code, 128) << cmd << " died of a signal: " << r.err;
    EXPECT_FALSE(nlohmann::json::parse(r.out, nullptr, false).is_discarded()) << cmd << ": " << r.out;
  }
}

}  // namespace
}  // namespace kvtier
