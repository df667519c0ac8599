// CRC32C (Castagnoli) arithmetic that compiles both for the CPU (g++, plain
// C++) and for a CUDA device (nvcc, __host__ __device__), so the device CRC
// kernel (crc_kernel.cu) runs exactly the functions the CPU tests check
// against ISA-L (tests/unit/crc32c_hd_test.cc).
//
// Two kinds of value appear here:
//  * a register: the CRC state with no initial value and no final xor
//    ("raw"). Raw(M) is linear in M, so Raw(A || B) = Shift(Raw(A), |B|) ^
//    Raw(B), where Shift multiplies by x^(8|B|) mod P; this is how a warp's
//    lanes, and a row's pieces, are put back together.
//  * a standard CRC32C (initial value and final xor 0xffffffff), the one
//    FORMAT.md L60/L102 keeps: Crc32c(M) = Raw(M) ^ Shift(~0, |M|) ^ ~0.
// The GF(2) products follow zlib's crc32_combine (crc32.c, multmodp,
// x2nmodp; Mark Adler), as util/crc32c.cc does for Crc32cExtendZeros.
//
// C++17 (nvcc builds the kernel as such).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define KVTIER_HD __host__ __device__
#else
#define KVTIER_HD
#endif

namespace kvtier::internal::crc32c_hd {

inline constexpr uint32_t kPolyReflected = 0x82f63b78u;  // bit-reflected
inline constexpr uint32_t kOne = 1u << 31;               // x^0 in the reflected order

// Slice-by-8 tables: t[0] is the byte table, t[k][i] = one more zero byte
// after t[k-1][i].
struct Tables {
  uint32_t t[8][256];
};

KVTIER_HD constexpr Tables MakeTables() {
  Tables tables{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int b = 0; b < 8; ++b) c = (c & 1) ? (c >> 1) ^ kPolyReflected : c >> 1;
    tables.t[0][i] = c;
  }
  for (int k = 1; k < 8; ++k) {
    for (int i = 0; i < 256; ++i) {
      const uint32_t prev = tables.t[k - 1][i];
      tables.t[k][i] = (prev >> 8) ^ tables.t[0][prev & 0xff];
    }
  }
  return tables;
}

// x^(8 * 2^k) mod P for k = 0..63: Shift by any byte count is then one
// product per set bit of the count.
struct Powers {
  uint32_t x8_2k[64];
};

// a * b mod P, both reflected.
KVTIER_HD constexpr uint32_t MulModP(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t m = kOne; m != 0 && a != 0; m >>= 1) {
    if (a & m) {
      product ^= b;
      a ^= m;
    }
    b = (b & 1) ? (b >> 1) ^ kPolyReflected : b >> 1;
  }
  return product;
}

KVTIER_HD constexpr Powers MakePowers() {
  Powers p{};
  p.x8_2k[0] = kOne >> 8;  // x^8: one byte
  for (int k = 1; k < 64; ++k) p.x8_2k[k] = MulModP(p.x8_2k[k - 1], p.x8_2k[k - 1]);
  return p;
}

// The register after `n` more zero bytes: reg * x^(8n) mod P.
KVTIER_HD inline uint32_t Shift(const Powers& powers, uint32_t reg, uint64_t n) {
  for (int k = 0; n != 0 && reg != 0; ++k, n >>= 1) {
    if (n & 1) reg = MulModP(powers.x8_2k[k], reg);
  }
  return reg;
}

// Crc32c(A || B) from the standard CRCs of A and B and |B|.
KVTIER_HD inline uint32_t Combine(const Powers& powers, uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  return Shift(powers, crc_a, len_b) ^ crc_b;
}

// Crc32c(A || n zero bytes) from Crc32c(A) (a row's padding, L109's holes).
KVTIER_HD inline uint32_t ExtendZeros(const Powers& powers, uint32_t crc, uint64_t n) {
  return Shift(powers, crc ^ 0xffffffffu, n) ^ 0xffffffffu;
}

// The register after the bytes p[0, n), from `reg`. Bytes up to an 8-byte
// boundary go one at a time, then 8 at a time (little-endian words, as on
// x86, Arm and CUDA devices).
KVTIER_HD inline uint32_t UpdateRaw(const Tables& tables, uint32_t reg, const uint8_t* p, uint64_t n) {
  const auto& t = tables.t;
  for (; n != 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0; --n, ++p) reg = t[0][(reg ^ *p) & 0xff] ^ (reg >> 8);
  for (; n >= 8; n -= 8, p += 8) {
#if defined(__CUDA_ARCH__)
    const uint64_t w = *reinterpret_cast<const uint64_t*>(p);  // aligned above
#else
    uint64_t w;
    std::memcpy(&w, p, 8);
#endif
    const uint32_t lo = reg ^ static_cast<uint32_t>(w);
    const uint32_t hi = static_cast<uint32_t>(w >> 32);
    reg = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
          t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
  }
  for (; n != 0; --n, ++p) reg = t[0][(reg ^ *p) & 0xff] ^ (reg >> 8);
  return reg;
}

// How the device kernel splits one piece over a warp's 32 lanes: lane i
// takes bytes [*begin, *begin + *len), consecutive ranges in lane order,
// each a multiple of 8 bytes long except at the end.
inline constexpr unsigned kLanes = 32;
KVTIER_HD inline void LaneRange(uint64_t bytes, unsigned lane, uint64_t* begin, uint64_t* len) {
  const uint64_t per = ((bytes + kLanes - 1) / kLanes + 7) / 8 * 8;
  const uint64_t b = per * lane < bytes ? per * lane : bytes;
  *begin = b;
  *len = (bytes - b) < per ? bytes - b : per;
}

// One step of the warp's tree: the lane holding Raw(A) (|A| = *len) takes its
// right neighbour's Raw(B), |B| = len_b, and then holds Raw(A || B).
KVTIER_HD inline void Absorb(const Powers& powers, uint32_t* reg, uint64_t* len, uint32_t reg_b, uint64_t len_b) {
  *reg = Shift(powers, *reg, len_b) ^ reg_b;
  *len += len_b;
}

}  // namespace kvtier::internal::crc32c_hd
