// Helpers the block operations share (block_ops.h): the timed CRC32C of a
// row, and O_DIRECT's alignment test and its fallback. Stores, loads, the
// codecs and the bounce pool all use them, so they live beside none of them.
#include <fcntl.h>

#include <cstdint>

#include "fs/block_ops.h"
#include "fs/block_codec.h"
#include "util/crc32c.h"

namespace kvtier::internal {

TierShared::TierShared() = default;
TierShared::~TierShared() = default;

uint64_t TierShared::file_bytes() const { return row_bytes + codec->page_bytes(); }

uint32_t TimedCrc32c(std::atomic<uint64_t>* spent_ns, const RowPieces& row) {
  const uint64_t t0 = MonotonicNowNs();
  uint32_t crc = Crc32c(row.piece(0));
  for (size_t i = 1; i < row.count(); ++i) crc = Crc32cExtend(crc, row.piece(i));
  spent_ns->fetch_add(MonotonicNowNs() - t0, std::memory_order_relaxed);
  return crc;
}

bool DirectIoAligned(const void* buf, uint64_t len) {
  return reinterpret_cast<uintptr_t>(buf) % 4096 == 0 && len % 4096 == 0 && len > 0;
}

bool DropDirect(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags & ~O_DIRECT) == 0;
}

}  // namespace kvtier::internal
