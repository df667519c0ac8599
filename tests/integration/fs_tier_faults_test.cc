// Proves the fs tier's store and load state machines under injected faults
// (FakeBackend wraps real syscalls on real files): short writes and reads are
// resumed and still give byte-exact rows; -EAGAIN/-EINTR are retried; ENOSPC
// on write fails the store cleanly with no temp file left; EIO on read fails
// the load without touching the file; an expired deadline (-ECANCELED) fails
// the key, never hangs it; slow and shuffled completions change nothing;
// durability modes issue their syncs; backpressure drops stores, not loads;
// while loads run, no more than stores_while_loading_max stores do; shard
// directories are made deepest first; ENODATA from an open is transient; a
// file replaced under an open fd is looked up afresh before it is reopened;
// rows of several pieces (one request each, or vectored) resume short
// transfers mid-piece, staged unaligned rows with O_DIRECT on included.
// Seeded.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <thread>

#include "fs/fs_tier_internal.h"
#include "support/fake_backend.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kRow = 8192;

class FaultTest : public ::testing::Test {
 protected:
  // O_DIRECT is off unless `o_direct`: short transfers cut anywhere resume
  // at offsets O_DIRECT refuses (the tier then drops it for that file).
  std::unique_ptr<FsTier> Open(testing::FaultPlan plan, FsTierOpenOptions o = {}, bool o_direct = false) {
    if (o.tier.root_dir.empty()) o.tier.root_dir = root_.path().string();
    o.ns.model_name = "faulty/model";
    o.row_bytes = kRow;
    o.tier.n_read_threads = 3;
    o.tier.n_write_threads = 3;
    o.tier.o_direct = o_direct;
    auto fake = std::make_unique<testing::FakeBackend>(seed_, plan);
    fake_ = fake.get();
    return internal::OpenFsTierWithBackend(o, std::move(fake)).value();
  }
  JobResult Wait(FsTier* tier, uint64_t id) { return testing::WaitForJob(tier, id); }
  // A plan that fails every request of `op` with -err.
  static testing::FaultPlan AlwaysFail(internal::IoOp op, int err) {
    testing::FaultPlan plan;
    plan.error_op = op;
    plan.error_errno = err;
    plan.error_one_in = 1;
    return plan;
  }
  // Stores `rows` under `keys` through a tier without faults (then closes it).
  void StoreClean(const std::vector<OffloadKey>& keys, std::vector<std::vector<uint8_t>>& rows) {
    auto writer = Open({});
    ASSERT_EQ(Wait(writer.get(), writer->SubmitStore(keys, Const(rows)).value()).OkPrefix(), keys.size());
  }
  std::vector<OffloadKey> Keys(size_t n) {
    std::vector<OffloadKey> keys;
    for (size_t i = 0; i < n; ++i) {
      std::vector<uint8_t> b(32, static_cast<uint8_t>(i));
      b[0] = 0x5a;
      keys.push_back({BlockHash::FromBytes(b).value(), 1});
    }
    return keys;
  }
  std::vector<std::vector<uint8_t>> Rows(size_t n) {
    std::mt19937_64 rng(seed_ + n);
    std::vector<std::vector<uint8_t>> rows(n, std::vector<uint8_t>(kRow));
    for (auto& r : rows) for (auto& b : r) b = static_cast<uint8_t>(rng());
    return rows;
  }
  static std::vector<std::span<const uint8_t>> Const(std::vector<std::vector<uint8_t>>& rows) {
    return {rows.begin(), rows.end()};
  }
  static std::vector<std::span<uint8_t>> Mut(std::vector<std::vector<uint8_t>>& rows) {
    return {rows.begin(), rows.end()};
  }
  bool NoTempFiles() {
    for (auto& e : fs::recursive_directory_iterator(root_.path())) {
      if (e.path().extension() == ".tmp") return false;
    }
    return true;
  }

  uint64_t seed_ = testing::TestSeed();
  testing::TempDir root_;
  testing::FakeBackend* fake_ = nullptr;
};

