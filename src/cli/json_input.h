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

// Parses JSON text; never throws. kInvalidArgument with the byte offset of a
// syntax error. `what` names the input in messages (a file name).
Result<nlohmann::json> ParseJsonKeepingBigInts(std::string_view text, std::string_view what);

// An integer element of a document from ParseJsonKeepingBigInts.
Result<BigInt> JsonToBigInt(const nlohmann::json& value, std::string_view what);

// An integer that fits int64 (rejects booleans, floats and big integers).
Result<int64_t> JsonToInt64(const nlohmann::json& value, std::string_view what);

}  // namespace kvtier::internal
