// Proves gc's one-walk capacity path (src/ops/gc_candidates.h):
// - on seeded random trees (distinct use times) a trim the candidate buffer
//   covers takes one walk and removes exactly the exact-LRU set, the dry run
//   reporting that same set and removing nothing; with a list of roots too;
// - a need beyond the buffer (a budget of 10 entries) falls back to two walks
//   and stays within the histogram's stated tolerance; the buffer held no more
//   than its budget;
// - a block replaced (another inode) or used (its atime set) between the walk
//   and its removal is left;
// - shard directories the trim emptied are removed only past dir_grace_s;
// - once GcOptions::stop says stop, nothing more is removed;
// - an orphaned namespace (decided after the walk) takes the walks it did.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <ctime>
#include <filesystem>
#include <random>
#include <set>

#include "kvtier/ops.h"
#include "ops/gc_candidates.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;

std::string Hex64(std::mt19937_64& rng) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string h(64, '0');
  for (char& c : h) c = kDigits[rng() % 16];
  return h;
}

struct Block {
  std::string rel;
  uint64_t bytes;
  int64_t used;
};

// A block file of `size` bytes used at `used`, in vLLM's layout (FORMAT.md L6-L8).
Block Plant(const fs::path& root, const std::string& ns, const std::string& hex, uint64_t size, int64_t used) {
  const std::string dir = ns + "_r0/" + hex.substr(0, 3) + "/" + hex.substr(3, 2) + "_g0";
  fs::create_directories(root / dir);
  const std::string rel = dir + "/" + hex + ".bin";
  testing::WriteFileOrDie(root / rel, std::string(size, 'k'));
  const timespec times[2] = {{used, 0}, {used, 0}};
  EXPECT_EQ(utimensat(AT_FDCWD, (root / rel).c_str(), times, 0), 0);
  return {rel, size, used};
}

void AgeDirs(const fs::path& dir, int64_t when) {
  const timespec times[2] = {{when, 0}, {when, 0}};
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_directory()) (void)utimensat(AT_FDCWD, e.path().c_str(), times, AT_SYMLINK_NOFOLLOW);
  }
}

// n blocks over two namespaces, every use time distinct (so exact LRU is one set).
std::vector<Block> PlantTree(const fs::path& root, std::mt19937_64& rng, size_t n, bool old_dirs = true) {
  const int64_t now = std::time(nullptr);
  std::vector<int64_t> ages(n);
  for (size_t i = 0; i < n; ++i) ages[i] = 10 + static_cast<int64_t>(i) * (1 + static_cast<int64_t>(rng() % 5000));
  std::shuffle(ages.begin(), ages.end(), rng);
  std::vector<Block> out;
  for (size_t i = 0; i < n; ++i) {
    const std::string ns = i % 2 == 0 ? "a_0123456789a0" : "b_0123456789a1";
    out.push_back(Plant(root, ns, Hex64(rng), i % 2 == 0 ? 4096 : 8192, now - ages[i]));
  }
  if (old_dirs) {
    for (const char* d : {"a_0123456789a0_r0", "b_0123456789a1_r0"}) AgeDirs(root / d, now - 3600);
  }
  return out;
}

// The least recently used of the planted blocks.
Block Oldest(const std::vector<Block>& blocks) {
  return *std::min_element(blocks.begin(), blocks.end(), [](const Block& x, const Block& y) { return x.used < y.used; });
}

uint64_t Total(const std::vector<Block>& blocks) {
  uint64_t t = 0;
  for (const Block& b : blocks) t += b.bytes;
  return t;
}

// The exact LRU set: oldest first until the total is at the low water.
std::set<std::string> ExactLru(std::vector<Block> blocks, uint64_t low_water) {
  std::sort(blocks.begin(), blocks.end(), [](const Block& a, const Block& b) { return a.used < b.used; });
  uint64_t left = Total(blocks);
  std::set<std::string> out;
  for (const Block& b : blocks) {
    if (left <= low_water) break;
    out.insert(b.rel), left -= b.bytes;
  }
  return out;
}

std::set<std::string> Paths(const GcReport& r) {
  std::set<std::string> out;
  for (const Reclaimed& x : r.reclaimed) out.insert(x.path);
  return out;
}

