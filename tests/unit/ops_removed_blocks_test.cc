// Proves that gc (one-shot, CollectOnce and the watch Collector's passes)
// and fsck --repair tell GcOptions / FsckOptions::on_block_removed of
// exactly the block files they remove, once each, with the right
// block_dir / group_dir / stem / engine / reason, and of nothing else.
// Method: trees built by hand from the layout's rules (FORMAT.md L2-L8: a
// vLLM namespace's config.json from Namespace, an SGLang one's from
// SglangNamespace, one without config.json) in a temp directory; the block
// files are listed before and after each run, and the set of files gone
// must equal the set the callback was told of. Temp, probe, lease and
// config.json files gc removes, non-files fsck removes at block names, a
// dry run and fsck without --repair are never told; a badly named file is
// never removed, so never told. A file's block-hash record (FORMAT.md L201)
// names every block it holds. Block ages are drawn from the test's seed.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "format/block_hashes.h"
#include "format/layout_names.h"
#include "kvtier/collector.h"
#include "kvtier/layout.h"
#include "kvtier/ops.h"
#include "kvtier/sglang.h"
#include "support/test_support.h"
#include "util/crc32c.h"
#include "util/dir_fd.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kRow = 4096;

// What on_block_removed was told, by path (a path told twice fails).
struct Told {
  std::mutex mu;
  std::map<std::string, RemovedBlock> by_path;
  std::vector<std::string> twice;
  OnBlockRemoved Callback() {
    return [this](const RemovedBlock& b) {
      std::lock_guard lock(mu);
      if (!by_path.emplace(b.path, b).second) twice.push_back(b.path);
    };
  }
  std::set<std::string> Paths() {
    std::lock_guard lock(mu);
    std::set<std::string> out;
    for (const auto& [p, b] : by_path) out.insert(p);
    return out;
  }
};

class RemovedBlocksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = testing::TestSeed();
    rng_.seed(seed_);
    now_ = std::time(nullptr);
  }
  fs::path P(const std::string& rel) const { return root_.path() / rel; }
  std::string Root() const { return root_.path().string(); }

  // A namespace directory with its config.json ("" : none).
  void MakeNamespace(const std::string& dir, const std::string& config_json) {
    fs::create_directories(P(dir));
    if (!config_json.empty()) testing::WriteFileOrDie(P(dir + "/config.json"), config_json);
  }
  // A block file of `bytes` at its place (L8), used `age_s` ago; its CRC
  // attribute (L60) as the data's. Returns its path relative to the root.
  std::string MakeBlock(const std::string& ns_dir, const std::string& hex, int64_t group, uint64_t bytes,
                        int64_t age_s) {
    const std::string rel = format::BlockDirName(ns_dir, 0) + "/" + format::BlockRelPath(hex, group);
    fs::create_directories(P(rel).parent_path());
    const std::string data(bytes, static_cast<char>('a' + (hex[0] & 7)));
    testing::WriteFileOrDie(P(rel), data);
    const uint32_t crc = internal::Crc32c({reinterpret_cast<const uint8_t*>(data.data()), data.size()});
    const uint8_t be[4] = {uint8_t(crc >> 24), uint8_t(crc >> 16), uint8_t(crc >> 8), uint8_t(crc)};
    EXPECT_EQ(setxattr(P(rel).c_str(), format::kCrcXattr, be, 4, 0), 0) << "user xattrs on $TMPDIR";
    Age(rel, age_s);
    return rel;
  }
  std::vector<BlockHash> Hashes(int n) {
    std::vector<BlockHash> h;
    for (int i = 0; i < n; ++i) h.push_back(BlockHash::FromHex(RandomHex(64)).value());
    return h;
  }
  // L199: `hashes`' block-hash record in the file's attribute.
  void SetRecord(const std::string& rel, const std::vector<BlockHash>& hashes) {
    const std::string r = format::EncodeBlockHashRecord(hashes);
    ASSERT_EQ(setxattr(P(rel).c_str(), format::kBlockHashesXattr, r.data(), r.size(), 0), 0) << rel;
  }
  void Age(const std::string& rel, int64_t age_s) {
    const struct timespec t[2] = {{now_ - age_s, 0}, {now_ - age_s, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, P(rel).c_str(), t, AT_SYMLINK_NOFOLLOW), 0) << rel;
  }
  std::string RandomHex(size_t chars) {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string h;
    for (size_t i = 0; i < chars; ++i) h += kHex[rng_() % 16];
    return h;
  }
  // Every regular file and symlink under the root, relative to it.
  std::set<std::string> Files() const {
    std::set<std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(root_.path())) {
      if (!e.is_directory() || e.is_symlink()) out.insert(fs::relative(e.path(), root_.path()).string());
    }
    return out;
  }
  static std::set<std::string> Gone(const std::set<std::string>& before, const std::set<std::string>& after) {
    std::set<std::string> out;
    for (const std::string& f : before) {
      if (!after.count(f)) out.insert(f);
    }
    return out;
  }
  // Each told block's names agree with its path and its namespace's engine.
  void CheckNames(Told& told, const std::map<std::string, std::string>& engine_of_ns) {
    std::lock_guard lock(told.mu);
    EXPECT_TRUE(told.twice.empty()) << "told twice: " << told.twice.front();
    for (const auto& [path, b] : told.by_path) {
      SCOPED_TRACE(path + " seed " + std::to_string(seed_));
      EXPECT_EQ(b.root, Root());
      EXPECT_EQ(path, b.block_dir + "/" + b.stem.substr(0, 3) + "/" + b.group_dir + "/" + b.stem + ".bin");
      EXPECT_EQ(b.group_dir.substr(0, 2), b.stem.substr(3, 2));
      const std::string ns(format::ParseBlockDirName(b.block_dir)->ns);
      EXPECT_EQ(b.engine, engine_of_ns.at(ns));
    }
  }

  testing::TempDir root_;
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  int64_t now_ = 0;
};

