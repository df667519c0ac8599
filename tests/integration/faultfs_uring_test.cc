// Proves that the io_uring requests kvtier's I/O loop issues reach
// kvtier_faultfs and obey its faults: a read hung by the daemon stays in
// flight (no completion) until Release(), then completes with the data,
// both on an O_DIRECT fd and on a plain one (the kernel takes different
// paths: async direct I/O versus an io-wq worker blocked in the call); and
// openat2 (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), statx, write, fsetxattr,
// fgetxattr, mkdirat, renameat and unlinkat through the mount are each
// counted by the daemon and fail with the errno a fail rule names. The ring
// is made with liburing directly; tests skip where io_uring or FUSE is
// unavailable. A request left in flight by a failed assertion is released
// and reaped before the ring and its buffer go.
#include <fcntl.h>
#include <linux/openat2.h>
#include <liburing.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <thread>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>

#include "support/faultfs_fixture.h"

namespace kvtier::testing {
namespace {

// A ring whose destructor lets in-flight requests finish (Release) and
// reaps them, bounded, before the ring goes.
class Ring {
 public:
  explicit Ring(FaultFs* fs) : fs_(fs) { ok_ = io_uring_queue_init(8, &ring_, 0) == 0; }
  ~Ring() {
    if (!ok_) return;
    if (in_flight_ > 0 && fs_ != nullptr) fs_->Release().IgnoreError();
    while (in_flight_ > 0 && Wait(5000).has_value()) {
    }
    io_uring_queue_exit(&ring_);
  }
  bool ok() const { return ok_; }
  io_uring_sqe* Sqe() { return io_uring_get_sqe(&ring_); }
  bool Submit() {
    const int n = io_uring_submit(&ring_);
    in_flight_ += n > 0 ? n : 0;
    return n == 1;
  }
  // The next completion's result, or nullopt after timeout_ms.
  std::optional<int> Wait(int timeout_ms) {
    __kernel_timespec ts = {timeout_ms / 1000, (timeout_ms % 1000) * 1000000LL};
    io_uring_cqe* cqe = nullptr;
    if (io_uring_wait_cqe_timeout(&ring_, &cqe, &ts) != 0) return std::nullopt;
    const int res = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    --in_flight_;
    return res;
  }
  // Submits one prepared request and waits (5 s at most) for its result.
  int Run() {
    if (!Submit()) return -1000;
    return Wait(5000).value_or(-1001);
  }

 private:
  FaultFs* fs_;
  io_uring ring_ = {};
  bool ok_ = false;
  int in_flight_ = 0;
};

class FaultFsUringTest : public FaultFsTest {
 protected:
  void SetUp() override {
    FaultFsTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    io_uring probe;
    if (io_uring_queue_init(2, &probe, 0) != 0) GTEST_SKIP() << "io_uring unavailable here (seccomp or sysctl kernel.io_uring_disabled)";
    io_uring_queue_exit(&probe);
  }

