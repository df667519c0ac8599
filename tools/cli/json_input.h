// JSON input for the CLI that keeps integers of any size: nlohmann/json turns
// integer literals beyond 64 bits into doubles, so those are kept as their
// decimal text instead and read back with JsonToBigInt.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "kvtier/big_int.h"
#include "kvtier/result.h"

namespace kvtier::internal {

// Deepest nesting of a CLI JSON input (compat cases, token lists, config.json
// files, --kv-groups files). The deepest legitimate one, a whole compat-cases
// file, nests 7 levels; the parser's DOM and dump recurse per level, so
// deeper text is refused before parsing.
inline constexpr size_t kCliJsonDepthMax = 32;

// Parses JSON text; never throws. kInvalidArgument with the byte offset of a
// syntax error, or "<what>: nested deeper than 32 levels at byte B" (checked
// before parsing). `what` names the input in messages (a file name).
Result<nlohmann::json> ParseJsonKeepingBigInts(std::string_view text, std::string_view what);

// An integer element of a document from ParseJsonKeepingBigInts.
Result<BigInt> JsonToBigInt(const nlohmann::json& value, std::string_view what);

// An integer that fits int64 (rejects booleans, floats and big integers).
Result<int64_t> JsonToInt64(const nlohmann::json& value, std::string_view what);

}  // namespace kvtier::internal
