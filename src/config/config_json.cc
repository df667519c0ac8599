// JSON text checks and typed value readers for the config parser.
//
// nlohmann::json is used with exceptions disabled at every call that could
// throw: parse(..., allow_exceptions=false), dump(..., error_handler_t::replace),
// and get<T>() only after the matching is_*() test.
#include "config/config_json.h"

#include <cmath>
#include <string>
#include <utility>

#include "util/json_text.h"

namespace kvtier::internal {
namespace {

constexpr size_t kDescribedStringBytesMax = 60;

Status SyntaxError(std::string_view text) {
  const std::optional<JsonSyntaxError> error = LocateJsonSyntaxError(text);
  if (!error) return InvalidArgument("config: invalid JSON");  // not expected: the DOM parse failed
  return InvalidArgument("config: invalid JSON at byte " + std::to_string(error->position) + ": " + error->message);
}

bool IsBlank(std::string_view text) {
  return text.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

// Cuts a UTF-8 string to at most `max` bytes without splitting a character.
std::string CutUtf8(std::string s, size_t max) {
  if (s.size() <= max) return s;
  size_t end = max;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  s.resize(end);
  return s + "...";
}

std::string Dump(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

const char* RuleText(IntRule rule) {
  return rule == IntRule::kPositive ? "expected a positive integer"
                                    : "expected a non-negative integer";
}

// The error for a float given where an integer is expected.
Status FloatForInteger(const Json& value, std::string_view path, IntRule rule) {
  const double d = value.get<double>();
  std::string rule_text = RuleText(rule);
  if (std::isfinite(d) && std::trunc(d) == d) {
    if (std::fabs(d) >= 9.2e18) {
      return KeyError(path, rule_text + ", got " + Dump(value) +
                                " (out of range: an integer must fit in 64 bits)");
    }
    return KeyError(path, rule_text + ", got " + Dump(value) +
                              " (a float; write integers without a fraction or exponent)");
  }
  return KeyError(path, rule_text + ", got " + DescribeValue(value));
}

}  // namespace

Result<Json> ParseJsonObjectText(std::string_view text, int depth_max) {
  if (IsBlank(text)) return InvalidArgument("config: the text is empty; expected a JSON object");
  // Before parsing, so that hostile input never builds a deep tree: every
  // config path (files, ParseOffloadConfig, ParseFsTierConfig) comes here.
  KVTIER_RETURN_IF_ERROR(CheckJsonDepth(text, static_cast<size_t>(depth_max), "config"));
  Json root = Json::parse(text.begin(), text.end(), /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return SyntaxError(text);
  if (!root.is_object()) {
    return InvalidArgument("config: the top level must be a JSON object, got " +
                           DescribeValue(root));
  }
  return root;
}

Status KeyError(std::string_view path, std::string_view rule) {
  std::string message = "config key '";
  message += path;
  message += "': ";
  message += rule;
  return InvalidArgument(std::move(message));
}

std::string JoinKeyPath(std::string_view prefix, std::string_view name) {
  std::string path(prefix);
  if (!path.empty()) path += '.';
  path += name;
  return path;
}

std::string DescribeValue(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return Dump(value) + " (a boolean)";
    case Json::value_t::string:
      return CutUtf8(Dump(value), kDescribedStringBytesMax) + " (a string)";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return Dump(value) + " (an integer)";
    case Json::value_t::number_float:
      if (!std::isfinite(value.get<double>())) return "a number beyond the range of a double";
      return Dump(value) + " (a float)";
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "an array";
    default: return "an unsupported value";
  }
}

Status ReadUnsignedInRange(const Json& value, std::string_view path, IntRule rule, uint64_t max,
                           uint64_t* out) {
  if (value.is_number_float()) return FloatForInteger(value, path, rule);
  if (!value.is_number_integer()) {
    return KeyError(path, std::string(RuleText(rule)) + ", got " + DescribeValue(value));
  }
  if (!value.is_number_unsigned() && value.get<int64_t>() < 0) {
    return KeyError(path, std::string(RuleText(rule)) + ", got " + Dump(value) + " (negative)");
  }
  const uint64_t x =
      value.is_number_unsigned() ? value.get<uint64_t>() : static_cast<uint64_t>(value.get<int64_t>());
  if (rule == IntRule::kPositive && x == 0) {
    return KeyError(path, std::string(RuleText(rule)) + ", got 0");
  }
  if (x > max) {
    return KeyError(path, std::string(RuleText(rule)) + " of at most " + std::to_string(max) +
                              ", got " + std::to_string(x) + " (out of range)");
  }
  *out = x;
  return Status::Ok();
}

Status ReadBool(const Json& value, std::string_view path, bool* out) {
  if (!value.is_boolean()) return KeyError(path, "expected true or false, got " + DescribeValue(value));
  *out = value.get<bool>();
  return Status::Ok();
}

Status ReadString(const Json& value, std::string_view path, std::string* out) {
  if (!value.is_string()) return KeyError(path, "expected a string, got " + DescribeValue(value));
  *out = value.get<std::string>();
  return Status::Ok();
}

Status ReadNumber(const Json& value, std::string_view path, double min_exclusive,
                  double max_inclusive, double* out) {
  std::string rule = "expected a number greater than " + Dump(Json(min_exclusive));
  if (std::isfinite(max_inclusive)) rule += " and at most " + Dump(Json(max_inclusive));
  if (!value.is_number()) return KeyError(path, rule + ", got " + DescribeValue(value));
  const double x = value.get<double>();
  if (!std::isfinite(x) || !(x > min_exclusive) || !(x <= max_inclusive)) {
    return KeyError(path, rule + ", got " + DescribeValue(value));
  }
  *out = x;
  return Status::Ok();
}

}  // namespace kvtier::internal
