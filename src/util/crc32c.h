// CRC32C (Castagnoli), the checksum kvtier keeps with every block file
// (xattr user.vllm.kv_crc32c, FORMAT.md L60). Computed by ISA-L, which uses
// the CPU's CRC32 and carry-less multiply instructions.
#pragma once

#include <cstdint>
#include <span>

namespace kvtier::internal {

// Standard CRC32C (initial value and final xor 0xffffffff): "123456789" ->
// 0xe3069283.
uint32_t Crc32c(std::span<const uint8_t> data);
// The CRC32C of A || data given crc_so_far = Crc32c(A) (0 for empty A), so a
// file can be checked in chunks: Crc32cExtend(Crc32c(A), B) == Crc32c(A || B).
uint32_t Crc32cExtend(uint32_t crc_so_far, std::span<const uint8_t> data);
// The same for `zero_bytes` zero bytes, without reading or looping over them:
// Crc32cExtendZeros(c, n) == Crc32cExtend(c, <n zero bytes>) in O(log n)
// steps, so a file's holes (FORMAT.md L109) cost nothing to check.
uint32_t Crc32cExtendZeros(uint32_t crc_so_far, uint64_t zero_bytes);

}  // namespace kvtier::internal
