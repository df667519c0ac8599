// Proves that TraceToJsonl -> ParseTraceJsonl gives back the same requests
// for hand-written, random and synthetic traces; that the trace's name
// cannot inject a line; and that the longest request the parser accepts
// stays under the line limit once written. Random inputs come from TestSeed
// (printed; replay with KVTIER_TEST_SEED=<seed>).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "replay/trace.h"
#include "support/test_support.h"
#include "trace_support.h"

namespace kvtier::internal::tracetest {
namespace {

TEST(TraceRoundTrip, HandWrittenTrace) {
  const std::string text =
      "{\"arrival_s\": 0, \"session\": \"a\", \"tokens\": [0, 9223372036854775807]}\n"
      "{\"arrival_s\": 0.1, \"session\": \"b\", \"tenant\": \"t\", \"segments\": [{\"ref\": \"sys\", \"len\": 50}, "
      "{\"tokens\": [7]}], \"output_tokens\": 9, \"lora_name\": \"\", \"cache_salt\": \"s\\u0000\\n\\\"\"}\n"
      "{\"arrival_s\": 1e300, \"session\": \"\\u65e5\\ud83d\\ude42\", \"tokens\": [3], \"tenant\": null}\n";
  ASSERT_OK_AND_ASSIGN(const Trace trace, ParseTraceJsonl(text, "hand"));
  const std::string written = TraceToJsonl(trace);
  EXPECT_EQ(written.find("segments"), std::string::npos) << "the writer writes literal tokens";
  EXPECT_EQ(written.rfind("# kvtier trace: hand, 3 requests\n", 0), 0u) << written;
  ASSERT_OK_AND_ASSIGN(const Trace back, ParseTraceJsonl(written, "hand"));
  EXPECT_TRUE(SameRequests(trace.requests, back.requests));
  EXPECT_EQ(back.requests[1].cache_salt, std::optional<std::string>(std::string("s\0\n\"", 4)));
  EXPECT_EQ(back.requests[1].lora_name, std::optional<std::string>(""));
  EXPECT_EQ(TraceToJsonl(back), written);  // a fixed point
}

// Random traces, drawn from one generator: strings full of JSON's special
// characters and valid UTF-8, ids across the whole non-negative int64 range
// and arrivals that are not short decimals.
class RandomTraces {
 public:
  explicit RandomTraces(uint64_t seed) : rng_(seed) {}

  Trace Next() {
    Trace trace;
    trace.name = String(0);
    double arrival = rng_() % 2 == 0 ? 0 : Unit();
    const int n = static_cast<int>(rng_() % 30);
    for (int i = 0; i < n; ++i) {
      switch (rng_() % 4) {
        case 0: break;  // an equal arrival
        case 1: arrival += Unit() * 10; break;
        case 2: arrival += 0.1; break;
        default: arrival = std::nextafter(arrival, 1e308); break;
      }
      trace.requests.push_back(Request(arrival));
    }
    return trace;
  }

 private:
  TraceRequest Request(double arrival) {
    TraceRequest r;
    r.arrival_s = arrival;
    r.session = String(1);
    if (rng_() % 2 == 0) r.tenant = String(0);
    const size_t m = 1 + rng_() % 40;
    for (size_t j = 0; j < m; ++j) r.tokens.push_back(static_cast<int64_t>(rng_() >> (1 + rng_() % 63)));
    r.output_tokens = static_cast<uint32_t>(rng_() % (kTraceRequestTokensMax + 1));
    if (rng_() % 2 == 0) r.lora_name = String(0);
    if (rng_() % 2 == 0) r.cache_salt = String(0);
    return r;
  }
  std::string String(size_t min_len) {
    std::string s;
    const size_t n = min_len + rng_() % 8;
    for (size_t i = 0; i < n; ++i) s += pieces_[rng_() % pieces_.size()];
    return s;
  }
  double Unit() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

  const std::vector<std::string> pieces_ = {"a", "Z", "0", " ", "#", "\"", "\\", "/", "\n", "\r", "\t",
                                           std::string(1, '\0'), "\x01", "\x7f", "\xC3\xA9",
                                           "\xE6\x97\xA5", "\xF0\x9F\x99\x82", "{", "}", "[", "]"};
  std::mt19937_64 rng_;
};

// Random traces come back equal.
TEST(TraceRoundTrip, RandomTraces) {
  const uint64_t seed = testing::TestSeed();
  RandomTraces traces(seed);
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " round " + std::to_string(round));
    const Trace trace = traces.Next();
    const std::string written = TraceToJsonl(trace);
    ASSERT_OK_AND_ASSIGN(const Trace back, ParseTraceJsonl(written));
    EXPECT_TRUE(SameRequests(trace.requests, back.requests));
  }
}

TEST(TraceRoundTrip, SyntheticTraces) {
  const uint64_t seed = testing::TestSeed();
  for (const auto& [name, s] : std::vector<std::pair<std::string, uint64_t>>{
           {"agents", 1}, {"agents", seed}, {"chat", 1}, {"chat", seed}}) {
    SCOPED_TRACE(name + " seed " + std::to_string(s));
    const Trace trace = Synthetic(name, s);
    ASSERT_FALSE(trace.requests.empty());
    ASSERT_OK_AND_ASSIGN(const Trace back, ParseTraceJsonl(TraceToJsonl(trace), trace.name));
    EXPECT_TRUE(SameRequests(trace.requests, back.requests));
  }
}

// The trace's name goes into the comment line; a newline in it must not
// start a line of its own (which would be parsed as a request).
TEST(TraceRoundTrip, NameCannotInjectALine) {
  Trace trace;
  trace.name = "evil\n{\"arrival_s\": 0, \"session\": \"x\", \"tokens\": [1]}\r\n# more";
  const std::string written = TraceToJsonl(trace);
  EXPECT_EQ(std::count(written.begin(), written.end(), '\n'), 1) << written;
  ASSERT_OK_AND_ASSIGN(const Trace back, ParseTraceJsonl(written));
  EXPECT_TRUE(back.requests.empty());
}

// The writer expands segments into literal ids, so a line can come back
// longer than it was read. The string cap keeps the longest request the
// parser accepts (1M ids of 19 digits, four 4096-byte strings that each
// escape to six bytes a character) under the 32 MiB line limit, so every
// parsed trace round-trips; a longer string is refused when read.
TEST(TraceRoundTrip, TheLongestRequestStaysUnderTheLineLimit) {
  Trace trace;
  TraceRequest& r = trace.requests.emplace_back();
  const std::string control(kTraceStringBytesMax, '\x01');
  r.session = r.tenant = control;
  r.lora_name = r.cache_salt = control;
  r.tokens.assign(kTraceRequestTokensMax, std::numeric_limits<int64_t>::max());
  const std::string written = TraceToJsonl(trace);
  ASSERT_OK_AND_ASSIGN(const Trace back, ParseTraceJsonl(written));
  EXPECT_TRUE(SameRequests(trace.requests, back.requests));
  const std::string message = ParseError("{\"arrival_s\": 0, \"session\": \"" +
                                         std::string(kTraceStringBytesMax + 1, 's') + "\", \"tokens\": [1]}");
  EXPECT_EQ(message, "trace line 1: key 'session': longer than 4096 bytes");
}

}  // namespace
}  // namespace kvtier::internal::tracetest
