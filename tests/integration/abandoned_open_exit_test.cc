// Proves that an engine process whose fs tier open was abandoned on a hung
// mount (FsTier::Open's watched thread, src/io/io_watch.h) exits normally
// and cleanly, on a FUSE mount (tests/support/faultfs) whose lease create
// is held, with the process a real child (this binary run again):
//  * returning from main while the open is still blocked in the kernel
//    (the daemon stopped: a request it has not read yet, which exit_group's
//    SIGKILL ends) exits 0;
//  * the mount answering in the middle of exit, after the process's
//    function-local statics have been destroyed (an atexit handler
//    registered before any kvtier code ran waits there for it), lets the
//    late open finish (it makes its tier and closes it at once) and the
//    process still exits 0; and the abandoned open, from its start to that
//    late end, registers no destructor to run at exit (counted by an
//    interposed __cxa_atexit): it constructs no static that exit destroys,
//    which is what its thread could outlive.
#include <gtest/gtest.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "kvtier/fs_tier.h"
#include "support/faultfs_mount.h"
#include "support/test_support.h"

namespace {

// Registrations of exit-time destructors while g_counting is set.
std::atomic<bool> g_counting{false};
std::atomic<int> g_registered{0};

}  // namespace

// Every static's exit-time destructor is registered here (libstdc++ and the
// compiler call it); counted, then passed to the C library's.
extern "C" int __cxa_atexit(void (*fn)(void*), void* arg, void* dso) {
  using Real = int (*)(void (*)(void*), void*, void*);
  static const Real real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "__cxa_atexit"));
  if (g_counting.load()) g_registered.fetch_add(1);
  return real(fn, arg, dso);
}

