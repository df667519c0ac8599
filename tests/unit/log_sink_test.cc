// Proves the public log sink (kvtier/log.h): a warning that a real kvtier
// call emits reaches the installed sink and not stderr; an empty sink
// restores stderr; SetMinLogLevel drops lower levels; SetLogSink may be
// called while other threads log, and once it returns the previous sink is
// never called again; a sink that logs or throws does not recurse or crash.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kvtier/hashing.h"
#include "kvtier/log.h"

namespace kvtier {
namespace {

// xxhash_cbor is not cryptographic: without PYTHONHASHSEED its NONE_HASH
// seed is random, which kvtier reports as a warning (hash_algo.cc).
void EmitRealWarning() { (void)ResolveNoneHashSeed(HashAlgo::kXxhashCbor, std::nullopt); }

struct Captured {
  std::mutex mu;
  std::vector<std::pair<LogLevel, std::string>> lines;
  LogSink Sink() {
    return [this](LogLevel level, std::string_view message) {
      std::lock_guard lock(mu);
      lines.emplace_back(level, std::string(message));
    };
  }
};

class LogSinkTest : public ::testing::Test {
 protected:
  void TearDown() override {
    SetLogSink(nullptr);
    SetMinLogLevel(LogLevel::kInfo);
  }
};

TEST_F(LogSinkTest, SinkReceivesAWarningOfARealCall) {
  Captured captured;
  SetLogSink(captured.Sink());
  ::testing::internal::CaptureStderr();
  EmitRealWarning();
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(captured.lines.size(), 1u);
  EXPECT_EQ(captured.lines[0].first, LogLevel::kWarning);
  EXPECT_NE(captured.lines[0].second.find("PYTHONHASHSEED is not set"), std::string::npos) << captured.lines[0].second;
  EXPECT_EQ(err, "") << "a message given to the sink must not reach stderr too";
}

TEST_F(LogSinkTest, EmptySinkRestoresStderr) {
  Captured captured;
  SetLogSink(captured.Sink());
  SetLogSink(nullptr);
  ::testing::internal::CaptureStderr();
  EmitRealWarning();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(captured.lines.empty());
  EXPECT_EQ(err.rfind("kvtier: warning: PYTHONHASHSEED is not set", 0), 0u) << err;
  EXPECT_EQ(err.back(), '\n');
}

TEST_F(LogSinkTest, MinLevelDropsLowerLevels) {
  Captured captured;
  SetLogSink(captured.Sink());
  SetMinLogLevel(LogLevel::kError);
  EmitRealWarning();
  EXPECT_TRUE(captured.lines.empty());
  SetMinLogLevel(LogLevel::kWarning);
  EmitRealWarning();
  EXPECT_EQ(captured.lines.size(), 1u);
}

TEST_F(LogSinkTest, LevelNames) {
  EXPECT_EQ(LogLevelName(LogLevel::kInfo), "info");
  EXPECT_EQ(LogLevelName(LogLevel::kWarning), "warning");
  EXPECT_EQ(LogLevelName(LogLevel::kError), "error");
}

// Threads log without pause while the main thread swaps sinks. Each sink
// checks that the generation it belongs to has not been retired, i.e. that
// it is not called after the SetLogSink that replaced it returned.
TEST_F(LogSinkTest, SwappingWhileThreadsLogNeverCallsARetiredSink) {
  struct Generation {
    std::atomic<bool> retired{false};
    std::atomic<uint64_t> calls{0};
  };
  std::atomic<uint64_t> late_calls{0}, total_calls{0};
  auto sink_for = [&](std::shared_ptr<Generation> g) -> LogSink {
    return [g, &late_calls, &total_calls](LogLevel, std::string_view) {
      ++g->calls;
      ++total_calls;
      std::this_thread::yield();  // widen the window in which a swap can happen
      if (g->retired) ++late_calls;
    };
  };
  std::atomic<bool> stop{false};
  std::vector<std::thread> loggers;
  for (int t = 0; t < 4; ++t) {
    loggers.emplace_back([&] {
      while (!stop) EmitRealWarning();
    });
  }
  auto current = std::make_shared<Generation>();
  SetLogSink(sink_for(current));
  for (int swap = 0; swap < 2000; ++swap) {
    while (current->calls == 0) std::this_thread::yield();  // swap while this sink is in use
    auto next = std::make_shared<Generation>();
    SetLogSink(sink_for(next));
    current->retired = true;
    current = next;
  }
  stop = true;
  for (auto& t : loggers) t.join();
  SetLogSink(nullptr);
  EXPECT_GT(total_calls.load(), 0u);
  EXPECT_EQ(late_calls.load(), 0u) << "a sink was called after SetLogSink replaced it";
}

TEST_F(LogSinkTest, SinkThatLogsGoesToStderrInsteadOfRecursing) {
  std::atomic<int> calls{0};
  SetLogSink([&](LogLevel, std::string_view) {
    ++calls;
    EmitRealWarning();  // kvtier logging from inside the sink
  });
  ::testing::internal::CaptureStderr();
  EmitRealWarning();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(calls.load(), 1);
  EXPECT_NE(err.find("kvtier: warning: PYTHONHASHSEED"), std::string::npos) << err;
}

TEST_F(LogSinkTest, SinkThatThrowsIsReportedOnStderr) {
  SetLogSink([](LogLevel, std::string_view) { throw std::runtime_error("sink broke"); });
  ::testing::internal::CaptureStderr();
  EmitRealWarning();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("kvtier: error: the log sink threw"), std::string::npos) << err;
}

}  // namespace
}  // namespace kvtier
