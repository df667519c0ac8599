// What the crash writer stores and the crash test checks, shared by both so
// that a reader can rebuild everything from a key index alone:
//  * key i: a 32-byte block hash, i little-endian in bytes 0..7, then a fixed
//    tail (so a file name maps back to i, and a foreign name is recognised);
//  * row of key i: bytes 0..7 = i, bytes 8..15 = the content seed, then a
//    splitmix64 stream seeded from (seed, i). Any torn, misplaced or foreign
//    row therefore differs from the expected bytes;
//  * OracleCrc32c: the CRC32C the tests expect in the attribute.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/fs_tier.h"

namespace kvtier::crash {

inline constexpr size_t kHashBytes = 32;

inline uint8_t TailByte(size_t b) { return static_cast<uint8_t>(0xc0 + b); }  // b in [8, 32)

inline NamespaceSpec CrashSpec() {
  NamespaceSpec spec;
  spec.model_name = "crash/model";
  spec.kv_cache_groups.push_back({16, {"l0", "l1"}});
  return spec;
}

// The fs tier that checks what a crash left: the crash namespace, 4 readers,
// 1 writer (the checks only read and repair).
inline FsTierOpenOptions CrashTierOptions(const std::filesystem::path& root, uint64_t row_bytes,
                                          IoBackendKind backend) {
  FsTierOpenOptions o;
  o.tier.root_dir = root.string();
  o.ns = CrashSpec();
  o.row_bytes = row_bytes;
  o.tier.n_read_threads = 4;
  o.tier.n_write_threads = 1;
  o.tier.io_backend = backend;
  return o;
}

inline OffloadKey CrashKey(uint64_t i) {
  uint8_t bytes[kHashBytes];
  for (size_t b = 0; b < 8; ++b) bytes[b] = static_cast<uint8_t>(i >> (8 * b));
  for (size_t b = 8; b < kHashBytes; ++b) bytes[b] = TailByte(b);
  return {BlockHash::FromBytes(bytes).value(), 0};
}

// "<64 hex>.bin" of a CrashKey -> its index; nullopt for any other name.
inline std::optional<uint64_t> CrashKeyIndex(std::string_view file_name) {
  constexpr std::string_view kExt = ".bin";
  if (file_name.size() != 2 * kHashBytes + kExt.size() ||
      file_name.substr(2 * kHashBytes) != kExt) {
    return std::nullopt;
  }
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  uint64_t i = 0;
  for (size_t b = 0; b < kHashBytes; ++b) {
    const int hi = nibble(file_name[2 * b]), lo = nibble(file_name[2 * b + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    const uint8_t v = static_cast<uint8_t>(hi << 4 | lo);
    if (b < 8) {
      i |= uint64_t{v} << (8 * b);
    } else if (v != TailByte(b)) {
      return std::nullopt;
    }
  }
  return i;
}

inline uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The expected bytes of key i (row.size() must be a multiple of 8).
inline void FillCrashRow(uint64_t seed, uint64_t i, std::span<uint8_t> row) {
  uint64_t state = seed ^ (i * 0xd1b54a32d192ed03ull);
  uint64_t words[2] = {i, seed};
  std::memcpy(row.data(), words, 16);
  for (size_t at = 16; at + 8 <= row.size(); at += 8) {
    const uint64_t v = SplitMix64(&state);
    std::memcpy(row.data() + at, &v, 8);
  }
}

// CRC32C (Castagnoli, reflected 0x82F63B78) from a bitwise-built table: the
// crash tests' own oracle, independent of the library's ISA-L one.
inline uint32_t OracleCrc32c(std::span<const uint8_t> data) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0x82f63b78u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  uint32_t crc = 0xffffffffu;
  for (uint8_t b : data) crc = table[(crc ^ b) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

}  // namespace kvtier::crash
