// Printing names that may be any bytes (name_escape.h).
#include "util/name_escape.h"

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "util/hex.h"
#include "util/utf8.h"

namespace kvtier::internal {
namespace {

// Characters that must never reach a terminal as they are: C0 and C1
// controls, DEL, and the bidirectional formatting characters, which can make
// a listed path read as another one ("Trojan Source").
bool IsUnprintable(int32_t cp) {
  if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f)) return true;
  return cp == 0x200e || cp == 0x200f || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

void AppendHexByte(char byte, std::string* out) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const auto b = static_cast<uint8_t>(byte);
  *out += "\\x";
  *out += kDigits[b >> 4];
  *out += kDigits[b & 0xf];
}

// Appends `s` with unprintable characters and invalid bytes escaped; with
// `quoting`, also the quote and backslash that $'...' gives a meaning to.
void AppendEscaped(std::string_view s, bool quoting, std::string* out) {
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const int32_t cp = NextCodePoint(s, &i);
    if (cp < 0) {
      AppendHexByte(s[i++], out);
    } else if (cp == '\n' || cp == '\t' || cp == '\r') {
      *out += cp == '\n' ? "\\n" : cp == '\t' ? "\\t" : "\\r";
    } else if (quoting && (cp == '\'' || cp == '\\')) {
      *out += '\\';
      *out += static_cast<char>(cp);
    } else if (IsUnprintable(cp)) {
      for (size_t k = start; k < i; ++k) AppendHexByte(s[k], out);
    } else {
      out->append(s.substr(start, i - start));
    }
  }
}

std::string HexOf(std::string_view s) {
  return HexEncode(std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
}

}  // namespace

bool NameNeedsQuoting(std::string_view name) {
  for (size_t i = 0; i < name.size();) {
    const int32_t cp = NextCodePoint(name, &i);
    if (cp < 0 || IsUnprintable(cp) || cp == ' ' || cp == '\'' || cp == '"' || cp == '\\') return true;
  }
  return false;
}

std::string QuoteName(std::string_view name) {
  if (!NameNeedsQuoting(name)) return std::string(name);
  std::string out = "$'";
  AppendEscaped(name, /*quoting=*/true, &out);
  out += '\'';
  return out;
}

std::string EscapeUnprintable(std::string_view text) {
  std::string out;
  AppendEscaped(text, /*quoting=*/false, &out);
  return out;
}

std::string ReplaceInvalidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    if (NextCodePoint(s, &i) < 0) {
      out += "\xef\xbf\xbd";  // U+FFFD
      ++i;
    } else {
      out.append(s.substr(start, i - start));
    }
  }
  return out;
}

void MakeJsonUtf8(nlohmann::json* j) {
  if (j->is_string()) {
    auto& s = j->get_ref<std::string&>();
    if (!IsValidUtf8(s)) s = ReplaceInvalidUtf8(s);
  } else if (j->is_array()) {
    for (nlohmann::json& element : *j) MakeJsonUtf8(&element);
  } else if (j->is_object()) {
    // Rebuilt rather than edited in place: keys may change too.
    nlohmann::json fixed = nlohmann::json::object();
    for (auto& [key, value] : j->items()) {
      if (value.is_string() && !IsValidUtf8(value.get_ref<const std::string&>())) {
        fixed[ReplaceInvalidUtf8(key) + "_hex"] = HexOf(value.get_ref<const std::string&>());
      }
      MakeJsonUtf8(&value);
      fixed[ReplaceInvalidUtf8(key)] = std::move(value);
    }
    *j = std::move(fixed);
  }
}

}  // namespace kvtier::internal
