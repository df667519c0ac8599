// Proves the operators' tools stay bounded on volumes of any size:
// - memory: the peak RSS of `kvtier du`, `fsck` and `gc --max-bytes` (a child
//   process, its ru_maxrss from wait4) grows by less than 8 MiB from 2*10^4 to
//   10^5 block files (the old gc grew ~1.1 KB per file: ~88 MiB here), so it
//   does not grow with the number of files (gc with a 1 MiB candidate buffer:
//   the default 32 MiB one fills only past ~400k blocks; its bound is proved
//   by gc_onewalk_test), and stays under 64 MiB with the default buffer;
// - LRU within the stated tolerance: on small seeded random trees, gc's
//   capacity selection equals the exact least-recently-used sort except for
//   blocks inside the cut-off's histogram bucket (at most max(1 s, age/64)
//   wide), and frees what the exact sort frees (it stops at the first block
//   that reaches the low water);
// - sparse files: eight 1 TiB files (holes) in a namespace, even when they are
//   all it holds, are size_mismatch findings never read by fsck --verify-data;
//   du and gc count their allocated bytes (none), and all three finish;
// - a hostile tree: one flat <hh>_g<g> directory of 2*10^5 files
//   (blocks, badly named files, stale temp files) costs du, fsck and gc
//   no more peak RSS than one of 2.5*10^4 (less than 8 MiB more; the walk
//   that read directories whole and listed every finding took 72, 344 and
//   112 MiB more): directories are read
//   in batches and findings lists stop at kFindingsListMax (10^4) per kind,
//   while fsck's totals (--json by_kind, exit 4) still count every one;
// - empty directories: gc removes the shard directories its capacity pass
//   emptied (an SGLang namespace's as a vLLM one's), and writers storing into
//   those very directories while gc prunes them never lose a store: every
//   store is ok or skipped_exists, and every block gc did not report removing
//   reads back.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "kvtier/fs_tier.h"
#include "kvtier/ops.h"
#include "support/test_json.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;

// A block hash; with `fanout` set, only that many shard directories of each
// level are used (fewer directories make big trees quicker to build).
std::string Hex64(std::mt19937_64& rng, int fanout = 16) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string h(64, '0');
  for (size_t i = 0; i < h.size(); ++i) h[i] = kDigits[rng() % (i >= 1 && i <= 4 ? fanout : 16)];
  return h;
}

