// Proves the fs tier's `inline_metadata` option (it saves CPU per GB stored):
// with it, the io_uring backend runs mkdirat, renameat, unlinkat and
// fsetxattr during Submit on the submitting thread (their effects are on
// disk before any Reap) with the same results as through the ring; "auto"
// tells a local filesystem (this test's temp dir, ext4 or tmpfs here) from
// others (procfs, a missing path); and the tier stores and loads the same
// bytes with the option on and off. Seeded rows; seed printed on failure.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>

#include "fs/fs_tier_internal.h"
#include "io/backend.h"
#include "kvtier/fs_tier.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using internal::IoOp;
using internal::IoRequest;

std::map<uint64_t, int64_t> ReapAll(internal::IoBackend* backend, size_t n) {
  std::map<uint64_t, int64_t> done;
  internal::IoCompletion c[8];
  for (int i = 0; i < 100 && done.size() < n; ++i) {
    const size_t got = backend->Reap(c, 100);
    for (size_t k = 0; k < got; ++k) done[c[k].tag] = c[k].res;
  }
  return done;
}

TEST(InlineMetadata, UringBackendRunsDirectoryAndXattrSyscallsDuringSubmit) {
  auto made = internal::MakeUringBackend(16, {.inline_metadata = true});
  if (!made.ok()) GTEST_SKIP() << "no io_uring here: " << made.status().ToString();
  std::unique_ptr<internal::IoBackend> backend = std::move(*made);
  testing::TempDir dir;
  const int dirfd = open(dir.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dirfd, 0);
  testing::WriteFileOrDie(dir.path() / "a", "x");
  testing::WriteFileOrDie(dir.path() / "gone", "y");
  const int fd = open((dir.path() / "a").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const char value[4] = {1, 2, 3, 4};
  IoRequest reqs[5];
  reqs[0] = {.tag = 1, .op = IoOp::kMkdir, .dirfd = dirfd, .path = "d", .mode = 0755};
  reqs[1] = {.tag = 2, .op = IoOp::kFsetxattr, .fd = fd, .name = "user.kvtier.test",
             .buf = const_cast<char*>(value), .len = 4};
  reqs[2] = {.tag = 3, .op = IoOp::kRename, .dirfd = dirfd, .path = "a", .path2 = "b"};
  reqs[3] = {.tag = 4, .op = IoOp::kUnlink, .dirfd = dirfd, .path = "gone"};
  reqs[4] = {.tag = 5, .op = IoOp::kMkdir, .dirfd = dirfd, .path = "d", .mode = 0755};  // exists now
  ASSERT_OK(backend->Submit(reqs));
  // Before any Reap: every change is already made.
  EXPECT_TRUE(fs::is_directory(dir.path() / "d"));
  EXPECT_TRUE(fs::exists(dir.path() / "b"));
  EXPECT_FALSE(fs::exists(dir.path() / "a"));
  EXPECT_FALSE(fs::exists(dir.path() / "gone"));
  const std::map<uint64_t, int64_t> done = ReapAll(backend.get(), 5);
  ASSERT_EQ(done.size(), 5u);
  EXPECT_EQ(done.at(1), 0);
  // ENOTSUP only where this filesystem has no user xattrs.
  EXPECT_TRUE(done.at(2) == 0 || done.at(2) == -ENOTSUP) << done.at(2);
  if (done.at(2) == 0) {
    char got[8];
    EXPECT_EQ(fgetxattr(fd, "user.kvtier.test", got, sizeof got), 4);
    EXPECT_EQ(std::memcmp(got, value, 4), 0);
  }
  EXPECT_EQ(done.at(3), 0);
  EXPECT_EQ(done.at(4), 0);
  EXPECT_EQ(done.at(5), -EEXIST);
  close(fd);
  close(dirfd);
}

TEST(InlineMetadata, AutoMeansALocalFilesystem) {
  testing::TempDir dir;
  EXPECT_TRUE(internal::LocalFilesystem(dir.path())) << dir.path() << " (the temp dir: ext4 or tmpfs here)";
  EXPECT_FALSE(internal::LocalFilesystem("/proc"));
  EXPECT_FALSE(internal::LocalFilesystem((dir.path() / "missing").string()));
}

TEST(InlineMetadata, TierRoundTripsWithTheOptionOnAndOff) {
  constexpr uint64_t kRow = 16 * 1024;
  constexpr size_t kRows = 24;
  const uint64_t seed = testing::TestSeed();
  testing::AlignedRows rows(kRows, kRow, seed);
  std::vector<OffloadKey> keys;
  for (size_t i = 0; i < kRows; ++i) {
    std::vector<uint8_t> bytes(32);
    for (size_t b = 0; b < bytes.size(); ++b) bytes[b] = static_cast<uint8_t>((seed >> (b % 8)) + i * 31 + b);
    keys.push_back({BlockHash::FromBytes(bytes).value(), 0});
  }
  for (const InlineMetadata mode : {InlineMetadata::kOn, InlineMetadata::kOff}) {
    testing::TempDir root;
    FsTierOpenOptions o;
    o.tier.root_dir = root.path().string();
    o.tier.io_backend = IoBackendKind::kUring;
    o.tier.inline_metadata = mode;
    o.ns.model_name = "inline/model";
    o.row_bytes = kRow;
    auto tier = FsTier::Open(o);
    if (!tier.ok() && tier.status().code() == StatusCode::kUnavailable) GTEST_SKIP() << "no io_uring here";
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    JobResult stored = testing::WaitForJob(tier->get(), (*tier)->SubmitStore(keys, rows.Const()).value());
    for (const KeyResult& k : stored.keys) ASSERT_EQ(k.outcome, KeyOutcome::kOk) << k.status.ToString();
    testing::AlignedRows back(kRows, kRow, seed + 1);
    JobResult loaded = testing::WaitForJob(tier->get(), (*tier)->SubmitLoad(keys, back.Mut()).value());
    for (size_t i = 0; i < kRows; ++i) {
      ASSERT_EQ(loaded.keys[i].outcome, KeyOutcome::kOk) << i << ": " << loaded.keys[i].status.ToString();
      EXPECT_EQ(std::memcmp(back.Row(i).data(), rows.Row(i).data(), kRow), 0) << "row " << i;
    }
  }
}

}  // namespace
}  // namespace kvtier
