// Minimal logging: warnings and errors go to stderr as "kvtier: warning: ...".
// Tests and embedders can capture them with SetLogSinkForTesting.
#pragma once

#include <functional>
#include <string_view>

namespace kvtier::internal {

enum class LogLevel { kInfo, kWarning, kError };

void Log(LogLevel level, std::string_view message);
inline void LogWarning(std::string_view message) { Log(LogLevel::kWarning, message); }
inline void LogError(std::string_view message) { Log(LogLevel::kError, message); }

// Replaces the sink (nullptr restores stderr). Not thread-safe against
// concurrent logging; call it before starting threads.
void SetLogSinkForTesting(std::function<void(LogLevel, std::string_view)> sink);

}  // namespace kvtier::internal
