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
//
// Where the caller reads this command's stdout or stderr through a pipe or
// socket (`$(kvtier du)`, a sidecar's log pipe, a test's capture), the child
// must not hold that pipe: the caller would wait for its end as long as the
// stuck thread lives. So the child writes there through pipes of its own that
// the parent copies on; a terminal or a file it writes directly (no end to
// wait for, and progress output still sees its terminal).
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
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

// fd 1 or 2 of the caller, and the read end of the child's pipe in its place
// (-1: the child writes to the caller's fd itself).
struct Relay {
  int target = -1, from = -1;
};

void CloseBoth(int* ends) {
  for (int i = 0; i < 2; ++i) {
    if (ends[i] >= 0) close(ends[i]);
  }
}

bool IsPipe(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode));
}

enum class Copied { kSome, kNone, kEnd };  // kNone: nothing there now (non-blocking)

// Copies one read of what `r` holds to its target.
Copied CopyOnce(Relay* r) {
  char buf[65536];
  ssize_t n;
  while ((n = read(r->from, buf, sizeof buf)) < 0 && errno == EINTR) {
  }
  if (n < 0 && errno == EAGAIN) return Copied::kNone;
  if (n <= 0) return Copied::kEnd;
  for (ssize_t off = 0; off < n;) {
    const ssize_t w = write(r->target, buf + off, static_cast<size_t>(n - off));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;  // the caller stopped reading: what is left is dropped, as it would be
    off += w;
  }
  return Copied::kSome;
}

// Copies the relays on until the child writes kHung or closes its pipe to
// us; then what the relays still hold now. Whether the child said hung.
bool RelayUntilDone(int hung_fd, Relay* relays, int n) {
  bool hung = false, open[2] = {relays[0].from >= 0, relays[1].from >= 0};
  for (;;) {
    pollfd p[3] = {{hung_fd, POLLIN, 0}, {relays[0].from, POLLIN, 0}, {relays[1].from, POLLIN, 0}};
    for (int i = 0; i < n; ++i) p[i + 1].fd = open[i] ? relays[i].from : -1;
    if (poll(p, 3, -1) < 0 && errno != EINTR) break;
    for (int i = 0; i < n; ++i) {
      if (open[i] && p[i + 1].revents != 0) open[i] = CopyOnce(&relays[i]) != Copied::kEnd;
    }
    if (p[0].revents == 0) continue;
    char c = 0;
    const ssize_t got = read(hung_fd, &c, 1);
    if (got < 0 && errno == EINTR) continue;
    hung = got == 1 && c == kHung;
    if (hung || got == 0) break;
  }
  for (int i = 0; i < n; ++i) {  // the last of its output, without waiting on what it may still hold
    if (!open[i]) continue;
    fcntl(relays[i].from, F_SETFL, O_NONBLOCK);
    while (CopyOnce(&relays[i]) == Copied::kSome) {
    }
  }
  return hung;
}

int WaitChild(pid_t pid, int hung_fd, Relay* relays) {
  const bool hung = RelayUntilDone(hung_fd, relays, 2);
  close(hung_fd);
  for (int i = 0; i < 2; ++i) {
    if (relays[i].from >= 0) close(relays[i].from);
  }
  if (hung) {
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

// Stdout and stderr, where they are pipes or sockets: a pipe of the child's
// in their place (`ends`), whose read end the parent relays from.
void MakeRelays(Relay* relays, int (*ends)[2]) {
  for (int i = 0; i < 2; ++i) {
    relays[i].target = i + 1;
    if (IsPipe(i + 1) && pipe2(ends[i], O_CLOEXEC) == 0) relays[i].from = ends[i][0];
  }
}

}  // namespace

int RunGuarded(const std::function<int()>& body) {
  int fds[2];
  std::fflush(stdout);
  std::fflush(stderr);
  if (pipe2(fds, O_CLOEXEC) != 0) return body();  // no pipe: run unguarded rather than fail
  Relay relays[2];
  int ends[2][2] = {{-1, -1}, {-1, -1}};
  MakeRelays(relays, ends);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    for (auto& e : ends) CloseBoth(e);
    return body();
  }
  if (pid == 0) {
    close(fds[0]);
    for (int i = 0; i < 2; ++i) {
      if (ends[i][1] >= 0) dup2(ends[i][1], i + 1);  // the caller's pipe is the parent's alone
      CloseBoth(ends[i]);
    }
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
  for (auto& e : ends) close(e[1]);
  g_child = pid;
  ForwardSignals();
  return WaitChild(pid, fds[0], relays);
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