TEST_F(FaultTest, ShortTransfersAndRetriesStillGiveExactRows) {
  testing::FaultPlan plan;
  plan.short_transfer_one_in = 2;
  plan.eagain_one_in = 5;
  plan.slow_one_in = 4;
  plan.shuffle = true;
  auto tier = Open(plan);
  auto keys = Keys(30);
  auto rows = Rows(30);
  JobResult stored = Wait(tier.get(), tier->SubmitStore(keys, Const(rows)).value());
  ASSERT_EQ(stored.OkPrefix(), 30u) << stored.keys[stored.OkPrefix()].status.ToString();
  std::vector<std::vector<uint8_t>> back(30, std::vector<uint8_t>(kRow));
  JobResult loaded = Wait(tier.get(), tier->SubmitLoad(keys, Mut(back)).value());
  ASSERT_EQ(loaded.OkPrefix(), 30u) << loaded.keys[loaded.OkPrefix()].status.ToString();
  EXPECT_EQ(back, rows);
  EXPECT_GT(fake_->faults_injected(), 10);
  EXPECT_TRUE(NoTempFiles());
}

// Rows as 2 pieces (one request each) and as 5 uneven pieces (vectored):
// transfers cut short anywhere, mid-piece included, resume at the right
// piece and offset; written as pieces, read back as one row and the reverse.
TEST_F(FaultTest, PiecewiseAndVectoredRowsSurviveShortTransfers) {
  testing::FaultPlan plan;
  plan.short_transfer_one_in = 2;
  plan.eagain_one_in = 5;
  plan.shuffle = true;
  auto tier = Open(plan);
  for (const std::vector<uint64_t>& cut : {std::vector<uint64_t>{4096, 4096}, {1000, 3, 4093, 96, 3000}}) {
    SCOPED_TRACE(std::to_string(cut.size()) + " pieces");
    auto keys = Keys(12);
    for (auto& k : keys) k.group_idx = static_cast<uint32_t>(cut.size());
    auto rows = Rows(12);
    auto as_pieces = [&](std::vector<std::vector<uint8_t>>& rs) {
      std::vector<std::vector<std::span<uint8_t>>> out;
      for (auto& r : rs) {
        out.emplace_back();
        uint64_t at = 0;
        for (uint64_t len : cut) out.back().emplace_back(r.data() + at, len), at += len;
      }
      return out;
    };
    const auto mut = as_pieces(rows);
    std::vector<std::vector<std::span<const uint8_t>>> pieces;
    for (const auto& row : mut) pieces.emplace_back(row.begin(), row.end());
    ASSERT_EQ(Wait(tier.get(), tier->SubmitStorePieces(keys, pieces).value()).OkPrefix(), 12u);
    std::vector<std::vector<uint8_t>> flat(12, std::vector<uint8_t>(kRow));
    ASSERT_EQ(Wait(tier.get(), tier->SubmitLoad(keys, Mut(flat)).value()).OkPrefix(), 12u);
    EXPECT_EQ(flat, rows);
    std::vector<std::vector<uint8_t>> back(12, std::vector<uint8_t>(kRow));
    ASSERT_EQ(Wait(tier.get(), tier->SubmitLoadPieces(keys, as_pieces(back)).value()).OkPrefix(), 12u);
    EXPECT_EQ(back, rows);
  }
  EXPECT_GT(fake_->faults_injected(), 10);
  EXPECT_TRUE(NoTempFiles());
}

