// Proves that FsTier::Open enforces the I/O slot limit itself, for callers of
// the C++ API who bypass the config parser, that the
// syscall backend reports a refused thread as a Status instead of
// std::terminate, and that the O_DIRECT probe blames the filesystem only
// for EINVAL. Method: open tiers with slot counts at, above and far
// above kFsTierIoSlotsMax (the far case, which would spin forever if unchecked, runs in
// a forked child under an alarm); start a syscall pool under a tight
// RLIMIT_AS in a forked child; run the probe in a directory removed under
// its fd (ENOENT, which says nothing about O_DIRECT) with a log sink.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "fs/fs_tier_internal.h"
#include "io/backend.h"
#include "kvtier/fs_tier.h"
#include "kvtier/log.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;

FsTierOpenOptions Options(const fs::path& root, int reads, int writes, IoBackendKind backend) {
  FsTierOpenOptions o;
  o.tier.root_dir = root.string();
  o.ns.model_name = "limits/model";
  o.row_bytes = 4096;
  o.tier.n_read_threads = reads;
  o.tier.n_write_threads = writes;
  o.tier.io_backend = backend;
  return o;
}

TEST(FsTierLimits, SlotsAboveTheLimitAreRefusedAtOpen) {
  testing::TempDir dir;
  for (IoBackendKind backend : {IoBackendKind::kAuto, IoBackendKind::kSyscall}) {
    Result<std::unique_ptr<FsTier>> tier = FsTier::Open(Options(dir.path(), 8100, 100, backend));
    ASSERT_FALSE(tier.ok());
    EXPECT_EQ(tier.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(tier.status().message().find("at most 8192"), std::string::npos) << tier.status().ToString();
  }
}

// 2^29 + 2^29 slots: an unchecked sum would overflow the ring size loop and
// spin forever.
TEST(FsTierLimits, SlotSumThatOverflowsIsRefusedNotSpun) {
  testing::TempDir dir;
  const FsTierOpenOptions o = Options(dir.path(), 1 << 29, 1 << 29, IoBackendKind::kAuto);
  EXPECT_EXIT(
      {
        alarm(30);
        Result<std::unique_ptr<FsTier>> tier = FsTier::Open(o);
        _exit(!tier.ok() && tier.status().code() == StatusCode::kInvalidArgument ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// The largest ring the limit allows is one the kernel accepts.
TEST(FsTierLimits, SlotsAtTheLimitOpenAnIoUringTier) {
  testing::TempDir dir;
  Result<std::unique_ptr<FsTier>> tier =
      FsTier::Open(Options(dir.path(), kFsTierIoSlotsMax - 1, 1, IoBackendKind::kUring));
  if (!tier.ok() && tier.status().code() == StatusCode::kUnavailable) {
    GTEST_SKIP() << "io_uring refused here (seccomp or kernel.io_uring_disabled): " << tier.status().ToString();
  }
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
}

// In a forked child: with address space for a few thread stacks at most,
// a 1000-thread pool cannot start. Exits 0 when that is a kUnavailable Status.
[[noreturn]] void StartPoolUnderTightAddressSpace() {
  std::ifstream status("/proc/self/status");
  std::string line;
  uint64_t vm_kib = 0;
  while (std::getline(status, line)) {
    if (line.rfind("VmSize:", 0) == 0) vm_kib = std::stoull(line.substr(7));
  }
  struct rlimit limit {};
  limit.rlim_cur = limit.rlim_max = (vm_kib + 32 * 1024) * 1024;
  if (vm_kib == 0 || setrlimit(RLIMIT_AS, &limit) != 0) _exit(3);
  Result<std::unique_ptr<internal::IoBackend>> pool = internal::MakeSyncBackend(1000);
  _exit(!pool.ok() && pool.status().code() == StatusCode::kUnavailable ? 0 : 1);
}

TEST(FsTierLimits, SyscallPoolThatTheOsRefusesIsAStatusNotATerminate) {
  EXPECT_EXIT(StartPoolUnderTightAddressSpace(), ::testing::ExitedWithCode(0), "");
}

// Collects warnings while alive.
class WarningLog {
 public:
  WarningLog() {
    SetLogSink([this](LogLevel, std::string_view m) {
      std::lock_guard lock(mu_);
      lines_.emplace_back(m);
    });
  }
  ~WarningLog() { SetLogSink(nullptr); }
  std::string Text() {
    std::lock_guard lock(mu_);
    std::string all;
    for (const std::string& l : lines_) all += l + "\n";
    return all;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

// A failure other than EINVAL (here ENOENT: the directory is gone) says
// nothing about O_DIRECT: it stays on, and the log names the errno, not tmpfs.
TEST(FsTierLimits, ODirectProbeBlamesTheFilesystemOnlyForEinval) {
  testing::TempDir dir;
  const fs::path gone = dir.path() / "gone";
  fs::create_directory(gone);
  const int fd = open(gone.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  fs::remove(gone);
  WarningLog log;
  EXPECT_TRUE(internal::ProbeODirect(fd, gone.string(), 1, /*want_direct=*/true));
  close(fd);
  const std::string text = log.Text();
  EXPECT_NE(text.find("No such file"), std::string::npos) << text;
  EXPECT_EQ(text.find("tmpfs"), std::string::npos) << text;
}

}  // namespace
}  // namespace kvtier
