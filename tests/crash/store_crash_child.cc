// store_crash_test's child process: see store_crash_child.h.
#include "store_crash_child.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "crash_spawn.h"
#include "support/test_support.h"

namespace kvtier::storecrash {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string ReadSome(int fd, bool* eof) {
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *eof = true;
      return {};
    }
    return std::string(buf, static_cast<size_t>(n));
  }
}

// Waits up to `until` for data on fd; appends it to `out`. False at EOF.
bool PumpUntil(int fd, Clock::time_point until, std::string* out) {
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::microseconds>(until - Clock::now()).count();
    if (left <= 0) return true;
    pollfd p{fd, POLLIN, 0};
    timespec ts{static_cast<time_t>(left / 1000000), static_cast<long>(left % 1000000) * 1000};
    const int rc = ppoll(&p, 1, &ts, nullptr);
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) return rc == 0;
    bool eof = false;
    *out += ReadSome(fd, &eof);
    if (eof) return false;
  }
}

// Reads until the READY or UNAVAILABLE line, EOF or 20 s; false at EOF.
bool AwaitReady(int out_fd, std::string* out, ChildRun* run) {
  bool open = true;
  const auto ready_deadline = Clock::now() + std::chrono::seconds(20);
  while (open && !run->ready && !run->unavailable && Clock::now() < ready_deadline) {
    open = PumpUntil(out_fd, std::min(ready_deadline, Clock::now() + std::chrono::milliseconds(1)),
                     out);
    if (out->rfind("READY", 0) == 0 && out->find('\n') != std::string::npos) run->ready = true;
    if (out->rfind("UNAVAILABLE", 0) == 0) run->unavailable = true;
  }
  return open;
}

// Only complete lines count: the kill may cut the last one short.
void ParseLines(const std::string& out, ChildRun* run) {
  size_t at = 0;
  while (at < out.size()) {
    const size_t nl = out.find('\n', at);
    if (nl == std::string::npos) {
      run->torn_last_line = true;
      break;
    }
    const std::string line = out.substr(at, nl - at);
    at = nl + 1;
    if (line.rfind("READY", 0) == 0) {
      run->ready_line = line;
    } else if (line.rfind("ACK ", 0) == 0) {
      run->acks.push_back(std::strtoull(line.c_str() + 4, nullptr, 10));
    } else if (line.rfind("NACK ", 0) == 0) {
      run->nacks.push_back(line);
    } else if (line != "UNAVAILABLE") {
      run->problem = "unexpected output line '" + line + "'";
    }
  }
}

}  // namespace

ChildRun RunAndKill(const std::vector<std::string>& argv, const fs::path& err_log,
                    uint32_t kill_after_us) {
  ChildRun run;
  const crash::SpawnedChild child = crash::SpawnWithStdoutPipe(argv, err_log, O_TRUNC);
  if (child.error != 0) {
    run.problem = child.what + ": " + std::strerror(child.error);
    return run;
  }
  const pid_t pid = child.pid;
  const int out_fd = child.stdout_fd;

  std::string out;
  bool open = AwaitReady(out_fd, &out, &run);
  if (run.ready && open) {
    open = PumpUntil(out_fd, Clock::now() + std::chrono::microseconds(kill_after_us), &out);
  }
  ::kill(pid, SIGKILL);
  while (waitpid(pid, &run.wait_status, 0) < 0 && errno == EINTR) {
  }
  run.killed = WIFSIGNALED(run.wait_status) && WTERMSIG(run.wait_status) == SIGKILL;
  // Drain what it wrote before it died (its pipe end is closed now).
  while (open) open = PumpUntil(out_fd, Clock::now() + std::chrono::seconds(5), &out);
  ::close(out_fd);

  if (!run.ready && !run.unavailable) {
    run.problem = "no READY line; it printed '" + out.substr(0, 200) +
                  "', stderr: " + testing::ReadFileOrDie(err_log);
    return run;
  }
  if (run.ready && !run.killed) {
    run.problem = "it ended on its own (wait status " + std::to_string(run.wait_status) +
                  "), stderr: " + testing::ReadFileOrDie(err_log);
  }
  ParseLines(out, &run);
  return run;
}

}  // namespace kvtier::storecrash
