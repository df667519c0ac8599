// Proves that the fs tier cannot be turned against its user by someone who
// can write the shared volume, once per backend (io_uring and the syscall
// pool): a FIFO at a block path is a miss at once and hangs nothing; a
// symlink at a block path, or a symlinked shard directory, never makes a load
// return (or delete) a file outside root_dir, nor a store write one there; a
// directory at a block path is a miss for lookups and loads, fails stores
// cleanly and is left alone, and once removed the key works again; a
// symlinked <NS>, <NS>_r0, .kvtier or leases directory fails the open with
// its path named and nothing is created in its target. Also proves that the
// syscall backend ends a syscall that blocks past its deadline, and reports
// it only once the syscall is over, and that the io_uring backend cancels a
// request at its deadline. Every wait is bounded, and a blocked FIFO
// is released afterwards, so a regression fails instead of hanging. Seeded
// random rows; seed printed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include "io/backend.h"
#include "kvtier/fs_tier.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kRow = 16384;
constexpr int kJobWaitMs = 10000;  // far above any honest completion here: only a hang reaches it

constexpr char kModel[] = "hostile/model";
using testing::Key;
using testing::Spec;
// The key bytes this file's tests use.
constexpr testing::KeyShape kKeyShape = testing::KeyShape::Last(0x5c);

// Opens and closes the write end of a FIFO without blocking: a reader stuck
// in open() on it (old code) gets released, so the tier can close.
void ReleaseFifo(const fs::path& fifo) {
  const int fd = open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd >= 0) close(fd);
}

bool EmptyDir(const fs::path& dir) { return fs::is_empty(dir); }

std::string BackendName(const ::testing::TestParamInfo<IoBackendKind>& p) {
  return p.param == IoBackendKind::kUring ? "uring" : "syscall";
}

class FsTierHostileTest : public ::testing::TestWithParam<IoBackendKind> {
 protected:
  void SetUp() override {
    rng_.seed(testing::TestSeed());
    auto tier = Open();
    if (!tier.ok() && tier.status().code() == StatusCode::kUnavailable) GTEST_SKIP() << tier.status().ToString();
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    tier_ = std::move(tier).value();
  }

  Result<std::unique_ptr<FsTier>> Open() {
    FsTierOpenOptions o;
    o.tier.root_dir = root_.path().string();
    o.ns = Spec(kModel);
    o.row_bytes = kRow;
    o.tier.n_read_threads = 2;
    o.tier.n_write_threads = 2;
    o.tier.io_timeout_ms = 2000;
    o.tier.io_backend = GetParam();
    return FsTier::Open(o);
  }

  std::vector<uint8_t> RandomRow() {
    std::vector<uint8_t> row(kRow);
    for (auto& b : row) b = static_cast<uint8_t>(rng_());
    return row;
  }
  fs::path PathOf(const OffloadKey& key) const { return tier_->BlockPath(key); }

  KeyResult One(uint64_t id) {
    JobResult r = testing::WaitForJob(tier_.get(), id, kJobWaitMs);
    return r.keys.size() == 1 ? r.keys[0] : KeyResult{KeyOutcome::kError, Status(StatusCode::kTimedOut, "hung")};
  }
  KeyResult Load(const OffloadKey& key, std::vector<uint8_t>* row) {
    std::span<uint8_t> span(*row);
    return One(tier_->SubmitLoad({&key, 1}, {&span, 1}).value());
  }
  KeyResult Store(const OffloadKey& key, const std::vector<uint8_t>& row) {
    std::span<const uint8_t> span(row);
    return One(tier_->SubmitStore({&key, 1}, {&span, 1}).value());
  }
  KeyResult Lookup(const OffloadKey& key) { return One(tier_->SubmitLookup({&key, 1}).value()); }

  testing::TempDir root_, outside_;
  std::mt19937_64 rng_;
  std::unique_ptr<FsTier> tier_;
};

TEST_P(FsTierHostileTest, FifoAtBlockPathIsAMissAndHangsNothing) {
  const OffloadKey key = Key(1, kKeyShape);
  const fs::path fifo = PathOf(key);
  fs::create_directories(fifo.parent_path());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0) << strerror(errno);
  std::vector<uint8_t> row(kRow, 0xee);
  const KeyResult loaded = Load(key, &row);
  ReleaseFifo(fifo);  // only matters where the open blocked
  // A miss, not an error: a timeout (-ETIMEDOUT / -ECANCELED) would be one.
  EXPECT_EQ(loaded.outcome, KeyOutcome::kMiss) << loaded.status.ToString();
  EXPECT_EQ(row, std::vector<uint8_t>(kRow, 0xee));
  EXPECT_EQ(Lookup(key).outcome, KeyOutcome::kMiss);
  const KeyResult stored = Store(key, RandomRow());
  EXPECT_EQ(stored.outcome, KeyOutcome::kError);
  EXPECT_TRUE(fs::is_fifo(fifo));  // left for fsck --repair
}

