// Checks on JSON text before and after nlohmann's parser, shared by the
// config parser and the trace parser: a nesting-depth scan that runs before
// parsing (so hostile input never builds a deep tree) and a SAX pass that
// says where a failed parse gave up.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "kvtier/status.h"

namespace kvtier::internal {

// The byte offset of the first '[' or '{' (outside strings) that opens a
// container nested deeper than depth_max; nullopt when there is none.
std::optional<size_t> FirstTooDeepByte(std::string_view text, int depth_max);

// The check every JSON input runs before nlohmann parses or dumps it (both
// recurse per level, so 100,000 nested brackets would overflow the stack):
// one pass, no recursion, brackets inside strings (escapes included) ignored.
// kInvalidArgument "<what>: nested deeper than <depth_max> levels at byte
// B"; Ok for shallower text, and for text too broken to parse (the parser
// reports that).
Status CheckJsonDepth(std::string_view text, size_t depth_max, std::string_view what);

// Where and why a parse of `text` fails: the byte offset and nlohmann's
// message without its "[json.exception.parse_error.N] " tag ("parse error at
// line L, column C: ..."). nullopt when the text parses.
struct JsonSyntaxError {
  size_t position = 0;
  std::string message;
};
std::optional<JsonSyntaxError> LocateJsonSyntaxError(std::string_view text);

}  // namespace kvtier::internal
