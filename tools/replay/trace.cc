// The JSONL trace format (docs/trace-format.md): the parser, whose errors
// name the line and the key; the file loader; the literal-token writer; and
// the token ids of named segments.
//
// nlohmann::json is used with exceptions off at every call that could throw:
// parse(..., allow_exceptions=false), dump(..., error_handler_t::replace),
// get<T>() only after the matching is_*() test, and find() instead of at().
#include "replay/trace.h"

#include <xxhash.h>

#include <charconv>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "util/json_text.h"
#include "util/read_file.h"

namespace kvtier::internal {
namespace {

using Json = nlohmann::json;

// A valid line nests four levels at most (object, segments, segment, tokens);
// checking before parsing keeps hostile nesting from recursing deep.
constexpr int kLineDepthMax = 8;
// 1M literal token ids of up to 19 digits fit with room to spare.
constexpr size_t kLineBytesMax = size_t{32} << 20;
constexpr size_t kFileBytesMax = size_t{1} << 30;
constexpr size_t kDescribeBytesMax = 40;
constexpr uint64_t kSegmentVocab = 32000;

std::string Dump(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

// A short rendering of a value for messages: `"x" (a string)`, `an array`.
std::string Describe(const Json& value) {
  if (value.is_object()) return "an object";
  if (value.is_array()) return "an array";
  if (value.is_null()) return "null";
  std::string text = Dump(value);
  if (text.size() > kDescribeBytesMax) {
    size_t end = kDescribeBytesMax;  // do not split a UTF-8 character
    while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
    text = text.substr(0, end) + "...";
  }
  if (value.is_string()) return text + " (a string)";
  if (value.is_boolean()) return text + " (a boolean)";
  if (value.is_number_float()) return text + " (a float)";
  return text + " (an integer)";
}

Status LineError(size_t line, std::string_view what) {
  return InvalidArgument("trace line " + std::to_string(line) + ": " + std::string(what));
}

Status KeyError(size_t line, std::string_view key, std::string_view rule) {
  return LineError(line, "key '" + std::string(key) + "': " + std::string(rule));
}

Result<Json> ParseLineObject(std::string_view text, size_t line) {
  if (text.size() > kLineBytesMax) {
    return LineError(line, "longer than " + std::to_string(kLineBytesMax) + " bytes");
  }
  if (FirstTooDeepByte(text, kLineDepthMax)) {
    return LineError(line, "malformed JSON: nested deeper than " + std::to_string(kLineDepthMax) +
                               " levels");
  }
  Json value = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    const std::optional<JsonSyntaxError> error = LocateJsonSyntaxError(text);
    return LineError(line, "malformed JSON: " + (error ? error->message : std::string("unparsable")));
  }
  if (!value.is_object()) return LineError(line, "expected a JSON object, got " + Describe(value));
  return value;
}

// Tokens a request may still add: the per-request limit and what is left of
// the trace's; an error names the limit that was crossed.
struct TokenBudget {
  uint64_t request_left = kTraceRequestTokensMax;
  uint64_t trace_left = kTraceTokensMax;