TEST_P(FsTierHostileTest, SymlinkAtBlockPathIsNeverReturned) {
  const OffloadKey key = Key(2, kKeyShape);
  const std::vector<uint8_t> secret = RandomRow();
  const fs::path target = outside_.path() / "secret";
  testing::WriteFileOrDie(target, std::string(secret.begin(), secret.end()));  // same size, no xattr (L68)
  const fs::path link = PathOf(key);
  fs::create_directories(link.parent_path());
  fs::create_symlink(target, link);
  std::vector<uint8_t> row(kRow, 0xee);
  const KeyResult loaded = Load(key, &row);
  EXPECT_EQ(loaded.outcome, KeyOutcome::kMiss) << loaded.status.ToString();
  EXPECT_EQ(row, std::vector<uint8_t>(kRow, 0xee));
  EXPECT_EQ(Lookup(key).outcome, KeyOutcome::kMiss);
  EXPECT_EQ(testing::ReadFileOrDie(target), std::string(secret.begin(), secret.end()));
  EXPECT_TRUE(fs::is_symlink(link));
}

// <hhh> is a symlink to a directory outside the root that holds a short file
// at the block's place: a load that followed it would "repair" (unlink) it.
TEST_P(FsTierHostileTest, SymlinkedShardDirectoryIsNeitherReadNorWritten) {
  const OffloadKey key = Key(3, kKeyShape);
  const fs::path block = PathOf(key);
  const fs::path hhh = block.parent_path().parent_path();
  fs::create_directories(hhh.parent_path());
  const fs::path decoy = outside_.path() / block.parent_path().filename() / block.filename();
  fs::create_directories(decoy.parent_path());
  testing::WriteFileOrDie(decoy, "short");
  fs::create_directory_symlink(outside_.path(), hhh);

  std::vector<uint8_t> row(kRow, 0xee);
  const KeyResult loaded = Load(key, &row);
  EXPECT_EQ(loaded.outcome, KeyOutcome::kMiss) << loaded.status.ToString();
  EXPECT_EQ(testing::ReadFileOrDie(decoy), "short");

  fs::remove(decoy);
  fs::remove(decoy.parent_path());
  const KeyResult stored = Store(key, RandomRow());
  EXPECT_EQ(stored.outcome, KeyOutcome::kError);
  EXPECT_TRUE(EmptyDir(outside_.path())) << "a store wrote outside root_dir";
}

TEST_P(FsTierHostileTest, DirectoryAtBlockPathIsAMissUntilRemoved) {
  const OffloadKey key = Key(4, kKeyShape);
  const fs::path block = PathOf(key);
  fs::create_directories(block);
  EXPECT_EQ(Lookup(key).outcome, KeyOutcome::kMiss);
  std::vector<uint8_t> row(kRow, 0xee);
  EXPECT_EQ(Load(key, &row).outcome, KeyOutcome::kMiss);
  const std::vector<uint8_t> data = RandomRow();
  const KeyResult refused = Store(key, data);
  EXPECT_EQ(refused.outcome, KeyOutcome::kError);
  EXPECT_NE(refused.status.message().find(block.string()), std::string::npos) << refused.status.ToString();
  EXPECT_TRUE(fs::is_directory(block)) << "somebody's directory was removed";
  EXPECT_GE(tier_->Metrics().store_errors, 1u);
  EXPECT_EQ(tier_->Metrics().rows_corrupt, 0u);

  fs::remove(block);
  const KeyResult stored = Store(key, data);
  EXPECT_EQ(stored.outcome, KeyOutcome::kOk) << stored.status.ToString();
  EXPECT_EQ(Lookup(key).outcome, KeyOutcome::kOk);
  EXPECT_EQ(Load(key, &row).outcome, KeyOutcome::kOk);
  EXPECT_EQ(row, data);
}