std::string VllmConfig(const std::string& model, std::string* dir) {
  const Namespace ns = Namespace::Create(testing::Spec(model)).value();
  *dir = ns.dir_name();
  return ns.config_json();
}

TEST_F(RemovedBlocksTest, GcCapacityTellsExactlyTheBlocksItRemoved) {
  std::string ns;
  const std::string config = VllmConfig("org/a", &ns);
  MakeNamespace(ns, config);
  for (int i = 0; i < 30; ++i) MakeBlock(ns, RandomHex(64), i % 3, kRow, 60 + static_cast<int64_t>(rng_() % 100000));
  // A stale temp file and a stale probe: removed, never told.
  const std::string some = *Files().rbegin();
  testing::WriteFileOrDie(P(some + "_7.tmp"), "partial");
  Age(some + "_7.tmp", 7200);
  testing::WriteFileOrDie(P(ns + "/" + format::ODirectProbeName(3)), "");
  Age(ns + "/" + format::ODirectProbeName(3), 7200);
  const std::set<std::string> before = Files();
  Told told;
  GcOptions o;
  o.root = Root();
  o.max_bytes = 12 * kRow;
  o.on_block_removed = told.Callback();
  ASSERT_OK_AND_ASSIGN(GcReport r, Gc(o));
  const std::set<std::string> gone = Gone(before, Files());
  EXPECT_EQ(r.files_reclaimed, 20u) << "18 blocks, a temp file, a probe; seed " << seed_;
  EXPECT_EQ(gone.size(), 20u);
  std::set<std::string> blocks_gone;
  for (const std::string& g : gone) {
    if (g.ends_with(".bin")) blocks_gone.insert(g);
  }
  EXPECT_EQ(blocks_gone.size(), 18u);
  EXPECT_EQ(told.Paths(), blocks_gone) << "seed " << seed_;
  CheckNames(told, {{ns, "vllm"}});
  for (const auto& [p, b] : told.by_path) {
    EXPECT_EQ(b.reason, "capacity");
    EXPECT_EQ(b.bytes, kRow);
  }
}

TEST_F(RemovedBlocksTest, GcOfAnOrphanedSglangNamespaceTellsItsPagesOnly) {
  const SglangNamespace sg = SglangNamespace::Create(testing::SglangSpec("org/s", {4, 2, 8, 8, 1})).value();
  const std::string ns = sg.dir_name();
  MakeNamespace(ns, sg.config_json());
  std::set<std::string> pages;
  for (int i = 0; i < 6; ++i) pages.insert(MakeBlock(ns, RandomHex(64), 0, sg.page_bytes(), 30 * 86400));
  // Names that are no layout name: never removed, never told (L94).
  const std::string shard = fs::path(*pages.begin()).parent_path().string();
  const std::string hostile[] = {shard + "/" + std::string(64, 'A') + ".bin", shard + "/abc.bin",
                                 shard + "/" + std::string(63, 'a') + "\n.bin", shard + "/" + std::string(64, 'g') + ".bin"};
  for (const std::string& h : hostile) {
    testing::WriteFileOrDie(P(h), "x");
    Age(h, 30 * 86400);
  }
  Age(ns + "/config.json", 30 * 86400);
  const std::set<std::string> before = Files();
  Told told;
  GcOptions o;
  o.root = Root();
  o.older_than_s = 86400;
  o.on_block_removed = told.Callback();
  ASSERT_OK_AND_ASSIGN(GcReport r, Gc(o));
  const std::set<std::string> after = Files();
  EXPECT_EQ(told.Paths(), pages) << "seed " << seed_;
  EXPECT_EQ(Gone(before, after).count(ns + "/config.json"), 1u) << "removed, not told";
  for (const std::string& h : hostile) EXPECT_EQ(after.count(h), 1u) << h;
  CheckNames(told, {{ns, "sglang"}});
  for (const auto& [p, b] : told.by_path) EXPECT_EQ(b.reason, "orphaned_namespace");
}