  Status Take(uint64_t n, size_t line, std::string_view key) {
    if (n > request_left) {
      return KeyError(line, key, "the prompt has more than " +
                                     std::to_string(kTraceRequestTokensMax) +
                                     " tokens (the per-request limit)");
    }
    if (n > trace_left) {
      return KeyError(line, key, "the trace has more than " + std::to_string(kTraceTokensMax) +
                                     " prompt tokens in all (the limit)");
    }
    request_left -= n;
    trace_left -= n;
    return Status::Ok();
  }
};

// A non-negative JSON integer: nlohmann keeps -0 as a signed integer, and
// JSON's -0 is 0.
bool NonNegativeInteger(const Json& value) {
  return value.is_number_unsigned() || (value.is_number_integer() && value.get<int64_t>() == 0);
}

Status ReadCount(const Json& value, size_t line, std::string_view key, uint64_t max,
                 uint64_t* out) {
  if (!NonNegativeInteger(value) || value.get<uint64_t>() > max) {
    return KeyError(line, key, "expected an integer in [0, " + std::to_string(max) + "], got " +
                                   Describe(value));
  }
  *out = value.get<uint64_t>();
  return Status::Ok();
}

Status ReadTokens(const Json& value, size_t line, const std::string& key, TokenBudget* budget,
                  std::vector<int64_t>* out) {
  if (!value.is_array()) {
    return KeyError(line, key, "expected an array of token ids, got " + Describe(value));
  }
  KVTIER_RETURN_IF_ERROR(budget->Take(value.size(), line, key));
  constexpr uint64_t kIdMax = std::numeric_limits<int64_t>::max();
  for (size_t i = 0; i < value.size(); ++i) {
    const Json& id = value[i];
    if (!NonNegativeInteger(id) || id.get<uint64_t>() > kIdMax) {
      return KeyError(line, key + "[" + std::to_string(i) + "]",
                      "expected a non-negative integer token id, got " + Describe(id));
    }
    out->push_back(static_cast<int64_t>(id.get<uint64_t>()));
  }
  return Status::Ok();
}

Status ReadSegment(const Json& segment, size_t line, const std::string& path, TokenBudget* budget,
                   std::vector<int64_t>* out) {
  if (!segment.is_object()) {
    return KeyError(line, path, "expected an object ({\"ref\": ..., \"len\": ...} or "
                                "{\"tokens\": [...]}), got " + Describe(segment));
  }
  for (const auto& [key, value] : segment.items()) {
    if (key != "ref" && key != "len" && key != "tokens") {
      return KeyError(line, path + "." + key, "unknown key (allowed: ref, len, tokens)");
    }
  }
  const auto tokens = segment.find("tokens");
  const auto ref = segment.find("ref");
  const auto len = segment.find("len");
  if (tokens != segment.end()) {
    if (ref != segment.end() || len != segment.end()) {
      return KeyError(line, path, "give either 'ref' with 'len' or 'tokens', not both");
    }
    return ReadTokens(*tokens, line, path + ".tokens", budget, out);
  }
  if (ref == segment.end() || len == segment.end()) {
    return KeyError(line, path + (ref == segment.end() ? ".ref" : ".len"), "required");
  }
  if (!ref->is_string() || ref->get_ref<const std::string&>().empty()) {
    return KeyError(line, path + ".ref", "expected a non-empty string, got " + Describe(*ref));
  }
  uint64_t n = 0;
  KVTIER_RETURN_IF_ERROR(ReadCount(*len, line, path + ".len", kTraceRequestTokensMax, &n));
  KVTIER_RETURN_IF_ERROR(budget->Take(n, line, path + ".len"));
  const std::vector<int64_t> expanded =
      SegmentTokens(ref->get_ref<const std::string&>(), static_cast<uint32_t>(n));
  out->insert(out->end(), expanded.begin(), expanded.end());
  return Status::Ok();
}

Status ReadPrompt(const Json& obj, size_t line, TokenBudget* budget, std::vector<int64_t>* out) {
  const auto tokens = obj.find("tokens");
  const auto segments = obj.find("segments");
  if (tokens != obj.end() && segments != obj.end()) {
    return KeyError(line, "segments", "give exactly one of 'tokens' or 'segments', not both");
  }
  if (tokens != obj.end()) {
    KVTIER_RETURN_IF_ERROR(ReadTokens(*tokens, line, "tokens", budget, out));
  } else if (segments != obj.end()) {
    if (!segments->is_array()) {
      return KeyError(line, "segments", "expected an array of segments, got " + Describe(*segments));
    }
    for (size_t i = 0; i < segments->size(); ++i) {
      const std::string path = "segments[" + std::to_string(i) + "]";
      KVTIER_RETURN_IF_ERROR(ReadSegment((*segments)[i], line, path, budget, out));
    }
  } else {
    return KeyError(line, "tokens", "required (or 'segments'): every request needs a prompt");
  }
  if (out->empty()) {
    return KeyError(line, tokens != obj.end() ? "tokens" : "segments", "the prompt is empty");
  }
  return Status::Ok();
}

Status CheckStringLength(const Json& value, size_t line, const char* key) {
  if (value.get_ref<const std::string&>().size() <= kTraceStringBytesMax) return Status::Ok();
  return KeyError(line, key, "longer than " + std::to_string(kTraceStringBytesMax) + " bytes");
}

// Reads an optional string key; null counts as absent (Python's None).
Status ReadOptionalString(const Json& obj, size_t line, const char* key,
                          std::optional<std::string>* out) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return Status::Ok();
  if (!it->is_string()) return KeyError(line, key, "expected a string, got " + Describe(*it));
  KVTIER_RETURN_IF_ERROR(CheckStringLength(*it, line, key));
  *out = it->get<std::string>();
  return Status::Ok();
}

constexpr std::string_view kKeys[] = {"arrival_s",     "session",   "tenant",    "tokens",
                                      "segments",      "output_tokens", "lora_name", "cache_salt"};

Status CheckKeys(const Json& obj, size_t line) {
  for (const auto& item : obj.items()) {
    bool known = false;
    for (const std::string_view k : kKeys) known = known || item.key() == k;
    if (!known) {
      return KeyError(line, item.key(),
                      "unknown key (allowed: arrival_s, session, tenant, tokens, segments, "
                      "output_tokens, lora_name, cache_salt)");
    }
  }
  return Status::Ok();
}

Status ReadArrival(const Json& obj, size_t line, double previous, double* out) {
  const auto it = obj.find("arrival_s");
  if (it == obj.end()) return KeyError(line, "arrival_s", "required");
  if (!it->is_number() || it->get<double>() < 0) {
    return KeyError(line, "arrival_s", "expected a number >= 0, got " + Describe(*it));
  }
  *out = it->get<double>();
  if (*out < previous) {
    return KeyError(line, "arrival_s", "must not decrease: got " + Dump(*it) +
                                           " after an earlier request's " + Dump(Json(previous)));
  }
  return Status::Ok();
}

Status ReadSessionAndTenant(const Json& obj, size_t line, TraceRequest* request) {
  const auto session = obj.find("session");
  if (session == obj.end()) return KeyError(line, "session", "required");
  if (!session->is_string() || session->get_ref<const std::string&>().empty()) {
    return KeyError(line, "session", "expected a non-empty string, got " + Describe(*session));
  }
  KVTIER_RETURN_IF_ERROR(CheckStringLength(*session, line, "session"));
  request->session = session->get<std::string>();
  std::optional<std::string> tenant;
  KVTIER_RETURN_IF_ERROR(ReadOptionalString(obj, line, "tenant", &tenant));
  request->tenant = tenant.value_or("");
  return Status::Ok();
}

Result<TraceRequest> ReadRequest(const Json& obj, size_t line, double previous_arrival,
                                 uint64_t trace_tokens) {
  KVTIER_RETURN_IF_ERROR(CheckKeys(obj, line));
  TraceRequest request;
  KVTIER_RETURN_IF_ERROR(ReadArrival(obj, line, previous_arrival, &request.arrival_s));
  KVTIER_RETURN_IF_ERROR(ReadSessionAndTenant(obj, line, &request));
  TokenBudget budget;
  budget.trace_left = kTraceTokensMax - trace_tokens;
  KVTIER_RETURN_IF_ERROR(ReadPrompt(obj, line, &budget, &request.tokens));
  if (const auto out = obj.find("output_tokens"); out != obj.end()) {
    uint64_t n = 0;
    KVTIER_RETURN_IF_ERROR(ReadCount(*out, line, "output_tokens", kTraceRequestTokensMax, &n));
    request.output_tokens = static_cast<uint32_t>(n);
  }
  KVTIER_RETURN_IF_ERROR(ReadOptionalString(obj, line, "lora_name", &request.lora_name));
  KVTIER_RETURN_IF_ERROR(ReadOptionalString(obj, line, "cache_salt", &request.cache_salt));
  return request;
}

bool SkippedLine(std::string_view text) {
  const size_t first = text.find_first_not_of(" \t\r");
  return first == std::string_view::npos || text[first] == '#';
}

void AppendTokens(const std::vector<int64_t>& tokens, std::string* out) {
  char buf[24];
  out->push_back('[');
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) out->push_back(',');
    const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), tokens[i]);
    out->append(buf, end);
  }
  out->push_back(']');
}