// Unaligned rows (64 bytes past a page: one piece, [K, V], uneven pieces)
// with O_DIRECT on go through staging rows; transfers cut short anywhere
// still resume to byte-exact rows (an unaligned resume drops O_DIRECT for
// that file), with bounce_loads on and off, and the uncut ones stay O_DIRECT.
TEST_F(FaultTest, StagedUnalignedRowsSurviveShortTransfers) {
  testing::FaultPlan plan;
  plan.short_transfer_one_in = 2;
  plan.eagain_one_in = 5;
  plan.shuffle = true;
  const std::vector<std::vector<uint64_t>> cuts = {{kRow}, {kRow / 2, kRow / 2}, {1000, 3, 4093, 96, 3000}};
  constexpr size_t kRows = 12;
  const uint64_t arena_bytes = kRows * kRow + 4096;
  auto* src = static_cast<uint8_t*>(std::aligned_alloc(4096, arena_bytes));
  auto* dst = static_cast<uint8_t*>(std::aligned_alloc(4096, arena_bytes));
  std::mt19937_64 rng(seed_);
  for (uint64_t i = 0; i < arena_bytes; ++i) src[i] = static_cast<uint8_t>(rng());
  auto cut_rows = [&](uint8_t* arena, size_t c) {
    std::vector<std::vector<std::span<uint8_t>>> rows(kRows);
    uint8_t* at = arena + 64;
    for (auto& row : rows) for (uint64_t len : cuts[c]) row.emplace_back(at, len), at += len;
    return rows;
  };
  for (bool bounce : {false, true}) {
    FsTierOpenOptions o;
    o.tier.root_dir = (root_.path() / (bounce ? "bounce" : "direct")).string();
    fs::create_directories(o.tier.root_dir);
    o.tier.bounce_loads = bounce ? BounceLoads::kOn : BounceLoads::kOff;
    auto tier = Open(plan, o, /*o_direct=*/true);
    if (!tier->o_direct()) GTEST_SKIP() << "this filesystem refuses O_DIRECT: nothing to stage";
    for (size_t c = 0; c < cuts.size(); ++c) {
      SCOPED_TRACE(std::to_string(cuts[c].size()) + " pieces, bounce_loads " + (bounce ? "on" : "off"));
      auto keys = Keys(kRows);
      for (auto& k : keys) k.group_idx = static_cast<uint32_t>(c);
      std::vector<std::vector<std::span<const uint8_t>>> pieces;
      for (const auto& row : cut_rows(src, c)) pieces.emplace_back(row.begin(), row.end());
      JobResult stored = Wait(tier.get(), tier->SubmitStorePieces(keys, pieces).value());
      ASSERT_EQ(stored.OkPrefix(), kRows) << stored.keys[stored.OkPrefix()].status.ToString();
      std::memset(dst, 0, arena_bytes);
      JobResult loaded = Wait(tier.get(), tier->SubmitLoadPieces(keys, cut_rows(dst, c)).value());
      ASSERT_EQ(loaded.OkPrefix(), kRows) << loaded.keys[loaded.OkPrefix()].status.ToString();
      EXPECT_EQ(std::memcmp(src + 64, dst + 64, kRows * kRow), 0);
    }
    EXPECT_GT(tier->Metrics().staged_ios, 0u) << "rows whose transfers were not cut stay O_DIRECT";
    EXPECT_GT(fake_->faults_injected(), 10);  // before `tier` (and the backend) goes
  }
  EXPECT_TRUE(NoTempFiles());
  std::free(src);
  std::free(dst);
}

TEST_F(FaultTest, EnospcFailsStoresCleanlyAndLeavesNoTempFile) {
  auto tier = Open(AlwaysFail(internal::IoOp::kWrite, ENOSPC));
  auto keys = Keys(5);
  auto rows = Rows(5);
  JobResult stored = Wait(tier.get(), tier->SubmitStore(keys, Const(rows)).value());
  for (auto& k : stored.keys) {
    EXPECT_EQ(k.outcome, KeyOutcome::kError);
    EXPECT_EQ(k.status.code(), StatusCode::kNoSpace) << k.status.ToString();
  }
  EXPECT_TRUE(NoTempFiles());
  for (auto& k : keys) EXPECT_FALSE(fs::exists(tier->BlockPath(k)));
  EXPECT_EQ(tier->Metrics().store_errors, 5u);
}

