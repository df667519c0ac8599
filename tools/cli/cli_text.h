// What the CLI prints is text for people and terminals, whatever bytes the
// user or the volume gave it (a model name, a root path, a trace path, a
// file name): the same rules as the operators' reports (util/name_escape.h).
//  * Names and paths in text output go through QuoteName: printed as they
//    are unless they hold a control character, invalid UTF-8 or the like,
//    then in bash's $'...' form, which a shell turns back into the bytes.
//  * Messages (errors, notes) go through EscapeUnprintable: a newline or an
//    escape sequence inside a message cannot split or recolour its line.
//  * JSON output is valid UTF-8, with "<key>_hex" siblings holding the exact
//    bytes of any string that was not (MakeJsonUtf8).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kvtier::internal {

// "kvtier <command>: <message>\n" on stderr ("kvtier: " without a command),
// the message escaped.
void PrintError(std::string_view command, std::string_view message);

// `j` as indented JSON text with a final newline, made valid UTF-8 first:
// it cannot throw on a name that is not.
std::string JsonOutput(nlohmann::json j);

}  // namespace kvtier::internal
