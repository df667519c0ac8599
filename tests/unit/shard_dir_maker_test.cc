// Proves the store's shard-directory sub-machine (src/fs/shard_dir_maker.h),
// driven request by request on a real directory as a store drives it: in a
// fresh tree it makes the block directory in root_dir's fd and each shard
// directory with mkdirat in its parent's fd (never by a path from root_dir),
// every open an openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS; where
// directories are held it opens the deepest one in its parent's fd and
// caches it; a symlinked shard directory fails it (ELOOP, nothing made in the
// target); a held directory that gc removed is dropped and made and opened
// again; and a late answer after abandonment closes the fd it opened.
#include "fs/shard_dir_maker.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "io/backend.h"
#include "support/test_support.h"

namespace kvtier::internal {
namespace {

namespace fs = std::filesystem;

const BlockPathParts kPath{"ns_r0", "abc", "de_g0", "x.bin"};

class ShardDirMakerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shared_.root = UniqueFd(::open(tmp_.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(shared_.root.valid());
    shared_.root_dir = tmp_.path().string();
  }
  // Runs the maker's requests with real syscalls until it is idle.
  void Drive(ShardDirMaker* maker) {
    for (int i = 0; maker->busy() && i < 64; ++i) {
      IoRequest req;
      maker->Fill(&req);
      log_.push_back(req);
      maker->OnCompletion(ExecuteSync(req));
    }
    ASSERT_FALSE(maker->busy());
  }
  bool IsDir(const std::string& rel) const { return fs::is_directory(tmp_.path() / rel); }

  testing::TempDir tmp_;
  TierShared shared_;
  std::vector<IoRequest> log_;
};

TEST_F(ShardDirMakerTest, MakesEachLevelInItsParentsFdWhereNothingIsHeld) {
  shared_.hold_shard_dirs = false;
  ShardDirMaker maker(&shared_, kPath);
  EXPECT_FALSE(maker.Begin());  // nothing held: the store's first request names the path
  ASSERT_TRUE(maker.Remake(-ENOENT));
  Drive(&maker);
  ASSERT_FALSE(maker.failed()) << maker.error_what();
  EXPECT_TRUE(IsDir("ns_r0/abc/de_g0"));
  EXPECT_EQ(maker.held(), nullptr);
  for (int level = 0; level < 3; ++level) EXPECT_TRUE(maker.made(level)) << level;
  int mkdirs = 0;
  for (const IoRequest& req : log_) {
    if (req.op == IoOp::kOpen) {
      EXPECT_EQ(req.resolve, kResolveInTree);
    }
    if (req.op != IoOp::kMkdir) continue;
    // The block directory in root_dir's fd; below it, one name in the parent's fd.
    EXPECT_EQ(req.dirfd == shared_.root.get(), std::string(req.path) == "ns_r0") << req.path;
    EXPECT_EQ(std::string(req.path).find('/'), std::string::npos) << req.path;
    ++mkdirs;
  }
  EXPECT_EQ(mkdirs, 3);
}

TEST_F(ShardDirMakerTest, OpensTheDeepestInItsParentAndHoldsIt) {
  ASSERT_TRUE(fs::create_directory(tmp_.path() / "ns_r0"));
  ShardDirMaker maker(&shared_, kPath);
  ASSERT_TRUE(maker.Begin());
  Drive(&maker);
  ASSERT_FALSE(maker.failed()) << maker.error_what();
  ASSERT_NE(maker.held(), nullptr);
  EXPECT_EQ(shared_.shard_dirs.Find("ns_r0/abc/de_g0", MonotonicNowNs()), maker.held());
  EXPECT_FALSE(maker.made(0));  // it was there
  EXPECT_TRUE(maker.made(1) && maker.made(2));
  ASSERT_FALSE(log_.empty());
  EXPECT_EQ(log_.back().op, IoOp::kOpen);
  EXPECT_STREQ(log_.back().path, "de_g0");  // one name, in <hhh>'s fd
  EXPECT_NE(log_.back().dirfd, shared_.root.get());

  ShardDirMaker again(&shared_, kPath);  // a later store finds it cached: no request
  EXPECT_FALSE(again.Begin());
  EXPECT_EQ(again.held(), maker.held());
}

TEST_F(ShardDirMakerTest, RefusesASymlinkedShardDirectory) {
  testing::TempDir elsewhere;
  ASSERT_TRUE(fs::create_directories(tmp_.path() / "ns_r0"));
  fs::create_directory_symlink(elsewhere.path(), tmp_.path() / "ns_r0/abc");
  ShardDirMaker maker(&shared_, kPath);
  ASSERT_TRUE(maker.Begin());
  Drive(&maker);
  ASSERT_TRUE(maker.failed());
  EXPECT_EQ(maker.error(), -ELOOP);
  EXPECT_NE(maker.error_what().find("refused"), std::string::npos) << maker.error_what();
  EXPECT_TRUE(fs::is_empty(elsewhere.path()));
  EXPECT_EQ(maker.held(), nullptr);
}

TEST_F(ShardDirMakerTest, AHeldDirectoryGcRemovedIsMadeAndOpenedAgain) {
  ShardDirMaker maker(&shared_, kPath);
  ASSERT_TRUE(maker.Begin());
  Drive(&maker);
  ASSERT_NE(maker.held(), nullptr);
  const ShardDirs::Dir* first = maker.held().get();
  fs::remove_all(tmp_.path() / "ns_r0/abc");  // gc emptied and removed them
  ASSERT_TRUE(maker.Reopen());
  EXPECT_EQ(shared_.shard_dirs.Find("ns_r0/abc/de_g0", MonotonicNowNs()), nullptr);  // dropped for every op
  Drive(&maker);
  ASSERT_FALSE(maker.failed()) << maker.error_what();
  EXPECT_TRUE(IsDir("ns_r0/abc/de_g0"));
  EXPECT_NE(maker.held().get(), first);
  EXPECT_EQ(shared_.shard_dirs.Find("ns_r0/abc/de_g0", MonotonicNowNs()), maker.held());
}

TEST_F(ShardDirMakerTest, ALateOpenAfterAbandonmentIsClosed) {
  ASSERT_TRUE(fs::create_directories(tmp_.path() / "ns_r0/abc/de_g0"));
  ShardDirMaker maker(&shared_, kPath);
  ASSERT_TRUE(maker.Begin());
  EXPECT_STREQ(maker.Syscall(), "open");
  EXPECT_EQ(maker.InFlightPath(), "ns_r0/abc/de_g0");
  IoRequest req;
  maker.Fill(&req);
  const int64_t fd = ExecuteSync(req);
  ASSERT_GE(fd, 0);
  maker.AfterLate(fd);  // the op was abandoned meanwhile: its result is taken, the fd must not leak
  EXPECT_FALSE(maker.busy());
  EXPECT_LT(::fcntl(static_cast<int>(fd), F_GETFD), 0);
  EXPECT_EQ(shared_.shard_dirs.size(), 0u);
}

}  // namespace
}  // namespace kvtier::internal
