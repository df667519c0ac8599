// The log sink: stderr by default, or the embedder's (kvtier/log.h).
//
// The sink lives in a reference-counted slot. Log takes the slot under a
// mutex and calls the sink outside it, so a slow sink never holds the mutex
// and a sink that needs another lock (Python's GIL) cannot deadlock against
// a thread that logs while holding that lock. SetLogSink swaps the slot and
// then waits until the old slot's calls have returned: after it, nothing
// calls the old sink.
#include "util/log.h"

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace kvtier {
namespace {

struct SinkSlot {
  explicit SinkSlot(LogSink s) : sink(std::move(s)) {}
  LogSink sink;
  int calls = 0;  // calls running now; guarded by SinkState::mu
};

struct SinkState {
  std::mutex mu;
  std::condition_variable idle;  // a slot's calls dropped to 0
  std::shared_ptr<SinkSlot> slot;
};

SinkState& State() {
  static SinkState* state = new SinkState;  // never destroyed: threads may log during exit
  return *state;
}

std::atomic<int> min_level{static_cast<int>(LogLevel::kInfo)};
// True while this thread runs a sink: what kvtier logs from inside it goes
// to stderr (no recursion), and SetLogSink from inside it does not wait for
// the call that is running it.
thread_local bool in_sink = false;

void WriteStderr(LogLevel level, std::string_view message) {
  // One fputs per line keeps concurrent messages from interleaving.
  std::string line = "kvtier: ";
  line += LogLevelName(level);
  line += ": ";
  line += message;
  line += '\n';
  std::fputs(line.c_str(), stderr);
}

// The current slot with one more call counted, or null (stderr).
std::shared_ptr<SinkSlot> AcquireSlot() {
  if (in_sink) return nullptr;
  SinkState& s = State();
  std::lock_guard lock(s.mu);
  if (s.slot) ++s.slot->calls;
  return s.slot;
}

// Ends a call. The reference is dropped under the mutex, before SetLogSink
// can see the count reach 0: so the last reference is SetLogSink's, and the
// sink is destroyed on its thread (unless SetLogSink ran inside this call).
void ReleaseSlot(std::shared_ptr<SinkSlot> slot) {
  SinkState& s = State();
  std::lock_guard lock(s.mu);
  const bool last = --slot->calls == 0;
  slot.reset();
  if (last) s.idle.notify_all();
}

void CallSink(SinkSlot& slot, LogLevel level, std::string_view message) {
  in_sink = true;
  try {
    slot.sink(level, message);
  } catch (...) {
    WriteStderr(LogLevel::kError, "the log sink threw an exception; the message was: " + std::string(message));
  }
  in_sink = false;
}

}  // namespace

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
  }
  return "log";
}

void SetLogSink(LogSink sink) {
  auto next = sink ? std::make_shared<SinkSlot>(std::move(sink)) : nullptr;
  SinkState& s = State();
  std::unique_lock lock(s.mu);
  std::shared_ptr<SinkSlot> old = std::exchange(s.slot, std::move(next));
  if (old && !in_sink) s.idle.wait(lock, [&] { return old->calls == 0; });
  lock.unlock();
  old.reset();  // the previous sink is destroyed here, outside the mutex
}

void SetMinLogLevel(LogLevel level) { min_level.store(static_cast<int>(level), std::memory_order_relaxed); }

namespace internal {

void Log(LogLevel level, std::string_view message) {
  if (static_cast<int>(level) < min_level.load(std::memory_order_relaxed)) return;
  std::shared_ptr<SinkSlot> slot = AcquireSlot();
  if (!slot) return WriteStderr(level, message);
  CallSink(*slot, level, message);
  ReleaseSlot(std::move(slot));
}

}  // namespace internal
}  // namespace kvtier