// Each of the tier's own directories, replaced by a symlink to an outside
// directory, fails the next open with its path named; nothing lands there.
TEST_P(FsTierHostileTest, SymlinkedTierDirectoriesFailTheOpen) {
  const fs::path ns_dir = root_.path() / tier_->ns().dir_name();
  const std::vector<fs::path> victims = {ns_dir / ".kvtier" / "leases", ns_dir / ".kvtier",
                                         root_.path() / tier_->ns().block_dir_name(), ns_dir};
  tier_.reset();
  for (const fs::path& victim : victims) {
    SCOPED_TRACE(victim.string());
    const fs::path moved = victim.string() + ".real";
    fs::rename(victim, moved);
    fs::create_directory_symlink(outside_.path(), victim);
    {
      auto tier = Open();
      EXPECT_FALSE(tier.ok());
      if (!tier.ok()) {
        EXPECT_NE(tier.status().message().find(victim.string()), std::string::npos) << tier.status().ToString();
      }
      // Checked while the tier lives: its lease is removed when it closes.
      EXPECT_TRUE(EmptyDir(outside_.path())) << "the open wrote through a symlink";
    }
    for (const auto& entry : fs::directory_iterator(outside_.path())) fs::remove_all(entry.path());
    fs::remove(victim);
    fs::rename(moved, victim);
  }
  ASSERT_TRUE(Open().ok());
}

// What a power cut leaves of an unsynced config.json write (an empty file)
// is rewritten at the next open (FORMAT.md L28); a non-empty one is kept.
TEST_P(FsTierHostileTest, EmptyConfigJsonIsRewrittenAtOpen) {
  const fs::path config = root_.path() / tier_->ns().ConfigRelPath();
  const std::string want = testing::ReadFileOrDie(config);
  tier_.reset();
  fs::resize_file(config, 0);
  ASSERT_TRUE(Open().ok());
  EXPECT_EQ(testing::ReadFileOrDie(config), want);
  testing::WriteFileOrDie(config, "someone else's");
  ASSERT_TRUE(Open().ok());
  EXPECT_EQ(testing::ReadFileOrDie(config), "someone else's");
}

INSTANTIATE_TEST_SUITE_P(Backends, FsTierHostileTest, ::testing::Values(IoBackendKind::kUring, IoBackendKind::kSyscall),
                         BackendName);

// The syscall backend itself: an open that blocks (a FIFO without a writer,
// opened without O_NONBLOCK) ends by its deadline, and is over when it is
// reported: no reader is left waiting in the kernel afterwards. (io_uring
// tries every open with O_NONBLOCK first, so there it never blocks.)
TEST(FsTierSyscallBackendTest, OpenPastItsDeadlineEndsBeforeItIsReported) {
  std::unique_ptr<internal::IoBackend> backend = internal::MakeSyncBackend(1).value();
  testing::TempDir dir;
  const fs::path fifo = dir.path() / "fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  internal::IoRequest req;
  req.tag = 7;
  req.op = internal::IoOp::kOpen;
  req.path = fifo.c_str();
  req.flags = O_RDONLY;
  req.deadline_ns = internal::MonotonicNowNs() + 200'000'000;
  ASSERT_OK(backend->Submit({&req, 1}));
  internal::IoCompletion c{};
  size_t n = 0;
  for (int i = 0; i < kJobWaitMs / 100 && n == 0; ++i) n = backend->Reap({&c, 1}, 100);
  // A writer's non-blocking open succeeds only while a reader waits: ENXIO
  // proves the reported open is really over.
  const int writer = open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  const int writer_errno = errno;
  if (writer >= 0) close(writer);  // (and releases an open still blocked)
  ASSERT_EQ(n, 1u) << "the open outlived its deadline";
  EXPECT_EQ(c.tag, 7u);
  EXPECT_EQ(c.res, -ETIMEDOUT);
  EXPECT_EQ(writer, -1);
  EXPECT_EQ(writer_errno, ENXIO);
}

