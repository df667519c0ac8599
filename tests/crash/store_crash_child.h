// The crash writer as store_crash_test's child: spawned on a pipe, SIGKILLed
// a given time after its READY line, reaped, and what it printed parsed
// (the ACKed keys, the NACKs, whether the kill cut the last line short).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace kvtier::storecrash {

struct ChildRun {
  bool ready = false;
  bool unavailable = false;  // the requested io_uring backend is refused here
  std::string ready_line;
  bool killed = false;  // it died of our SIGKILL (not on its own)
  int wait_status = 0;
  std::vector<uint64_t> acks;
  std::vector<std::string> nacks;
  bool torn_last_line = false;  // the kill cut a line short (ignored)
  std::string problem;          // non-empty: the run itself went wrong
};

// Spawns argv with stdout on a pipe and stderr into err_log, waits for its
// READY line, lets it run kill_after_us more, SIGKILLs and reaps it, and
// parses everything it printed.
ChildRun RunAndKill(const std::vector<std::string>& argv, const std::filesystem::path& err_log,
                    uint32_t kill_after_us);

}  // namespace kvtier::storecrash