TEST_F(RemovedBlocksTest, ADryRunAndFsckWithoutRepairTellNothing) {
  MakeNamespace("m_0123456789ab", "");
  for (int i = 0; i < 4; ++i) MakeBlock("m_0123456789ab", RandomHex(32), 0, kRow, 3600 * (i + 1));
  MakeBlock("m_0123456789ab", RandomHex(32), 0, kRow / 2, 60);  // short
  Told told;
  GcOptions g;
  g.root = Root();
  g.dry_run = true;
  g.max_bytes = kRow;
  g.on_block_removed = told.Callback();
  ASSERT_OK_AND_ASSIGN(GcReport r, Gc(g));
  EXPECT_GT(r.files_reclaimed, 0u);
  FsckOptions f;
  f.root = Root();
  f.on_block_removed = told.Callback();
  ASSERT_OK_AND_ASSIGN(FsckReport fr, Fsck(f));
  EXPECT_FALSE(fr.findings.empty());
  EXPECT_TRUE(told.Paths().empty());
  EXPECT_EQ(Files().size(), 5u);
}

TEST_F(RemovedBlocksTest, FsckRepairTellsTheShortAndCorruptBlocksItRemoved) {
  MakeNamespace("m_0123456789ab", "");  // no config.json: engine "", a vLLM block
  std::vector<std::string> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(MakeBlock("m_0123456789ab", RandomHex(32), 1, kRow, 60));
  ASSERT_EQ(truncate(P(blocks[0]).c_str(), kRow / 2), 0);  // short (L80)
  {
    const int fd = open(P(blocks[1]).c_str(), O_WRONLY);
    ASSERT_EQ(pwrite(fd, "!", 1, 100), 1);  // a flipped byte (L67)
    close(fd);
  }
  // A symlink at a block name (L95): removed, but no block was there.
  const std::string link = fs::path(blocks[2]).parent_path().string() + "/" + blocks[2].substr(blocks[2].rfind('/') + 1, 5) +
                           RandomHex(27) + ".bin";
  fs::create_symlink("/nonexistent", P(link));
  const std::set<std::string> before = Files();
  Told told;
  FsckOptions f;
  f.root = Root();
  f.repair = true;
  f.verify_data = true;
  f.row_bytes = kRow;  // the row given: a short block is removed (L196)
  f.on_block_removed = told.Callback();
  ASSERT_OK_AND_ASSIGN(FsckReport r, Fsck(f));
  const std::set<std::string> gone = Gone(before, Files());
  EXPECT_EQ(gone, (std::set<std::string>{blocks[0], blocks[1], link})) << "seed " << seed_;
  EXPECT_EQ(told.Paths(), (std::set<std::string>{blocks[0], blocks[1]}));
  CheckNames(told, {{"m_0123456789ab", ""}});
  EXPECT_EQ(told.by_path[blocks[0]].reason, "size_mismatch");
  EXPECT_EQ(told.by_path[blocks[1]].reason, "crc_mismatch");
  EXPECT_EQ(told.by_path[blocks[0]].group_dir.substr(2), "_g1");
}

