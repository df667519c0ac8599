// Proves the replay trace format (docs/trace-format.md) and the synthetic
// generators: every key parses, segments expand deterministically with the
// prefix property, comments and blank lines are skipped, each malformed line
// is rejected with a message naming the line and the key, the limits hold,
// TraceToJsonl round-trips, and GenerateSynthetic is seeded, deterministic and
// shaped as documented (agents: shared tenant prefixes, sessions that grow
// turn by turn to 8K-64K tokens; chat: short).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "replay/trace.h"
#include "support/test_support.h"

namespace kvtier::internal {
namespace {

Trace ParseOk(const std::string& text) {
  Result<Trace> t = ParseTraceJsonl(text);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : Trace{};
}

// The error message of a line that must fail.
std::string ParseError(const std::string& text) {
  Result<Trace> t = ParseTraceJsonl(text);
  EXPECT_FALSE(t.ok()) << text;
  if (t.ok()) return "";
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  return t.status().message();
}

bool IsPrefix(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

TEST(Trace, EveryKeyParses) {
  const Trace t = ParseOk(
      R"({"arrival_s": 0.5, "session": "s1", "tenant": "t", "tokens": [1, 2, 3], "output_tokens": 7, )"
      R"("lora_name": "adapter", "cache_salt": "salt"})"
      "\n"
      R"({"arrival_s": 1, "session": "s2", "segments": [{"ref": "sys", "len": 5}, {"tokens": [9, 8]}]})");
  ASSERT_EQ(t.requests.size(), 2u);
  const TraceRequest& a = t.requests[0];
  EXPECT_EQ(a.arrival_s, 0.5);
  EXPECT_EQ(a.session, "s1");
  EXPECT_EQ(a.tenant, "t");
  EXPECT_EQ(a.tokens, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(a.output_tokens, 7u);
  EXPECT_EQ(a.lora_name, "adapter");
  EXPECT_EQ(a.cache_salt, "salt");
  const TraceRequest& b = t.requests[1];
  std::vector<int64_t> expected = SegmentTokens("sys", 5);
  expected.insert(expected.end(), {9, 8});
  EXPECT_EQ(b.tokens, expected);
  EXPECT_EQ(b.tenant, "");
  EXPECT_FALSE(b.lora_name.has_value());
  EXPECT_FALSE(b.cache_salt.has_value());
  EXPECT_EQ(b.output_tokens, 0u);
}

TEST(Trace, CommentsBlankLinesAndNullOptionalsAreSkipped) {
  const Trace t = ParseOk("# a comment\n\n   \n  # indented comment\r\n"
                          R"({"arrival_s": 0, "session": "s", "tokens": [1], "lora_name": null, "tenant": null})"
                          "\n");
  ASSERT_EQ(t.requests.size(), 1u);
  EXPECT_FALSE(t.requests[0].lora_name.has_value());
}

TEST(Trace, SegmentTokensAreDeterministicPrefixesInTheVocabulary) {
  const std::vector<int64_t> short_ = SegmentTokens("tenant/system", 100);
  const std::vector<int64_t> long_ = SegmentTokens("tenant/system", 5000);
  EXPECT_EQ(short_, SegmentTokens("tenant/system", 100));
  EXPECT_TRUE(IsPrefix(short_, long_));
  EXPECT_NE(SegmentTokens("tenant/tools", 100), short_);
  for (int64_t id : long_) ASSERT_TRUE(id >= 0 && id < 32000) << id;
  // Not a constant stream: many distinct ids.
  std::vector<int64_t> sorted = long_;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_GT(std::unique(sorted.begin(), sorted.end()) - sorted.begin(), 4000);
}

TEST(Trace, MalformedLinesNameTheLineAndTheKey) {
  const std::string ok = R"({"arrival_s": 0, "session": "s", "tokens": [1]})";
  const std::map<std::string, std::string> cases = {
      {R"({"arrival_s": 0, "session": "s", "tokens": [1], "prompt": "x"})", "trace line 2: key 'prompt': unknown key"},
      {R"({"session": "s", "tokens": [1]})", "trace line 2: key 'arrival_s': required"},
      {R"({"arrival_s": -1, "session": "s", "tokens": [1]})", "trace line 2: key 'arrival_s': expected a number >= 0"},
      {R"({"arrival_s": "0", "session": "s", "tokens": [1]})", "trace line 2: key 'arrival_s': expected a number"},
      {R"({"arrival_s": 0, "tokens": [1]})", "trace line 2: key 'session': required"},
      {R"({"arrival_s": 0, "session": "", "tokens": [1]})", "trace line 2: key 'session': expected a non-empty string"},
      {R"({"arrival_s": 0, "session": "s"})", "trace line 2: key 'tokens': required (or 'segments')"},
      {R"({"arrival_s": 0, "session": "s", "tokens": []})", "trace line 2: key 'tokens': the prompt is empty"},
      {R"({"arrival_s": 0, "session": "s", "tokens": [1], "segments": []})", "trace line 2: key 'segments': give exactly one"},
      {R"({"arrival_s": 0, "session": "s", "tokens": [1, -2]})", "trace line 2: key 'tokens[1]': expected a non-negative integer"},
      {R"({"arrival_s": 0, "session": "s", "tokens": "1 2"})", "trace line 2: key 'tokens': expected an array"},
      {R"({"arrival_s": 0, "session": "s", "segments": [{"ref": "a"}]})", "trace line 2: key 'segments[0].len': required"},
      {R"({"arrival_s": 0, "session": "s", "segments": [{"ref": "a", "len": 2, "tokens": [1]}]})",
       "trace line 2: key 'segments[0]': give either 'ref' with 'len' or 'tokens'"},
      {R"({"arrival_s": 0, "session": "s", "segments": [{"ref": "", "len": 2}]})",
       "trace line 2: key 'segments[0].ref': expected a non-empty string"},
      {R"({"arrival_s": 0, "session": "s", "segments": [{"ref": "a", "len": 2, "x": 1}]})",
       "trace line 2: key 'segments[0].x': unknown key"},
      {R"({"arrival_s": 0, "session": "s", "tokens": [1], "output_tokens": 1.5})",
       "trace line 2: key 'output_tokens': expected an integer"},
      {R"({"arrival_s": 0, "session": "s", "tokens": [1], "lora_name": 3})", "trace line 2: key 'lora_name': expected a string"},
      {R"({"arrival_s": 0, "session": "s", "tokens": [1)", "trace line 2: malformed JSON"},
      {R"([1, 2])", "trace line 2: expected a JSON object"},
      {"[[[[[[[[[[1]]]]]]]]]]", "trace line 2: malformed JSON: nested deeper than"},
  };
  for (const auto& [line, prefix] : cases) {
    const std::string message = ParseError(ok + "\n" + line + "\n");
    EXPECT_EQ(message.rfind(prefix, 0), 0u) << "line: " << line << "\nmessage: " << message;
  }
}

TEST(Trace, ArrivalsMustNotDecrease) {
  const std::string message = ParseError(R"({"arrival_s": 2, "session": "s", "tokens": [1]})"
                                         "\n"
                                         R"({"arrival_s": 1, "session": "s", "tokens": [1]})");
  EXPECT_NE(message.find("trace line 2: key 'arrival_s': must not decrease"), std::string::npos) << message;
  ParseOk(R"({"arrival_s": 1, "session": "s", "tokens": [1]})"
          "\n"
          R"({"arrival_s": 1, "session": "t", "tokens": [1]})");  // ties are fine
}

TEST(Trace, TokenLimitsPerRequestAndPerTrace) {
  const std::string too_long = R"({"arrival_s": 0, "session": "s", "segments": [{"ref": "a", "len": )" +
                               std::to_string(kTraceRequestTokensMax) + R"(}, {"ref": "b", "len": 1}]})";
  EXPECT_NE(ParseError(too_long).find("key 'segments[1].len': the prompt has more than"), std::string::npos);
  std::string just_fits = R"({"arrival_s": 0, "session": "s", "segments": [{"ref": "a", "len": )" +
                          std::to_string(kTraceRequestTokensMax) + "}]}\n";
  std::string many;
  for (uint64_t i = 0; i < kTraceTokensMax / kTraceRequestTokensMax; ++i) many += just_fits;
  ParseOk(many);
  const std::string message = ParseError(many + just_fits);
  EXPECT_NE(message.find("trace line 17: key 'segments[0].len': the trace has more than"), std::string::npos)
      << message;
}

TEST(Trace, LiteralJsonlRoundTrips) {
  Trace t = ParseOk(R"({"arrival_s": 0.25, "session": "s\"1", "tenant": "t", "segments": [{"ref": "x", "len": 40}], )"
                    R"("output_tokens": 3, "lora_name": "l", "cache_salt": "c"})"
                    "\n"
                    R"({"arrival_s": 1e3, "session": "s2", "tokens": [0, 31999, 9223372036854775807]})");
  const Trace back = ParseOk(TraceToJsonl(t));
  ASSERT_EQ(back.requests.size(), t.requests.size());
  for (size_t i = 0; i < t.requests.size(); ++i) {
    const TraceRequest &a = t.requests[i], &b = back.requests[i];
    EXPECT_EQ(a.arrival_s, b.arrival_s);
    EXPECT_EQ(a.session, b.session);
    EXPECT_EQ(a.tenant, b.tenant);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.output_tokens, b.output_tokens);
    EXPECT_EQ(a.lora_name, b.lora_name);
    EXPECT_EQ(a.cache_salt, b.cache_salt);
  }
}

TEST(Trace, LoadTraceFileNamesAMissingPath) {
  Result<Trace> t = LoadTraceFile("/nonexistent/kvtier/trace.jsonl");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("/nonexistent/kvtier/trace.jsonl"), std::string::npos)
      << t.status().ToString();
}

TEST(Synthetic, SameSeedSameTraceOtherSeedOtherTokens) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  SyntheticOptions o{"agents", seed, 40, 0.1};
  Result<Trace> a = GenerateSynthetic(o), b = GenerateSynthetic(o);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(TraceToJsonl(*a), TraceToJsonl(*b));
  o.seed = seed + 1;
  Result<Trace> c = GenerateSynthetic(o);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->requests[0].tokens, c->requests[0].tokens);
  // Any synthetic trace round-trips through the literal format.
  const Trace back = ParseOk(TraceToJsonl(*a));
  ASSERT_EQ(back.requests.size(), a->requests.size());
  for (size_t i = 0; i < back.requests.size(); ++i) EXPECT_EQ(back.requests[i].tokens, a->requests[i].tokens);
}

