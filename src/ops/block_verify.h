// fsck --verify-data's check of one block's bytes (FORMAT.md L67, L109,
// L137): the CRC32C a block carries, in its trailer or its attribute,
// against its row, read where it holds data and counted as zeros through
// its holes.
#pragma once

#include <cstdint>
#include <string>

#include "io/io_watch.h"

namespace kvtier::internal {

enum class Verdict { kMatches, kMismatch, kUnjudged };

// The verdict on the open block `fd` of `size` bytes; *detail says why on a
// mismatch, *read_bytes counts what was read (not the holes).
Verdict CrcVerdict(int fd, uint64_t size, IoScope* io, std::string* detail, uint64_t* read_bytes);

}  // namespace kvtier::internal
