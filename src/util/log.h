// kvtier's internal logging calls. Messages go to the sink an embedder
// installed with kvtier::SetLogSink (include/kvtier/log.h), else to stderr.
#pragma once

#include <string_view>

#include "kvtier/log.h"

namespace kvtier::internal {

using kvtier::LogLevel;

void Log(LogLevel level, std::string_view message);
inline void LogWarning(std::string_view message) { Log(LogLevel::kWarning, message); }
inline void LogError(std::string_view message) { Log(LogLevel::kError, message); }

}  // namespace kvtier::internal
