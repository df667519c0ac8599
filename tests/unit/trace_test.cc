// Proves that the replay trace format (docs/trace-format.md) is read and
// written as documented: ParseTraceJsonl reads every key, skips blank and
// comment lines while still counting them, and rejects each bad input with the
// exact message naming the line and the key (unknown keys, wrong types,
// negative or decreasing arrivals, both or neither prompt, bad token ids,
// malformed or too deeply nested JSON, the per-request, per-trace and per-line
// limits, each at its boundary); segments expand to the SegmentTokens of their
// refs (a shorter length of a ref is a prefix of a longer one, ids in
// [0, 32000), the same on every call and, via pinned values, in every
// version); TraceToJsonl -> ParseTraceJsonl gives back the same requests for
// hand-written, random and synthetic traces; GenerateSynthetic is seeded
// (same seed, same trace; different seeds share no first block), "agents" has
// 4 tenants x 4 sessions that share each tenant's system prompt and tools and
// grow turn by turn to final prompts of 8K-64K tokens, "chat" keeps every
// prompt at or below 2048 tokens, and bad options are kInvalidArgument; and
// LoadTraceFile names the path in its errors. Random inputs come from
// TestSeed (printed; replay with KVTIER_TEST_SEED=<seed>). Two tests expose
// known bugs and skip until they are fixed: -0 refused where an integer >= 0
// is expected, and TraceToJsonl writing lines longer than the parser reads.
#include "replay/trace.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvtier::internal {
namespace {

using Json = nlohmann::json;

// ---- helpers ----------------------------------------------------------------

// The first difference between two request lists, field by field.
::testing::AssertionResult SameRequests(const std::vector<TraceRequest>& want,
                                        const std::vector<TraceRequest>& got) {
  if (want.size() != got.size()) {
    return ::testing::AssertionFailure() << want.size() << " requests wanted, " << got.size()
                                         << " got";
  }
  for (size_t i = 0; i < want.size(); ++i) {
    const TraceRequest& a = want[i];
    const TraceRequest& b = got[i];
    auto fail = [&](const char* field) {
      return ::testing::AssertionFailure() << "request " << i << " differs in " << field;
    };
    if (a.arrival_s != b.arrival_s) return fail("arrival_s") << ": " << a.arrival_s << " vs " << b.arrival_s;
    if (a.session != b.session) return fail("session") << ": '" << a.session << "' vs '" << b.session << "'";
    if (a.tenant != b.tenant) return fail("tenant") << ": '" << a.tenant << "' vs '" << b.tenant << "'";
    if (a.tokens != b.tokens) return fail("tokens") << " (" << a.tokens.size() << " vs " << b.tokens.size() << " ids)";
    if (a.output_tokens != b.output_tokens) return fail("output_tokens") << ": " << a.output_tokens << " vs " << b.output_tokens;
    if (a.lora_name != b.lora_name) return fail("lora_name");
    if (a.cache_salt != b.cache_salt) return fail("cache_salt");
  }
  return ::testing::AssertionSuccess();
}

// The message of a parse that must fail with kInvalidArgument ("" and a test
// failure when it parses).
std::string ParseError(std::string_view text) {
  const Result<Trace> r = ParseTraceJsonl(text);
  if (r.ok()) {
    ADD_FAILURE() << "parsed, but should not have: " << text.substr(0, 200);
    return "";
  }
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  return r.status().message();
}

size_t CommonPrefix(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

bool IsPrefix(const std::vector<int64_t>& shorter, const std::vector<int64_t>& longer) {
  return shorter.size() <= longer.size() && CommonPrefix(shorter, longer) == shorter.size();
}

std::vector<int64_t> Concat(std::initializer_list<std::vector<int64_t>> parts) {
  std::vector<int64_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// A request line with `prompt` (a "tokens" or "segments" member, without
// braces) and the minimal required keys.
std::string Line(double arrival, const std::string& prompt) {
  return "{\"arrival_s\": " + Json(arrival).dump() + ", \"session\": \"s\", " + prompt + "}";
}

// A request line prompting `len` tokens of segment `ref`.
std::string SegmentLine(const std::string& ref, uint64_t len) {
  return Line(0, "\"segments\": [{\"ref\": \"" + ref + "\", \"len\": " + std::to_string(len) + "}]");
}

// The requests of each session, in trace order.
std::map<std::string, std::vector<const TraceRequest*>> BySession(const Trace& trace) {
  std::map<std::string, std::vector<const TraceRequest*>> out;
  for (const TraceRequest& r : trace.requests) out[r.session].push_back(&r);
  return out;
}

::testing::AssertionResult ArrivalsNonDecreasing(const Trace& trace) {
  double previous = 0;
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    const double a = trace.requests[i].arrival_s;
    if (!std::isfinite(a) || a < previous) {
      return ::testing::AssertionFailure() << "request " << i << " arrives at " << a << " after "
                                           << previous;
    }
    previous = a;
  }
  return ::testing::AssertionSuccess();
}

// Every later request of a session extends the previous one: its prompt is
// the previous prompt, the previous output (output_tokens of them) and at
// least one token of a new message; and it arrives no earlier than the
// previous output could be decoded (10 ms a token in the generators).
::testing::AssertionResult SessionsGrowTurnByTurn(const Trace& trace) {
  for (const auto& [session, turns] : BySession(trace)) {
    for (size_t k = 1; k < turns.size(); ++k) {
      const TraceRequest& prev = *turns[k - 1];
      const TraceRequest& next = *turns[k];
      if (!IsPrefix(prev.tokens, next.tokens)) {
        return ::testing::AssertionFailure() << session << " turn " << k + 1
                                             << "'s prompt does not extend turn " << k << "'s";
      }
      if (next.tokens.size() <= prev.tokens.size() + prev.output_tokens) {
        return ::testing::AssertionFailure()
               << session << " turn " << k + 1 << " has " << next.tokens.size()
               << " tokens, not more than the previous prompt (" << prev.tokens.size()
               << ") plus its output (" << prev.output_tokens << ")";
      }
      if (next.arrival_s < prev.arrival_s + 0.01 * prev.output_tokens * (1 - 1e-12)) {
        return ::testing::AssertionFailure()
               << session << " turn " << k + 1 << " arrives at " << next.arrival_s
               << ", before turn " << k << "'s " << prev.output_tokens << " output tokens ("
               << prev.arrival_s << " + 10 ms each)";
      }
    }
  }
  return ::testing::AssertionSuccess();
}

Trace Synthetic(const std::string& name, uint64_t seed, uint32_t requests = 0, double scale = 1) {
  SyntheticOptions o;
  o.name = name;
  o.seed = seed;
  o.requests = requests;
  o.scale = scale;
  Result<Trace> r = GenerateSynthetic(o);
  if (!r.ok()) {
    ADD_FAILURE() << "GenerateSynthetic(" << name << ", seed " << seed << ", requests " << requests
                  << ", scale " << scale << "): " << r.status().ToString();
    return {};
  }
  return std::move(r).value();
}

Status SyntheticError(const std::string& name, double scale, uint32_t requests = 0) {
  SyntheticOptions o;
  o.name = name;
  o.scale = scale;
  o.requests = requests;
  const Result<Trace> r = GenerateSynthetic(o);
  return r.status();
}

// ---- parsing: every key, skipped lines ---------------------------------------

TEST(TraceParse, ReadsEveryKey) {
  const std::string text =
      "# a comment\n"
      "   # an indented comment\n"
      "\n"
      " \t \r\n"
      "{\"arrival_s\": 0, \"session\": \"a\", \"tokens\": [0, 1, 31999, 32000, 9223372036854775807]}\n"
      "{\"cache_salt\": \"salt\", \"lora_name\": \"sql\", \"output_tokens\": 1048576, "
      "\"segments\": [{\"ref\": \"sys\", \"len\": 5}, {\"tokens\": [7, 8]}, {\"len\": 2, \"ref\": \"sys\"}, "
      "{\"ref\": \"empty\", \"len\": 0}, {\"tokens\": []}], \"tenant\": \"acme\", \"session\": \"b\", "
      "\"arrival_s\": 0.0}\n"
      "{\"arrival_s\": 2.5, \"session\": \"c\", \"tenant\": null, \"tokens\": [3], \"output_tokens\": 0, "
      "\"lora_name\": null, \"cache_salt\": \"\"}";  // no final newline
  ASSERT_OK_AND_ASSIGN(const Trace trace, ParseTraceJsonl(text, "my.jsonl"));
  EXPECT_EQ(trace.name, "my.jsonl");
  ASSERT_EQ(trace.requests.size(), 3u);

  const TraceRequest& a = trace.requests[0];
  EXPECT_EQ(a.arrival_s, 0.0);
  EXPECT_EQ(a.session, "a");
  EXPECT_EQ(a.tenant, "");  // absent
  // Literal ids are taken as they are: not limited to SegmentTokens' range.
  EXPECT_EQ(a.tokens, (std::vector<int64_t>{0, 1, 31999, 32000, std::numeric_limits<int64_t>::max()}));
  EXPECT_EQ(a.output_tokens, 0u);  // the default
  EXPECT_FALSE(a.lora_name.has_value());
  EXPECT_FALSE(a.cache_salt.has_value());

  const TraceRequest& b = trace.requests[1];  // keys in any order; an equal arrival
  EXPECT_EQ(b.arrival_s, 0.0);
  EXPECT_EQ(b.session, "b");
  EXPECT_EQ(b.tenant, "acme");
  EXPECT_EQ(b.tokens, Concat({SegmentTokens("sys", 5), {7, 8}, SegmentTokens("sys", 2)}));
  EXPECT_EQ(b.output_tokens, 1048576u);  // the documented maximum
  EXPECT_EQ(b.lora_name, std::optional<std::string>("sql"));
  EXPECT_EQ(b.cache_salt, std::optional<std::string>("salt"));

  const TraceRequest& c = trace.requests[2];  // null is absent; "" is present
  EXPECT_EQ(c.arrival_s, 2.5);
  EXPECT_EQ(c.session, "c");
  EXPECT_EQ(c.tenant, "");
  EXPECT_EQ(c.tokens, std::vector<int64_t>{3});
  EXPECT_EQ(c.output_tokens, 0u);
  EXPECT_FALSE(c.lora_name.has_value());
  EXPECT_EQ(c.cache_salt, std::optional<std::string>(""));
}

TEST(TraceParse, EmptyAndCommentOnlyTextsAreEmptyTraces) {
  for (const char* text : {"", "\n", "\n\n  \n", "# only\n#comments", "\r\n\t\r\n"}) {
    SCOPED_TRACE(::testing::PrintToString(std::string(text)));
    ASSERT_OK_AND_ASSIGN(const Trace trace, ParseTraceJsonl(text));
    EXPECT_TRUE(trace.requests.empty());
    EXPECT_EQ(trace.name, "trace");  // the default name
  }
}

// Skipped lines still count: an error's line number is the line in the file,
// with CRLF line ends as well as LF.
TEST(TraceParse, SkippedLinesCountInLineNumbers) {
  const std::string good = Line(1, "\"tokens\": [1]");
  EXPECT_EQ(ParseError("\n# c\n" + good + "\n  \n{\"arrival_s\": 1}\n" + good),
            "trace line 5: key 'session': required");
  EXPECT_EQ(ParseError("# c\r\n\r\n" + good + "\r\n{\"arrival_s\": 1}\r\n"),
            "trace line 4: key 'session': required");
  ASSERT_OK_AND_ASSIGN(const Trace crlf, ParseTraceJsonl("# c\r\n" + good + "\r\n" + good + "\r\n"));
  EXPECT_EQ(crlf.requests.size(), 2u);
}

// The nesting check before parsing ignores brackets inside strings.
TEST(TraceParse, BracketsInStringsAreNotNesting) {
  const std::string deep = "[[[[[[[[[[{{{{{{{{{{\\\"[[[[[";
  ASSERT_OK_AND_ASSIGN(
      const Trace trace,
      ParseTraceJsonl("{\"arrival_s\": 0, \"session\": \"" + deep + "\", \"tokens\": [1]}"));
  ASSERT_EQ(trace.requests.size(), 1u);
  EXPECT_EQ(trace.requests[0].session, "[[[[[[[[[[{{{{{{{{{{\"[[[[[");
}

// ---- parsing: errors ---------------------------------------------------------

// Each bad line, placed as line 3 after a comment and a blank line, gives
// exactly "trace line 3: " + the message.
TEST(TraceParseErrors, EachNamesTheLineAndTheKey) {
  const std::string kAllowed =
      "unknown key (allowed: arrival_s, session, tenant, tokens, segments, output_tokens, "
      "lora_name, cache_salt)";
  struct Case {
    std::string line, message;
  };
  const std::vector<Case> cases = {
      // Unknown keys, case-sensitively, before any other check.
      {"{\"arrival_s\": 1, \"session\": \"s\", \"tokens\": [1], \"prompt\": \"x\"}", "key 'prompt': " + kAllowed},
      {"{\"arrival_s\": 1, \"Session\": \"s\", \"tokens\": [1]}", "key 'Session': " + kAllowed},
      {"{\"bogus\": 1}", "key 'bogus': " + kAllowed},
      // arrival_s
      {"{\"session\": \"s\", \"tokens\": [1]}", "key 'arrival_s': required"},
      {Line(-0.5, "\"tokens\": [1]"), "key 'arrival_s': expected a number >= 0, got -0.5 (a float)"},
      {"{\"arrival_s\": -1, \"session\": \"s\", \"tokens\": [1]}", "key 'arrival_s': expected a number >= 0, got -1 (an integer)"},
      {"{\"arrival_s\": \"1\", \"session\": \"s\", \"tokens\": [1]}", "key 'arrival_s': expected a number >= 0, got \"1\" (a string)"},
      {"{\"arrival_s\": null, \"session\": \"s\", \"tokens\": [1]}", "key 'arrival_s': expected a number >= 0, got null"},
      {"{\"arrival_s\": true, \"session\": \"s\", \"tokens\": [1]}", "key 'arrival_s': expected a number >= 0, got true (a boolean)"},
      {"{\"arrival_s\": [1], \"session\": \"s\", \"tokens\": [1]}", "key 'arrival_s': expected a number >= 0, got an array"},
      // session, tenant
      {"{\"arrival_s\": 1, \"tokens\": [1]}", "key 'session': required"},
      {"{\"arrival_s\": 1, \"session\": \"\", \"tokens\": [1]}", "key 'session': expected a non-empty string, got \"\" (a string)"},
      {"{\"arrival_s\": 1, \"session\": 7, \"tokens\": [1]}", "key 'session': expected a non-empty string, got 7 (an integer)"},
      {"{\"arrival_s\": 1, \"session\": null, \"tokens\": [1]}", "key 'session': expected a non-empty string, got null"},
      {"{\"arrival_s\": 1, \"session\": \"s\", \"tenant\": 1.5, \"tokens\": [1]}", "key 'tenant': expected a string, got 1.5 (a float)"},
      {"{\"arrival_s\": 1, \"session\": \"s\", \"tenant\": {}, \"tokens\": [1]}", "key 'tenant': expected a string, got an object"},
      // the prompt: neither, both, empty
      {"{\"arrival_s\": 1, \"session\": \"s\"}", "key 'tokens': required (or 'segments'): every request needs a prompt"},
      {Line(1, "\"tokens\": [1], \"segments\": [{\"ref\": \"a\", \"len\": 1}]"), "key 'segments': give exactly one of 'tokens' or 'segments', not both"},
      {Line(1, "\"tokens\": null, \"segments\": [{\"ref\": \"a\", \"len\": 1}]"), "key 'segments': give exactly one of 'tokens' or 'segments', not both"},
      {Line(1, "\"tokens\": []"), "key 'tokens': the prompt is empty"},
      {Line(1, "\"segments\": []"), "key 'segments': the prompt is empty"},
      {Line(1, "\"segments\": [{\"ref\": \"a\", \"len\": 0}, {\"tokens\": []}]"), "key 'segments': the prompt is empty"},
      // tokens
      {Line(1, "\"tokens\": \"1 2\""), "key 'tokens': expected an array of token ids, got \"1 2\" (a string)"},
      {Line(1, "\"tokens\": null"), "key 'tokens': expected an array of token ids, got null"},
      {Line(1, "\"tokens\": [1, -2]"), "key 'tokens[1]': expected a non-negative integer token id, got -2 (an integer)"},
      {Line(1, "\"tokens\": [1.0]"), "key 'tokens[0]': expected a non-negative integer token id, got 1.0 (a float)"},
      {Line(1, "\"tokens\": [\"5\"]"), "key 'tokens[0]': expected a non-negative integer token id, got \"5\" (a string)"},
      {Line(1, "\"tokens\": [0, 1, 9223372036854775808]"), "key 'tokens[2]': expected a non-negative integer token id, got 9223372036854775808 (an integer)"},
      {Line(1, "\"tokens\": [18446744073709551616]"), "key 'tokens[0]': expected a non-negative integer token id, got 1.8446744073709552e+19 (a float)"},
      {Line(1, "\"tokens\": [[1]]"), "key 'tokens[0]': expected a non-negative integer token id, got an array"},
      // segments
      {Line(1, "\"segments\": {\"ref\": \"a\", \"len\": 1}"), "key 'segments': expected an array of segments, got an object"},
      {Line(1, "\"segments\": [\"a\"]"), "key 'segments[0]': expected an object ({\"ref\": ..., \"len\": ...} or {\"tokens\": [...]}), got \"a\" (a string)"},
      {Line(1, "\"segments\": [{\"ref\": \"a\", \"len\": 1}, {\"ref\": \"b\", \"len\": 2, \"lenght\": 3}]"), "key 'segments[1].lenght': unknown key (allowed: ref, len, tokens)"},
      {Line(1, "\"segments\": [{\"ref\": \"a\", \"len\": 2, \"tokens\": [1]}]"), "key 'segments[0]': give either 'ref' with 'len' or 'tokens', not both"},
      {Line(1, "\"segments\": [{\"len\": 2, \"tokens\": [1]}]"), "key 'segments[0]': give either 'ref' with 'len' or 'tokens', not both"},
      {Line(1, "\"segments\": [{\"ref\": \"a\"}]"), "key 'segments[0].len': required"},
      {Line(1, "\"segments\": [{\"len\": 3}]"), "key 'segments[0].ref': required"},
      {Line(1, "\"segments\": [{}]"), "key 'segments[0].ref': required"},
      {Line(1, "\"segments\": [{\"ref\": \"\", \"len\": 3}]"), "key 'segments[0].ref': expected a non-empty string, got \"\" (a string)"},
      {Line(1, "\"segments\": [{\"ref\": 5, \"len\": 3}]"), "key 'segments[0].ref': expected a non-empty string, got 5 (an integer)"},
      {Line(1, "\"segments\": [{\"ref\": \"a\", \"len\": -3}]"), "key 'segments[0].len': expected an integer in [0, 1048576], got -3 (an integer)"},
      {Line(1, "\"segments\": [{\"ref\": \"a\", \"len\": 1.5}]"), "key 'segments[0].len': expected an integer in [0, 1048576], got 1.5 (a float)"},
      {Line(1, "\"segments\": [{\"ref\": \"a\", \"len\": \"3\"}]"), "key 'segments[0].len': expected an integer in [0, 1048576], got \"3\" (a string)"},
      {Line(1, "\"segments\": [{\"ref\": \"a\", \"len\": 1048577}]"), "key 'segments[0].len': expected an integer in [0, 1048576], got 1048577 (an integer)"},
      {Line(1, "\"segments\": [{\"tokens\": 5}]"), "key 'segments[0].tokens': expected an array of token ids, got 5 (an integer)"},
      {Line(1, "\"segments\": [{\"ref\": \"a\", \"len\": 1}, {\"tokens\": [1, -1]}]"), "key 'segments[1].tokens[1]': expected a non-negative integer token id, got -1 (an integer)"},
      // output_tokens, lora_name, cache_salt
      {Line(1, "\"tokens\": [1], \"output_tokens\": -1"), "key 'output_tokens': expected an integer in [0, 1048576], got -1 (an integer)"},
      {Line(1, "\"tokens\": [1], \"output_tokens\": 1048577"), "key 'output_tokens': expected an integer in [0, 1048576], got 1048577 (an integer)"},
      {Line(1, "\"tokens\": [1], \"output_tokens\": 2.0"), "key 'output_tokens': expected an integer in [0, 1048576], got 2.0 (a float)"},
      {Line(1, "\"tokens\": [1], \"output_tokens\": null"), "key 'output_tokens': expected an integer in [0, 1048576], got null"},
      {Line(1, "\"tokens\": [1], \"lora_name\": 3"), "key 'lora_name': expected a string, got 3 (an integer)"},
      {Line(1, "\"tokens\": [1], \"cache_salt\": {}"), "key 'cache_salt': expected a string, got an object"},
      {Line(1, "\"tokens\": [1], \"cache_salt\": false"), "key 'cache_salt': expected a string, got false (a boolean)"},
      // a line that is not an object
      {"[1, 2]", "expected a JSON object, got an array"},
      {"42", "expected a JSON object, got 42 (an integer)"},
      {"\"x\"", "expected a JSON object, got \"x\" (a string)"},
      {"null", "expected a JSON object, got null"},
      // nesting: 9 levels are refused before parsing, 8 parse
      {Line(1, "\"tokens\": [[[[[[[[1]]]]]]]]"), "malformed JSON: nested deeper than 8 levels"},
      {Line(1, "\"tokens\": [[[[[[[1]]]]]]]"), "key 'tokens[0]': expected a non-negative integer token id, got an array"},
      // long values are cut to 40 bytes in messages, never inside a UTF-8 character
      {"{\"arrival_s\": \"" + std::string(50, 'x') + "\"}", "key 'arrival_s': expected a number >= 0, got \"" + std::string(39, 'x') + "... (a string)"},
      {"{\"arrival_s\": \"" + std::string(60, 'e') + "\"}", "key 'arrival_s': expected a number >= 0, got \"" + std::string(39, 'e') + "... (a string)"},
  };
  // The UTF-8 case: "é" is 2 bytes; 40 bytes would end inside the 20th one.
  std::vector<Case> all = cases;
  std::string e19, e30;
  for (int i = 0; i < 19; ++i) e19 += "\xC3\xA9";
  for (int i = 0; i < 30; ++i) e30 += "\xC3\xA9";
  all.push_back({"{\"arrival_s\": \"" + e30 + "\"}",
                 "key 'arrival_s': expected a number >= 0, got \"" + e19 + "... (a string)"});
  for (const Case& c : all) {
    SCOPED_TRACE(c.line);
    EXPECT_EQ(ParseError("# header\n\n" + c.line + "\n" + Line(9, "\"tokens\": [1]") + "\n"),
              "trace line 3: " + c.message);
  }
}

// The example in docs/trace-format.md, word for word.
TEST(TraceParseErrors, DocumentedExample) {
  std::string text;
  for (int i = 0; i < 6; ++i) text += Line(i, "\"tokens\": [1]") + "\n";
  text += Line(6, "\"segments\": [{\"ref\": \"a\", \"len\": 1}, {\"tokens\": [2]}, {\"ref\": \"b\", \"len\": -3}]");
  EXPECT_EQ(ParseError(text),
            "trace line 7: key 'segments[2].len': expected an integer in [0, 1048576], got -3 (an integer)");
}

TEST(TraceParseErrors, ArrivalMustNotDecrease) {
  const std::string text = Line(1, "\"tokens\": [1]") + "\n" + Line(2.5, "\"tokens\": [1]") + "\n" +
                           Line(2.5, "\"tokens\": [1]") + "\n" +
                           "{\"arrival_s\": 1, \"session\": \"s\", \"tokens\": [1]}\n";
  EXPECT_EQ(ParseError(text),
            "trace line 4: key 'arrival_s': must not decrease: got 1 after an earlier request's 2.5");
  // Against the previous request, not the first: 2 after 3 is refused.
  EXPECT_EQ(ParseError(Line(0, "\"tokens\": [1]") + "\n" + Line(3, "\"tokens\": [1]") + "\n" +
                       Line(2, "\"tokens\": [1]")),
            "trace line 3: key 'arrival_s': must not decrease: got 2.0 after an earlier request's 3.0");
}

// Malformed JSON names the line and nlohmann's position and reason.
TEST(TraceParseErrors, MalformedJson) {
  struct Case {
    std::string line, prefix, reason;
  };
  const std::vector<Case> cases = {
      {"{\"arrival_s\": 1, \"session\": \"s\", \"tokens\": [1]", "parse error at line 1, column 47: ",
       "unexpected end of input; expected '}'"},
      {"{\"arrival_s\": 1, \"session\": \"s\", \"tokens\": [1]} x", "parse error at line 1, column 49: ",
       "expected end of input"},
      {"{\"arrival_s\": 1}{\"arrival_s\": 2}", "parse error at line 1, column 17: ", "expected end of input"},
      {"{arrival_s: 1}", "parse error at line 1, column 2: ", "expected string literal"},
      {"{\"tokens\": [1,]}", "parse error at line 1, column 15: ", "unexpected ']'"},
      {"{\"arrival_s\": 1e400, \"session\": \"s\", \"tokens\": [1]}", "number overflow parsing '1e400'", ""},
      {"{\"arrival_s\": 0, \"session\": \"\xFF\", \"tokens\": [1]}", "parse error at line 1, column ", "ill-formed UTF-8"},
      {"// a comment", "parse error at line 1, column 1: ", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.line);
    const std::string message = ParseError("# header\n" + c.line + "\n");
    EXPECT_EQ(message.rfind("trace line 2: malformed JSON: " + c.prefix, 0), 0u) << message;
    EXPECT_NE(message.find(c.reason), std::string::npos) << message;
  }
}

// The first bad line stops the parse even when later lines are bad too.
TEST(TraceParseErrors, FirstErrorWins) {
  EXPECT_EQ(ParseError(Line(0, "\"tokens\": [1]") + "\n{\"arrival_s\": 1}\n{bad json\n"),
            "trace line 2: key 'session': required");
}

// JSON's -0 is the integer 0 (arrival_s accepts it), so an id, a length or
// an output count written as -0 is 0.
TEST(TraceParseErrors, MinusZeroIsZero) {
  ASSERT_OK_AND_ASSIGN(
      const Trace trace,
      ParseTraceJsonl("{\"arrival_s\": -0, \"session\": \"s\", \"segments\": [{\"ref\": \"a\", \"len\": -0}, "
                      "{\"tokens\": [-0, 1]}], \"output_tokens\": -0}"));
  ASSERT_EQ(trace.requests.size(), 1u);
  EXPECT_EQ(trace.requests[0].tokens, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(trace.requests[0].output_tokens, 0u);
}

// ---- parsing: limits, each at its boundary -----------------------------------

TEST(TraceLimits, LiteralTokensPerRequest) {
  auto literal = [](size_t n) {
    std::string ids;
    ids.reserve(2 * n);
    for (size_t i = 0; i < n; ++i) ids += i == 0 ? "0" : ",0";
    return Line(0, "\"tokens\": [" + ids + "]");
  };
  ASSERT_OK_AND_ASSIGN(const Trace trace, ParseTraceJsonl(literal(kTraceRequestTokensMax)));
  ASSERT_EQ(trace.requests.size(), 1u);
  EXPECT_EQ(trace.requests[0].tokens.size(), kTraceRequestTokensMax);
  EXPECT_EQ(ParseError(literal(kTraceRequestTokensMax + 1)),
            "trace line 1: key 'tokens': the prompt has more than 1048576 tokens (the per-request limit)");
}

TEST(TraceLimits, SegmentTokensPerRequest) {
  ASSERT_OK_AND_ASSIGN(const Trace trace, ParseTraceJsonl(SegmentLine("a", kTraceRequestTokensMax)));
  ASSERT_EQ(trace.requests.size(), 1u);
  EXPECT_EQ(trace.requests[0].tokens, SegmentTokens("a", kTraceRequestTokensMax));
  // The segment that crosses the limit is named, whichever kind it is.
  EXPECT_EQ(ParseError(Line(0, "\"segments\": [{\"ref\": \"a\", \"len\": 1048576}, {\"tokens\": [1]}]")),
            "trace line 1: key 'segments[1].tokens': the prompt has more than 1048576 tokens (the per-request limit)");
  EXPECT_EQ(ParseError(Line(0, "\"segments\": [{\"tokens\": [1]}, {\"ref\": \"a\", \"len\": 1048576}]")),
            "trace line 1: key 'segments[1].len': the prompt has more than 1048576 tokens (the per-request limit)");
  EXPECT_EQ(ParseError(Line(0, "\"segments\": [{\"ref\": \"a\", \"len\": 524288}, {\"ref\": \"b\", \"len\": 524288}, "
                               "{\"ref\": \"c\", \"len\": 1}]")),
            "trace line 1: key 'segments[2].len': the prompt has more than 1048576 tokens (the per-request limit)");
}

// 16 requests of 1,048,576 tokens are exactly the trace's limit; one token
// more, on a later line, is refused there.
TEST(TraceLimits, TokensPerTrace) {
  std::string text;
  for (int i = 0; i < 16; ++i) {
    // Not `"r" + std::to_string(i)`: GCC 12 -Wrestrict false positive in Release.
    text += SegmentLine(std::string("r").append(std::to_string(i)), kTraceRequestTokensMax) + "\n";
  }
  {
    ASSERT_OK_AND_ASSIGN(const Trace trace, ParseTraceJsonl(text));
    uint64_t total = 0;
    for (const TraceRequest& r : trace.requests) total += r.tokens.size();
    EXPECT_EQ(total, kTraceTokensMax);
  }
  EXPECT_EQ(ParseError(text + "# more\n" + Line(1, "\"tokens\": [1]")),
            "trace line 18: key 'tokens': the trace has more than 16777216 prompt tokens in all (the limit)");
  EXPECT_EQ(ParseError(text + SegmentLine("x", 1)),
            "trace line 17: key 'segments[0].len': the trace has more than 16777216 prompt tokens in all (the limit)");
}

TEST(TraceLimits, BytesPerLine) {
  constexpr size_t kLineBytesMax = size_t{32} << 20;
  const std::string head = "{\"arrival_s\": 0, \"session\": \"s\", \"tokens\": [1]";
  std::string line = head + std::string(kLineBytesMax - head.size() - 1, ' ') + "}";
  ASSERT_EQ(line.size(), kLineBytesMax);
  {
    ASSERT_OK_AND_ASSIGN(const Trace trace, ParseTraceJsonl("# c\n" + line + "\n"));
    EXPECT_EQ(trace.requests.size(), 1u);
  }
  line.insert(line.size() - 1, " ");
  EXPECT_EQ(ParseError("# c\n" + line + "\n"), "trace line 2: longer than 33554432 bytes");
}

// ---- segments ----------------------------------------------------------------

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

// A random mix of segments parses to the concatenation of their expansions.
TEST(TraceParse, SegmentsExpandToTheirTokens) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  const std::vector<std::string> refs = {"sys", "tools", "s/turn1", "s/out1", "\xC3\xA9t\xC3\xA9", "a\"b\\c"};
  std::string text;
  std::vector<std::vector<int64_t>> want;
  for (int line = 0; line < 100; ++line) {
    Json segments = Json::array();
    std::vector<int64_t> tokens;
    const int n = static_cast<int>(rng() % 6);
    for (int i = 0; i < n; ++i) {
      if (rng() % 3 == 0) {
        Json ids = Json::array();
        const int m = static_cast<int>(rng() % 5);
        for (int j = 0; j < m; ++j) {
          const int64_t id = static_cast<int64_t>(rng() >> (1 + rng() % 63));
          ids.push_back(id);
          tokens.push_back(id);
        }
        segments.push_back({{"tokens", ids}});
      } else {
        const std::string& ref = refs[rng() % refs.size()];
        const uint32_t len = static_cast<uint32_t>(rng() % 300);
        segments.push_back({{"ref", ref}, {"len", len}});
        const std::vector<int64_t> expanded = SegmentTokens(ref, len);
        tokens.insert(tokens.end(), expanded.begin(), expanded.end());
      }
    }
    if (tokens.empty()) {
      segments.push_back({{"tokens", {5}}});
      tokens.push_back(5);
    }
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

// ---- TraceToJsonl round trips ------------------------------------------------

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

// Random traces, with strings full of JSON's special characters and valid
// UTF-8, ids across the whole non-negative int64 range and arrivals that are
// not short decimals, come back equal.
TEST(TraceRoundTrip, RandomTraces) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  const std::vector<std::string> pieces = {"a", "Z", "0", " ", "#", "\"", "\\", "/", "\n", "\r", "\t",
                                           std::string(1, '\0'), "\x01", "\x7f", "\xC3\xA9",
                                           "\xE6\x97\xA5", "\xF0\x9F\x99\x82", "{", "}", "[", "]"};
  auto random_string = [&](size_t min_len) {
    std::string s;
    const size_t n = min_len + rng() % 8;
    for (size_t i = 0; i < n; ++i) s += pieces[rng() % pieces.size()];
    return s;
  };
  auto unit = [&] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " round " + std::to_string(round));
    Trace trace;
    trace.name = random_string(0);
    double arrival = rng() % 2 == 0 ? 0 : unit();
    const int n = static_cast<int>(rng() % 30);
    for (int i = 0; i < n; ++i) {
      switch (rng() % 4) {
        case 0: break;  // an equal arrival
        case 1: arrival += unit() * 10; break;
        case 2: arrival += 0.1; break;
        default: arrival = std::nextafter(arrival, 1e308); break;
      }
      TraceRequest r;
      r.arrival_s = arrival;
      r.session = random_string(1);
      if (rng() % 2 == 0) r.tenant = random_string(0);
      const size_t m = 1 + rng() % 40;
      for (size_t j = 0; j < m; ++j) r.tokens.push_back(static_cast<int64_t>(rng() >> (1 + rng() % 63)));
      r.output_tokens = static_cast<uint32_t>(rng() % (kTraceRequestTokensMax + 1));
      if (rng() % 2 == 0) r.lora_name = random_string(0);
      if (rng() % 2 == 0) r.cache_salt = random_string(0);
      trace.requests.push_back(std::move(r));
    }
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

// ---- synthetic traces --------------------------------------------------------

TEST(Synthetic, SameSeedSameTrace) {
  const uint64_t seed = testing::TestSeed();
  for (const char* name : {"agents", "chat"}) {
    for (const uint64_t s : {uint64_t{1}, seed}) {
      SCOPED_TRACE(std::string(name) + " seed " + std::to_string(s));
      const Trace a = Synthetic(name, s);
      const Trace b = Synthetic(name, s);
      EXPECT_EQ(a.name, "synthetic:" + std::string(name));
      EXPECT_EQ(b.name, a.name);
      EXPECT_TRUE(SameRequests(a.requests, b.requests));
    }
  }
}

// Different seeds name different segments: no request of one trace starts
// with the first 16-token block of any request of the other, so a cache
// filled by one seed gives the other no hits. (Also: the traces differ.)
TEST(Synthetic, DifferentSeedsShareNoFirstBlock) {
  const uint64_t seed = testing::TestSeed();
  for (const char* name : {"agents", "chat"}) {
    SCOPED_TRACE(std::string(name) + " seeds " + std::to_string(seed) + ", " + std::to_string(seed + 1));
    const Trace a = Synthetic(name, seed);
    const Trace b = Synthetic(name, seed + 1);
    std::set<std::vector<int64_t>> blocks;
    for (const TraceRequest& r : a.requests) {
      ASSERT_GE(r.tokens.size(), 16u);
      blocks.emplace(r.tokens.begin(), r.tokens.begin() + 16);
    }
    for (const TraceRequest& r : b.requests) {
      ASSERT_GE(r.tokens.size(), 16u);
      EXPECT_EQ(blocks.count(std::vector<int64_t>(r.tokens.begin(), r.tokens.begin() + 16)), 0u)
          << r.session;
    }
    EXPECT_FALSE(SameRequests(a.requests, b.requests));
  }
}

// The documented shape of "agents" at scale 1, for the default seed and a
// random one.
TEST(Synthetic, AgentsShape) {
  const uint64_t seed = testing::TestSeed();
  for (const uint64_t s : {uint64_t{1}, seed}) {
    SCOPED_TRACE("agents seed " + std::to_string(s));
    const Trace trace = Synthetic("agents", s);
    EXPECT_TRUE(ArrivalsNonDecreasing(trace));
    EXPECT_TRUE(SessionsGrowTurnByTurn(trace));
    const auto sessions = BySession(trace);
    EXPECT_EQ(sessions.size(), 16u);
    // Sessions take several turns to grow (a session whose first turn already
    // reaches its final context has one), ~12 on average.
    EXPECT_GT(trace.requests.size(), 3 * sessions.size());

    // 4 tenants, 4 sessions each; a session never changes tenant.
    std::map<std::string, std::vector<const TraceRequest*>> first_turns;  // by tenant
    for (const auto& [session, turns] : sessions) {
      for (const TraceRequest* r : turns) EXPECT_EQ(r->tenant, turns[0]->tenant) << session;
      first_turns[turns[0]->tenant].push_back(turns[0]);
    }
    ASSERT_EQ(first_turns.size(), 4u);
    for (const auto& [tenant, firsts] : first_turns) {
      EXPECT_FALSE(tenant.empty());
      EXPECT_EQ(firsts.size(), 4u) << tenant;
    }

    // A tenant's sessions share its system prompt (2K-4K) and tool schema
    // (2K-8K) as a common prefix, and nothing past it; tenants share nothing.
    for (const auto& [tenant, firsts] : first_turns) {
      size_t shared = firsts[0]->tokens.size();
      for (const TraceRequest* r : firsts) shared = std::min(shared, CommonPrefix(firsts[0]->tokens, r->tokens));
      EXPECT_GE(shared, 4096u) << tenant;
      EXPECT_LE(shared, 12288u) << tenant;
      for (const auto& [other, other_firsts] : first_turns) {
        if (other == tenant) continue;
        EXPECT_LT(CommonPrefix(firsts[0]->tokens, other_firsts[0]->tokens), 16u) << tenant << ", " << other;
      }
    }

    for (const auto& [session, turns] : sessions) {
      // Final contexts of 8K-64K tokens.
      const size_t final_prompt = turns.back()->tokens.size();
      EXPECT_GE(final_prompt, 8192u) << session;
      EXPECT_LE(final_prompt, 65536u) << session;
      for (size_t k = 0; k < turns.size(); ++k) {
        // Outputs of 64-1024 tokens; every message but the last 256-4096
        // (the last one is cut, or stretched by up to an output, to reach
        // the final context).
        EXPECT_GE(turns[k]->output_tokens, 64u) << session;
        EXPECT_LE(turns[k]->output_tokens, 1024u) << session;
        if (k == 0) continue;
        const size_t message = turns[k]->tokens.size() - turns[k - 1]->tokens.size() - turns[k - 1]->output_tokens;
        if (k + 1 < turns.size()) {
          EXPECT_GE(message, 256u) << session << " turn " << k + 1;
          EXPECT_LE(message, 4096u) << session << " turn " << k + 1;
        } else {
          EXPECT_LE(message, 4096u + 1024u) << session << " turn " << k + 1;
        }
      }
    }
  }
}

// "chat": 64 short conversations of 1-4 turns sharing a 100-token system
// prompt. The bound the code uses: every prompt is at most 2048 tokens (a
// conversation's final prompt is drawn from 200-2048) at scale 1.
TEST(Synthetic, ChatStaysShort) {
  const uint64_t seed = testing::TestSeed();
  for (const uint64_t s : {uint64_t{1}, seed}) {
    SCOPED_TRACE("chat seed " + std::to_string(s));
    const Trace trace = Synthetic("chat", s);
    EXPECT_TRUE(ArrivalsNonDecreasing(trace));
    EXPECT_TRUE(SessionsGrowTurnByTurn(trace));
    const auto sessions = BySession(trace);
    EXPECT_EQ(sessions.size(), 64u);
    ASSERT_FALSE(trace.requests.empty());
    const std::vector<int64_t>& first = trace.requests[0].tokens;
    for (const TraceRequest& r : trace.requests) {
      EXPECT_EQ(r.tenant, "chat");
      EXPECT_LE(r.tokens.size(), 2048u) << r.session;
      EXPECT_GE(r.output_tokens, 32u) << r.session;
      EXPECT_LE(r.output_tokens, 512u) << r.session;
      EXPECT_GE(CommonPrefix(first, r.tokens), 100u) << r.session;  // the shared system prompt
    }
    for (const auto& [session, turns] : sessions) {
      EXPECT_GE(turns.size(), 1u);
      EXPECT_LE(turns.size(), 4u) << session;
      EXPECT_GE(turns.back()->tokens.size(), 200u) << session;
    }
  }
}

// --scale multiplies the lengths: agents' final contexts at scale 2 are
// 16K-128K; tiny scales still give every message a token.
TEST(Synthetic, ScaleMultipliesLengths) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Trace big = Synthetic("agents", seed, 0, 2.0);
  for (const auto& [session, turns] : BySession(big)) {
    EXPECT_GE(turns.back()->tokens.size(), 16384u) << session;
    EXPECT_LE(turns.back()->tokens.size(), 131072u) << session;
  }
  for (const char* name : {"agents", "chat"}) {
    const Trace tiny = Synthetic(name, seed, 0, 1e-6);
    ASSERT_FALSE(tiny.requests.empty()) << name;
    EXPECT_TRUE(ArrivalsNonDecreasing(tiny)) << name;
    EXPECT_TRUE(SessionsGrowTurnByTurn(tiny)) << name;
    for (const TraceRequest& r : tiny.requests) {
      EXPECT_LE(r.tokens.size(), 8u) << name;  // the 1-token floor of every length
      EXPECT_GE(r.output_tokens, 1u) << name;
    }
    ASSERT_OK_AND_ASSIGN(const Trace back, ParseTraceJsonl(TraceToJsonl(tiny)));
    EXPECT_TRUE(SameRequests(tiny.requests, back.requests)) << name;
  }
}

// requests = N up to the default count is the default trace's first N
// requests; beyond it, sessions are added until there are N.
TEST(Synthetic, RequestsCutsTheTraceByArrival) {
  const uint64_t seed = testing::TestSeed();
  for (const char* name : {"agents", "chat"}) {
    SCOPED_TRACE(std::string(name) + " seed " + std::to_string(seed));
    const Trace full = Synthetic(name, seed);
    const uint32_t n = static_cast<uint32_t>(full.requests.size());
    for (const uint32_t cut : {1u, 10u, n - 1, n}) {
      const Trace part = Synthetic(name, seed, cut);
      const std::vector<TraceRequest> want(full.requests.begin(), full.requests.begin() + cut);
      EXPECT_TRUE(SameRequests(want, part.requests)) << "requests " << cut;
    }
    const Trace more = Synthetic(name, seed, n + 50);
    EXPECT_EQ(more.requests.size(), n + 50u);
    EXPECT_GT(BySession(more).size(), BySession(full).size());
    EXPECT_TRUE(ArrivalsNonDecreasing(more));
    EXPECT_TRUE(SessionsGrowTurnByTurn(more));
  }
}

// Request counts and prompt-token totals of the default seed (they do not
// depend on floating point, so they are the same on every machine). A
// deliberate change to a generator changes them; update them with it, since
// results published for "--seed 1" change too.
TEST(Synthetic, DefaultSeedIsPinned) {
  for (const auto& [name, requests, tokens] : std::vector<std::tuple<std::string, size_t, uint64_t>>{
           {"agents", 191, 5263168}, {"chat", 109, 91830}}) {
    const Trace trace = Synthetic(name, 1);
    uint64_t total = 0;
    for (const TraceRequest& r : trace.requests) total += r.tokens.size();
    EXPECT_EQ(trace.requests.size(), requests) << name;
    EXPECT_EQ(total, tokens) << name;
  }
}

TEST(Synthetic, BadOptionsAreInvalidArgument) {
  Status s = SyntheticError("Agents", 1);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "synthetic trace: unknown name 'Agents' (expected 'agents' or 'chat')");
  s = SyntheticError("", 1);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "synthetic trace: unknown name '' (expected 'agents' or 'chat')");

