// Proves the CLI's one duration parser (tools/cli/duration.h) against tables
// of inputs: fractional seconds with and without a leading digit, every unit,
// rounding up to the millisecond (ParseDurationMs) and to the second
// (ParseDurationS) so that a tiny value never reads as 0, the exact bounds;
// and that every malformed input (empty, signs, NaN, inf, exponents, hex,
// spaces, other units, too many decimals, overflow) is refused with a
// message that quotes it and lists every unit.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "cli/duration.h"

namespace kvtier::internal {
namespace {

struct Good {
  std::string text;
  uint64_t ms;
};

TEST(CliDuration, GoodInputsInMilliseconds) {
  const Good kGood[] = {
      {"0", 0},           {"30", 30000},         {"0.5", 500},          {".5", 500},
      {"1.5", 1500},      {"5.", 5000},          {"00010", 10000},      {"0.001", 1},
      {"0.0001", 1},      {"0.000000001", 1},    {"0.1", 100},          {"2.675", 2675},
      {"500ms", 500},     {"0.5ms", 1},          {"0ms", 0},            {"10s", 10000},
      {"1.5s", 1500},     {".25s", 250},         {"2m", 120000},        {"1.5m", 90000},
      {"2h", 7200000},    {"1.5h", 5400000},     {"7d", 604800000},     {"0.5d", 43200000},
      {"36500d", kDurationMsMax}, {"3153600000", kDurationMsMax}, {"3153600000000ms", kDurationMsMax},
  };
  for (const Good& g : kGood) {
    const Result<uint64_t> r = ParseDurationMs(g.text);
    ASSERT_TRUE(r.ok()) << "'" << g.text << "': " << r.status().ToString();
    EXPECT_EQ(*r, g.ms) << "'" << g.text << "'";
  }
}

TEST(CliDuration, SecondsRoundUp) {
  const Good kSeconds[] = {{"0", 0},  {"1", 1},    {"0.5", 1},   {"1.5", 2},           {"1.0", 1},
                           {"1ms", 1}, {"999ms", 1}, {"1000ms", 1}, {"1001ms", 2},        {"90", 90},
                           {"15m", 900}, {"2h", 7200}, {"7d", 604800}, {"36500d", 3153600000}};
  for (const Good& g : kSeconds) {
    const Result<uint64_t> r = ParseDurationS(g.text);
    ASSERT_TRUE(r.ok()) << "'" << g.text << "': " << r.status().ToString();
    EXPECT_EQ(*r, g.ms) << "'" << g.text << "' in seconds";
  }
}

struct Bad {
  std::string text;
  std::string says;  // a part of the message
};

TEST(CliDuration, BadInputsAreRefusedWithAClearMessage) {
  const std::string kUnits = "ms, s, m, h or d";
  const Bad kBad[] = {
      {"", "empty"},        {"-1", "negative"},    {"-0.5", "negative"},   {"-0", "negative"},
      {"+1", kUnits},       {"nan", kUnits},       {"NaN", kUnits},        {"inf", kUnits},
      {"-inf", "negative"}, {"infinity", kUnits},  {"1e3", kUnits},        {"0x10", kUnits},
      {" 5", kUnits},       {"5 ", kUnits},        {"5 s", kUnits},        {"5s ", kUnits},
      {"5S", kUnits},       {"5sec", kUnits},      {"5us", kUnits},        {"5ns", kUnits},
      {"5w", kUnits},       {"1.2.3", kUnits},     {".", kUnits},          {"s", kUnits},
      {"ms", kUnits},       {"1..5", kUnits},      {"5\n", kUnits},        {std::string("5\0", 2), kUnits},
      {"1,5", kUnits},      {"1.0000000001", "more than 9 decimals"},
      {"36500.000001d", "out of range (at most 36500d)"}, {"36501d", "out of range"},
      {"3153600001", "out of range"}, {"3153600000001ms", "out of range"},
      {"18446744073709551615ms", "out of range"}, {"18446744073709551616", "out of range"},
      {"99999999999999999999999999999999d", "out of range"},
  };
  for (const Bad& b : kBad) {
    const Result<uint64_t> r = ParseDurationMs(b.text);
    ASSERT_FALSE(r.ok()) << "'" << b.text << "' was accepted as " << *r << " ms";
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << b.text;
    EXPECT_NE(r.status().message().find(b.says), std::string::npos) << "'" << b.text << "': " << r.status().message();
    if (!b.text.empty() && b.text.find('\0') == std::string::npos) {
      EXPECT_NE(r.status().message().find("'" + b.text + "'"), std::string::npos) << r.status().message();
    }
    EXPECT_FALSE(ParseDurationS(b.text).ok()) << "'" << b.text << "' in seconds";
  }
}

TEST(CliDuration, AnOptionsOwnMaximumIsNamed) {
  constexpr uint64_t kMax = UINT32_MAX;  // bench fs: the tier's 32-bit io_timeout_ms
  EXPECT_EQ(*ParseDurationMs("4294967295ms", kMax), kMax);
  EXPECT_EQ(*ParseDurationMs("49d", kMax), uint64_t{49} * 86400000);
  const Result<uint64_t> r = ParseDurationMs("50d", kMax);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("at most 4294967295ms"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace kvtier::internal
