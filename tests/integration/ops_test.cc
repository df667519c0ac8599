// Proves kvtier du / fsck / gc on trees written in vLLM's exact layout by the
// real fs tier (plus files planted the way vLLM and crashes leave them):
// every fsck finding kind with its rule, near misses that must not be flagged
// (a fresh temp file, a vLLM-written block without the CRC attribute),
// --repair acting only on layout files, --verify-data catching a flipped bit,
// e2fsck exit codes through the CLI; gc by age (whole namespaces, both
// directories), by size (least recently used first, down to the low water),
// with --keep and with a live lease; a symlink out of the root is never
// followed; a root that does not look like one is refused; and gc plus
// fsck --repair running while a writer stores lose nothing it acknowledged;
// vLLM's .xattr_probe_<n>.tmp leftovers are probe leftovers.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "kvtier/fs_tier.h"
#include "kvtier/ops.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kRow = 8192;

using testing::Key;
using testing::Spec;

class OpsTest : public ::testing::Test {
 protected:
  std::unique_ptr<FsTier> Open(const std::string& model) {
    FsTierOpenOptions o;
    o.tier.root_dir = root_.path().string();
    o.ns = Spec(model);
    o.row_bytes = kRow;
    o.tier.n_read_threads = o.tier.n_write_threads = 2;
    return FsTier::Open(o).value();
  }
  // Stores n rows through a tier and closes it (its lease goes away).
  std::vector<std::string> Write(const std::string& model, size_t n, uint8_t tag = 0x77) {
    auto tier = Open(model);
    std::vector<OffloadKey> keys;
    std::vector<std::vector<uint8_t>> rows(n, std::vector<uint8_t>(kRow));
    std::vector<std::span<const uint8_t>> spans;
    for (size_t i = 0; i < n; ++i) {
      keys.push_back(Key(i, testing::KeyShape::Fill(tag)));
      std::memset(rows[i].data(), static_cast<int>(i + 1), kRow);
      spans.emplace_back(rows[i]);
    }
    EXPECT_TRUE(tier->SubmitStore(keys, spans).ok());
    EXPECT_OK(tier->WaitIdle(10000));
    std::vector<std::string> paths;
    for (auto& k : keys) paths.push_back(fs::relative(tier->BlockPath(k), root_.path()).string());
    return paths;
  }
  fs::path P(const std::string& rel) const { return root_.path() / rel; }
  void Age(const std::string& rel, int64_t seconds) {
    const auto t = std::chrono::system_clock::now() - std::chrono::seconds(seconds);
    const timespec ts{std::chrono::system_clock::to_time_t(t), 0};
    const timespec times[2] = {ts, ts};
    ASSERT_EQ(utimensat(AT_FDCWD, P(rel).c_str(), times, AT_SYMLINK_NOFOLLOW), 0) << rel;
  }
  std::string NsDir(const std::string& model) { return Namespace::Create(Spec(model)).value().dir_name(); }
  FsckOptions FsckOpts() {
    FsckOptions o;
    o.root = root_.path().string();
    return o;
  }
  GcOptions GcOpts() {
    GcOptions o;
    o.root = root_.path().string();
    return o;
  }
  static std::set<std::string> Kinds(const FsckReport& r) {
    std::set<std::string> kinds;
    for (const Finding& f : r.findings) kinds.insert(std::string(FindingKindName(f.kind)) + "@" + f.rule);
    return kinds;
  }

  testing::TempDir root_;
};

TEST_F(OpsTest, CleanTreeWithNearMissesIsClean) {
  auto paths = Write("org/a", 10);
  // A vLLM-written block (no CRC attribute) and a fresh temp file of a write in flight.
  const std::string vllm = paths[0].substr(0, paths[0].rfind('/')) + "/" + std::string(64, 'c').replace(0, 5, paths[0].substr(paths[0].rfind('/') + 1, 5)) + ".bin";
  testing::WriteFileOrDie(P(vllm), std::string(kRow, 'v'));
  testing::WriteFileOrDie(P(paths[1] + "_42.tmp"), "partial");
  FsckOptions o = FsckOpts();
  o.verify_data = true;
  ASSERT_OK_AND_ASSIGN(FsckReport r, Fsck(o));
  for (const Finding& f : r.findings) ADD_FAILURE() << FindingKindName(f.kind) << " " << f.path << " " << f.detail;
  EXPECT_EQ(r.ExitCode(), 0);
  EXPECT_EQ(r.blocks_checked, 11u);
  EXPECT_EQ(r.blocks_verified, 11u);
  ScanOptions du_opts;
  du_opts.root = root_.path().string();
  ASSERT_OK_AND_ASSIGN(DuReport du, Du(du_opts));
  ASSERT_EQ(du.namespaces.size(), 1u);
  EXPECT_EQ(du.namespaces[0].blocks, 11u);
  EXPECT_EQ(du.namespaces[0].bytes, 11 * kRow);
  EXPECT_EQ(du.namespaces[0].tmp_files, 1u);
  EXPECT_EQ(du.namespaces[0].model, "org/a");
  EXPECT_EQ(du.namespaces[0].tokens_per_hash, 16);
  EXPECT_EQ(du.namespaces[0].ranks, std::vector<int64_t>{0});
}