// Plants block files in vLLM's layout under root/<ns>_r0 (FORMAT.md L6-L8).
class Planter {
 public:
  Planter(fs::path root, std::string ns) : root_(std::move(root)), ns_(std::move(ns)) {
    fs::create_directories(root_ / ns_);
  }
  // A block of `size` bytes (data, or a hole of that size when sparse) used at `used`.
  std::string Block(const std::string& hex, uint64_t size, int64_t used, bool sparse = false) {
    const std::string dir = ns_ + "_r0/" + hex.substr(0, 3) + "/" + hex.substr(3, 2) + "_g0";
    if (made_.insert(dir).second) fs::create_directories(root_ / dir);
    const std::string rel = dir + "/" + hex + ".bin";
    const int fd = open((root_ / rel).c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    EXPECT_GE(fd, 0) << rel;
    if (sparse) {
      EXPECT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
    } else {
      const std::string data(size, 'k');
      EXPECT_EQ(write(fd, data.data(), data.size()), static_cast<ssize_t>(size));
    }
    const timespec times[2] = {{used, 0}, {used, 0}};
    EXPECT_EQ(futimens(fd, times), 0);
    close(fd);
    return rel;
  }
  void Config(const std::string& engine) {
    testing::WriteFileOrDie(root_ / ns_ / "config.json", "{\"inference_engine\": \"" + engine + "\"}");
  }

 private:
  fs::path root_;
  std::string ns_;
  std::set<std::string> made_;
};

struct Peak {
  int exit_code = -1;
  long rss_kb = 0;  // ru_maxrss of the command and the children it waited for
};

// Runs the CLI with stdout to `out` (/dev/null by default); its peak RSS from wait4.
Peak RunForPeak(std::vector<std::string> args, const std::string& out = "/dev/null") {
  args.insert(args.begin(), testing::CliPath().string());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(null, STDOUT_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  Peak p;
  int status = 0;
  struct rusage ru {};
  if (wait4(pid, &status, 0, &ru) == pid) {
    p.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    p.rss_kb = ru.ru_maxrss;
  }
  return p;
}

// A directory on tmpfs (/dev/shm) where there is one: 10^5 files are built
// and removed there in seconds, where a busy disk's journal takes minutes.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = "/dev/shm/kvtier-test-XXXXXX";
    if (fs::is_directory("/dev/shm") && mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  fs::path path() const { return path_.empty() ? fallback_.path() : path_; }

 private:
  fs::path path_;
  testing::TempDir fallback_;
};

std::map<std::string, long> PeaksFor(size_t n, uint64_t seed) {
  ScratchDir root;
  std::mt19937_64 rng(seed);
  const int64_t now = std::time(nullptr);
  for (int i = 0; i < 2; ++i) {
    Planter p(root.path(), std::string("m") + std::to_string(i) + "_0123456789a" + std::to_string(i));
    for (size_t k = 0; k < n / 2; ++k) p.Block(Hex64(rng, 4), 16, now - static_cast<int64_t>(rng() % 86400));
  }
  std::map<std::string, long> peaks;
  const std::string r = root.path().string();
  const std::string half = std::to_string(n * 16 / 2);
  for (const auto& [name, args] : std::map<std::string, std::vector<std::string>>{
           {"du", {"du", r, "--json"}},
           {"fsck", {"fsck", r, "--json"}},
           {"gc --dry-run --max-bytes", {"gc", r, "--json", "--dry-run", "--max-bytes", half, "--candidates-max", "1M"}},
           {"gc --max-bytes", {"gc", r, "--json", "--max-bytes", half, "--list-max", "100", "--candidates-max", "1M",
                               "--ignore-lease"}},  // no other collector here: no lease settle to wait
           {"gc --max-bytes (32 MiB buffer)", {"gc", r, "--json", "--max-bytes", half, "--list-max", "100", "--ignore-lease"}}}) {
    const Peak p = RunForPeak(args);
    EXPECT_LT(p.exit_code, 8) << name;  // fsck: 4 (no config.json)
    peaks[name] = p.rss_kb;
  }
  return peaks;
}

TEST(OpsBoundedTest, PeakMemoryDoesNotGrowWithTheNumberOfFiles) {
  const uint64_t seed = testing::TestSeed();
  const auto small = PeaksFor(20000, seed);
  const auto large = PeaksFor(100000, seed);
  for (const auto& [name, kb] : large) {
    std::printf("%-26s peak RSS %6ld KiB at 2*10^4 files, %6ld KiB at 10^5\n", name.c_str(), small.at(name), kb);
    // The dry run lists up to list_max (10^4) files in either tree: bounded too.
    if (name.find("32 MiB") == std::string::npos) {
      EXPECT_LT(kb - small.at(name), 8 * 1024) << name << ": memory grows with the number of files";
    }
    EXPECT_LT(kb, 64 * 1024) << name;
  }
}

// What PlantFlat put in the one flat shard directory.
struct Flat {
  size_t blocks = 0, bad_names = 0, tmps = 0;
};

// n files in one <hhh>/<hh>_g0 directory of namespace m0 (a flat directory,
// as a buggy writer or an attacker can make): a tenth well-named blocks of
// that shard, the rest half badly named files, half temp files older than
// the default grace (stale_tmp findings).
Flat PlantFlat(const fs::path& root, size_t n, std::mt19937_64& rng) {
  const std::string ns = "m0_0123456789a0";
  const fs::path dir = root / (ns + "_r0") / "abc" / "de_g0";
  fs::create_directories(dir);
  fs::create_directories(root / ns);
  testing::WriteFileOrDie(root / ns / "config.json", "{}");
  const int64_t old = std::time(nullptr) - 7200;
  const timespec times[2] = {{old, 0}, {old, 0}};
  Flat f;
  for (size_t i = 0; i < n; ++i) {
    const std::string hex = "abcde" + Hex64(rng).substr(5);
    std::string name;
    if (i % 10 == 0) name = hex + ".bin", ++f.blocks;
    else if (i % 2 == 0) name = "junk_" + std::to_string(i), ++f.bad_names;
    else name = hex + ".bin_" + std::to_string(i) + ".tmp", ++f.tmps;
    const int fd = open((dir / name).c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    EXPECT_GE(fd, 0) << name;
    EXPECT_EQ(write(fd, "0123456789abcdef", 16), 16);
    EXPECT_EQ(futimens(fd, times), 0);
    close(fd);
  }
  return f;
}

struct HostileRun {
  Flat planted;
  std::map<std::string, long> peaks;
};

// Peak RSS of du, fsck and gc --dry-run over a tree with one flat directory
// of n files; fsck's JSON report goes to `json`, read later: a child's
// ru_maxrss includes what its parent held when it forked.
HostileRun HostilePeaks(size_t n, uint64_t seed, const fs::path& json) {
  ScratchDir root;
  std::mt19937_64 rng(seed);
  HostileRun run{PlantFlat(root.path(), n, rng), {}};
  const std::string r = root.path().string();
  const Peak fsck = RunForPeak({"fsck", r, "--json"}, json.string());
  EXPECT_EQ(fsck.exit_code, 4) << "problems left";
  const Peak du = RunForPeak({"du", r, "--json"});
  EXPECT_EQ(du.exit_code, 0);
  const Peak gc = RunForPeak({"gc", r, "--json", "--dry-run", "--max-bytes", std::to_string(run.planted.blocks * 8)});
  EXPECT_EQ(gc.exit_code, 0);
  run.peaks = {{"fsck", fsck.rss_kb}, {"du", du.rss_kb}, {"gc --dry-run --max-bytes", gc.rss_kb}};
  return run;
}

// fsck counted every planted finding, and listed at most the cap of each kind.
void CheckFsckTotals(const fs::path& json, const Flat& planted) {
  const nlohmann::json report = testing::ReadJsonOrDie(json);
  const nlohmann::json& by_kind = report["summary"]["by_kind"];
  EXPECT_EQ(by_kind.value("bad_name", uint64_t{0}), planted.bad_names) << "every finding counted";
  EXPECT_EQ(by_kind.value("stale_tmp", uint64_t{0}), planted.tmps);
  EXPECT_EQ(report["summary"]["blocks_checked"].get<uint64_t>(), planted.blocks);
  std::map<std::string, size_t> listed;
  for (const nlohmann::json& f : report["findings"]) ++listed[f["kind"].get<std::string>()];
  for (const auto& [kind, planted_n] : std::map<std::string, size_t>{{"bad_name", planted.bad_names}, {"stale_tmp", planted.tmps}}) {
    const size_t unlisted = report["summary"]["unlisted"].value(kind, size_t{0});
    EXPECT_EQ(listed[kind], std::min<size_t>(planted_n, 10000)) << kind << ": listed up to the cap";
    EXPECT_EQ(listed[kind] + unlisted, planted_n) << kind << ": the rest counted as unlisted";
  }
}

TEST(OpsBoundedTest, PeakMemoryDoesNotGrowWithAFlatHostileDirectory) {
  const uint64_t seed = testing::TestSeed();
  testing::TempDir out;
  // Both trees hold more than 10^4 bad names and temp files: fsck lists as
  // many in either, so what differs is what grows with the directory.
  const HostileRun small = HostilePeaks(25000, seed, out.path() / "small.json");
  const HostileRun large = HostilePeaks(200000, seed, out.path() / "large.json");
  for (const auto& [name, kb] : large.peaks) {
    std::printf("%-26s peak RSS %6ld KiB at 2.5*10^4 files in one directory, %6ld KiB at 2*10^5\n", name.c_str(),
                small.peaks.at(name), kb);
    EXPECT_LT(kb - small.peaks.at(name), 8 * 1024) << name << ": memory grows with a directory's size";
  }
  SCOPED_TRACE("seed " + std::to_string(seed));
  CheckFsckTotals(out.path() / "small.json", small.planted);
  CheckFsckTotals(out.path() / "large.json", large.planted);
}

struct Block {
  std::string rel;
  uint64_t bytes;
  int64_t used;
};

// One random tree, gc'd by capacity, against the exact LRU sort.
void CompareWithExactLru(std::mt19937_64& rng) {
  ScratchDir root;
  const int64_t now = std::time(nullptr);
  std::vector<Block> blocks;
  const uint64_t rows[2] = {4096, 8192};
  for (int i = 0; i < 2; ++i) {
    Planter p(root.path(), std::string("m") + std::to_string(i) + "_0123456789a" + std::to_string(i));
    const size_t n = 50 + rng() % 250;
    for (size_t k = 0; k < n; ++k) {
      // Ages from seconds to ~100 days, log-uniform, some sharing a second.
      const int64_t age = static_cast<int64_t>(std::exp2(static_cast<double>(rng() % 2300) / 100.0));
      blocks.push_back({p.Block(Hex64(rng), rows[i], now - age), rows[i], now - age});
    }
  }
  uint64_t total = 0;
  for (const Block& b : blocks) total += b.bytes;
  GcOptions o;
  o.root = root.path().string();
  o.max_bytes = total * (30 + rng() % 60) / 100;
  o.low_water_bytes = *o.max_bytes * (50 + rng() % 51) / 100;
  o.jobs = 1 + static_cast<int>(rng() % 4);
  SCOPED_TRACE("blocks " + std::to_string(blocks.size()) + " total " + std::to_string(total) + " max " +
               std::to_string(*o.max_bytes) + " low " + std::to_string(*o.low_water_bytes) + " jobs " + std::to_string(o.jobs));
  ASSERT_OK_AND_ASSIGN(GcReport r, Gc(o));
  std::set<std::string> gone;
  for (const Reclaimed& x : r.reclaimed) gone.insert(x.path);
  ASSERT_EQ(r.files_reclaimed, gone.size());
  // The exact sort: oldest first until the total is at the low water.
  std::vector<Block> order = blocks;
  std::stable_sort(order.begin(), order.end(), [](const Block& a, const Block& b) { return a.used < b.used; });
  uint64_t left = total, exact_freed = 0;
  std::set<std::string> exact;
  for (const Block& b : order) {
    if (left <= *o.low_water_bytes) break;
    exact.insert(b.rel), left -= b.bytes, exact_freed += b.bytes;
  }
  const int64_t cutoff = r.capacity_cutoff;
  const auto tolerance = static_cast<int64_t>(r.capacity_tolerance_s);
  ASSERT_GT(cutoff, 0) << "the bound was over: a capacity pass ran";
  EXPECT_LE(tolerance, std::max<int64_t>(1, (now + 2 - cutoff) / 64)) << "the stated tolerance";
  for (const Block& b : blocks) {
    const bool removed = gone.count(b.rel) > 0;
    EXPECT_EQ(removed, !fs::exists(root.path() / b.rel)) << b.rel;
    if (removed) {
      EXPECT_LE(b.used, cutoff) << b.rel << " removed, used after the cut-off";
    } else {
      EXPECT_GT(b.used, cutoff - tolerance) << b.rel << " kept, used before the cut-off's bucket";
    }
    if (removed != (exact.count(b.rel) > 0)) {
      EXPECT_GT(b.used, cutoff - tolerance) << b.rel << ": differs from exact LRU outside the boundary bucket";
    }
  }
  // What is freed: at least down to the low water, never a block more than needed.
  EXPECT_LE(total - r.bytes_reclaimed, *o.low_water_bytes);
  EXPECT_GT(total - r.bytes_reclaimed + 8192, *o.low_water_bytes);
  EXPECT_LE(r.bytes_reclaimed, exact_freed + 8192 - 4096);
}

TEST(OpsBoundedTest, CapacitySelectionIsExactLruWithinTheBoundaryBucket) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 8; ++trial) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " trial " + std::to_string(trial));
    CompareWithExactLru(rng);
  }
}