  for (const double scale : {0.0, -0.0, -1.0, std::nan(""), 1024.5, std::numeric_limits<double>::infinity()}) {
    for (const char* name : {"agents", "chat"}) {
      SCOPED_TRACE(std::string(name) + " scale " + std::to_string(scale));
      s = SyntheticError(name, scale);
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(s.message(), "synthetic trace: scale must be in (0, 1024.000000], got " + std::to_string(scale));
    }
  }

  s = SyntheticError("agents", 1, (1u << 20) + 1);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "synthetic trace: requests must be at most 1048576, got 1048577");
}

// The generators refuse, before expanding any tokens, what the parser would
// refuse: a request over 1,048,576 tokens, a trace over 16,777,216.
TEST(Synthetic, LimitsAreTheParsers) {
  Status s = SyntheticError("agents", 1024);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("synthetic agents: scale 1024.000000 makes a request of ", 0), 0u) << s.message();
  EXPECT_NE(s.message().find(" tokens, more than the 1048576 allowed per request"), std::string::npos) << s.message();

  s = SyntheticError("agents", 1, 1000);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("synthetic agents: ", 0), 0u) << s.message();
  EXPECT_NE(s.message().find(" prompt tokens in all, more than the 16777216 allowed; lower the scale or set requests"),
            std::string::npos)
      << s.message();
}