TEST(GcOneWalkTest, TrimWithinTheBufferIsOneWalkAndExactLru) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 6; ++trial) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " trial " + std::to_string(trial));
    testing::TempDir root;
    const std::vector<Block> blocks = PlantTree(root.path(), rng, 50 + rng() % 300);
    GcOptions o;
    o.root = root.path().string();
    o.max_bytes = Total(blocks) * (30 + rng() % 60) / 100;
    o.low_water_bytes = *o.max_bytes * (50 + rng() % 51) / 100;
    o.jobs = 1 + static_cast<int>(rng() % 4);
    const std::set<std::string> exact = ExactLru(blocks, *o.low_water_bytes);
    o.dry_run = true;
    ASSERT_OK_AND_ASSIGN(GcReport dry, Gc(o));
    EXPECT_EQ(dry.walks, 1u);
    EXPECT_EQ(Paths(dry), exact);
    for (const Block& b : blocks) EXPECT_TRUE(fs::exists(root.path() / b.rel)) << "the dry run removed " << b.rel;
    o.dry_run = false;
    ASSERT_OK_AND_ASSIGN(GcReport r, Gc(o));
    EXPECT_EQ(r.walks, 1u);
    EXPECT_EQ(r.candidates_held, blocks.size());
    EXPECT_EQ(Paths(r), exact);
    EXPECT_EQ(r.by_reason["capacity"].files, exact.size());
    for (const Block& b : blocks) EXPECT_EQ(fs::exists(root.path() / b.rel), exact.count(b.rel) == 0) << b.rel;
  }
}

TEST(GcOneWalkTest, EveryRootOfAListTrimsInOneWalk) {
  std::mt19937_64 rng(testing::TestSeed());
  testing::TempDir a, b;
  const std::vector<Block> on_a = PlantTree(a.path(), rng, 120), on_b = PlantTree(b.path(), rng, 80);
  GcOptions o;
  o.root = a.path().string() + "," + b.path().string();
  o.max_bytes = std::min(Total(on_a), Total(on_b)) / 2;
  ASSERT_OK_AND_ASSIGN(GcReport r, Gc(o));
  EXPECT_EQ(r.walks, 1u);
  std::set<std::string> exact;
  for (const auto& [root, blocks] : {std::pair{a.path(), on_a}, std::pair{b.path(), on_b}}) {
    for (const std::string& rel : ExactLru(blocks, *o.max_bytes)) exact.insert((root / rel).string());
  }
  EXPECT_EQ(Paths(r), exact);
}

TEST(GcOneWalkTest, NeedBeyondTheBufferWalksAgainWithinTheHistogramsTolerance) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  testing::TempDir root;
  const std::vector<Block> blocks = PlantTree(root.path(), rng, 300);
  GcOptions o;
  o.root = root.path().string();
  o.max_bytes = Total(blocks) / 2;
  o.candidates_bytes_max = 10 * internal::CandidateBuffer::kEntryBytes;
  ASSERT_OK_AND_ASSIGN(GcReport r, Gc(o));
  EXPECT_EQ(r.walks, 2u);
  EXPECT_EQ(r.candidates_held, 10u) << "the buffer's bound";
  const std::set<std::string> gone = Paths(r);
  ASSERT_GT(r.capacity_cutoff, 0);
  for (const Block& b : blocks) {
    if (gone.count(b.rel) > 0) EXPECT_LE(b.used, r.capacity_cutoff) << b.rel;
    else EXPECT_GT(b.used, r.capacity_cutoff - static_cast<int64_t>(r.capacity_tolerance_s)) << b.rel;
  }
  EXPECT_LE(Total(blocks) - r.bytes_reclaimed, *o.max_bytes);
}

TEST(GcOneWalkTest, ABlockReplacedAfterTheWalkIsLeft) {
  std::mt19937_64 rng(testing::TestSeed());
  testing::TempDir root;
  const std::vector<Block> blocks = PlantTree(root.path(), rng, 40);
  const Block oldest = Oldest(blocks);
  GcOptions o;
  o.root = root.path().string();
  o.max_bytes = Total(blocks) - 1;  // the oldest block alone would do
  bool replaced = false;
  o.stop = [&] {  // asked before the first removal: another writer stores the block anew
    if (!replaced) {
      const fs::path p = root.path() / oldest.rel;
      testing::WriteFileOrDie(p.string() + "_1.tmp", std::string(oldest.bytes, 'n'));
      fs::rename(p.string() + "_1.tmp", p);
      replaced = true;
    }
    return false;
  };
  ASSERT_OK_AND_ASSIGN(GcReport r, Gc(o));
  EXPECT_TRUE(replaced);
  EXPECT_EQ(r.walks, 1u);
  EXPECT_EQ(r.files_reclaimed, 0u) << "only the replaced block was selected";
  EXPECT_EQ(r.files_failed, 0u);
  EXPECT_TRUE(fs::exists(root.path() / oldest.rel));
}