TEST(OpsBoundedTest, SparseTerabyteFilesAreNeverRead) {
  testing::TempDir root;
  std::mt19937_64 rng(7);
  const int64_t now = std::time(nullptr);
  constexpr uint64_t kTiB = uint64_t{1} << 40;
  // All of one namespace's blocks are 1 TiB holes: even its "most common size" is wrong.
  Planter hostile(root.path(), "m0_0123456789a0");
  hostile.Config("vllm");
  std::set<std::string> sparse;
  for (int i = 0; i < 8; ++i) sparse.insert(hostile.Block(Hex64(rng), kTiB, now - 10, /*sparse=*/true));
  // Another namespace has real rows too.
  Planter mixed(root.path(), "m1_0123456789a1");
  mixed.Config("sglang");
  for (int i = 0; i < 3; ++i) mixed.Block(Hex64(rng), 8192, now - 1000);
  for (int i = 0; i < 8; ++i) sparse.insert(mixed.Block(Hex64(rng), kTiB, now - 10, /*sparse=*/true));
  FsckOptions f;
  f.root = root.path().string();
  f.verify_data = true;
  ASSERT_OK_AND_ASSIGN(FsckReport fr, Fsck(f));
  EXPECT_EQ(fr.blocks_checked, 19u);
  EXPECT_EQ(fr.blocks_verified, 3u) << "only the real rows are read";
  std::set<std::string> found;
  for (const Finding& x : fr.findings) {
    if (x.rule == "L79") continue;  // the planted config.json files are not vLLM's
    EXPECT_EQ(FindingKindName(x.kind), "size_mismatch") << x.path;
    EXPECT_NE(x.detail.find("not read"), std::string::npos) << x.detail;
    found.insert(x.path);
  }
  EXPECT_EQ(found, sparse);
  ScanOptions d;
  d.root = root.path().string();
  ASSERT_OK_AND_ASSIGN(DuReport du, Du(d));
  ASSERT_EQ(du.namespaces.size(), 2u);
  EXPECT_EQ(du.namespaces[0].blocks, 8u);
  EXPECT_EQ(du.namespaces[0].bytes, 0u) << "holes hold nothing";
  EXPECT_EQ(du.namespaces[1].bytes, 3 * 8192u);
  GcOptions g;
  g.root = root.path().string();
  g.max_bytes = 2 * 8192;
  g.low_water_bytes = 8192;
  ASSERT_OK_AND_ASSIGN(GcReport gr, Gc(g));
  EXPECT_EQ(gr.bytes_reclaimed, 2 * 8192u) << "the bound counts allocated bytes: two real rows go";
  for (const std::string& s : sparse) EXPECT_TRUE(fs::exists(root.path() / s)) << "a long block is not corrupt (L66)";
}

