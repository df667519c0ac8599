// kvtier's log: the few conditions an operator should know about that are
// not an error of any one call (O_DIRECT or user xattrs unusable under a
// root_dir, io_uring refused and the syscall pool used instead, a random
// NONE_HASH seed, a store shut down with transfers running). Errors of a call
// are returned as Status, never only logged.
//
// By default every message goes to stderr as one line,
// "kvtier: <level>: <message>\n", written with a single call so concurrent
// messages do not interleave. An embedder that has its own logging (a
// serving engine, Python's `logging`) installs a sink instead.
#pragma once

#include <functional>
#include <string_view>

#include "kvtier/export.h"

namespace kvtier {

enum class LogLevel : int {
  kInfo = 0,  // a choice kvtier made that works as configured
  kWarning,   // a degraded mode: kvtier goes on, slower or with fewer checks
  kError,     // a failure kvtier recovers from by itself (retried, dropped)
};

// Stable lower-case name of a level: "info", "warning", "error".
KVTIER_API std::string_view LogLevelName(LogLevel level);

// Receives each message (one line of text, no trailing newline).
using LogSink = std::function<void(LogLevel level, std::string_view message)>;

// Installs `sink` in place of stderr; an empty one (nullptr) restores stderr.
//
// Thread safety: may be called at any time from any thread, also while
// kvtier's threads are logging. When it returns, every call of the previous
// sink has returned and no further call will start, so the previous sink's
// state may be destroyed; its std::function itself is destroyed on the
// calling thread before SetLogSink returns.
//
// What a sink may do: it is called from whichever thread logs (a caller's
// thread inside a kvtier call, or one of kvtier's I/O, worker or
// progress threads), possibly from several threads at once, so it must be
// thread-safe. It should return quickly and must not block on anything that
// waits for kvtier (a kvtier thread is paused while it runs). It should not
// call back into kvtier: a message that kvtier logs while a sink runs on the
// same thread goes to stderr, and SetLogSink called from inside a sink does
// not wait for other threads' calls to finish. An exception thrown by a sink
// is caught, and a line saying so goes to stderr.
KVTIER_API void SetLogSink(LogSink sink);

// Messages below `level` are dropped (by the sink and by stderr alike).
// Default kInfo: everything. Thread-safe; takes effect for messages logged
// after it returns.
KVTIER_API void SetMinLogLevel(LogLevel level);

}  // namespace kvtier