TEST_F(OpsTest, EveryFindingKindWithItsRuleAndRepair) {
  auto paths = Write("org/a", 6);
  const std::string ns = NsDir("org/a");
  const std::string shard = paths[0].substr(0, paths[0].rfind('/'));
  fs::resize_file(P(paths[0]), kRow / 2);                        // size_mismatch, short: removed
  { std::fstream f(P(paths[1]), std::ios::in | std::ios::out | std::ios::binary); f.put('X'); }  // crc_mismatch
  testing::WriteFileOrDie(P(paths[2] + "_7.tmp"), "x");            // stale_tmp
  Age(paths[2] + "_7.tmp", 7200);
  testing::WriteFileOrDie(P(ns + "/.o_direct_probe_1.tmp"), "");   // probe_leftover
  Age(ns + "/.o_direct_probe_1.tmp", 7200);
  testing::WriteFileOrDie(P(shard + "/NOTHEX.bin"), "x");          // bad_name
  testing::WriteFileOrDie(P(ns + "/README"), "mine");              // stray_file
  fs::create_directories(P(ns + "_r0/fff/ff_g0"));                 // empty_dir
  testing::WriteFileOrDie(P(ns + "/config.json"), "{\"model_name\": \"org/a\"");  // config_torn
  auto other = Write("org/b", 1);
  fs::remove(P(NsDir("org/b") + "/config.json"));                  // config_missing
  auto third = Write("org/c", 1);
  testing::WriteFileOrDie(P(NsDir("org/c") + "/config.json"), "{\"model_name\": \"edited\"}");  // digest mismatch
  FsckOptions o = FsckOpts();
  o.verify_data = true, o.row_bytes = kRow;  // L196: a short block goes by its size only against a known row
  ASSERT_OK_AND_ASSIGN(FsckReport before, Fsck(o));
  const std::set<std::string> want = {"size_mismatch@L80", "crc_mismatch@L67", "stale_tmp@L81", "probe_leftover@L82",
                                      "bad_name@L94", "stray_file@L90", "empty_dir@L91", "config_torn@L77",
                                      "config_missing@L78", "config_digest_mismatch@L79"};
  EXPECT_EQ(Kinds(before), want);
  EXPECT_EQ(before.ExitCode(), 4);
  EXPECT_TRUE(fs::exists(P(paths[0]))) << "without --repair nothing changes";
  o.repair = true;
  o.dir_grace_s = 0;  // the directories are all fresh here; the grace has its own test
  ASSERT_OK_AND_ASSIGN(FsckReport repaired, Fsck(o));
  EXPECT_EQ(repaired.ExitCode(), 4) << "strays and bad names are never removed";
  EXPECT_FALSE(fs::exists(P(paths[0])));
  EXPECT_FALSE(fs::exists(P(paths[1])));
  EXPECT_FALSE(fs::exists(P(paths[2] + "_7.tmp")));
  EXPECT_FALSE(fs::exists(P(ns + "/config.json"))) << "a torn config.json is quarantined";
  EXPECT_TRUE(fs::exists(P(ns + "/README")));
  EXPECT_TRUE(fs::exists(P(shard + "/NOTHEX.bin")));
  EXPECT_TRUE(fs::exists(P(paths[3])));
  ASSERT_OK_AND_ASSIGN(FsckReport after, Fsck(o));
  std::set<std::string> left = Kinds(after);
  EXPECT_EQ(left, (std::set<std::string>{"stray_file@L90", "bad_name@L94", "config_missing@L78"}));
}

