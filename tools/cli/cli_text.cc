#include "cli/cli_text.h"

#include <cstdio>

#include "util/name_escape.h"

namespace kvtier::internal {

void PrintError(std::string_view command, std::string_view message) {
  const std::string who = command.empty() ? "kvtier" : "kvtier " + EscapeUnprintable(command);
  std::fprintf(stderr, "%s: %s\n", who.c_str(), EscapeUnprintable(message).c_str());
}

std::string JsonOutput(nlohmann::json j) {
  MakeJsonUtf8(&j);
  return j.dump(2) + "\n";
}

}  // namespace kvtier::internal