TEST_F(RemovedBlocksTest, CollectOnceAndTheWatchCollectorTellTheirRemovals) {
  MakeNamespace("m_0123456789ab", "");
  for (int i = 0; i < 16; ++i) MakeBlock("m_0123456789ab", RandomHex(64), 0, kRow, 3600 * (16 - i));
  const std::set<std::string> before = Files();
  Told told;
  CollectOnceOptions once;
  once.root = Root();
  once.max_bytes = 12 * kRow;
  once.collector_ttl_ms = 1000;
  once.on_block_removed = told.Callback();
  ASSERT_OK_AND_ASSIGN(GcReport r, CollectOnce(once));
  EXPECT_EQ(r.files_reclaimed, 4u);
  const std::set<std::string> mid = Files();
  EXPECT_EQ(told.Paths(), Gone(before, mid));
  CollectorOptions w;
  w.gc.root = Root();
  w.gc.max_bytes = 8 * kRow;
  w.gc.on_block_removed = told.Callback();
  w.interval_ms = 200;
  w.check_ms = 50;
  w.collector_ttl_ms = 1000;
  w.log = [](std::string_view) {};
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Collector> c, Collector::Open(std::move(w)));
  ASSERT_OK(c->Start());
  for (int i = 0; i < 1000 && c->status().files_reclaimed < 4; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  c->Stop();
  ASSERT_OK(c->Wait());
  EXPECT_EQ(c->status().files_reclaimed, 4u);
  EXPECT_EQ(told.Paths(), Gone(before, Files())) << "both runs' removals, each told once";
  EXPECT_EQ(told.Paths().size(), 8u);
  CheckNames(told, {{"m_0123456789ab", ""}});
}

// L200, L201: in a namespace whose files hold several blocks, a removal
// names every block a file's record lists (the attribute, or the start of
// its last page); a record copied from another file, or none, leaves the
// stem alone; a namespace of one block per file reads no record at all.
TEST_F(RemovedBlocksTest, GcNamesEveryBlockAFilesRecordLists) {
  NamespaceSpec spec = testing::Spec("org/chunks");
  spec.blocks_per_file = 4;
  const Namespace chunks = Namespace::Create(spec).value();
  std::string single;
  const std::string single_config = VllmConfig("org/single", &single);
  MakeNamespace(chunks.dir_name(), chunks.config_json());
  MakeNamespace(single, single_config);
  const std::vector<BlockHash> in_xattr = Hashes(4), in_page = Hashes(4), foreign = Hashes(4), one_block_ns = Hashes(4);
  const int64_t old_s = 30 * 86400;
  const std::string x = MakeBlock(chunks.dir_name(), in_xattr.back().Hex(), 0, kRow, old_s);
  SetRecord(x, in_xattr);
  const std::string t = MakeBlock(chunks.dir_name(), in_page.back().Hex(), 1, kRow + 4096, old_s);
  {
    std::fstream f(P(t), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(kRow);
    f << format::EncodeBlockHashRecord(in_page);
  }
  const std::string c = MakeBlock(chunks.dir_name(), foreign.back().Hex(), 0, kRow, old_s);
  SetRecord(c, in_xattr);
  const std::string none = MakeBlock(chunks.dir_name(), RandomHex(64), 0, kRow, old_s);
  const std::string s1 = MakeBlock(single, one_block_ns.back().Hex(), 0, kRow, old_s);
  SetRecord(s1, one_block_ns);
  for (const std::string& rel : {x, t, c, none, s1}) Age(rel, old_s);
  Age(chunks.dir_name() + "/config.json", old_s);
  Age(single + "/config.json", old_s);
  Told told;
  GcOptions o;
  o.root = Root();
  o.older_than_s = 86400;
  o.on_block_removed = told.Callback();
  ASSERT_OK(Gc(o).status());
  ASSERT_EQ(told.Paths(), (std::set<std::string>{x, t, c, none, s1}));
  EXPECT_EQ(told.by_path[x].block_hashes, in_xattr);
  EXPECT_EQ(told.by_path[t].block_hashes, in_page);
  EXPECT_TRUE(told.by_path[c].block_hashes.empty()) << "another file's record";
  EXPECT_TRUE(told.by_path[none].block_hashes.empty());
  EXPECT_TRUE(told.by_path[s1].block_hashes.empty()) << "its namespace holds one block per file";
}

TEST(UnlinkIfSameAt, SaysWhetherThisCallRemovedTheFile) {
  testing::TempDir dir;
  testing::WriteFileOrDie(dir.path() / "f", "x");
  struct stat st;
  ASSERT_EQ(stat((dir.path() / "f").c_str(), &st), 0);
  const int fd = open(dir.path().c_str(), O_DIRECTORY | O_RDONLY);
  bool unlinked = false;
  EXPECT_EQ(internal::UnlinkIfSameAt(fd, "f", st.st_dev, st.st_ino, false, &unlinked), 0);
  EXPECT_TRUE(unlinked);
  unlinked = false;
  EXPECT_EQ(internal::UnlinkIfSameAt(fd, "f", st.st_dev, st.st_ino, false, &unlinked), 0) << "gone counts as removed";
  EXPECT_FALSE(unlinked) << "... but not by this call: another collector tells of it";
  close(fd);
}

}  // namespace
}  // namespace kvtier
