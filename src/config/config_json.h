// Internal JSON helpers of the config parser: turning text into a checked
// nlohmann::json object, and reading typed values out of it with error
// messages that name the key path. Nothing here throws.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <type_traits>

#include "kvtier/result.h"
#include "kvtier/status.h"

namespace kvtier::internal {

using Json = nlohmann::json;

// Parses `text` as one JSON value whose top level is an object. Errors
// (kInvalidArgument) cover empty text, nesting deeper than `depth_max`,
// syntax errors (with line, column and byte offset) and a non-object top level.
Result<Json> ParseJsonObjectText(std::string_view text, int depth_max);

// "config key '<path>': <rule>", as kInvalidArgument.
Status KeyError(std::string_view path, std::string_view rule);

// "<path>.<name>", or "<name>" at the top level.
std::string JoinKeyPath(std::string_view prefix, std::string_view name);

// A short rendering of a value for error messages: `"16" (a string)`,
// `16.0 (a float)`, `an object`. Long strings are cut.
std::string DescribeValue(const Json& value);

enum class IntRule { kPositive, kNonNegative };

// Reads a JSON integer in [rule's minimum, max]. Booleans, strings, floats
// (even 16.0), negative numbers and values beyond `max` are errors.
Status ReadUnsignedInRange(const Json& value, std::string_view path, IntRule rule, uint64_t max,
                           uint64_t* out);

template <class T>
Status ReadInteger(const Json& value, std::string_view path, IntRule rule, T* out) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  uint64_t wide = 0;
  KVTIER_RETURN_IF_ERROR(ReadUnsignedInRange(
      value, path, rule, static_cast<uint64_t>(std::numeric_limits<T>::max()), &wide));
  *out = static_cast<T>(wide);
  return Status::Ok();
}

// Reads true or false (not 0/1, not "true").
Status ReadBool(const Json& value, std::string_view path, bool* out);

// Reads a JSON string.
Status ReadString(const Json& value, std::string_view path, std::string* out);

// Reads a finite JSON number (integer or float) with
// min_exclusive < x <= max_inclusive.
Status ReadNumber(const Json& value, std::string_view path, double min_exclusive,
                  double max_inclusive, double* out);

}  // namespace kvtier::internal
