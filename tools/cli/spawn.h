// Running a child process from the CLI and capturing its standard output.
// `kvtier bench tiers` re-executes its own binary (/proc/self/exe) for the
// load phase, so that phase starts from an empty CPU tier exactly as after a
// restart. (tests/support has a similar runner, but only for tests.)
#pragma once

#include <string>
#include <vector>

#include "kvtier/result.h"

namespace kvtier::internal {

struct ChildOutput {
  int exit_code = -1;  // the exit status, or 128 + the signal that ended it
  std::string out;     // everything it wrote to standard output
};

// Runs `path` with `argv` (argv[0] included) and the current environment, no
// shell. Its stdout is captured; stdin and stderr are inherited, so the
// child's messages reach the user directly. Blocks until the child exits.
// kIoError / kUnavailable when it cannot be started.
Result<ChildOutput> RunChild(const std::string& path, const std::vector<std::string>& argv);

// The path of the running executable (readlink /proc/self/exe), for messages;
// "/proc/self/exe" when it cannot be read.
std::string SelfExePath();

}  // namespace kvtier::internal
