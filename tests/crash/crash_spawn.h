// How the crash tests start crash_writer: a real child process (posix_spawn)
// with stdin from /dev/null, stdout into a pipe the test reads its progress
// lines from, and stderr appended to (or truncating) a log file kept for the
// failure message. Shared by store_crash_test (SIGKILL) and power_loss_test.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <vector>

extern char** environ;

namespace kvtier::crash {

struct SpawnedChild {
  pid_t pid = -1;
  int stdout_fd = -1;  // the read end of the child's stdout (O_CLOEXEC), owned by the caller
  int error = 0;       // errno of the failed step (0: started)
  std::string what;    // that step ("pipe2", "posix_spawn <argv[0]>")
};

// err_flags: O_TRUNC or O_APPEND for the stderr log.
inline SpawnedChild SpawnWithStdoutPipe(const std::vector<std::string>& argv,
                                        const std::filesystem::path& err_log, int err_flags) {
  SpawnedChild child;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    child.error = errno;
    child.what = "pipe2";
    return child;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, err_log.c_str(), O_WRONLY | O_CREAT | err_flags,
                                   0644);
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  const int rc = posix_spawn(&child.pid, cargv[0], &fa, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    child.pid = -1;
    child.error = rc;
    child.what = "posix_spawn " + argv[0];
    return child;
  }
  child.stdout_fd = fds[0];
  return child;
}

}  // namespace kvtier::crash