TEST_F(FaultTest, ReadErrorsAndDeadlinesFailTheKeyAndKeepTheFile) {
  auto keys = Keys(4);
  auto rows = Rows(4);
  ASSERT_NO_FATAL_FAILURE(StoreClean(keys, rows));
  auto tier = Open(AlwaysFail(internal::IoOp::kRead, EIO));
  std::vector<std::vector<uint8_t>> back(4, std::vector<uint8_t>(kRow));
  JobResult loaded = Wait(tier.get(), tier->SubmitLoad(keys, Mut(back)).value());
  for (auto& k : loaded.keys) EXPECT_EQ(k.outcome, KeyOutcome::kError);
  for (auto& k : keys) EXPECT_TRUE(fs::exists(tier->BlockPath(k))) << "an I/O error is not corruption";
  testing::FaultPlan timeouts;
  timeouts.timeout_one_in = 1;
  auto slow = Open(timeouts);
  JobResult timed_out = Wait(slow.get(), slow->SubmitLoad(keys, Mut(back)).value());
  for (auto& k : timed_out.keys) {
    EXPECT_EQ(k.outcome, KeyOutcome::kError);
    EXPECT_EQ(k.status.code(), StatusCode::kTimedOut) << k.status.ToString();
  }
}

TEST_F(FaultTest, DurabilityModesIssueTheirSyncs) {
  auto count = [&](internal::IoOp op) {
    int n = 0;
    for (const auto& r : fake_->log()) n += r.op == op;
    return n;
  };
  for (Durability d : {Durability::kNone, Durability::kFile, Durability::kFull}) {
    testing::TempDir fresh;
    FsTierOpenOptions o;
    o.tier.root_dir = fresh.path().string();
    o.tier.durability = d;
    auto tier = Open({}, o);
    auto keys = Keys(2);  // same shard directories: created by the first store only
    auto rows = Rows(2);
    ASSERT_EQ(Wait(tier.get(), tier->SubmitStore(keys, Const(rows)).value()).OkPrefix(), 2u);
    const int datasyncs = count(internal::IoOp::kFdatasync), fsyncs = count(internal::IoOp::kFsync);
    EXPECT_EQ(datasyncs, d == Durability::kNone ? 0 : 2) << static_cast<int>(d);
    // full: each file's directory, plus the parents of the directories whose
    // entry was not yet synced (the two the first store created, the block directory).
    EXPECT_GE(fsyncs, d == Durability::kFull ? 4 : 0) << static_cast<int>(d);
    if (d != Durability::kFull) {
      EXPECT_EQ(fsyncs, 0);
    }
  }
}

// Shard directories are made deepest first: a store whose first-level shard
// exists makes only the second (no mkdirat that finds its directory there),
// one whose shards exist makes none, and one whose block directory vanished
// (gc) makes all three and still lands.
TEST_F(FaultTest, ShardDirectoriesAreMadeDeepestFirst) {
  auto tier = Open({});
  auto key = [](uint8_t b1, uint8_t b2) {
    std::vector<uint8_t> b(32, 0x33);
    b[0] = 0x5a;
    b[1] = b1;
    b[2] = b2;
    return OffloadKey{BlockHash::FromBytes(b).value(), 1};
  };
  const OffloadKey a = key(0x10, 0x00), same_shard1 = key(0x1f, 0xf0), same_both = key(0x10, 0x01);
  const fs::path pa = tier->BlockPath(a), pb = tier->BlockPath(same_shard1), pc = tier->BlockPath(same_both);
  ASSERT_EQ(pa.parent_path().parent_path(), pb.parent_path().parent_path());
  ASSERT_NE(pa.parent_path(), pb.parent_path());
  ASSERT_EQ(pa.parent_path(), pc.parent_path());
  auto rows = Rows(1);
  size_t seen = 0;
  auto store_counting_mkdirs = [&](const OffloadKey& k) {
    EXPECT_EQ(Wait(tier.get(), tier->SubmitStore({&k, 1}, Const(rows)).value()).OkPrefix(), 1u);
    const auto log = fake_->log();
    int mkdirs = 0;
    for (size_t i = seen; i < log.size(); ++i) mkdirs += log[i].op == internal::IoOp::kMkdir;
    seen = log.size();
    return mkdirs;
  };
  EXPECT_EQ(store_counting_mkdirs(a), 2);            // both shard levels, not the block directory
  EXPECT_EQ(store_counting_mkdirs(same_shard1), 1);  // the second level only
  EXPECT_EQ(store_counting_mkdirs(same_both), 0);
  fs::remove_all(pa.parent_path().parent_path().parent_path());  // the block directory, as gc would
  EXPECT_EQ(store_counting_mkdirs(a), 3);
  EXPECT_TRUE(fs::is_regular_file(pa));
}

