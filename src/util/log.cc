// The stderr log sink.
#include "util/log.h"

#include <cstdio>
#include <mutex>
#include <string>

namespace kvtier::internal {
namespace {

std::function<void(LogLevel, std::string_view)>& Sink() {
  static std::function<void(LogLevel, std::string_view)> sink;
  return sink;
}

std::string_view LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
  }
  return "log";
}

}  // namespace

void Log(LogLevel level, std::string_view message) {
  if (Sink()) {
    Sink()(level, message);
    return;
  }
  // One fprintf per line keeps concurrent messages from interleaving.
  std::string line = "kvtier: ";
  line += LevelName(level);
  line += ": ";
  line += message;
  line += '\n';
  std::fputs(line.c_str(), stderr);
}

void SetLogSinkForTesting(std::function<void(LogLevel, std::string_view)> sink) {
  Sink() = std::move(sink);
}

}  // namespace kvtier::internal