TEST(Synthetic, AgentsShareTenantPrefixesAndGrowTurnByTurnTo8KTo64K) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Result<Trace> t = GenerateSynthetic({"agents", seed, 0, 1.0});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::map<std::string, std::vector<const TraceRequest*>> sessions;
  std::map<std::string, std::vector<const TraceRequest*>> tenants;
  double previous = 0;
  for (const TraceRequest& r : t->requests) {
    EXPECT_GE(r.arrival_s, previous);
    previous = r.arrival_s;
    sessions[r.session].push_back(&r);
    tenants[r.tenant].push_back(&r);
  }
  EXPECT_EQ(tenants.size(), 4u);
  EXPECT_EQ(sessions.size(), 16u);
  for (const auto& [name, turns] : sessions) {
    for (size_t k = 1; k < turns.size(); ++k) {
      EXPECT_TRUE(IsPrefix(turns[k - 1]->tokens, turns[k]->tokens)) << name << " turn " << k;
      EXPECT_GT(turns[k]->tokens.size(), turns[k - 1]->tokens.size()) << name;
    }
    EXPECT_GE(turns.back()->tokens.size(), 8192u) << name;
    EXPECT_LE(turns.back()->tokens.size(), 65536u) << name;
  }
  // A tenant's sessions share its system prompt and tool schema (>= 4K tokens).
  for (const auto& [tenant, requests] : tenants) {
    const std::vector<int64_t>& first = requests.front()->tokens;
    for (const TraceRequest* r : requests) {
      const auto mismatch = std::mismatch(first.begin(), first.end(), r->tokens.begin(), r->tokens.end());
      EXPECT_GE(mismatch.first - first.begin(), 4096) << tenant << " / " << r->session;
    }
  }
}

