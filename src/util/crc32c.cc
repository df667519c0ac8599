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

// Extending by zeros, the method of zlib's crc32_combine (crc32.c,
// multmodp/x2nmodp, Mark Adler): the CRC register is a polynomial over
// GF(2) modulo P, bit-reflected (bit 31 is x^0), and feeding it one zero bit
// multiplies it by x mod P. So n zero bytes multiply it by x^(8n) mod P,
// which square-and-multiply finds in O(log n) products. zlib keeps a table of
// x^(2^k) and wraps k at 32, which holds for its irreducible polynomial;
// CRC32C's is divisible by x + 1, so here the powers are squared as we go.
namespace {

constexpr uint32_t kPolyReflected = 0x82f63b78u;  // CRC32C (Castagnoli), bit-reflected
constexpr uint32_t kOne = 1u << 31;               // x^0 in the reflected order

// a * b mod P, both reflected (zlib's multmodp with CRC32C's polynomial).
uint32_t MulModP(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t m = kOne; m != 0 && a != 0; m >>= 1) {
    if (a & m) {
      product ^= b;
      a ^= m;
    }
    b = (b & 1) ? (b >> 1) ^ kPolyReflected : b >> 1;  // b *= x mod P
  }
  return product;
}

}  // namespace

uint32_t Crc32cExtendZeros(uint32_t crc_so_far, uint64_t zero_bytes) {
  uint32_t reg = crc_so_far ^ 0xffffffffu;  // the register, as Crc32cExtend holds it
  uint32_t power = kOne >> 8;               // x^8: one zero byte
  for (; zero_bytes != 0; zero_bytes >>= 1) {
    if (zero_bytes & 1) reg = MulModP(power, reg);
    power = MulModP(power, power);  // x^(8 * 2^k) for the next bit of the count
  }
  return reg ^ 0xffffffffu;
}

}  // namespace kvtier::internal
