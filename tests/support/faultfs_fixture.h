// FaultFsTest: a gtest fixture that mounts a FaultFs over a fresh backing
// directory holding one file "f" (payload_, 8 KiB), and the small helpers
// the FaultFs tests share: syscalls that return 0 or -errno, and calls run
// in a background thread (for calls that are meant to block).
//
// Teardown order matters and is bounded: TearDown() first destroys the
// FaultFs (releasing or aborting every hung call), then waits for the
// background calls, then closes the fds the test opened, then the temporary
// directory goes.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "faultfs/fuse_abort.h"
#include "support/faultfs_mount.h"
#include "support/test_support.h"

namespace kvtier::testing {

// 0 when `result` is not negative, else -errno.
inline int Sys(long result) { return result < 0 ? -errno : 0; }

class FaultFsTest : public ::testing::Test {
 public:
  std::string Mnt(const std::string& name) const { return (dir_.path() / "mnt" / name).string(); }
  std::string Back(const std::string& name) const { return (dir_.path() / "backing" / name).string(); }

  int StatErrno(const std::string& path) {
    struct stat st;
    return Sys(stat(path.c_str(), &st));
  }

  // Opens `name` on the mount, closed at teardown; -1 (and a failure) on error.
  int OpenMnt(const std::string& name, int flags) {
    const int fd = open(Mnt(name).c_str(), flags | O_CLOEXEC);
    if (fd < 0) ADD_FAILURE() << "open " << Mnt(name) << ": " << strerror(errno);
    if (fd >= 0) fds_.push_back(fd);
    return fd;
  }

  // Opens and closes `name`: 0 or -errno of the open.
  int OpenErrno(const std::string& name, int flags) {
    const int fd = open(Mnt(name).c_str(), flags | O_CLOEXEC);
    if (fd < 0) return -errno;
    close(fd);
    return 0;
  }

  // Runs `call` on "f" opened with `flags`: 0 or -errno of the call.
  int OnOpenFile(int flags, const std::function<long(int)>& call) {
    const int fd = open(Mnt("f").c_str(), flags | O_CLOEXEC);
    if (fd < 0) return -1000 - errno;  // the open is not what is being tested
    const int result = Sys(call(fd));
    close(fd);
    return result;
  }

  // Runs `call` in a thread. The shared state outlives the test body (it is
  // kept here), so a call still blocked there is waited for only after
  // TearDown has released the mount.
  std::shared_future<long> Async(std::function<long()> call) {
    std::shared_future<long> future = std::async(std::launch::async, std::move(call)).share();
    pending_.push_back(future);
    return future;
  }

  // Whether a FUSE mount is still at the mount point.
  bool Mounted() const { return faultfs::FuseConnectionOf((dir_.path() / "mnt").string()) >= 0; }

  std::string payload_;
  void* buffer_ = nullptr;  // 64 KiB, 4096-aligned (for O_DIRECT)

 protected:
  void SetUp() override {
    if (const std::string why = FaultFs::Unavailable(); !why.empty()) GTEST_SKIP() << why;
    payload_.resize(8192);
    for (size_t i = 0; i < payload_.size(); ++i) payload_[i] = static_cast<char>('a' + (i * 7 + i / 97) % 26);
    buffer_ = std::aligned_alloc(4096, 65536);
    Result<std::unique_ptr<FaultFs>> fs =
        FaultFs::Mount((dir_.path() / "backing").string(), (dir_.path() / "mnt").string());
    ASSERT_TRUE(fs.ok()) << fs.status().ToString();
    fs_ = std::move(fs).value();
    WriteFileOrDie(Back("f"), payload_);
  }

  void TearDown() override {
    fs_.reset();
    pending_.clear();
    for (int fd : fds_) close(fd);
    std::free(buffer_);
  }

  TempDir dir_;
  std::unique_ptr<FaultFs> fs_;
  std::vector<std::shared_future<long>> pending_;
  std::vector<int> fds_;
};

}  // namespace kvtier::testing
