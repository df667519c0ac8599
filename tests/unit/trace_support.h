// The helpers of the trace tests (trace_test, trace_segments_test,
// trace_roundtrip_test, trace_synthetic_test): comparing request lists,
// the message of a parse that must fail, token-list prefixes, request lines
// to parse, and the synthetic generator with its shape checks.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "replay/trace.h"
#include "support/test_support.h"

namespace kvtier::internal::tracetest {

using Json = nlohmann::json;

// The first difference between two request lists, field by field.
inline ::testing::AssertionResult SameRequests(const std::vector<TraceRequest>& want,
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
inline std::string ParseError(std::string_view text) {
  const Result<Trace> r = ParseTraceJsonl(text);
  if (r.ok()) {
    ADD_FAILURE() << "parsed, but should not have: " << text.substr(0, 200);
    return "";
  }
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  return r.status().message();
}

inline size_t CommonPrefix(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

inline bool IsPrefix(const std::vector<int64_t>& shorter, const std::vector<int64_t>& longer) {
  return shorter.size() <= longer.size() && CommonPrefix(shorter, longer) == shorter.size();
}

inline std::vector<int64_t> Concat(std::initializer_list<std::vector<int64_t>> parts) {
  std::vector<int64_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// A request line with `prompt` (a "tokens" or "segments" member, without
// braces) and the minimal required keys.
inline std::string Line(double arrival, const std::string& prompt) {
  return "{\"arrival_s\": " + Json(arrival).dump() + ", \"session\": \"s\", " + prompt + "}";
}

// A request line prompting `len` tokens of segment `ref`.
inline std::string SegmentLine(const std::string& ref, uint64_t len) {
  return Line(0, "\"segments\": [{\"ref\": \"" + ref + "\", \"len\": " + std::to_string(len) + "}]");
}

// The requests of each session, in trace order.
inline std::map<std::string, std::vector<const TraceRequest*>> BySession(const Trace& trace) {
  std::map<std::string, std::vector<const TraceRequest*>> out;
  for (const TraceRequest& r : trace.requests) out[r.session].push_back(&r);
  return out;
}

inline ::testing::AssertionResult ArrivalsNonDecreasing(const Trace& trace) {
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
inline ::testing::AssertionResult SessionsGrowTurnByTurn(const Trace& trace) {
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

inline Trace Synthetic(const std::string& name, uint64_t seed, uint32_t requests = 0, double scale = 1) {
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

inline Status SyntheticError(const std::string& name, double scale, uint32_t requests = 0) {
  SyntheticOptions o;
  o.name = name;
  o.scale = scale;
  o.requests = requests;
  const Result<Trace> r = GenerateSynthetic(o);
  return r.status();
}

}  // namespace kvtier::internal::tracetest