namespace kvtier {
namespace {

namespace fs = std::filesystem;

constexpr const char* kModeEnv = "KVTIER_ABANDON_CHILD";  // "blocked" or "late"
constexpr const char* kRootEnv = "KVTIER_ABANDON_ROOT";
constexpr const char* kFdsEnv = "KVTIER_ABANDON_FDS";  // "<to parent> <from parent>"
// Child exit codes that name what went wrong.
constexpr int kNotTimedOut = 3, kThreadsLeft = 4, kNoParent = 5, kRegistered = 6;

int g_to_parent = -1, g_from_parent = -1;

size_t Threads() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// Runs at exit after every static constructed later was destroyed: tells
// the parent, waits for it to release the mount, then for the late open to
// end (its thread and the threads of the tier it made and closed).
void LateOpenAtExit() {
  char byte = 'x';
  if (write(g_to_parent, &byte, 1) != 1 || read(g_from_parent, &byte, 1) != 1) _exit(kNoParent);
  for (int i = 0; i < 1000 && Threads() > 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  g_counting = false;
  if (Threads() > 1) _exit(kThreadsLeft);
  if (g_registered.load() != 0) {
    std::fprintf(stderr, "the abandoned open registered %d exit-time destructor(s)\n", g_registered.load());
    _exit(kRegistered);
  }
}

FsTierOpenOptions Options(const std::string& root) {
  FsTierOpenOptions o;
  o.tier.root_dir = root;
  o.tier.io_timeout_ms = 300;
  o.ns.model_name = "kvtier-test/abandoned-open";
  o.ns.kv_cache_groups.push_back({16, {"l0"}});
  o.row_bytes = 4096;
  return o;
}

// The child: abandons an open, then returns from main (through exit).
bool RunChildIfAsked() {
  const char* mode = std::getenv(kModeEnv);
  if (mode == nullptr) return false;
  const bool late = std::string(mode) == "late";
  if (late) {
    if (std::sscanf(std::getenv(kFdsEnv), "%d %d", &g_to_parent, &g_from_parent) != 2) _exit(kNoParent);
    std::atexit(LateOpenAtExit);  // before any kvtier static: runs after their destructors
    g_counting = true;            // from here to the late open's end
  }
  auto tier = FsTier::Open(Options(std::getenv(kRootEnv)));
  if (tier.ok() || tier.status().code() != StatusCode::kTimedOut) {
    std::fprintf(stderr, "open: %s\n", tier.ok() ? "ok" : tier.status().ToString().c_str());
    _exit(kNotTimedOut);
  }
  std::exit(0);
}
[[maybe_unused]] const bool g_child = RunChildIfAsked();

class AbandonedOpenExitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = testing::FaultFs::Unavailable(); !why.empty()) GTEST_SKIP() << why;
    ASSERT_OK_AND_ASSIGN(mount_, testing::FaultFs::Mount((dir_.path() / "backing").string(),
                                                         (dir_.path() / "mnt").string()));
    ASSERT_OK(mount_->Hang("open", "leases/"));  // the lease's create: the open's last call
  }
  // Runs this binary as the child; returns its wait status. `fds`: the pipes' ends it gets.
  int RunChild(const char* mode, const std::string& fds = "") {
    const pid_t pid = fork();
    if (pid == 0) {
      setenv(kModeEnv, mode, 1);
      setenv(kRootEnv, mount_->mountpoint().c_str(), 1);
      setenv(kFdsEnv, fds.c_str(), 1);
      execl("/proc/self/exe", "abandoned_open_exit_test", static_cast<char*>(nullptr));
      _exit(127);
    }
    child_ = pid;
    return pid;
  }
  int Wait() {
    int status = -1;
    for (int i = 0; i < 3000 && waitpid(child_, &status, WNOHANG) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (waitpid(child_, &status, WNOHANG) == 0) {  // a hung child fails the test, never the run
      kill(child_, SIGKILL);
      kill(mount_->daemon_pid(), SIGCONT);
      (void)mount_->Release();  // a request the daemon holds is not ended by SIGKILL
      waitpid(child_, &status, 0);
      ADD_FAILURE() << "the child did not exit within 30 s: killed";
    }
    return status;
  }

  testing::TempDir dir_;
  std::unique_ptr<testing::FaultFs> mount_;
  pid_t child_ = -1;
};

TEST_F(AbandonedOpenExitTest, ExitsZeroWhileTheOpenIsStillBlocked) {
  ASSERT_TRUE(mount_->StopDaemon());  // every call hangs, unread by the daemon (machine-facts.md)
  RunChild("blocked");
  const int status = Wait();
  kill(mount_->daemon_pid(), SIGCONT);
  EXPECT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0) << "3: the open did not time out";
}

TEST_F(AbandonedOpenExitTest, OpenFinishingDuringExitDoesNoHarm) {
  int to_parent[2], from_parent[2];
  ASSERT_EQ(pipe(to_parent), 0);
  ASSERT_EQ(pipe(from_parent), 0);
  RunChild("late", std::to_string(to_parent[1]) + " " + std::to_string(from_parent[0]));
  close(to_parent[1]);
  close(from_parent[0]);
  char byte = 0;
  uint64_t unlinks = 0;
  const bool exiting = read(to_parent[0], &byte, 1) == 1;  // EOF: the child ended before exit's handlers
  EXPECT_TRUE(exiting) << "the child never reached exit";
  if (exiting) {
    ASSERT_TRUE(mount_->WaitHung(1, 5000)) << "the open is not held at the lease";
    ASSERT_OK_AND_ASSIGN(unlinks, mount_->Calls("unlink"));  // every call before the lease's is done
    ASSERT_OK(mount_->Release());
    EXPECT_EQ(write(from_parent[1], &byte, 1), 1);
  }
  const int status = Wait();
  close(to_parent[0]);
  close(from_parent[1]);
  EXPECT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0)
      << "3: the open did not time out, 4: its threads never ended, 6: it registered exit-time destructors";
  // The tier's close removed its lease: the late open made its tier.
  ASSERT_OK_AND_ASSIGN(const uint64_t unlinks_after, mount_->Calls("unlink"));
  EXPECT_GT(unlinks_after, unlinks) << "the late open never made its tier";
}

}  // namespace
}  // namespace kvtier
