// Python-compatible JSON text: byte for byte what CPython's json module
// writes with sort_keys=True and ensure_ascii=True, in the two forms vLLM
// uses: compact (separators=(",", ":")) and indent=2 (separators ", " / ": ").
// nlohmann/json's own dump differs (it writes UTF-8 and other spacing).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "kvtier/result.h"

namespace kvtier::internal {

// Appends the JSON string literal of `utf8` (with quotes): '"' and '\' are
// escaped, \n \r \t \b \f use short escapes, every other character outside
// printable ASCII (0x20-0x7e) is \u00XX / \uXXXX with lowercase hex, and
// characters above U+FFFF become a surrogate pair. kInvalidArgument when
// `utf8` is not valid UTF-8.
Status PyJsonEscape(std::string_view utf8, std::string* out);

// json.dumps(value, sort_keys=True, separators=(",", ":")).
Result<std::string> PyJsonDumpsCompact(const nlohmann::json& value);
// json.dumps(value, indent=2, sort_keys=True): no trailing newline.
Result<std::string> PyJsonDumpsIndent2(const nlohmann::json& value);

}  // namespace kvtier::internal
