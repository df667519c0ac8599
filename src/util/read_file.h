// Reads a whole (small) file with a size cap, so a wrong path to a huge file
// fails fast instead of exhausting memory.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "kvtier/result.h"

namespace kvtier::internal {

// Errors name `what` and the path: "open config file X: ...", "trace file X:
// larger than N bytes" (kInvalidArgument); errno is mapped as everywhere.
Result<std::string> ReadFileCapped(const std::string& path, std::string_view what, size_t bytes_max);

}  // namespace kvtier::internal