void AppendRequest(const TraceRequest& r, std::string* out) {
  *out += "{\"arrival_s\":" + Dump(Json(r.arrival_s));
  *out += ",\"session\":" + Dump(Json(r.session));
  if (!r.tenant.empty()) *out += ",\"tenant\":" + Dump(Json(r.tenant));
  *out += ",\"tokens\":";
  AppendTokens(r.tokens, out);
  *out += ",\"output_tokens\":" + std::to_string(r.output_tokens);
  if (r.lora_name) *out += ",\"lora_name\":" + Dump(Json(*r.lora_name));
  if (r.cache_salt) *out += ",\"cache_salt\":" + Dump(Json(*r.cache_salt));
  *out += "}\n";
}

// splitmix64's finalizer: a bijective mix of all 64 bits.
uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

Result<Trace> ParseTraceJsonl(std::string_view text, std::string name) {
  Trace trace;
  trace.name = std::move(name);
  double previous_arrival = 0;
  uint64_t trace_tokens = 0;
  size_t line = 0;
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t newline = text.find('\n', begin);
    const size_t end = newline == std::string_view::npos ? text.size() : newline;
    const std::string_view content = text.substr(begin, end - begin);
    begin = end + 1;
    ++line;
    if (SkippedLine(content)) continue;
    KVTIER_ASSIGN_OR_RETURN(const Json obj, ParseLineObject(content, line));
    KVTIER_ASSIGN_OR_RETURN(TraceRequest request,
                            ReadRequest(obj, line, previous_arrival, trace_tokens));
    previous_arrival = request.arrival_s;
    trace_tokens += request.tokens.size();
    trace.requests.push_back(std::move(request));
  }
  return trace;
}