std::vector<std::string> EmptyDirsUnder(const fs::path& dir) {
  std::vector<std::string> out;
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator(); ++it) {
    if (it->is_directory() && !it->is_symlink() && fs::is_empty(it->path())) out.push_back(it->path().string());
  }
  return out;
}

void AgeDirs(const fs::path& block_dir, int64_t when) {
  const timespec times[2] = {{when, 0}, {when, 0}};
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(block_dir, ec); it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (it->is_directory(ec)) (void)utimensat(AT_FDCWD, it->path().c_str(), times, AT_SYMLINK_NOFOLLOW);
  }
}

TEST(OpsBoundedTest, CapacityRemovalLeavesNoEmptyShardDirectoriesOfAnyEngine) {
  testing::TempDir root;
  std::mt19937_64 rng(11);
  const int64_t old = std::time(nullptr) - 86400;
  Planter vllm(root.path(), "v_0123456789a0"), sglang(root.path(), "s_0123456789a1");
  vllm.Config("vllm");
  sglang.Config("sglang");
  for (int i = 0; i < 40; ++i) vllm.Block(Hex64(rng), 4096, old), sglang.Block(Hex64(rng), 4096, old);
  for (const char* ns : {"v_0123456789a0_r0", "s_0123456789a1_r0"}) AgeDirs(root.path() / ns, old);
  GcOptions o;
  o.root = root.path().string();
  o.max_bytes = 1;
  o.low_water_bytes = 0;
  ASSERT_OK_AND_ASSIGN(GcReport r, Gc(o));
  EXPECT_EQ(r.files_reclaimed, 80u);
  EXPECT_GT(r.dirs_removed, 80u) << "each block's <hh>_g0 and most <hhh>";
  for (const char* ns : {"v_0123456789a0_r0", "s_0123456789a1_r0"}) {
    EXPECT_EQ(EmptyDirsUnder(root.path() / ns), std::vector<std::string>{}) << ns;
  }
  // A fresh empty shard directory (a writer about to create its file) stays.
  fs::create_directories(root.path() / "v_0123456789a0_r0/abc/de_g0");
  ASSERT_OK_AND_ASSIGN(GcReport again, Gc(o));
  EXPECT_TRUE(fs::exists(root.path() / "v_0123456789a0_r0/abc/de_g0")) << "younger than dir_grace_s";
  // Once idle for the grace, a gc with nothing else to do removes it, and its <hhh> parent.
  AgeDirs(root.path() / "v_0123456789a0_r0", old);
  ASSERT_OK_AND_ASSIGN(GcReport idle, Gc(o));
  EXPECT_EQ(idle.dirs_removed, 2u);
  EXPECT_FALSE(fs::exists(root.path() / "v_0123456789a0_r0/abc"));
  EXPECT_TRUE(fs::exists(root.path() / "v_0123456789a0_r0")) << "a block directory of a live namespace stays";
}

