// How the operators' tools size and read blocks that may carry a checksum
// trailer (FORMAT.md L131-L137): a namespace on a volume without user
// xattrs can hold kvtier's blocks of row + 4096 bytes beside vLLM's plain
// rows of the same namespace, and neither is a short or a long block.
#pragma once

#include <cstdint>

#include "format/block_trailer.h"

namespace kvtier::internal {

// L133: the record in the last kTrailerRecordBytes of the open file `fd`
// of `size` bytes (one pread). kAbsent for a file too small to hold a
// trailer or a read that fails; `read_failed` (if given) tells the two apart.
format::TrailerState ReadTrailerRecord(int fd, uint64_t size, format::TrailerRecord* out,
                                       bool* read_failed = nullptr);

}  // namespace kvtier::internal