// ---- LoadTraceFile -----------------------------------------------------------

TEST(LoadTraceFile, MissingFileNamesThePath) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "missing.jsonl").string();
  const Result<Trace> r = LoadTraceFile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().sys_errno(), ENOENT);
  EXPECT_EQ(r.status().message(), "open trace file " + path);
}

TEST(LoadTraceFile, DirectoryNamesThePath) {
  testing::TempDir dir;
  const Result<Trace> r = LoadTraceFile(dir.path().string());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(dir.path().string()), std::string::npos) << r.status().ToString();
}

TEST(LoadTraceFile, ParsesAndNamesTheTraceAfterThePath) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "t.jsonl").string();
  const std::string text = "# t\n" + SegmentLine("sys", 40) + "\n" + Line(1, "\"tokens\": [1, 2]") + "\n";
  testing::WriteFileOrDie(path, text);
  ASSERT_OK_AND_ASSIGN(const Trace trace, LoadTraceFile(path));
  EXPECT_EQ(trace.name, path);
  ASSERT_OK_AND_ASSIGN(const Trace parsed, ParseTraceJsonl(text));
  EXPECT_TRUE(SameRequests(parsed.requests, trace.requests));
}

TEST(LoadTraceFile, ParseErrorsNameTheFileAndTheLine) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "bad.jsonl").string();
  testing::WriteFileOrDie(path, Line(0, "\"tokens\": [1]") + "\n{\"arrival_s\": 1}\n");
  const Result<Trace> r = LoadTraceFile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "trace file " + path + ": trace line 2: key 'session': required");
}

