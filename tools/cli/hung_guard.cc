// RunGuarded and ExitHung (cli/ops_command.h): how the CLI returns to the
// operator's shell although a thread of it is stuck on a hung mount.
//
// A FUSE request that the daemon has read but never answers is waited for
// uninterruptibly: not even SIGKILL ends the waiting thread, and a process
// cannot finish exiting while one of its threads waits. So the command runs
// in a child process; the parent only waits. When the child's watch gives up
// (kTimedOut), it prints its message, tells the parent through a pipe and
// exits; the parent exits 8 at once, and the child, killed, goes when the
// mount answers or its connection is aborted. On a mount that merely stopped
// (a stopped daemon, an NFS hard mount) the child goes at once.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "cli/ops_command.h"

namespace kvtier::internal {
namespace {

int g_hung_fd = -1;  // the child's end of the pipe to the parent (-1: not guarded)
constexpr char kHung = 'H';
volatile pid_t g_child = 0;  // the parent's child, while it runs
// A supervisor stops the process it started, the parent: the child must hear
// it (gc --watch stops cleanly on SIGTERM), and then the parent ends as the
// child did.
constexpr int kForwarded[] = {SIGTERM, SIGINT, SIGHUP};

void Forward(int sig) {
  if (g_child > 0) kill(g_child, sig);
}

void ForwardSignals() {
  struct sigaction sa {};
  sa.sa_handler = Forward;
  sigemptyset(&sa.sa_mask);
  for (const int sig : kForwarded) sigaction(sig, &sa, nullptr);
}

// The child died of a forwarded signal: so does the parent (a shell sees
// the same end it would have without the child).
void DieLikeChild(int status) {
  if (!WIFSIGNALED(status)) return;
  for (const int sig : kForwarded) {
    if (WTERMSIG(status) != sig) continue;
    signal(sig, SIG_DFL);
    raise(sig);
  }
}

int WaitChild(pid_t pid, int hung_fd) {
  char c = 0;
  ssize_t n;
  while ((n = read(hung_fd, &c, 1)) < 0 && errno == EINTR) {
  }
  close(hung_fd);
  if (n == 1 && c == kHung) {
    kill(pid, SIGKILL);  // it dies when its stuck call returns; do not wait for it
    return 8;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;
  DieLikeChild(status);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

int RunGuarded(const std::function<int()>& body) {
  int fds[2];
  std::fflush(stdout);
  std::fflush(stderr);
  if (pipe2(fds, O_CLOEXEC) != 0) return body();  // no pipe: run unguarded rather than fail
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return body();
  }
  if (pid == 0) {
    close(fds[0]);
    // The parent killed (SIGKILL cannot be forwarded): the child goes too, or
    // a killed `gc --watch` would go on collecting unseen.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(128 + SIGKILL);
    g_hung_fd = fds[1];
    const int rc = body();
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(rc);
  }
  close(fds[1]);
  g_child = pid;
  ForwardSignals();
  return WaitChild(pid, fds[0]);
}

void ExitHung() {
  std::fflush(stdout);
  std::fflush(stderr);
  if (g_hung_fd >= 0) {
    const char c = kHung;
    (void)!write(g_hung_fd, &c, 1);
  }
  _exit(8);
}

}  // namespace kvtier::internal