  void HungReadCompletesAfterRelease(int open_flags) {
    const int fd = OpenMnt("f", O_RDONLY | open_flags);
    Ring ring(fs_.get());
    ASSERT_TRUE(ring.ok());
    ASSERT_OK(fs_->Hang("read"));
    io_uring_prep_read(ring.Sqe(), fd, buffer_, 4096, 0);
    ASSERT_TRUE(ring.Submit());
    ASSERT_TRUE(fs_->WaitHung(1, 5000));
    EXPECT_FALSE(ring.Wait(300).has_value()) << "a hung read completed";
    ASSERT_OK(fs_->Release());
    const std::optional<int> res = ring.Wait(5000);
    ASSERT_TRUE(res.has_value()) << "the read did not complete after Release";
    EXPECT_EQ(*res, 4096);
    EXPECT_EQ(std::string(static_cast<char*>(buffer_), 4096), payload_.substr(0, 4096));
  }
};

TEST_F(FaultFsUringTest, HungODirectReadCompletesAfterRelease) { HungReadCompletesAfterRelease(O_DIRECT); }

TEST_F(FaultFsUringTest, HungBufferedReadCompletesAfterRelease) { HungReadCompletesAfterRelease(0); }

// Each request through the ring, counted by the daemon under `op`.
TEST_F(FaultFsUringTest, EngineRequestsReachTheDaemon) {
  Ring ring(fs_.get());
  ASSERT_TRUE(ring.ok());
  const int dir = OpenMnt("", O_RDONLY | O_DIRECTORY);
  open_how how = {};
  how.flags = O_RDWR | O_CREAT;
  how.mode = 0644;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS;
  const auto counted = [&](const char* op, auto prep) {
    const uint64_t before = fs_->Calls(op).value();
    prep(ring.Sqe());
    const int res = ring.Run();
    EXPECT_GT(fs_->Calls(op).value(), before) << op;
    return res;
  };
  const int fd = counted("open", [&](io_uring_sqe* sqe) { io_uring_prep_openat2(sqe, dir, "g", &how); });
  ASSERT_GE(fd, 0) << strerror(-fd);
  fds_.push_back(fd);
  struct statx stx;
  EXPECT_EQ(counted("lookup", [&](io_uring_sqe* sqe) { io_uring_prep_statx(sqe, dir, "g", 0, STATX_SIZE, &stx); }), 0);
  EXPECT_EQ(counted("write", [&](io_uring_sqe* sqe) { io_uring_prep_write(sqe, fd, payload_.data(), 512, 0); }), 512);
  char value[8] = "crc";
  EXPECT_EQ(counted("xattr", [&](io_uring_sqe* sqe) { io_uring_prep_fsetxattr(sqe, fd, "user.kvtier.c", value, 0, 3); }), 0);
  EXPECT_EQ(counted("xattr", [&](io_uring_sqe* sqe) { io_uring_prep_fgetxattr(sqe, fd, "user.kvtier.c", value, sizeof(value)); }), 3);
  EXPECT_EQ(counted("mkdir", [&](io_uring_sqe* sqe) { io_uring_prep_mkdirat(sqe, dir, "d", 0755); }), 0);
  EXPECT_EQ(counted("rename", [&](io_uring_sqe* sqe) { io_uring_prep_renameat(sqe, dir, "g", dir, "d/h", 0); }), 0);
  EXPECT_EQ(counted("unlink", [&](io_uring_sqe* sqe) { io_uring_prep_unlinkat(sqe, dir, "d/h", 0); }), 0);
  EXPECT_EQ(ReadFileOrDie(Back("f")), payload_);
}

TEST_F(FaultFsUringTest, FailRulesActOnRingRequests) {
  Ring ring(fs_.get());
  ASSERT_TRUE(ring.ok());
  const int dir = OpenMnt("", O_RDONLY | O_DIRECTORY);
  const int fd = OpenMnt("f", O_RDONLY | O_DIRECT);
  open_how how = {};
  how.flags = O_RDONLY;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS;
  ASSERT_OK(fs_->Fail("open", ESTALE, "f"));
  io_uring_prep_openat2(ring.Sqe(), dir, "f", &how);
  EXPECT_EQ(ring.Run(), -ESTALE);
  ASSERT_OK(fs_->Fail("read", EIO, "f"));
  io_uring_prep_read(ring.Sqe(), fd, buffer_, 4096, 0);
  EXPECT_EQ(ring.Run(), -EIO);
  ASSERT_OK(fs_->Clear());
  ASSERT_OK(fs_->Short("read"));
  io_uring_prep_read(ring.Sqe(), fd, buffer_, 8192, 0);
  EXPECT_EQ(ring.Run(), 4096);
}

// Whether `pid` exits (and is reaped) within timeout_ms.
bool ExitsWithin(pid_t pid, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (waitpid(pid, nullptr, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// The shutdown facts kvtier's sick-volume design rests on: a process that
// exits holding an fd on a FUSE mount whose server does not answer FLUSH
// never finishes exiting (close sends FLUSH and waits for it, and SIGKILL
// does not end that wait); an io_uring read still in flight does not hold up
// the exit. The children only make async-signal-safe calls (raw syscalls;
// liburing's setup only mmaps).
TEST_F(FaultFsUringTest, ExitWaitsForAHungFlushButNotForAReadInFlight) {
  ASSERT_OK(fs_->Hang("flush", "f"));
  const std::string path = Mnt("f");
  pid_t child = fork();
  if (child == 0) _exit(open(path.c_str(), O_RDONLY) >= 0 ? 0 : 1);  // exits with the fd open
  ASSERT_GT(child, 0);
  EXPECT_FALSE(ExitsWithin(child, 500)) << "the exit did not wait for FLUSH";
  kill(child, SIGKILL);
  EXPECT_FALSE(ExitsWithin(child, 300)) << "SIGKILL ended the wait for FLUSH";
  ASSERT_OK(fs_->Release());
  ASSERT_TRUE(ExitsWithin(child, 5000));

  ASSERT_OK(fs_->Hang("read", "f"));
  child = fork();
  if (child == 0) {
    io_uring ring;
    const int fd = open(path.c_str(), O_RDONLY | O_DIRECT);
    if (fd < 0 || io_uring_queue_init(2, &ring, 0) != 0) _exit(2);
    io_uring_prep_read(io_uring_get_sqe(&ring), fd, buffer_, 4096, 0);
    _exit(io_uring_submit(&ring) == 1 ? 0 : 3);
  }
  ASSERT_GT(child, 0);
  ASSERT_TRUE(fs_->WaitHung(1, 5000));
  EXPECT_TRUE(ExitsWithin(child, 5000)) << "the exit waited for the read in flight";
}

}  // namespace
}  // namespace kvtier::testing
