// UTF-8 decoding shared by the JSON writer and input validation. Python str
// values are always valid Unicode, so bytes that are not valid UTF-8 can never
// come from vLLM and are rejected wherever kvtier takes a string to hash.
#pragma once

#include <cstdint>
#include <string_view>

namespace kvtier::internal {

// Decodes the sequence at s[*i] and advances *i; -1 (and *i unchanged) when it
// is not valid UTF-8 (overlong forms, surrogates and values > U+10FFFF too).
int32_t NextCodePoint(std::string_view s, size_t* i);

bool IsValidUtf8(std::string_view s);

}  // namespace kvtier::internal
