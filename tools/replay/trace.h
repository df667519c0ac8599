// Serving traces for `kvtier replay`: a documented JSONL format
// (docs/trace-format.md) and seeded synthetic generators.
//
// A trace is a list of requests in arrival order. Prompts are either literal
// token ids or a compact list of segments: a named segment ("ref") always
// expands to the same tokens wherever it appears (a tenant's system prompt,
// a session's earlier turns), so traces of long shared prefixes stay small.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/result.h"

namespace kvtier::internal {

struct TraceRequest {
  double arrival_s = 0;          // seconds from the trace start, non-decreasing
  std::string session;           // sticky routing key (an agent session, a chat)
  std::string tenant;            // optional, for reports
  std::vector<int64_t> tokens;   // the prompt, expanded
  uint32_t output_tokens = 0;    // tokens the request generates
  std::optional<std::string> lora_name;
  std::optional<std::string> cache_salt;
};

struct Trace {
  std::string name;  // file name or "synthetic:<name>"
  std::vector<TraceRequest> requests;
};

// Limits that keep a bad file (or a huge synthetic scale) from exhausting
// memory: expanded prompt tokens per request and in the whole trace. The
// parser and the generators enforce the same limits, so any trace either
// produces round-trips through TraceToJsonl / ParseTraceJsonl.
inline constexpr uint64_t kTraceRequestTokensMax = uint64_t{1} << 20;  // 1,048,576
inline constexpr uint64_t kTraceTokensMax = uint64_t{1} << 24;         // 16,777,216
// Bytes of each string (session, tenant, lora_name, cache_salt): with it, the
// longest request TraceToJsonl can write (1M ids of 19 digits, four strings
// escaped as \u00XX) stays far under the parser's 32 MiB line limit.
inline constexpr size_t kTraceStringBytesMax = 4096;

// Parses JSONL; kInvalidArgument naming the line (1-based) and the key.
Result<Trace> ParseTraceJsonl(std::string_view text, std::string name = "trace");
// Reads and parses a file.
Result<Trace> LoadTraceFile(const std::string& path);
// Writes literal-token JSONL that ParseTraceJsonl reads back equal.
std::string TraceToJsonl(const Trace& trace);

// The tokens a named segment expands to: `length` token ids in [0, 32000)
// derived from the name alone.
std::vector<int64_t> SegmentTokens(std::string_view ref, uint32_t length);

struct SyntheticOptions {
  std::string name = "agents";  // "agents" or "chat"
  uint64_t seed = 1;
  // Requests to generate; 0 = the generator's default.
  uint32_t requests = 0;
  // Multiplies every length (system prompts, tool schemas, turns); 1 = the
  // documented sizes (agents grow to 8K-64K tokens).
  double scale = 1.0;
};

// kInvalidArgument for an unknown name or a non-positive scale.
Result<Trace> GenerateSynthetic(const SyntheticOptions& options);

}  // namespace kvtier::internal
