// Proves that the fs tier names its blocks in open shard directories instead
// of walking paths (src/fs/shard_dirs.h, FORMAT.md L145-L147):
//  * counted by kvtier_faultfs's per-op counters (every call reaches the
//    daemon: no entry or attribute caching), once per backend, a store into
//    a shard directory the tier holds open, and a load and a lookup of a
//    block there, stay under fixed bounds that a walk from root_dir (three
//    more LOOKUPs for each path a request names) exceeds; the counts of every
//    case (fresh shard, present shard, held shard, hits and misses) are
//    printed for the record;
//  * a held shard directory that gc removes (and another writer makes again)
//    between two stores costs nothing but a fresh open: the second block is
//    stored, reachable at its path and loads back whole;
//  * a shard directory renamed away under the tier is followed for at most
//    the cache's time to live: a store after it lands at the block's path,
//    in a directory made there again, and loads back whole;
//  * a symlink planted as a shard directory, before or while the tier holds
//    that directory, is never written through;
//  * the held directories' fds stay within the cache's bound and are all
//    closed when the tier closes;
//  * in a fresh tree, once a store has found a first-level directory
//    ("<hhh>") missing, later stores into new ones make it without looking
//    it up first (lookups taking the namespace directory's lock between the
//    mkdirs the kernel serializes there), and blocks land whole at their
//    paths; a new instance over that tree opens first, as it always did;
//  * with durability "full", a store fsyncs its shard directory and the
//    parent of each directory it made, and not the parent of one it found
//    made already (mkdir's EEXIST), made first or not (CRASH_INVARIANTS.md
//    step 9).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "fs/shard_dirs.h"
#include "kvtier/fs_tier.h"
#include "kvtier/layout.h"
#include "support/faultfs_mount.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using testing::FaultFs;

constexpr uint64_t kRow = 16384;

NamespaceSpec Spec() {
  NamespaceSpec spec;
  spec.model_name = "kvtier-test/dirfd";
  spec.kv_cache_groups.push_back({16, {"l0", "l1"}});
  return spec;
}

// Keys of one shard directory ("<hhh>/<hh>_g0": the first 2.5 bytes of the
// hash are `shard`'s), told apart by `i`.
OffloadKey Key(uint32_t shard, uint64_t i) {
  std::vector<uint8_t> bytes(32);
  bytes[0] = static_cast<uint8_t>(shard >> 12);
  bytes[1] = static_cast<uint8_t>(shard >> 4);
  bytes[2] = static_cast<uint8_t>((shard & 0xf) << 4);
  for (int b = 0; b < 8; ++b) bytes[8 + b] = static_cast<uint8_t>(i >> (8 * b));
  return {BlockHash::FromBytes(bytes).value(), 0};
}

// Calls per op between two "counts" snapshots, and their sum.
struct Delta {
  std::map<std::string, uint64_t> ops;
  uint64_t total = 0;
  uint64_t Of(const std::string& op) const { return ops.count(op) != 0 ? ops.at(op) : 0; }
  std::string Text() const {
    std::ostringstream out;
    out << total << " (";
    for (const auto& [op, n] : ops) out << op << "=" << n << " ";
    out << ")";
    return out.str();
  }
};
std::map<std::string, uint64_t> ParseCounts(const std::string& line) {
  std::map<std::string, uint64_t> counts;
  std::istringstream in(line);
  std::string word;
  while (in >> word) {
    const size_t eq = word.find('=');
    counts[word.substr(0, eq)] = std::stoull(word.substr(eq + 1));
  }
  return counts;
}