Result<Trace> LoadTraceFile(const std::string& path) {
  KVTIER_ASSIGN_OR_RETURN(const std::string text, ReadFileCapped(path, "trace file", kFileBytesMax));
  Result<Trace> trace = ParseTraceJsonl(text, path);
  if (!trace.ok()) return trace.status().WithContext("trace file " + path);
  return trace;
}

std::string TraceToJsonl(const Trace& trace) {
  // The name goes into a comment line; a newline in it would end the comment.
  std::string name = trace.name;
  for (char& c : name) c = (c == '\n' || c == '\r') ? ' ' : c;
  std::string out = "# kvtier trace: " + name + ", " + std::to_string(trace.requests.size()) +
                    " requests\n";
  for (const TraceRequest& request : trace.requests) AppendRequest(request, &out);
  return out;
}

std::vector<int64_t> SegmentTokens(std::string_view ref, uint32_t length) {
  // Token i depends on the name's hash and i only, so a shorter expansion is
  // a prefix of a longer one: a segment referenced with different lengths
  // shares its leading blocks in the prefix cache.
  const uint64_t seed = XXH64(ref.data(), ref.size(), 0);
  std::vector<int64_t> tokens(length);
  for (uint32_t i = 0; i < length; ++i) {
    const uint64_t counter = seed + (uint64_t{i} + 1) * 0x9E3779B97F4A7C15ULL;
    tokens[i] = static_cast<int64_t>(Mix64(counter) % kSegmentVocab);
  }
  return tokens;
}

}  // namespace kvtier::internal
