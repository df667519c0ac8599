// Proves that kvtier_faultfs's faults act on real syscalls through a real
// FUSE mount, so that tests built on FaultFs test what they claim: a hung
// call blocks the caller in the kernel until Release() and then returns the
// data; a delay delays; each fail rule makes the syscall return that errno;
// short rules shorten reads and writes; rules match only their path; calls
// are counted; "gone" leaves a mount that answers ENOTCONN; and the fixture's
// teardown is bounded even with a call still hung or the daemon stopped.
// Each test mounts its own FaultFs over a temporary backing directory, runs
// the syscalls (in a thread where they are meant to block) and checks the
// result; TearDown unmounts even after a failed assertion, and every wait is
// bounded. Where FUSE cannot be mounted, each test skips with one line.
// faultfs_uring_test.cc does the same for io_uring requests.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <functional>
#include <future>
#include <string>
#include <vector>

#include "support/faultfs_fixture.h"

namespace kvtier::testing {
namespace {

TEST_F(FaultFsTest, PassthroughServesFilesXattrsAndODirect) {
  const std::string data = ReadFileOrDie(Mnt("f"));
  EXPECT_EQ(data, payload_);
  const std::string value = "crc";
  ASSERT_EQ(setxattr(Mnt("f").c_str(), "user.kvtier.crc32c", value.data(), value.size(), 0), 0) << strerror(errno);
  char got[16] = {};
  EXPECT_EQ(getxattr(Mnt("f").c_str(), "user.kvtier.crc32c", got, sizeof(got)), 3);
  EXPECT_EQ(std::string(got), value);
  const int fd = open(Mnt("f").c_str(), O_RDONLY | O_DIRECT);
  ASSERT_GE(fd, 0) << strerror(errno);
  EXPECT_EQ(pread(fd, buffer_, 4096, 0), 4096);
  EXPECT_EQ(std::string(static_cast<char*>(buffer_), 4096), payload_.substr(0, 4096));
  close(fd);
}

TEST_F(FaultFsTest, HungReadBlocksUntilReleaseThenReturnsTheData) {
  const int fd = OpenMnt("f", O_RDONLY);
  ASSERT_OK(fs_->Hang("read"));
  auto read = Async([this, fd] { return static_cast<long>(pread(fd, buffer_, 4096, 0)); });
  ASSERT_TRUE(fs_->WaitHung(1, 5000));
  EXPECT_EQ(read.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  ASSERT_OK_AND_ASSIGN(const size_t hung, fs_->Hung());
  EXPECT_EQ(hung, 1u);
  ASSERT_OK(fs_->Release());
  ASSERT_EQ(read.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(read.get(), 4096);
  EXPECT_EQ(std::string(static_cast<char*>(buffer_), 4096), payload_.substr(0, 4096));
  ASSERT_OK_AND_ASSIGN(const size_t after, fs_->Hung());
  EXPECT_EQ(after, 0u);
}

TEST_F(FaultFsTest, ClearKeepsHungCallsHung) {
  ASSERT_OK(fs_->Hang("lookup", "f"));
  auto stat_call = Async([this] { return static_cast<long>(StatErrno(Mnt("f"))); });
  ASSERT_TRUE(fs_->WaitHung(1, 5000));
  ASSERT_OK(fs_->Clear());
  // New calls pass. (Not a lookup of "f" itself: the VFS makes a second
  // lookup of a name wait for the first one in flight.)
  WriteFileOrDie(Back("f2"), payload_);
  EXPECT_EQ(StatErrno(Mnt("f2")), 0);
  EXPECT_EQ(stat_call.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  ASSERT_OK(fs_->Release());
  ASSERT_EQ(stat_call.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(stat_call.get(), 0);
}

TEST_F(FaultFsTest, DelayMakesAStatWait) {
  ASSERT_OK(fs_->Delay("lookup", 300, "f"));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(StatErrno(Mnt("f")), 0);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(300));
  EXPECT_LT(waited, std::chrono::seconds(5));
}

// One syscall per operation group, each returning 0 or -errno, and the path
// substring its rule names ("" for the calls FUSE makes on the root).
struct OpCase {
  const char* op;
  const char* path_substr;
  std::function<int(FaultFsTest&)> call;
};

std::vector<OpCase> OpCases() {
  using T = FaultFsTest;
  return {
      {"lookup", "f", [](T& t) { return t.StatErrno(t.Mnt("f")); }},
      {"open", "f", [](T& t) { return t.OpenErrno("f", O_RDONLY); }},
      {"read", "f", [](T& t) { return t.OnOpenFile(O_RDONLY, [&](int fd) { return pread(fd, t.buffer_, 16, 0); }); }},
      {"write", "f", [](T& t) { return t.OnOpenFile(O_WRONLY, [](int fd) { return pwrite(fd, "x", 1, 0); }); }},
      {"xattr", "f", [](T& t) { return Sys(setxattr(t.Mnt("f").c_str(), "user.a", "1", 1, 0)); }},
      {"rename", "f", [](T& t) { return Sys(rename(t.Mnt("f").c_str(), t.Mnt("g").c_str())); }},
      {"unlink", "f", [](T& t) { return Sys(unlink(t.Mnt("f").c_str())); }},
      {"mkdir", "d", [](T& t) { return Sys(mkdir(t.Mnt("d").c_str(), 0755)); }},
      {"readdir", "", [](T& t) { return t.OpenErrno(".", O_RDONLY | O_DIRECTORY); }},
      {"statfs", "", [](T& t) {
         struct statvfs st;
         return Sys(statvfs(t.Mnt("f").c_str(), &st));
       }},
      {"flush", "f", [](T& t) { return t.OnOpenFile(O_RDONLY, [](int fd) { return fsync(fd); }); }},
      {"utimens", "f", [](T& t) { return Sys(utimensat(AT_FDCWD, t.Mnt("f").c_str(), nullptr, 0)); }},
  };
}

TEST_F(FaultFsTest, FailMakesEachOperationReturnTheErrno) {
  for (const OpCase& c : OpCases()) {
    SCOPED_TRACE(c.op);
    ASSERT_OK(fs_->Fail(c.op, EIO, c.path_substr));
    EXPECT_EQ(c.call(*this), -EIO);
    ASSERT_OK(fs_->Clear());
    EXPECT_EQ(c.call(*this), 0);  // and the call works again
    WriteFileOrDie(Back("f"), payload_);  // rename and unlink took it away
  }
}

TEST_F(FaultFsTest, FailReturnsEachNamedErrno) {
  for (int err : {EIO, ENOSPC, ESTALE, ENOTCONN, EACCES, ENODATA, ENOENT, EROFS}) {
    SCOPED_TRACE(strerrorname_np(err));
    ASSERT_OK(fs_->Fail("open", err, "f"));
    EXPECT_EQ(OpenErrno("f", O_RDONLY), -err);
    ASSERT_OK(fs_->Clear());
  }
  // The protocol takes names as well as numbers.
  ASSERT_OK_AND_ASSIGN(const std::string reply, fs_->Command("fail open ENOSPC f"));
  EXPECT_EQ(reply, "ok");
  EXPECT_EQ(OpenErrno("f", O_RDONLY), -ENOSPC);
  EXPECT_FALSE(fs_->Command("fail open ENOTANERRNO").ok());
  EXPECT_EQ(fs_->Hang("nosuchop").code(), StatusCode::kInvalidArgument);
}

TEST_F(FaultFsTest, CountedFailFailsOnlyThatManyCalls) {
  const int fd = OpenMnt("f", O_RDONLY);
  ASSERT_OK(fs_->Fail("read", ENOSPC, "", 2));
  EXPECT_EQ(Sys(pread(fd, buffer_, 16, 0)), -ENOSPC);
  EXPECT_EQ(Sys(pread(fd, buffer_, 16, 0)), -ENOSPC);
  EXPECT_EQ(pread(fd, buffer_, 16, 0), 16);
}

TEST_F(FaultFsTest, ShortReadsAndWritesMoveHalf) {
  const int fd = OpenMnt("f", O_RDWR);
  ASSERT_OK(fs_->Short("read"));
  EXPECT_EQ(pread(fd, buffer_, 4096, 0), 2048);
  EXPECT_EQ(pread(fd, buffer_, 1, 0), 1);  // at least one byte
  ASSERT_OK(fs_->Clear());
  ASSERT_OK(fs_->Short("write", "f"));
  EXPECT_EQ(pwrite(fd, payload_.data(), 4096, 0), 2048);
}

TEST_F(FaultFsTest, RulesMatchOnlyTheirPathAndTheOpenedPath) {
  WriteFileOrDie(Back("good"), payload_);
  WriteFileOrDie(Back("bad"), payload_);
  const int good = OpenMnt("good", O_RDONLY);
  const int bad = OpenMnt("bad", O_RDONLY);
  ASSERT_OK(fs_->Fail("read", EIO, "bad"));
  EXPECT_EQ(Sys(pread(bad, buffer_, 16, 0)), -EIO);
  EXPECT_EQ(pread(good, buffer_, 16, 0), 16);
  // A file renamed after opening is still matched by the path it was opened with.
  ASSERT_EQ(rename(Mnt("bad").c_str(), Mnt("renamed").c_str()), 0);
  EXPECT_EQ(Sys(pread(bad, buffer_, 16, 0)), -EIO);
  // A hung path does not stop calls on other paths.
  ASSERT_OK(fs_->Hang("lookup", "slow"));
  auto slow = Async([this] { return static_cast<long>(StatErrno(Mnt("slow"))); });
  ASSERT_TRUE(fs_->WaitHung(1, 5000));
  EXPECT_EQ(StatErrno(Mnt("good")), 0);
  ASSERT_OK(fs_->Release());
  EXPECT_EQ(slow.get(), -ENOENT);
}

TEST_F(FaultFsTest, CountsCalls) {
  const int fd = OpenMnt("f", O_RDONLY);
  ASSERT_OK_AND_ASSIGN(const uint64_t before, fs_->Calls("read"));
  for (int i = 0; i < 3; ++i) ASSERT_EQ(pread(fd, buffer_, 16, 0), 16);
  ASSERT_OK_AND_ASSIGN(const uint64_t after, fs_->Calls("read"));
  EXPECT_EQ(after - before, 3u);  // direct_io: no read is served from the page cache
  ASSERT_OK_AND_ASSIGN(const uint64_t all, fs_->Calls("all"));
  EXPECT_GE(all, after);
}

TEST_F(FaultFsTest, GoneLeavesAMountThatAnswersEnotconn) {
  const int fd = OpenMnt("f", O_RDONLY);
  ASSERT_OK(fs_->Gone());
  EXPECT_EQ(fs_->daemon_pid(), -1);
  EXPECT_EQ(StatErrno(Mnt("f")), -ENOTCONN);
  EXPECT_EQ(Sys(pread(fd, buffer_, 16, 0)), -ENOTCONN);
  EXPECT_FALSE(fs_->Hung().ok());
  fs_.reset();
  EXPECT_FALSE(Mounted());
}

TEST_F(FaultFsTest, TeardownIsBoundedWithACallStillHung) {
  const int fd = OpenMnt("f", O_RDONLY);
  ASSERT_OK(fs_->Hang("all"));
  auto read = Async([this, fd] { return static_cast<long>(pread(fd, buffer_, 16, 0)); });
  ASSERT_TRUE(fs_->WaitHung(1, 5000));
  const auto start = std::chrono::steady_clock::now();
  fs_.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(read.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_FALSE(Mounted());
}

TEST_F(FaultFsTest, TeardownIsBoundedWithTheDaemonStopped) {
  const int fd = OpenMnt("f", O_RDONLY);
  ASSERT_TRUE(fs_->StopDaemon());
  auto read = Async([this, fd] { return static_cast<long>(pread(fd, buffer_, 16, 0)); });
  EXPECT_EQ(read.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  const auto start = std::chrono::steady_clock::now();
  fs_.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
  ASSERT_EQ(read.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(read.get(), -1);  // the connection was aborted under it
  EXPECT_FALSE(Mounted());
}

}  // namespace
}  // namespace kvtier::testing