// FORMAT.md L108 holds for fsck --repair as for gc: an empty shard directory
// changed within dir_grace_s may be a writer's about to hold its file, so it
// is reported and left; once unchanged for the grace it goes, with its <hhh>
// parent when that was its last entry. A short block's removal takes its
// shard directories along only when they were idle for the grace before it.
TEST_F(OpsTest, RepairRemovesEmptyShardDirectoriesOnlyAfterTheGrace) {
  auto paths = Write("org/a", 5);
  const std::string ns = NsDir("org/a");
  auto shard = [](const std::string& rel) { return rel.substr(0, rel.rfind('/')); };
  auto up = [&](const std::string& rel) { return shard(shard(rel)); };
  for (int i : {0, 1}) {
    ASSERT_EQ(std::distance(fs::directory_iterator(P(up(paths[i]))), fs::directory_iterator{}), 1) << "one block per <hhh>";
    ASSERT_EQ(std::distance(fs::directory_iterator(P(shard(paths[i]))), fs::directory_iterator{}), 1);
    fs::resize_file(P(paths[i]), kRow / 2);  // size_mismatch, short: removed
  }
  Age(shard(paths[1]), 7200);
  Age(up(paths[1]), 7200);
  const std::string fresh = ns + "_r0/ffe/fe_g0", idle = ns + "_r0/ffd/fd_g0";
  fs::create_directories(P(fresh));
  fs::create_directories(P(idle));
  Age(idle, 7200);
  Age(shard(idle), 7200);
  FsckOptions o = FsckOpts();
  o.repair = true, o.row_bytes = kRow;  // L196: the short blocks go against a known row
  ASSERT_OK_AND_ASSIGN(FsckReport r, Fsck(o));
  EXPECT_FALSE(fs::exists(P(paths[0])));
  EXPECT_FALSE(fs::exists(P(paths[1])));
  EXPECT_TRUE(fs::exists(P(shard(paths[0])))) << "changed within the grace before the removal";
  EXPECT_FALSE(fs::exists(P(up(paths[1])))) << "idle for the grace: it and its <hhh> go with the block";
  EXPECT_TRUE(fs::exists(P(fresh))) << "a writer may have just created it";
  EXPECT_FALSE(fs::exists(P(shard(idle)))) << "idle for the grace: it and its <hhh> go";
  bool fresh_left = false;
  for (const Finding& f : r.findings) {
    if (f.path == fresh) fresh_left = f.kind == FindingKind::kEmptyDir && f.action == RepairAction::kNone &&
                                      f.detail.find("L108") != std::string::npos;
  }
  EXPECT_TRUE(fresh_left) << "reported, and left with the reason";
  EXPECT_EQ(r.ExitCode(), 4);
  // Once idle for the grace, the next pass removes them with their parents.
  for (const std::string& d : {fresh, shard(fresh), shard(paths[0]), up(paths[0])}) Age(d, 7200);
  ASSERT_OK_AND_ASSIGN(FsckReport again, Fsck(o));
  EXPECT_EQ(again.ExitCode(), 1);
  EXPECT_FALSE(fs::exists(P(shard(fresh))));
  EXPECT_FALSE(fs::exists(P(up(paths[0]))));
  EXPECT_TRUE(fs::exists(P(paths[2])));
}

// vLLM's checksum probe (PR #57912, FORMAT.md L82, L102), which kvtier's tier
// now makes too: an old ".xattr_probe_<n>.tmp" is a probe_leftover that fsck
// --repair and gc remove; a young one is left alone; a near miss is a stray.
TEST_F(OpsTest, XattrProbeLeftoversAreProbeLeftovers) {
  Write("org/a", 1);
  const std::string ns = NsDir("org/a");
  for (const std::string name : {".xattr_probe_12.tmp", ".xattr_probe_012.tmp", ".xattr_probe_13.tmp"}) {
    testing::WriteFileOrDie(P(ns + "/" + name), "");
  }
  Age(ns + "/.xattr_probe_12.tmp", 7200);
  Age(ns + "/.xattr_probe_012.tmp", 7200);
  FsckOptions o = FsckOpts();
  ASSERT_OK_AND_ASSIGN(FsckReport found, Fsck(o));
  std::set<std::string> seen;
  for (const Finding& f : found.findings) seen.insert(std::string(FindingKindName(f.kind)) + " " + f.path);
  EXPECT_EQ(seen, (std::set<std::string>{"probe_leftover " + ns + "/.xattr_probe_12.tmp",
                                         "stray_file " + ns + "/.xattr_probe_012.tmp"}));
  o.repair = true;
  ASSERT_OK_AND_ASSIGN(FsckReport repaired, Fsck(o));
  EXPECT_FALSE(fs::exists(P(ns + "/.xattr_probe_12.tmp")));
  EXPECT_TRUE(fs::exists(P(ns + "/.xattr_probe_012.tmp"))) << "a near miss is never removed";
  EXPECT_TRUE(fs::exists(P(ns + "/.xattr_probe_13.tmp"))) << "a young probe may be a tier starting now";
  Age(ns + "/.xattr_probe_13.tmp", 7200);
  ASSERT_OK_AND_ASSIGN(GcReport gc, Gc(GcOpts()));
  EXPECT_FALSE(fs::exists(P(ns + "/.xattr_probe_13.tmp"))) << "gc removes an old probe file";
  EXPECT_TRUE(fs::exists(P(ns + "/.xattr_probe_012.tmp")));
}