// A parent that keeps vanishing (here: every open says ENOENT, as if gc
// removed each directory as soon as it was made) ends the store with an
// error after a bounded number of rounds (at most 64, within about 2 s of
// the first); it never loops.
TEST_F(FaultTest, ShardDirectoriesThatKeepVanishingFailTheStoreInBoundedRounds) {
  auto tier = Open(AlwaysFail(internal::IoOp::kOpen, ENOENT));
  auto keys = Keys(1);
  auto rows = Rows(1);
  const JobResult r = Wait(tier.get(), tier->SubmitStore(keys, Const(rows)).value());
  ASSERT_EQ(r.keys.size(), 1u);
  EXPECT_EQ(r.keys[0].outcome, KeyOutcome::kError);
  EXPECT_EQ(r.keys[0].status.code(), StatusCode::kNotFound) << r.keys[0].status.ToString();
  int mkdirs = 0;
  for (const auto& req : fake_->log()) mkdirs += req.op == internal::IoOp::kMkdir;
  EXPECT_LE(mkdirs, 64 * 3) << "at most 64 rounds of at most 3 levels";
}

// ENODATA from an open (GlusterFS, while another client's mkdir or rename
// of the path is not complete) is a transient state, like ESTALE: a load
// opens again and, when it persists, reports a miss, never an error.
TEST_F(FaultTest, EnodataFromAnOpenIsAMissForLoads) {
  auto keys = Keys(3);
  auto rows = Rows(3);
  ASSERT_NO_FATAL_FAILURE(StoreClean(keys, rows));
  auto tier = Open(AlwaysFail(internal::IoOp::kOpen, ENODATA));
  auto back = Rows(3);
  const JobResult r = Wait(tier.get(), tier->SubmitLoad(keys, Mut(back)).value());
  for (const KeyResult& k : r.keys) EXPECT_EQ(k.outcome, KeyOutcome::kMiss) << k.status.ToString();
  EXPECT_GE(fake_->faults_injected(), 6) << "each load opens again before it gives up";
}

// ESTALE on an open fd (NFS, GlusterFS: another instance renamed a new
// block over the path) makes the load reopen the path; before each reopen
// it forces a statx of the path, on whose ESTALE the kernel looks the path
// up afresh instead of trusting the cached entry that named the old file.
// A file that stays stale is a miss, never corruption: it is kept.
TEST_F(FaultTest, AFileReplacedUnderAnOpenFdIsLookedUpAfreshBeforeEachReopen) {
  auto keys = Keys(1);
  auto rows = Rows(1);
  ASSERT_NO_FATAL_FAILURE(StoreClean(keys, rows));
  testing::FaultPlan plan = AlwaysFail(internal::IoOp::kStatx, ESTALE);
  plan.error_fd_only = true;  // the fd's statx is stale; the path's works
  auto tier = Open(plan);
  auto back = Rows(1);
  const JobResult r = Wait(tier.get(), tier->SubmitLoad(keys, Mut(back)).value());
  ASSERT_EQ(r.keys.size(), 1u);
  EXPECT_EQ(r.keys[0].outcome, KeyOutcome::kMiss) << r.keys[0].status.ToString();
  EXPECT_TRUE(fs::exists(tier->BlockPath(keys[0]))) << "a stale handle is not a corrupt file";
  std::vector<std::string> steps;  // the load's requests, in order
  for (const auto& req : fake_->log()) {
    if (req.op == internal::IoOp::kOpen) steps.push_back("open");
    if (req.op == internal::IoOp::kStatx && req.path != nullptr) {
      steps.push_back((req.flags & AT_STATX_FORCE_SYNC) != 0 ? "forced statx" : "statx");
    }
  }
  const std::vector<std::string> want = {"open", "forced statx", "open", "forced statx", "open",
                                         "forced statx", "open"};
  EXPECT_EQ(steps, want) << "three reopens, each after a forced lookup, then a miss";
}

