// Reads a whole (small) input file of the CLI or the library with a size cap,
// so a wrong path to a huge file fails fast instead of exhausting memory, and
// a FIFO, device or directory given as a file is an error, not a hang.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "kvtier/result.h"

namespace kvtier::internal {

// Opens `path` with O_NONBLOCK (so opening a FIFO with no writer returns at
// once), checks with fstat that it is a regular file and reads at most
// bytes_max bytes. Errors name `what` and the path:
//   "open config file X: ..."                      errno mapped as everywhere
//   "config file X: not a regular file (fifo)"     kInvalidArgument
//   "config file X: larger than N bytes"           kInvalidArgument
Result<std::string> ReadFileCapped(const std::string& path, std::string_view what, size_t bytes_max);

// Standard input, read to its end with the same cap (for a CLI's explicit
// "-"); a terminal or pipe is fine here since the user asked for it.
Result<std::string> ReadStdinCapped(std::string_view what, size_t bytes_max);

}  // namespace kvtier::internal