TEST_F(OpsTest, CliExitCodesFollowE2fsck) {
  auto paths = Write("org/a", 2);
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), testing::CliPath());
    return testing::RunCommand(args);
  };
  EXPECT_EQ(run({"fsck", root_.path()}).exit_code, 0);
  fs::resize_file(P(paths[0]), 10);
  auto found = run({"fsck", root_.path(), "--json"});
  EXPECT_EQ(found.exit_code, 4);
  auto doc = nlohmann::json::parse(found.out);
  EXPECT_EQ(doc["findings"][0]["kind"], "size_mismatch");
  EXPECT_EQ(doc["findings"][0]["action"], "none");
  const std::string shard = paths[0].substr(0, paths[0].rfind('/'));
  for (const std::string& d : {shard, shard.substr(0, shard.rfind('/'))}) Age(d, 7200);  // idle: they go with it (L108)
  EXPECT_EQ(run({"fsck", root_.path(), "--repair"}).exit_code, 4) << "L196: kept, the row is not known";
  EXPECT_EQ(run({"fsck", root_.path(), "--repair", "--row-bytes", std::to_string(kRow)}).exit_code, 1);
  EXPECT_EQ(run({"fsck", root_.path()}).exit_code, 0);
  testing::TempDir not_root;
  testing::WriteFileOrDie(not_root.path() / "photo.jpg", "x");
  auto refused = run({"fsck", not_root.path()});
  EXPECT_EQ(refused.exit_code, 8);
  EXPECT_NE(refused.err.find("--force"), std::string::npos) << refused.err;
  EXPECT_EQ(run({"fsck", not_root.path(), "--force"}).exit_code, 4);  // the stray photo
  EXPECT_EQ(run({"gc", root_.path(), "--max-bytes", "lots"}).exit_code, 2);
  auto du = run({"du", root_.path(), "--json"});
  ASSERT_EQ(du.exit_code, 0) << du.err;
  EXPECT_EQ(nlohmann::json::parse(du.out)["total_blocks"], 1);
}

TEST_F(OpsTest, GcByAgeReclaimsWholeIdleNamespacesOnly) {
  auto old_paths = Write("org/old", 3, 0x01);
  auto new_paths = Write("org/new", 3, 0x02);
  auto kept_paths = Write("org/kept", 2, 0x03);
  for (auto* set : {&old_paths, &kept_paths}) {
    for (const auto& p : *set) Age(p, 30 * 86400);
  }
  auto live = Write("org/live", 1, 0x04);
  Age(live[0], 30 * 86400);
  auto holder = Open("org/live");  // holds a fresh lease
  GcOptions o = GcOpts();
  o.older_than_s = 7 * 86400;
  o.keep = {NsDir("org/kept")};
  o.dry_run = true;
  ASSERT_OK_AND_ASSIGN(GcReport dry, Gc(o));
  EXPECT_EQ(dry.reclaimed.size(), 4u);  // 3 blocks + config.json of org/old
  EXPECT_TRUE(fs::exists(P(old_paths[0])));
  o.dry_run = false;
  ASSERT_OK_AND_ASSIGN(GcReport real, Gc(o));
  for (const auto& r : real.reclaimed) EXPECT_EQ(r.reason, "orphaned_namespace") << r.path;
  EXPECT_FALSE(fs::exists(P(NsDir("org/old")))) << "the namespace directory goes";
  EXPECT_FALSE(fs::exists(P(NsDir("org/old") + "_r0"))) << "and its block directory";
  for (const auto& p : new_paths) EXPECT_TRUE(fs::exists(P(p)));
  for (const auto& p : kept_paths) EXPECT_TRUE(fs::exists(P(p))) << "--keep";
  EXPECT_TRUE(fs::exists(P(live[0]))) << "a live lease protects its namespace";
  EXPECT_EQ(real.bytes_reclaimed, 3 * kRow + fs::file_size(P(NsDir("org/new") + "/config.json")));
}