OffloadKey SameShardKey(uint64_t i) {
  std::vector<uint8_t> b(32, 0x11);
  b[0] = 0xab, b[1] = 0xc0 | static_cast<uint8_t>(i % 2);  // two <hh>_g0 directories under one <hhh>
  for (int k = 0; k < 8; ++k) b[8 + k] = static_cast<uint8_t>(i >> (8 * k));
  return {BlockHash::FromBytes(b).value(), 0};
}

// Waits (up to 10 s) until `n` more stores are acknowledged: stores after
// gc's last pass, into the directories it pruned. With max_bytes 1 a pass
// removes every block it saw, so the last pass may leave nothing to load.
void WaitForMoreAcks(std::mutex& mu, const std::vector<OffloadKey>& acked, size_t n) {
  const auto count = [&] {
    std::lock_guard lock(mu);
    return acked.size();
  };
  const size_t target = count() + n;
  for (int i = 0; i < 10000 && count() < target; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

TEST(OpsBoundedTest, WritersRacingShardDirectoryRemovalNeverLoseAStore) {
  testing::TempDir root;
  constexpr uint64_t kRow = 4096;
  FsTierOpenOptions to;
  to.tier.root_dir = root.path().string();
  to.ns = testing::Spec("org/race");
  to.row_bytes = kRow;
  to.tier.n_read_threads = to.tier.n_write_threads = 2;
  // Two tiers: two hosts writing the same namespace (each polls its own jobs).
  std::unique_ptr<FsTier> tiers[2] = {FsTier::Open(to).value(), FsTier::Open(to).value()};
  FsTier* tier = tiers[0].get();
  const fs::path block_dir = fs::path(tier->BlockPath(SameShardKey(0))).parent_path().parent_path().parent_path();
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> next{0}, bad{0};
  std::mutex mu;
  std::vector<OffloadKey> acked;
  auto writer = [&](FsTier* own) {
    std::vector<uint8_t> row(kRow, 0x3c);
    while (!stop) {
      const std::vector<OffloadKey> keys = {SameShardKey(next++)};
      const std::vector<std::span<const uint8_t>> rows = {row};
      const uint64_t id = own->SubmitStore(keys, rows).value();
      const JobResult done = testing::WaitForJob(own, id);
      const KeyOutcome out = done.keys[0].outcome;
      if (out != KeyOutcome::kOk && out != KeyOutcome::kSkippedExists) {
        ++bad;
        ADD_FAILURE() << "store lost: " << KeyOutcomeName(out) << " " << done.keys[0].status.ToString();
      }
      std::lock_guard lock(mu);
      acked.push_back(keys[0]);
    }
  };
  std::vector<std::thread> writers;
  for (auto& t : tiers) writers.emplace_back(writer, t.get());
  GcOptions o;
  o.root = root.path().string();
  o.max_bytes = 1;
  o.low_water_bytes = 0;
  o.list_max = UINT64_MAX;
  std::set<std::string> reclaimed;
  uint64_t dirs_removed = 0;
  for (int round = 0; round < 300 && dirs_removed < 100; ++round) {
    AgeDirs(block_dir, std::time(nullptr) - 3600);  // the directories look idle: gc may prune them now
    ASSERT_OK_AND_ASSIGN(GcReport r, Gc(o));
    for (const Reclaimed& x : r.reclaimed) reclaimed.insert(x.path);
    dirs_removed += r.dirs_removed;
  }
  WaitForMoreAcks(mu, acked, 4);
  stop = true;
  for (auto& t : writers) t.join();
  EXPECT_GT(dirs_removed, 0u) << "the race was never run";
  EXPECT_EQ(bad.load(), 0u);
  std::printf("%zu stores, %llu shard directories removed under them, %zu blocks evicted\n", acked.size(),
              static_cast<unsigned long long>(dirs_removed), reclaimed.size());
  std::set<std::string> acked_paths;
  for (const OffloadKey& k : acked) acked_paths.insert(fs::relative(tier->BlockPath(k), root.path()).string());
  for (const std::string& x : reclaimed) EXPECT_EQ(acked_paths.count(x), 1u) << "gc removed what no store wrote: " << x;
  std::vector<OffloadKey> kept;
  for (const OffloadKey& k : acked) {
    if (reclaimed.count(fs::relative(tier->BlockPath(k), root.path()).string()) == 0) kept.push_back(k);
  }
  ASSERT_FALSE(kept.empty());
  std::vector<std::vector<uint8_t>> back(kept.size(), std::vector<uint8_t>(kRow));
  std::vector<std::span<uint8_t>> spans(back.begin(), back.end());
  const uint64_t id = tier->SubmitLoad(kept, spans).value();
  const JobResult done = testing::WaitForJob(tier, id);
  EXPECT_EQ(done.OkPrefix(), kept.size()) << "a stored block gc did not remove is gone";
}

}  // namespace
}  // namespace kvtier
