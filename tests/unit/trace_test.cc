// Proves that the replay trace format (docs/trace-format.md) is read as
// documented: ParseTraceJsonl reads every key, skips blank and comment lines
// while still counting them, and rejects each bad input with the exact
// message naming the line and the key (unknown keys, wrong types, negative or
// decreasing arrivals, both or neither prompt, bad token ids, malformed or
// too deeply nested JSON, the per-request, per-trace and per-line limits,
// each at its boundary); and LoadTraceFile names the path in its errors.
// The segments, the round trips through TraceToJsonl and the synthetic
// traces have test files of their own (trace_segments_test,
// trace_roundtrip_test, trace_synthetic_test).
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "replay/trace.h"
#include "support/test_support.h"
#include "trace_support.h"

namespace kvtier::internal::tracetest {
namespace {

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

// Each bad line of TraceParseErrors.EachNamesTheLineAndTheKey and the message
// it must give, in four parts.
struct ParseErrorCase {
  std::string line, message;
};

// Unknown keys, arrival_s, session and tenant.
std::vector<ParseErrorCase> KeyCases() {
  const std::string kAllowed =
      "unknown key (allowed: arrival_s, session, tenant, tokens, segments, output_tokens, "
      "lora_name, cache_salt)";
  return {
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
  };
}

// The prompt (neither, both, empty) and literal tokens.
std::vector<ParseErrorCase> PromptCases() {
  return {
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
  };
}

// Segments.
std::vector<ParseErrorCase> SegmentCases() {
  return {
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
  };
}

// output_tokens, lora_name, cache_salt; lines that are not objects; nesting;
// long values cut in messages.
std::vector<ParseErrorCase> ValueAndShapeCases() {
  std::vector<ParseErrorCase> cases = {

  };
  // The UTF-8 case: "é" is 2 bytes; 40 bytes would end inside the 20th one.
  std::string e19, e30;
  for (int i = 0; i < 19; ++i) e19 += "\xC3\xA9";
  for (int i = 0; i < 30; ++i) e30 += "\xC3\xA9";
  cases.push_back({"{\"arrival_s\": \"" + e30 + "\"}",
                 "key 'arrival_s': expected a number >= 0, got \"" + e19 + "... (a string)"});
  return cases;
}

// Each bad line, placed as line 3 after a comment and a blank line, gives
// exactly "trace line 3: " + the message.
TEST(TraceParseErrors, EachNamesTheLineAndTheKey) {
  std::vector<ParseErrorCase> all;
  for (const std::vector<ParseErrorCase>& part : {KeyCases(), PromptCases(), SegmentCases(), ValueAndShapeCases()}) {
    all.insert(all.end(), part.begin(), part.end());
  }
  for (const ParseErrorCase& c : all) {
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
  // One space more, before the closing brace. (Not insert(pos, " "): GCC 12
  // -Wrestrict false positive in Release.)
  line.insert(line.end() - 1, ' ');
  EXPECT_EQ(ParseError("# c\n" + line + "\n"), "trace line 2: longer than 33554432 bytes");
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
}  // namespace kvtier::internal::tracetest