// The documented example trace loads, and each session's later requests
// repeat its earlier prompt as a prefix, as its header says.
TEST(LoadTraceFile, ExampleTrace) {
  const std::string path = (testing::SourceDir() / "examples" / "trace-small.jsonl").string();
  ASSERT_OK_AND_ASSIGN(const Trace trace, LoadTraceFile(path));
  EXPECT_EQ(trace.requests.size(), 8u);
  EXPECT_TRUE(ArrivalsNonDecreasing(trace));
  for (const auto& [session, turns] : BySession(trace)) {
    for (size_t k = 1; k < turns.size(); ++k) {
      EXPECT_TRUE(IsPrefix(turns[k - 1]->tokens, turns[k]->tokens)) << session << " turn " << k + 1;
    }
  }
  const TraceRequest& lora = trace.requests[5];
  EXPECT_EQ(lora.session, "code/lora");
  EXPECT_EQ(lora.lora_name, std::optional<std::string>("sql-adapter"));
  EXPECT_EQ(lora.cache_salt, std::optional<std::string>("tenant-code"));
  EXPECT_EQ(lora.tokens, Concat({SegmentTokens("code/system", 4096), {101, 2009, 2003, 1037, 3231, 102}}));
}

}  // namespace
}  // namespace kvtier::internal
