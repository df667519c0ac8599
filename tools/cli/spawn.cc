// Child processes for the CLI (see spawn.h).
#include "cli/spawn.h"

#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

extern char** environ;

namespace kvtier::internal {
namespace {

// Reads fd to EOF, retrying on EINTR.
Status ReadAll(int fd, std::string* out) {
  char buf[65536];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      out->append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      return Status::Ok();
    } else if (errno != EINTR) {
      return ErrnoToStatus(errno, "read the child's output");
    }
  }
}

// Waits for pid, retrying on EINTR; the exit status or 128 + signal.
Result<int> Reap(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return ErrnoToStatus(errno, "wait for the child");
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

Result<ChildOutput> RunChild(const std::string& path, const std::vector<std::string>& argv) {
  // O_CLOEXEC: neither end leaks into the child except as its fd 1 (dup2
  // clears the flag on the copy).
  int out_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return ErrnoToStatus(errno, "pipe");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, path.c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);  // the child holds the only write end now: EOF when it exits
  if (rc != 0) {
    close(out_pipe[0]);
    return ErrnoToStatus(rc, "start " + path);
  }
  ChildOutput child;
  const Status read = ReadAll(out_pipe[0], &child.out);
  close(out_pipe[0]);  // on a read error the child gets SIGPIPE rather than blocking
  KVTIER_ASSIGN_OR_RETURN(child.exit_code, Reap(pid));
  KVTIER_RETURN_IF_ERROR(read);
  return child;
}

std::string SelfExePath() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "/proc/self/exe";
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace kvtier::internal