TEST(GcOneWalkTest, ABlockUsedAfterTheWalkIsKept) {
  std::mt19937_64 rng(testing::TestSeed());
  testing::TempDir root;
  const std::vector<Block> blocks = PlantTree(root.path(), rng, 40);
  const Block oldest = Oldest(blocks);
  GcOptions o;
  o.root = root.path().string();
  o.max_bytes = Total(blocks) - 1;
  std::atomic<bool> used{false};
  o.progress = [&](const ScanProgress& p) {  // once the walk has seen every block: a reader loads it (its atime set, L75)
    const timespec times[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
    if (p.files == blocks.size() && !used) used = utimensat(AT_FDCWD, (root.path() / oldest.rel).c_str(), times, 0) == 0;
  };
  ASSERT_OK_AND_ASSIGN(GcReport r, Gc(o));
  EXPECT_TRUE(used);
  EXPECT_EQ(r.walks, 1u);
  EXPECT_EQ(r.files_reclaimed, 0u);
  EXPECT_TRUE(fs::exists(root.path() / oldest.rel));
}

TEST(GcOneWalkTest, StopRemovesNothingMore) {
  std::mt19937_64 rng(testing::TestSeed());
  testing::TempDir root;
  const std::vector<Block> blocks = PlantTree(root.path(), rng, 30);
  GcOptions o;
  o.root = root.path().string();
  o.max_bytes = Total(blocks) / 2;
  int asked = 0;
  o.stop = [&] { return ++asked > 3; };  // SIGTERM, or the collector lease lost, after three removals
  ASSERT_OK_AND_ASSIGN(GcReport r, Gc(o));
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.walks, 1u);
  EXPECT_EQ(r.files_reclaimed, 3u);
  size_t left = 0;
  for (const Block& b : blocks) left += fs::exists(root.path() / b.rel) ? 1 : 0;
  EXPECT_EQ(left, blocks.size() - 3);
}

TEST(GcOneWalkTest, EmptiedShardDirectoriesGoOnlyPastTheGrace) {
  std::mt19937_64 rng(testing::TestSeed());
  for (const bool old_dirs : {false, true}) {
    SCOPED_TRACE(old_dirs ? "directories idle for an hour" : "directories just made");
    testing::TempDir root;
    const std::vector<Block> blocks = PlantTree(root.path(), rng, 30, old_dirs);
    GcOptions o;
    o.root = root.path().string();
    o.max_bytes = 1;
    o.low_water_bytes = 0;
    ASSERT_OK_AND_ASSIGN(GcReport r, Gc(o));
    EXPECT_EQ(r.walks, 1u);
    EXPECT_EQ(r.files_reclaimed, blocks.size());
    for (const Block& b : blocks) {
      EXPECT_EQ(fs::exists(root.path() / fs::path(b.rel).parent_path()), !old_dirs) << b.rel;
    }
    if (old_dirs) EXPECT_GE(r.dirs_removed, blocks.size()) << "each block's <hh>_g0, and its <hhh>";
    else EXPECT_EQ(r.dirs_removed, 0u);
  }
}

TEST(GcOneWalkTest, AnOrphanedNamespaceTakesTheWalksItDid) {
  std::mt19937_64 rng(testing::TestSeed());
  testing::TempDir root;
  const std::vector<Block> blocks = PlantTree(root.path(), rng, 40);
  Plant(root.path(), "old_0123456789a2", Hex64(rng), 4096, std::time(nullptr) - 30 * 86400);
  GcOptions o;
  o.root = root.path().string();
  o.older_than_s = 7 * 86400;
  o.max_bytes = Total(blocks) / 2;
  ASSERT_OK_AND_ASSIGN(GcReport r, Gc(o));
  EXPECT_EQ(r.by_reason["orphaned_namespace"].files, 1u);
  EXPECT_EQ(r.walks, 3u) << "the orphan's walk, then the histogram's";
  EXPECT_LE(Total(blocks) - r.by_reason["capacity"].bytes, *o.max_bytes);
}

}  // namespace
}  // namespace kvtier