TEST_F(OpsTest, GcBySizeRemovesLeastRecentlyUsedDownToLowWater) {
  auto paths = Write("org/a", 10);
  for (size_t i = 0; i < paths.size(); ++i) Age(paths[i], static_cast<int64_t>(1000 * (10 - i)));  // 0 oldest
  GcOptions o = GcOpts();
  o.max_bytes = 8 * kRow;
  o.low_water_bytes = 5 * kRow;
  ASSERT_OK_AND_ASSIGN(GcReport r, Gc(o));
  ASSERT_EQ(r.reclaimed.size(), 5u);
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(fs::exists(P(paths[i])), i >= 5) << i;
  for (const auto& x : r.reclaimed) EXPECT_EQ(x.reason, "capacity");
  ASSERT_OK_AND_ASSIGN(GcReport again, Gc(o));
  EXPECT_TRUE(again.reclaimed.empty()) << "under the bound now";
}

TEST_F(OpsTest, SymlinksOutOfTheRootAreNeverFollowed) {
  auto paths = Write("org/a", 2);
  testing::TempDir outside;
  testing::WriteFileOrDie(outside.path() / "precious.bin", "x");
  const std::string shard = paths[0].substr(0, paths[0].rfind('/'));
  fs::create_directory_symlink(outside.path(), P(shard + "/escape"));
  fs::create_directory_symlink(outside.path(), P(NsDir("org/a") + "_r0/abc"));
  FsckOptions f = FsckOpts();
  f.repair = true;
  ASSERT_OK_AND_ASSIGN(FsckReport r, Fsck(f));
  GcOptions g = GcOpts();
  g.max_bytes = 1;
  g.older_than_s = 0;
  ASSERT_OK_AND_ASSIGN(GcReport gr, Gc(g));
  EXPECT_TRUE(fs::exists(outside.path() / "precious.bin"));
  EXPECT_TRUE(fs::is_symlink(P(shard + "/escape")));
  for (const auto& x : gr.reclaimed) EXPECT_EQ(x.path.find("escape"), std::string::npos) << x.path;
}

TEST_F(OpsTest, GcAndRepairWhileAWriterStoresLoseNothingAcknowledged) {
  auto tier = Open("org/live");
  std::atomic<bool> stop{false};
  std::vector<OffloadKey> acked;
  std::thread writer([&] {
    std::vector<uint8_t> row(kRow, 0x3c);
    for (uint64_t i = 0; !stop; ++i) {
      std::vector<OffloadKey> keys = {Key(i, testing::KeyShape::Fill(0x5e))};
      std::vector<std::span<const uint8_t>> rows = {row};
      uint64_t id = tier->SubmitStore(keys, rows).value();
      std::vector<JobResult> done;
      while (done.empty()) {
        tier->PollFinished(&done);
        std::this_thread::yield();
      }
      if (done[0].job_id == id && done[0].keys[0].outcome == KeyOutcome::kOk) acked.push_back(keys[0]);
    }
  });
  // The operators' tools run as separate processes, as from a cron job.
  for (int round = 0; round < 15; ++round) {
    auto f = testing::RunCommand({testing::CliPath(), "fsck", root_.path(), "--repair", "--tmp-grace", "0s"});
    EXPECT_NE(f.exit_code, 8) << f.err;
    auto g = testing::RunCommand({testing::CliPath(), "gc", root_.path(), "--older-than", "1h", "--max-bytes", "1T"});
    EXPECT_EQ(g.exit_code, 0) << g.err;
  }
  stop = true;
  writer.join();
  ASSERT_FALSE(acked.empty());
  std::vector<std::vector<uint8_t>> back(acked.size(), std::vector<uint8_t>(kRow));
  std::vector<std::span<uint8_t>> spans(back.begin(), back.end());
  uint64_t id = tier->SubmitLoad(acked, spans).value();
  ASSERT_OK(tier->WaitIdle(30000));
  std::vector<JobResult> done;
  tier->PollFinished(&done);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].job_id, id);
  EXPECT_EQ(done[0].OkPrefix(), acked.size()) << "an acknowledged block was lost";
}

}  // namespace
}  // namespace kvtier
