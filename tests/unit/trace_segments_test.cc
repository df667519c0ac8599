// Proves that segments expand as docs/trace-format.md says: a shorter length
// of a ref is a prefix of a longer one, ids are in [0, 32000), the same on
// every call and, via pinned values, in every version; refs are byte-exact
// and spread over the vocabulary; and a random mix of segments parses to the
// concatenation of their expansions. Random inputs come from TestSeed
// (printed; replay with KVTIER_TEST_SEED=<seed>).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "replay/trace.h"
#include "support/test_support.h"
#include "trace_support.h"

namespace kvtier::internal::tracetest {
namespace {

TEST(SegmentTokens, ShorterIsPrefixOfLongerIdsInRangeDeterministic) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 50; ++round) {
    std::string ref;
    const size_t len = 1 + rng() % 40;
    for (size_t i = 0; i < len; ++i) ref.push_back(static_cast<char>(rng() % 256));
    const uint32_t longer = static_cast<uint32_t>(rng() % 5000);
    const uint32_t shorter = static_cast<uint32_t>(rng() % (longer + 1));
    SCOPED_TRACE("seed " + std::to_string(seed) + " round " + std::to_string(round) +
                 " lengths " + std::to_string(shorter) + " < " + std::to_string(longer));
    const std::vector<int64_t> a = SegmentTokens(ref, longer);
    const std::vector<int64_t> b = SegmentTokens(ref, shorter);
    ASSERT_EQ(a.size(), longer);
    ASSERT_EQ(b.size(), shorter);
    EXPECT_TRUE(IsPrefix(b, a));
    EXPECT_EQ(SegmentTokens(ref, longer), a);  // the same on every call
    for (const int64_t id : a) {
      ASSERT_GE(id, 0);
      ASSERT_LT(id, 32000);
    }
  }
  EXPECT_TRUE(SegmentTokens("x", 0).empty());
}

// The ids are a function of the ref alone, pinned here: a trace file (the
// example in examples/ included) must name the same prompt, and so the same
// cached blocks, on every machine and in every kvtier version.
TEST(SegmentTokens, PinnedValues) {
  EXPECT_EQ(SegmentTokens("support/system", 8),
            (std::vector<int64_t>{12321, 16062, 21852, 20951, 9690, 3004, 7397, 16007}));
  EXPECT_EQ(SegmentTokens("a", 4), (std::vector<int64_t>{611, 21178, 25013, 13555}));
}

TEST(SegmentTokens, RefsAreByteExactAndSpreadOverTheVocabulary) {
  const std::vector<int64_t> sys = SegmentTokens("sys", 64);
  for (const char* other : {"Sys", "sys ", " sys", "sys/", "sy"}) {
    SCOPED_TRACE(other);
    EXPECT_LT(CommonPrefix(sys, SegmentTokens(other, 64)), 4u);
  }
  const std::vector<int64_t> many = SegmentTokens("spread", 200000);
  const std::set<int64_t> distinct(many.begin(), many.end());
  // 200,000 uniform draws from 32,000 ids cover all but ~60 of them.
  EXPECT_GT(distinct.size(), 31800u);
  EXPECT_EQ(*distinct.begin(), 0);
  EXPECT_EQ(*distinct.rbegin(), 31999);
}

// One line's segments, drawn from rng: up to five, each literal ids (of any
// non-negative int64) or a ref of `refs` with a length below 300; at least
// one token in all. *tokens: what they expand to.
Json RandomSegments(std::mt19937_64& rng, const std::vector<std::string>& refs, std::vector<int64_t>* tokens) {
  Json segments = Json::array();
  const int n = static_cast<int>(rng() % 6);
  for (int i = 0; i < n; ++i) {
    if (rng() % 3 == 0) {
      Json ids = Json::array();
      const int m = static_cast<int>(rng() % 5);
      for (int j = 0; j < m; ++j) {
        const int64_t id = static_cast<int64_t>(rng() >> (1 + rng() % 63));
        ids.push_back(id);
        tokens->push_back(id);
      }
      segments.push_back({{"tokens", ids}});
    } else {
      const std::string& ref = refs[rng() % refs.size()];
      const uint32_t len = static_cast<uint32_t>(rng() % 300);
      segments.push_back({{"ref", ref}, {"len", len}});
      const std::vector<int64_t> expanded = SegmentTokens(ref, len);
      tokens->insert(tokens->end(), expanded.begin(), expanded.end());
    }
  }
  if (tokens->empty()) {
    segments.push_back({{"tokens", {5}}});
    tokens->push_back(5);
  }
  return segments;
}

// A random mix of segments parses to the concatenation of their expansions.
TEST(TraceParse, SegmentsExpandToTheirTokens) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  const std::vector<std::string> refs = {"sys", "tools", "s/turn1", "s/out1", "\xC3\xA9t\xC3\xA9", "a\"b\\c"};
  std::string text;
  std::vector<std::vector<int64_t>> want;
  for (int line = 0; line < 100; ++line) {
    std::vector<int64_t> tokens;
    const Json segments = RandomSegments(rng, refs, &tokens);
    Json request = {{"arrival_s", line}, {"session", "s"}, {"segments", segments}};
    text += request.dump() + "\n";
    want.push_back(std::move(tokens));
  }
  ASSERT_OK_AND_ASSIGN(const Trace trace, ParseTraceJsonl(text));
  ASSERT_EQ(trace.requests.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(trace.requests[i].tokens, want[i]) << "line " << i + 1 << ", seed " << seed;
  }
}

}  // namespace
}  // namespace kvtier::internal::tracetest
