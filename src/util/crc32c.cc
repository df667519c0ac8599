// CRC32C via ISA-L.
#include "util/crc32c.h"

#include <isa-l/crc.h>

#include <algorithm>
#include <climits>

namespace kvtier::internal {

uint32_t Crc32c(std::span<const uint8_t> data) { return Crc32cExtend(0, data); }

uint32_t Crc32cExtend(uint32_t crc_so_far, std::span<const uint8_t> data) {
  // ISA-L's crc32_iscsi takes the running register (no final inversion) and
  // an int length, so feed it in chunks below INT_MAX.
  uint32_t crc = crc_so_far ^ 0xffffffffu;
  const uint8_t* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    const int chunk = static_cast<int>(std::min<size_t>(left, 1u << 30));
    crc = crc32_iscsi(const_cast<unsigned char*>(p), chunk, crc);
    p += chunk;
    left -= static_cast<size_t>(chunk);
  }
  return crc ^ 0xffffffffu;
}

}  // namespace kvtier::internal