// GlusterFS's open-behind answers an fd whose file another mount's rename
// replaced with EBADFD: as ESTALE, the load reopens the path (and, if it
// stays so, misses); never an error, never a removal.
TEST_F(FaultTest, EbadfdOnAnOpenFdIsAReplacedFileNotAnError) {
  auto keys = Keys(1);
  auto rows = Rows(1);
  ASSERT_NO_FATAL_FAILURE(StoreClean(keys, rows));
  testing::FaultPlan plan = AlwaysFail(internal::IoOp::kStatx, EBADFD);
  plan.error_fd_only = true;
  auto tier = Open(plan);
  auto back = Rows(1);
  const JobResult r = Wait(tier.get(), tier->SubmitLoad(keys, Mut(back)).value());
  ASSERT_EQ(r.keys.size(), 1u);
  EXPECT_EQ(r.keys[0].outcome, KeyOutcome::kMiss) << r.keys[0].status.ToString();
  EXPECT_TRUE(fs::exists(tier->BlockPath(keys[0])));
}

// A CRC mismatch is read once more from a fresh open before the block is
// called corrupt: a file replaced under the fd can mix one block's
// attribute with another's bytes (GlusterFS's open-behind), and removing it
// would drop a good block. Here the first read "completes" without filling
// the row (its bytes mismatch); the second, real one serves the block.
TEST_F(FaultTest, AMismatchIsReadAgainFromAFreshOpenBeforeTheBlockIsRemoved) {
  auto keys = Keys(1);
  auto rows = Rows(1);
  ASSERT_NO_FATAL_FAILURE(StoreClean(keys, rows));
  auto tier = Open({});
  auto reads = std::make_shared<int>(0);
  fake_->HoldWhere([reads](const internal::IoRequest& q) {
    return (q.op == internal::IoOp::kRead || q.op == internal::IoOp::kReadv) && (*reads)++ == 0;
  });
  auto back = Rows(2);  // other bytes than rows[0]
  back.resize(1);
  const uint64_t id = tier->SubmitLoad(keys, Mut(back)).value();
  for (int i = 0; i < 10000 && fake_->Release({}, static_cast<int64_t>(kRow)) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const JobResult r = Wait(tier.get(), id);
  ASSERT_EQ(r.keys.size(), 1u);
  EXPECT_EQ(r.keys[0].outcome, KeyOutcome::kOk) << r.keys[0].status.ToString() << " seed " << seed_;
  EXPECT_TRUE(back[0] == rows[0]) << "the row is the block's, seed " << seed_;
  EXPECT_TRUE(fs::exists(tier->BlockPath(keys[0])));
  EXPECT_EQ(tier->Metrics().rows_corrupt, 0u);
}

TEST_F(FaultTest, BackpressureDropsStoresButNeverLoads) {
  FsTierOpenOptions o;
  o.tier.store_queue_bytes_max = 2 * kRow;
  o.tier.backpressure = BackpressureOptions{};
  o.tier.backpressure->high_water_s_per_mib = 1e-12;  // any completed store trips it
  o.tier.backpressure->low_water_s_per_mib = 1e-13;
  o.tier.backpressure->warmup_completions = 1;
  auto tier = Open({}, o);
  auto keys = Keys(3);
  auto rows = Rows(3);
  JobResult too_big = Wait(tier.get(), tier->SubmitStore(keys, Const(rows)).value());
  for (auto& k : too_big.keys) EXPECT_EQ(k.outcome, KeyOutcome::kDropped);
  for (auto& k : keys) EXPECT_FALSE(fs::exists(tier->BlockPath(k)));
  std::vector<OffloadKey> one(keys.begin(), keys.begin() + 1);
  std::vector<std::vector<uint8_t>> row(rows.begin(), rows.begin() + 1);
  ASSERT_EQ(Wait(tier.get(), tier->SubmitStore(one, Const(row)).value()).OkPrefix(), 1u);
  ASSERT_OK(tier->WaitIdle(5000));
  EXPECT_EQ(tier->Metrics().backpressure_active, 1u);
  std::vector<OffloadKey> two(keys.begin() + 1, keys.begin() + 2);
  std::vector<std::vector<uint8_t>> row2(rows.begin() + 1, rows.begin() + 2);
  JobResult dropped = Wait(tier.get(), tier->SubmitStore(two, Const(row2)).value());
  EXPECT_EQ(dropped.keys[0].outcome, KeyOutcome::kDropped) << "latency pressure drops new stores";
  std::vector<std::vector<uint8_t>> back(3, std::vector<uint8_t>(kRow));
  JobResult loaded = Wait(tier.get(), tier->SubmitLoad(keys, Mut(back)).value());
  EXPECT_EQ(loaded.keys[0].outcome, KeyOutcome::kOk) << "loads are never dropped";
  EXPECT_EQ(loaded.keys[1].outcome, KeyOutcome::kMiss);
  EXPECT_EQ(back[0], rows[0]);
  EXPECT_EQ(tier->Metrics().rows_dropped, 4u);
}

// The most stores running at once (started by their statx of the
// destination, finished by their rename) before the last load's read, from
// the backend's execution log.
int StoresAtOnceWhileLoading(const std::vector<internal::IoRequest>& log) {
  size_t last_read = 0;
  for (size_t i = 0; i < log.size(); ++i) {
    if (log[i].op == internal::IoOp::kRead) last_read = i;
  }
  int running = 0, most = 0;
  for (size_t i = 0; i < last_read; ++i) {
    if (log[i].op == internal::IoOp::kStatx && log[i].path != nullptr) ++running;  // loads stat their fd
    if (log[i].op == internal::IoOp::kRename) --running;
    most = std::max(most, running);
  }
  return most;
}

TEST_F(FaultTest, LoadsCapTheStoresRunningBesideThem) {
  for (int cap : {1, 0}) {
    SCOPED_TRACE("stores_while_loading_max " + std::to_string(cap));
    testing::TempDir root;
    FsTierOpenOptions o;
    o.tier.root_dir = root.path().string();
    o.tier.stores_while_loading_max = cap;
    testing::FaultPlan plan;
    plan.slow_one_in = 2;
    auto tier = Open(plan, o);
    auto keys = Keys(40);
    auto rows = Rows(40);
    std::vector<OffloadKey> first(keys.begin(), keys.begin() + 10), rest(keys.begin() + 10, keys.end());
    std::vector<std::vector<uint8_t>> first_rows(rows.begin(), rows.begin() + 10), rest_rows(rows.begin() + 10, rows.end());
    ASSERT_EQ(Wait(tier.get(), tier->SubmitStore(first, Const(first_rows)).value()).OkPrefix(), 10u);
    const size_t before = fake_->log().size();
    std::vector<std::vector<uint8_t>> back(10, std::vector<uint8_t>(kRow));
    const uint64_t load = tier->SubmitLoad(first, Mut(back)).value();
    const uint64_t store = tier->SubmitStore(rest, Const(rest_rows)).value();
    EXPECT_EQ(Wait(tier.get(), load).OkPrefix(), 10u);
    EXPECT_EQ(Wait(tier.get(), store).OkPrefix(), 30u);
    EXPECT_EQ(back, first_rows);
    const std::vector<internal::IoRequest> all = fake_->log();
    const int most = StoresAtOnceWhileLoading({all.begin() + static_cast<long>(before), all.end()});
    if (cap > 0) {
      EXPECT_LE(most, cap) << "stores beyond the cap ran while loads were active";
    } else {
      EXPECT_GT(most, 1) << "without a cap stores use their write slots beside loads (else this test proves nothing)";
    }
  }
}

}  // namespace
}  // namespace kvtier