// The io_uring backend: a read that waits (an empty pipe with a writer)
// ends by its deadline with a cancellation, one whose deadline has already
// passed never starts, and one that completes in time keeps its result.
TEST(FsTierUringBackendTest, RequestsEndByTheirDeadlines) {
  auto made = internal::MakeUringBackend(16);
  if (!made.ok()) GTEST_SKIP() << "no io_uring here: " << made.status().ToString();
  std::unique_ptr<internal::IoBackend> backend = std::move(*made);
  testing::TempDir dir;
  const fs::path fifo = dir.path() / "fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  const int fd = open(fifo.c_str(), O_RDWR | O_CLOEXEC);  // its own writer: opening never blocks
  ASSERT_GE(fd, 0) << strerror(errno);
  char buf[8];
  auto read_req = [&](uint64_t tag, uint64_t deadline_ns) {
    internal::IoRequest req;
    req.tag = tag;
    req.op = internal::IoOp::kRead;
    req.fd = fd;
    req.buf = buf;
    req.len = sizeof buf;
    req.deadline_ns = deadline_ns;
    return req;
  };
  const uint64_t t0 = internal::MonotonicNowNs();
  const internal::IoRequest reqs[] = {read_req(1, t0 + 200'000'000), read_req(2, t0 - 1)};
  ASSERT_OK(backend->Submit(reqs));
  std::map<uint64_t, int64_t> done;
  internal::IoCompletion c{};
  for (int i = 0; i < kJobWaitMs / 100 && done.size() < 2; ++i) {
    if (backend->Reap({&c, 1}, 100) == 1) done[c.tag] = c.res;
  }
  const double waited_s = static_cast<double>(internal::MonotonicNowNs() - t0) * 1e-9;
  ASSERT_EQ(done.size(), 2u) << "a read outlived its deadline";
  EXPECT_TRUE(done[1] == -ECANCELED || done[1] == -ETIMEDOUT || done[1] == -EINTR) << done[1];
  EXPECT_TRUE(done[2] == -ECANCELED || done[2] == -ETIMEDOUT) << done[2];
  EXPECT_GE(waited_s, 0.15);  // not before its deadline
  // In time: the data is there before the deadline, so the read keeps it.
  ASSERT_EQ(write(fd, "abc", 3), 3);
  const internal::IoRequest in_time = read_req(3, internal::MonotonicNowNs() + 5'000'000'000);
  ASSERT_OK(backend->Submit({&in_time, 1}));
  size_t n = 0;
  for (int i = 0; i < kJobWaitMs / 100 && n == 0; ++i) n = backend->Reap({&c, 1}, 100);
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(c.tag, 3u);
  EXPECT_EQ(c.res, 3);
  close(fd);
}

// The same with thousands of requests completing while one waits: the
// backend compacts its deadline bookkeeping meanwhile (it keeps memory
// proportional to the requests in flight), and the waiting one still ends
// by its own deadline.
TEST(FsTierUringBackendTest, AWaitingRequestEndsByItsDeadlineWhileThousandsComplete) {
  auto made = internal::MakeUringBackend(64);
  if (!made.ok()) GTEST_SKIP() << "no io_uring here: " << made.status().ToString();
  std::unique_ptr<internal::IoBackend> backend = std::move(*made);
  testing::TempDir dir;
  const fs::path fifo = dir.path() / "fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  const int pipe_fd = open(fifo.c_str(), O_RDWR | O_CLOEXEC);
  testing::WriteFileOrDie(dir.path() / "data", "0123456789");
  const int file_fd = open((dir.path() / "data").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(pipe_fd, 0);
  ASSERT_GE(file_fd, 0);
  char wait_buf[8], buf[4];
  const uint64_t t0 = internal::MonotonicNowNs();
  internal::IoRequest waiting{.tag = 1, .op = internal::IoOp::kRead, .fd = pipe_fd, .buf = wait_buf, .len = 8,
                              .deadline_ns = t0 + 500'000'000};
  ASSERT_OK(backend->Submit({&waiting, 1}));
  int64_t waiting_res = 1;
  internal::IoCompletion c[32];
  uint64_t tag = 2;
  int completed = 0;
  while (completed < 5000 && waiting_res == 1) {
    internal::IoRequest batch[16];
    for (auto& r : batch) {
      r = {.tag = tag++, .op = internal::IoOp::kRead, .fd = file_fd, .buf = buf, .len = 4,
           .deadline_ns = internal::MonotonicNowNs() + 10'000'000'000};
    }
    ASSERT_OK(backend->Submit(batch));
    for (int got = 0; got < 16;) {
      const size_t n = backend->Reap(c, 1000);
      ASSERT_GT(n, 0u) << "reads of a small file did not complete";
      for (size_t i = 0; i < n; ++i) {
        if (c[i].tag == 1) {
          waiting_res = c[i].res;
          continue;
        }
        EXPECT_EQ(c[i].res, 4) << c[i].tag;
        ++got;
        ++completed;
      }
    }
  }
  for (int i = 0; i < kJobWaitMs / 100 && waiting_res == 1; ++i) {
    const size_t n = backend->Reap(c, 100);
    for (size_t k = 0; k < n; ++k) waiting_res = c[k].tag == 1 ? c[k].res : waiting_res;
  }
  const double waited_s = static_cast<double>(internal::MonotonicNowNs() - t0) * 1e-9;
  EXPECT_GE(completed, 1100) << "too few completions to exercise the compaction";
  EXPECT_TRUE(waiting_res == -ECANCELED || waiting_res == -ETIMEDOUT || waiting_res == -EINTR) << waiting_res;
  EXPECT_GE(waited_s, 0.45);
  close(pipe_fd);
  close(file_fd);
}

}  // namespace
}  // namespace kvtier