TEST(Synthetic, ChatStaysShortAndBadOptionsAreErrors) {
  Result<Trace> t = GenerateSynthetic({"chat", 7, 0, 1.0});
  ASSERT_TRUE(t.ok());
  EXPECT_GE(t->requests.size(), 64u);
  for (const TraceRequest& r : t->requests) EXPECT_LE(r.tokens.size(), 2048u) << r.session;
  EXPECT_EQ(GenerateSynthetic({"nosuch", 1, 0, 1.0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(GenerateSynthetic({"agents", 1, 0, 0.0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(GenerateSynthetic({"agents", 1, 0, -1.0}).status().code(), StatusCode::kInvalidArgument);
  // A scale that would break the per-request limit fails before expanding.
  EXPECT_EQ(GenerateSynthetic({"agents", 1, 0, 100.0}).status().code(), StatusCode::kInvalidArgument);
}

TEST(Synthetic, RequestsCutsOrExtendsTheTrace) {
  Result<Trace> cut = GenerateSynthetic({"chat", 3, 10, 1.0});
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->requests.size(), 10u);
  Result<Trace> more = GenerateSynthetic({"chat", 3, 1000, 1.0});
  ASSERT_TRUE(more.ok());
  EXPECT_EQ(more->requests.size(), 1000u);
}

}  // namespace
}  // namespace kvtier::internal
