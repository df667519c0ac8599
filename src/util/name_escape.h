// How the operators' tools print file names, which on a shared volume are
// whatever bytes a writer chose: not necessarily UTF-8, possibly holding
// newlines or terminal escape sequences.
//
// Text output: a name is printed as it is unless it needs quoting, then in
// bash's $'...' form, which a shell turns back into the exact bytes.
// JSON output: every string is valid UTF-8 (I-JSON, RFC 7493), so that every
// JSON parser reads it; a member whose value is not valid UTF-8 holds the
// value with U+FFFD in place of each invalid byte, and a sibling member
// "<name>_hex" holds the exact bytes in hex.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kvtier::internal {

// True when `name` is printed quoted: it holds a byte that is not part of
// valid UTF-8, a control character (U+0000-U+001F, U+007F-U+009F), a
// bidirectional formatting character (U+200E, U+200F, U+202A-U+202E,
// U+2066-U+2069), a space, a quote (' or ") or a backslash.
bool NameNeedsQuoting(std::string_view name);

// `name` unchanged when it needs no quoting; otherwise $'...' with \n, \t, \r
// for those characters, \' and \\ for quote and backslash, and \xHH for each
// byte of an invalid sequence, a control or a bidirectional character.
std::string QuoteName(std::string_view name);

// Free text that may embed names (a finding's detail): the bytes that
// QuoteName writes as \xHH (and \n, \t, \r) are escaped the same way, the
// rest is left as it is. For reading, not for reversing.
std::string EscapeUnprintable(std::string_view text);

// `s` with U+FFFD in place of each byte that is not part of valid UTF-8.
std::string ReplaceInvalidUtf8(std::string_view s);

// Makes every string in `j` valid UTF-8 (ReplaceInvalidUtf8), and beside each
// object member whose string value was not, adds "<key>_hex" with its exact
// bytes. Afterwards j.dump() cannot fail on encoding.
void MakeJsonUtf8(nlohmann::json* j);

}  // namespace kvtier::internal
