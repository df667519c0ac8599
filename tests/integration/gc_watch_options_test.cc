// Proves the two GcOptions the watch mode drives gc with:
// reclaim_bytes removes least recently used blocks until that many bytes are
// gone, on each root of a list separately, labelled "min_free" beyond what
// max_bytes asks ("capacity"); a count that does not match the roots is
// refused naming the option; and stop, once true, makes gc remove nothing
// more (GcReport::stopped), asked before every removal; the volume's own
// .kvtier directory at the root is no stray (FORMAT.md L120).
//
// Method: blocks are written in the layout (FORMAT.md L2-L8) with distinct
// use times, so the least recently used order is known; gc runs through the
// public API and the tree is compared with what must remain.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "kvtier/ops.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
constexpr uint64_t kRow = 4096;
constexpr const char* kNs = "m_0123456789ab";

// Block i's 64-hex name: i in the last digits, the rest fixed.
std::string Hex(int i) {
  char tail[9];
  std::snprintf(tail, sizeof tail, "%08x", i);
  return std::string(56, 'a') + tail;
}

// n blocks under root, block i last used (n - i) hours ago: block 0 is the oldest.
void MakeBlocks(const fs::path& root, int n, int first = 0) {
  fs::create_directories(root / kNs);
  const std::time_t now = std::time(nullptr);
  for (int i = first; i < first + n; ++i) {
    const std::string h = Hex(i);
    const fs::path dir = root / (std::string(kNs) + "_r0") / h.substr(0, 3) / (h.substr(3, 2) + "_g0");
    fs::create_directories(dir);
    const fs::path file = dir / (h + ".bin");
    std::ofstream(file) << std::string(kRow, 'x');
    const struct timespec t[2] = {{now - 3600 * (first + n - i), 0}, {now - 3600 * (first + n - i), 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, file.c_str(), t, 0), 0);
  }
}

std::set<std::string> Reasons(const GcReport& r) {
  std::set<std::string> out;
  for (const Reclaimed& x : r.reclaimed) out.insert(x.reason);
  return out;
}

bool Has(const fs::path& root, int i) {
  const std::string h = Hex(i);
  return fs::exists(root / (std::string(kNs) + "_r0") / h.substr(0, 3) / (h.substr(3, 2) + "_g0") / (h + ".bin"));
}

TEST(GcWatchOptions, ReclaimBytesRemovesTheLeastRecentlyUsedFirst) {
  TempDir dir;
  MakeBlocks(dir.path(), 10);
  GcOptions o;
  o.root = dir.path().string();
  o.reclaim_bytes = {3 * kRow - 1};  // three blocks reach it
  Result<GcReport> r = Gc(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->bytes_reclaimed, 3 * kRow);
  EXPECT_EQ(Reasons(*r), std::set<std::string>{"min_free"});
  for (int i = 0; i < 10; ++i) EXPECT_EQ(Has(dir.path(), i), i >= 3) << i;
  EXPECT_FALSE(r->stopped);
}

TEST(GcWatchOptions, CapacityFirstThenMinFreeBeyondIt) {
  TempDir dir;
  MakeBlocks(dir.path(), 10);
  GcOptions o;
  o.root = dir.path().string();
  o.max_bytes = 8 * kRow;       // over by two blocks: "capacity"
  o.reclaim_bytes = {5 * kRow};  // three more: "min_free"
  Result<GcReport> r = Gc(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->reclaimed.size(), 5u);
  std::map<std::string, int> by_reason;  // counted: the order of removals is gc's own business
  for (const Reclaimed& x : r->reclaimed) ++by_reason[x.reason];
  EXPECT_EQ(by_reason, (std::map<std::string, int>{{"capacity", 2}, {"min_free", 3}}));
  ASSERT_EQ(r->by_reason.size(), 2u);  // the totals the watch exports
  EXPECT_EQ(r->by_reason.at("capacity").files, 2u);
  EXPECT_EQ(r->by_reason.at("capacity").bytes, 2 * kRow);
  EXPECT_EQ(r->by_reason.at("min_free").files, 3u);
  EXPECT_EQ(r->by_reason.at("min_free").bytes, 3 * kRow);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(Has(dir.path(), i), i >= 5) << i;
}

TEST(GcWatchOptions, ReclaimBytesIsPerRoot) {
  TempDir a, b;
  MakeBlocks(a.path(), 4);
  MakeBlocks(b.path(), 4, 100);
  GcOptions o;
  o.root = a.path().string() + "," + b.path().string();
  o.force = true;  // two unrelated trees, not one sharded namespace
  o.reclaim_bytes = {kRow, 3 * kRow};
  Result<GcReport> r = Gc(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->bytes_reclaimed, 4 * kRow);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Has(a.path(), i), i >= 1) << i;
  for (int i = 100; i < 104; ++i) EXPECT_EQ(Has(b.path(), i), i >= 103) << i;
}

TEST(GcWatchOptions, ReclaimBytesNeedsOneEntryPerRoot) {
  TempDir a, b;
  MakeBlocks(a.path(), 2);
  GcOptions o;
  o.root = a.path().string();
  o.reclaim_bytes = {kRow, kRow};
  Result<GcReport> r = Gc(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("reclaim_bytes"), std::string::npos) << r.status().ToString();
  o.root = a.path().string() + "," + b.path().string();
  o.reclaim_bytes = {kRow};
  EXPECT_EQ(Gc(o).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(a.path(), 0));
}

TEST(GcWatchOptions, StopIsAskedBeforeEveryRemovalAndEndsThem) {
  TempDir dir;
  MakeBlocks(dir.path(), 10);
  std::atomic<int> asked{0};
  GcOptions o;
  o.root = dir.path().string();
  o.max_bytes = 0;                                   // everything is over the bound
  o.stop = [&asked] { return ++asked > 4; };  // four removals, then stop
  Result<GcReport> r = Gc(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->stopped);
  EXPECT_EQ(r->reclaimed.size(), 4u);
  EXPECT_TRUE(r->failed.empty());
  int left = 0;  // which four went is gc's order (a walk's, with a bounded-memory LRU)
  for (int i = 0; i < 10; ++i) left += Has(dir.path(), i) ? 1 : 0;
  EXPECT_EQ(left, 6);
}

// L120: <root>/.kvtier (the collector lease's directory) is neither a stray
// nor a reason to refuse a root that holds nothing else.
TEST(GcWatchOptions, TheVolumesOwnDirectoryIsNoStray) {
  TempDir dir;
  fs::create_directories(dir.path() / ".kvtier");
  std::ofstream(dir.path() / ".kvtier" / "gc.lease") << "{}\n";
  GcOptions o;
  o.root = dir.path().string();
  ASSERT_TRUE(Gc(o).ok());  // a fresh volume: only the lease so far
  MakeBlocks(dir.path(), 2);
  FsckOptions f;
  f.root = dir.path().string();
  Result<FsckReport> r = Fsck(f);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const Finding& x : r->findings) EXPECT_EQ(x.path.find(".kvtier"), std::string::npos) << x.path;
  EXPECT_TRUE(fs::exists(dir.path() / ".kvtier" / "gc.lease"));
}

}  // namespace
}  // namespace kvtier
