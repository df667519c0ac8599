// The crash writer as a child process of power_loss_test: spawned with its
// stdout on a pipe (outside every filesystem the test crashes), so the test
// learns which stores were acknowledged and *when*, relative to the power cut.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::powerloss {

class WriterProcess {
 public:
  using Clock = std::chrono::steady_clock;

  WriterProcess() = default;
  ~WriterProcess() { Kill(); }
  WriterProcess(const WriterProcess&) = delete;
  WriterProcess& operator=(const WriterProcess&) = delete;

  // Spawns argv[0] (a path) with stdout on a non-blocking pipe and stderr
  // appended to err_log.
  Status Start(const std::vector<std::string>& argv, const std::filesystem::path& err_log);
  // Reads until the READY or UNAVAILABLE line, the writer's exit, or 20 s.
  void AwaitReady();
  // Reads whatever arrives until `until` (or the writer's exit).
  void PumpUntil(Clock::time_point until);
  // Reads what is in the pipe now, without waiting: called right before the
  // power cut, so that every ACK counted before the cut was printed before it.
  void DrainNow();
  // SIGKILLs the writer if it still runs, reaps it and reads the rest.
  void Kill();

  bool ready() const { return ready_; }
  bool unavailable() const { return unavailable_; }
  const std::string& ready_line() const { return ready_line_; }
  // Complete "ACK <i>" lines, in the order printed.
  const std::vector<uint64_t>& acks() const { return acks_; }
  const std::vector<std::string>& nacks() const { return nacks_; }
  // Anything else printed, and how the writer ended if not by our SIGKILL
  // or exit 0 (set by Kill()). Empty when all is well.
  const std::string& problem() const { return problem_; }

 private:
  bool ReadAvailable();  // false at EOF
  void Consume(std::string_view bytes);

  pid_t pid_ = -1;
  int fd_ = -1;
  std::string partial_;
  bool ready_ = false, unavailable_ = false;
  std::string ready_line_;
  std::vector<uint64_t> acks_;
  std::vector<std::string> nacks_;
  std::string problem_;
};

}  // namespace kvtier::powerloss
