// The crash writer child of power_loss_test (see power_loss_child.h).
#include "power_loss_child.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "crash_spawn.h"

namespace kvtier::powerloss {

Status WriterProcess::Start(const std::vector<std::string>& argv,
                            const std::filesystem::path& err_log) {
  const crash::SpawnedChild child = crash::SpawnWithStdoutPipe(argv, err_log, O_APPEND);
  if (child.error != 0) return ErrnoToStatus(child.error, child.what);
  pid_ = child.pid;
  fd_ = child.stdout_fd;
  if (fcntl(fd_, F_SETFL, O_NONBLOCK) != 0) return ErrnoToStatus(errno, "O_NONBLOCK");
  return Status::Ok();
}

bool WriterProcess::ReadAvailable() {
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n > 0) {
      Consume({buf, static_cast<size_t>(n)});
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return true;
    ::close(fd_);  // EOF (or a broken pipe): the writer is gone
    fd_ = -1;
    return false;
  }
}

void WriterProcess::PumpUntil(Clock::time_point until) {
  while (fd_ >= 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::microseconds>(until - Clock::now()).count();
    if (left <= 0) return;
    pollfd p{fd_, POLLIN, 0};
    timespec ts{static_cast<time_t>(left / 1000000), static_cast<long>(left % 1000000) * 1000};
    const int rc = ppoll(&p, 1, &ts, nullptr);
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) return;
    ReadAvailable();
  }
}

void WriterProcess::AwaitReady() {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (fd_ >= 0 && !ready_ && !unavailable_ && Clock::now() < deadline) {
    PumpUntil(std::min(deadline, Clock::now() + std::chrono::milliseconds(1)));
  }
}

void WriterProcess::DrainNow() {
  if (fd_ >= 0) ReadAvailable();
}

void WriterProcess::Kill() {
  if (pid_ < 0) return;
  ::kill(pid_, SIGKILL);  // harmless when it has already exited (a zombie until reaped)
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  // Its end of the pipe is closed now: read to EOF.
  PumpUntil(Clock::now() + std::chrono::seconds(5));
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  const bool killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  const bool done = WIFEXITED(status) && WEXITSTATUS(status) == 0;  // --max-rows reached
  const bool refused = WIFEXITED(status) && WEXITSTATUS(status) == 77 && unavailable_;
  if (!killed && !done && !refused && problem_.empty()) {
    problem_ = "the writer ended with wait status " + std::to_string(status);
  }
}

// Splits into lines; a line cut short by the kill stays in partial_ and
// never counts.
void WriterProcess::Consume(std::string_view bytes) {
  partial_.append(bytes);
  size_t at = 0;
  while (true) {
    const size_t nl = partial_.find('\n', at);
    if (nl == std::string::npos) break;
    const std::string line = partial_.substr(at, nl - at);
    at = nl + 1;
    if (line.rfind("ACK ", 0) == 0) {
      acks_.push_back(std::strtoull(line.c_str() + 4, nullptr, 10));
    } else if (line.rfind("NACK ", 0) == 0) {
      nacks_.push_back(line);
    } else if (line.rfind("READY ", 0) == 0) {
      ready_ = true;
      ready_line_ = line;
    } else if (line == "UNAVAILABLE") {
      unavailable_ = true;
    } else if (problem_.empty()) {
      problem_ = "unexpected line from the writer: '" + line + "'";
    }
  }
  partial_.erase(0, at);
}

}  // namespace kvtier::powerloss