class TierFixture {
 public:
  void Open(const std::string& root, IoBackendKind backend, Durability durability = Durability::kNone) {
    FsTierOpenOptions o;
    o.tier.root_dir = root;
    o.tier.io_backend = backend;
    o.tier.durability = durability;
    o.tier.n_read_threads = 2;
    o.tier.n_write_threads = 2;
    o.ns = Spec();
    o.row_bytes = kRow;
    auto tier = FsTier::Open(o);
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    tier_ = std::move(tier).value();
    ns_ = Namespace::Create(Spec()).value();
    // The start-up scan of the namespace is not a per-block cost: the counts
    // are taken once it is over (bounded; a count taken early only prints more).
    for (int i = 0; i < 500 && tier_->Metrics().namespace_scan_complete == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  void Close() { tier_.reset(); }
  JobResult Store(const OffloadKey& key, const testing::AlignedRows& rows) {
    const std::vector<OffloadKey> keys{key};
    return Wait(tier_->SubmitStore(keys, rows.Const()));
  }
  JobResult Load(const OffloadKey& key, const testing::AlignedRows& rows) {
    const std::vector<OffloadKey> keys{key};
    return Wait(tier_->SubmitLoad(keys, rows.Mut()));
  }
  JobResult Lookup(const OffloadKey& key) {
    const std::vector<OffloadKey> keys{key};
    return Wait(tier_->SubmitLookup(keys));
  }
  JobResult Wait(Result<uint64_t> id) {
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.ok() ? testing::WaitForJob(tier_.get(), *id) : JobResult{};
  }
  std::string Rel(const OffloadKey& key) const { return ns_->BlockRelPath(key); }

  std::unique_ptr<FsTier> tier_;
  std::optional<Namespace> ns_;
};

KeyOutcome Outcome(const JobResult& r) {
  return r.keys.empty() ? KeyOutcome::kError : r.keys[0].outcome;
}

class DirFdCallsTest : public ::testing::TestWithParam<IoBackendKind>, public TierFixture {
 protected:
  void SetUp() override {
    if (const std::string why = FaultFs::Unavailable(); !why.empty()) GTEST_SKIP() << why;
    ASSERT_OK_AND_ASSIGN(
        mount_, FaultFs::Mount((dir_.path() / "backing").string(), (dir_.path() / "mnt").string()));
    Open(mount_->mountpoint(), GetParam());
  }
  void TearDown() override {
    Close();
    mount_.reset();
  }
  std::map<std::string, uint64_t> Snapshot() {
    Result<std::string> line = mount_->Counts();
    EXPECT_TRUE(line.ok()) << line.status().ToString();
    return line.ok() ? ParseCounts(*line) : std::map<std::string, uint64_t>{};
  }
  // The calls the mount saw while `step` ran (the tier is idle around it).
  template <class F>
  Delta Count(const char* what, F step) {
    const auto before = Snapshot();
    step();
    const auto after = Snapshot();
    Delta d;
    for (const auto& [op, n] : after) {
      const uint64_t was = before.count(op) ? before.at(op) : 0;
      if (n > was) d.ops[op] = n - was, d.total += n - was;
    }
    std::printf("calls per block, %s: %s\n", what, d.Text().c_str());
    return d;
  }

  testing::TempDir dir_;
  std::unique_ptr<FaultFs> mount_;
};

// The bounds: what a held shard directory costs on this mount (observed:
// store 11, load 7, lookup 1 or 2), with a little room; naming the root-relative
// path instead adds 3 LOOKUPs per path-naming request (store +9, load +3,
// lookup +3), which each bound catches.
constexpr uint64_t kHeldStoreMax = 12;
constexpr uint64_t kHeldLoadMax = 8;
constexpr uint64_t kHeldLookupMax = 2;

TEST_P(DirFdCallsTest, HeldShardDirectoryKeepsCallsPerBlockBounded) {
  testing::AlignedRows rows(1, kRow, 7), back(1, kRow, 8);
  const OffloadKey fresh = Key(0xabcde, 1), held = Key(0xabcde, 2), missing = Key(0xabcde, 3);
  Count("store, fresh shard", [&] { EXPECT_EQ(Outcome(Store(fresh, rows)), KeyOutcome::kOk); });
  const Delta store =
      Count("store, held shard", [&] { EXPECT_EQ(Outcome(Store(held, rows)), KeyOutcome::kOk); });
  const Delta hit =
      Count("lookup hit, held shard", [&] { EXPECT_EQ(Outcome(Lookup(held)), KeyOutcome::kOk); });
  const Delta miss = Count("lookup miss, held shard",
                           [&] { EXPECT_EQ(Outcome(Lookup(missing)), KeyOutcome::kMiss); });
  const Delta load =
      Count("load hit, held shard", [&] { EXPECT_EQ(Outcome(Load(held, back)), KeyOutcome::kOk); });
  const Delta load_miss = Count(
      "load miss, held shard", [&] { EXPECT_EQ(Outcome(Load(missing, back)), KeyOutcome::kMiss); });
  EXPECT_EQ(std::memcmp(back.data, rows.data, kRow), 0);
  EXPECT_LE(store.total, kHeldStoreMax) << store.Text();
  EXPECT_LE(hit.total, kHeldLookupMax) << hit.Text();
  EXPECT_LE(miss.total, kHeldLookupMax) << miss.Text();
  EXPECT_LE(load.total, kHeldLoadMax) << load.Text();
  EXPECT_LE(load_miss.total, kHeldLookupMax) << load_miss.Text();

  // For the record: a tier that holds no directory yet (a fresh instance).
  Close();
  Open(mount_->mountpoint(), GetParam());
  Count("lookup hit, path", [&] { EXPECT_EQ(Outcome(Lookup(held)), KeyOutcome::kOk); });
  Count("lookup miss, path", [&] { EXPECT_EQ(Outcome(Lookup(missing)), KeyOutcome::kMiss); });
  Count("load hit, path", [&] { EXPECT_EQ(Outcome(Load(fresh, back)), KeyOutcome::kOk); });
  Count("load miss, path", [&] { EXPECT_EQ(Outcome(Load(missing, back)), KeyOutcome::kMiss); });
  Count("store, present shard", [&] { EXPECT_EQ(Outcome(Store(missing, rows)), KeyOutcome::kOk); });
  Count("store, existing block",
        [&] { EXPECT_EQ(Outcome(Store(fresh, rows)), KeyOutcome::kSkippedExists); });
}

// The bound: a store into a new <hhh> on this mount, made first (observed:
// 13 lookups, the kernel's and libfuse's own after each mkdir and create
// among them); looking up the shard directory's path first, then its
// parent's, costs 4 more (two of them of the missing <hhh>), which it catches.
constexpr uint64_t kFreshParentLookupsMax = 13;

TEST_P(DirFdCallsTest, FreshTreeStoresMakeFirstLevelDirectoriesFirst) {
  testing::AlignedRows rows(1, kRow, 11), back(1, kRow, 12);
  // The first store into an unknown <hhh> finds it missing: a fresh tree.
  Count("store, new <hhh> (first)", [&] { EXPECT_EQ(Outcome(Store(Key(0x10001, 1), rows)), KeyOutcome::kOk); });
  for (uint32_t i = 1; i <= 3; ++i) {
    const OffloadKey key = Key((0x100 + i) << 8 | 0x22, i);  // a <hhh> of its own
    const Delta d = Count("store, new <hhh>", [&] { EXPECT_EQ(Outcome(Store(key, rows)), KeyOutcome::kOk); });
    EXPECT_LE(d.Of("lookup"), kFreshParentLookupsMax) << d.Text();
    EXPECT_EQ(d.Of("mkdir"), 2u) << d.Text();
    ASSERT_EQ(Outcome(Load(key, back)), KeyOutcome::kOk);
    EXPECT_EQ(std::memcmp(back.data, rows.data, kRow), 0);
    EXPECT_TRUE(fs::is_regular_file(fs::path(mount_->mountpoint()) / Rel(key)));
  }
  // A new instance knows no <hhh>: it opens first (for the record).
  Close();
  Open(mount_->mountpoint(), GetParam());
  Count("store, present <hhh>, new shard, new instance",
        [&] { EXPECT_EQ(Outcome(Store(Key(0x10101, 2), rows)), KeyOutcome::kOk); });
}

// Each directory fsync opens the directory (O_RDONLY: an OPENDIR, counted
// under "readdir" by this mount), and a store opens no other directory (its
// shard directories are O_PATH opens, which the daemon never sees).
// Durability full: an acknowledged block must survive a power loss, so a
// store fsyncs the parent of each directory on its path whose entry this
// tier has not yet seen synced, whoever made it (a maker that found its
// write fail, an engine, a durability-none instance may never sync it):
// the first store into a directory syncs its parents, later ones only the
// directory (1 fsync per store in steady state).
TEST_P(DirFdCallsTest, FullDurabilitySyncsParentsOfEntriesNotYetSynced) {
  Close();
  Open(mount_->mountpoint(), GetParam(), Durability::kFull);
  testing::AlignedRows rows(1, kRow, 13), back(1, kRow, 14);
  auto syncs = [&](const char* what, const OffloadKey& key) {
    const Delta d = Count(what, [&] { EXPECT_EQ(Outcome(Store(key, rows)), KeyOutcome::kOk); });
    EXPECT_EQ(Outcome(Load(key, back)), KeyOutcome::kOk);
    return d.Of("readdir");
  };
  const fs::path mnt = mount_->mountpoint();
  // A fresh tree: this store finds its <hhh> missing, so later stores into
  // unknown <hhh> make them first. It syncs the block directory's entry too.
  syncs("store, full, fresh tree", Key(0x10001, 1));
  // It made <hhh> and the shard directory: syncs both and the block directory.
  EXPECT_EQ(syncs("store, full, new <hhh>", Key(0x20002, 1)), 3u);
  EXPECT_EQ(syncs("store, full, same shard again", Key(0x20002, 2)), 1u);
  // A new shard directory in a <hhh> whose entry is synced: that directory and <hhh>.
  EXPECT_EQ(syncs("store, full, new shard in known <hhh>", Key(0x20012, 2)), 2u);
  // Another client made <hhh> and the shard directory and never synced them:
  // both mkdirs find them (EEXIST), and both entries are synced all the same.
  ASSERT_TRUE(fs::create_directories((mnt / Rel(Key(0x30003, 1))).parent_path()));
  EXPECT_EQ(syncs("store, full, both made by another", Key(0x30003, 1)), 3u);
  EXPECT_EQ(syncs("store, full, both made by another, again", Key(0x30003, 2)), 1u);
  // Another client made <hhh> only: the shard directory, <hhh> and the block directory.
  ASSERT_TRUE(fs::create_directory((mnt / Rel(Key(0x40004, 1))).parent_path().parent_path()));
  EXPECT_EQ(syncs("store, full, <hhh> made by another", Key(0x40004, 1)), 3u);
  // Another client made a shard directory in a <hhh> this tier knows: the
  // store opens it without any mkdir, and still syncs its entry in <hhh>.
  ASSERT_TRUE(fs::create_directory((mnt / Rel(Key(0x20022, 1))).parent_path()));
  EXPECT_EQ(syncs("store, full, shard made by another, opened", Key(0x20022, 1)), 2u);
  EXPECT_EQ(syncs("store, full, shard made by another, again", Key(0x20022, 2)), 1u);
}

size_t OpenFds() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

TEST_P(DirFdCallsTest, HeldDirectoriesAreBoundedAndClosedWithTheTier) {
  Close();
  const size_t before_open = OpenFds();
  Open(mount_->mountpoint(), GetParam());
  const size_t opened = OpenFds();
  const size_t shards = internal::ShardDirs::kEntriesMax + 44;
  testing::AlignedRows rows(shards, kRow, 9);
  std::vector<OffloadKey> keys;
  for (uint32_t i = 0; i < shards; ++i) keys.push_back(Key(0x10000 + i * 16, i));  // one shard each
  const JobResult stored = Wait(tier_->SubmitStore(keys, rows.Const()));
  ASSERT_EQ(stored.keys.size(), shards);
  for (const KeyResult& k : stored.keys)
    ASSERT_EQ(k.outcome, KeyOutcome::kOk) << k.status.ToString();
  EXPECT_LE(OpenFds(), opened + internal::ShardDirs::kEntriesMax);
  EXPECT_GE(OpenFds(), opened + internal::ShardDirs::kEntriesMax / 2) << "no shard directory held";
  Close();
  EXPECT_LE(OpenFds(), before_open) << "the tier left fds open";
}

INSTANTIATE_TEST_SUITE_P(Backends, DirFdCallsTest,
                         ::testing::Values(IoBackendKind::kUring, IoBackendKind::kSyscall),
                         [](const ::testing::TestParamInfo<IoBackendKind>& p) {
                           return p.param == IoBackendKind::kUring ? "Uring" : "Syscall";
                         });

// The stale-directory cases, on the FUSE mount (where the tier holds shard
// directories), each change made through the mount as another client's
// would reach the kernel: a removed directory is dead under a held fd, a
// renamed one is followed by it.
class StaleShardDirTest : public DirFdCallsTest {
 protected:
  fs::path Path(const OffloadKey& key) const { return fs::path(mount_->mountpoint()) / Rel(key); }
  // Stores `key`, then checks it is a regular file at its path that loads back whole.
  void StoreReachable(const OffloadKey& key, uint64_t seed) {
    testing::AlignedRows rows(1, kRow, seed), back(1, kRow, seed + 1);
    ASSERT_EQ(Outcome(Store(key, rows)), KeyOutcome::kOk);
    struct stat st;
    ASSERT_EQ(lstat(Path(key).c_str(), &st), 0)
        << Path(key) << " is not at its path: " << std::strerror(errno);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    ASSERT_EQ(Outcome(Load(key, back)), KeyOutcome::kOk);
    EXPECT_EQ(std::memcmp(back.data, rows.data, kRow), 0);
  }
};

TEST_P(StaleShardDirTest, ShardDirectoryRemovedAndMadeAgainBetweenStores) {
  const OffloadKey a = Key(0x12345, 1), b = Key(0x12345, 2), c = Key(0x12345, 3);
  StoreReachable(a, 10);  // the tier now holds the shard directory
  const fs::path shard = Path(a).parent_path();
  // gc: the block goes, then its empty directory; another writer makes it
  // again (a new directory: the held fd's is dead).
  ASSERT_TRUE(fs::remove(Path(a)));
  ASSERT_TRUE(fs::remove(shard));
  ASSERT_TRUE(fs::create_directory(shard));
  StoreReachable(b, 20);
  // Removed and not made again: the store makes it.
  ASSERT_TRUE(fs::remove(Path(b)));
  ASSERT_TRUE(fs::remove(shard));
  StoreReachable(c, 30);
}

TEST_P(StaleShardDirTest, ShardDirectoryRenamedAwayIsLeftWithinTheTimeToLive) {
  // Two held shard directories: one renamed away, one replaced (renamed
  // away and a new directory made in its place).
  const OffloadKey a = Key(0x54321, 1), b = Key(0x54321, 2), c = Key(0x6789a, 1),
                   d = Key(0x6789a, 2);
  StoreReachable(a, 40);
  StoreReachable(c, 50);
  const fs::path moved = Path(a).parent_path(), replaced = Path(c).parent_path();
  fs::rename(moved, moved.string() + ".moved");
  fs::rename(replaced, replaced.string() + ".moved");
  ASSERT_TRUE(fs::create_directory(replaced));
  // The tier may follow a moved directory for up to the time to live
  // (FORMAT.md L146); once it has passed, stores land at their paths again.
  std::this_thread::sleep_for(std::chrono::nanoseconds(internal::ShardDirs::kTtlNs) +
                              std::chrono::milliseconds(50));
  StoreReachable(b, 60);
  StoreReachable(d, 70);
}

TEST_P(StaleShardDirTest, SymlinkedShardDirectoryIsNeverFollowed) {
  const OffloadKey a = Key(0x2468a, 1), b = Key(0x2468a, 2), c = Key(0x2468a, 3);
  const fs::path outside = fs::path(mount_->mountpoint()) / "outside";
  ASSERT_TRUE(fs::create_directory(outside));
  // Planted before any store: the shard directory's open refuses it.
  const fs::path shard = Path(a).parent_path();
  fs::create_directories(shard.parent_path());
  fs::create_directory_symlink(outside, shard);
  testing::AlignedRows rows(1, kRow, 80);
  EXPECT_EQ(Outcome(Store(a, rows)), KeyOutcome::kError);
  // Swapped in under a held directory: the held one is used, never the link;
  // once the time to live has passed, the store is refused.
  ASSERT_TRUE(fs::remove(shard));
  StoreReachable(b, 90);
  fs::rename(shard, shard.string() + ".moved");
  fs::create_directory_symlink(outside, shard);
  EXPECT_EQ(Outcome(Store(c, rows)), KeyOutcome::kOk);  // into the held (moved) directory (L146)
  std::this_thread::sleep_for(std::chrono::nanoseconds(internal::ShardDirs::kTtlNs) +
                              std::chrono::milliseconds(50));
  const OffloadKey d = Key(0x2468a, 4);
  EXPECT_EQ(Outcome(Store(d, rows)), KeyOutcome::kError);
  EXPECT_TRUE(fs::is_empty(outside)) << "a store wrote through the symlink";
}

INSTANTIATE_TEST_SUITE_P(Backends, StaleShardDirTest,
                         ::testing::Values(IoBackendKind::kUring, IoBackendKind::kSyscall),
                         [](const ::testing::TestParamInfo<IoBackendKind>& p) {
                           return p.param == IoBackendKind::kUring ? "Uring" : "Syscall";
                         });

}  // namespace
}  // namespace kvtier
