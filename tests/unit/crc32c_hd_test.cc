// Proves the CRC32C arithmetic the device kernel runs (staging/crc32c_hd.h,
// compiled here as plain C++) is byte-for-byte the CPU's ISA-L CRC32C
// (FORMAT.md L60/L102): the slice-by-8 register on random data at every
// alignment; the standard-CRC combine crc(A || B) from crc(A), crc(B), |B|;
// zero-extension against real zero bytes; and whole rows of every supported
// size (4 KiB to 2 MiB, and odd sizes), their used part cut into random
// segments (odd lengths, odd offsets) and 64 KiB pieces, each piece computed
// as the kernel does (32 lane ranges folded by Absorb), put back together
// with Shift and padded with zeros to the row size. Seeds are printed.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "staging/crc32c_hd.h"
#include "support/test_support.h"
#include "util/crc32c.h"

namespace kvtier::internal {
namespace {

namespace hd = crc32c_hd;

const hd::Tables kTables = hd::MakeTables();
const hd::Powers kPowers = hd::MakePowers();

std::vector<uint8_t> Bytes(std::mt19937_64& rng, size_t n) {
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

uint32_t Standard(const uint8_t* p, uint64_t n) { return hd::UpdateRaw(kTables, 0xffffffffu, p, n) ^ 0xffffffffu; }

// The register of one piece as a warp computes it: 32 lane ranges, folded in
// the kernel's tree order (step 1, 2, 4, 8, 16).
uint32_t WarpRaw(const uint8_t* p, uint64_t bytes) {
  uint32_t reg[hd::kLanes];
  uint64_t len[hd::kLanes];
  for (unsigned lane = 0; lane < hd::kLanes; ++lane) {
    uint64_t begin = 0;
    hd::LaneRange(bytes, lane, &begin, &len[lane]);
    reg[lane] = hd::UpdateRaw(kTables, 0, p + begin, len[lane]);
  }
  for (unsigned step = 1; step < hd::kLanes; step *= 2) {
    for (unsigned lane = 0; lane + step < hd::kLanes; lane += 2 * step) {
      hd::Absorb(kPowers, &reg[lane], &len[lane], reg[lane + step], len[lane + step]);
    }
  }
  EXPECT_EQ(len[0], bytes);
  return reg[0];
}

TEST(Crc32cHd, KnownAnswer) {
  const uint8_t digits[] = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
  EXPECT_EQ(Standard(digits, sizeof(digits)), 0xe3069283u);
  EXPECT_EQ(hd::ExtendZeros(kPowers, 0, 32), 0x8a9136aau);  // RFC 3720 B.4
}

TEST(Crc32cHd, SliceBy8EqualsIsalAtEveryAlignment) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  const std::vector<uint8_t> data = Bytes(rng, 70000);
  for (int i = 0; i < 300; ++i) {
    const size_t off = rng() % 64;
    const size_t n = i < 100 ? static_cast<size_t>(i) : rng() % (data.size() - off);
    const std::span<const uint8_t> s(data.data() + off, n);
    ASSERT_EQ(Standard(s.data(), n), Crc32c(s)) << "seed " << seed << " off " << off << " n " << n;
    ASSERT_EQ(WarpRaw(s.data(), n) ^ hd::Shift(kPowers, 0xffffffffu, n) ^ 0xffffffffu, Crc32c(s))
        << "warp split, seed " << seed << " n " << n;
  }
}

TEST(Crc32cHd, CombineAndZerosEqualIsal) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 200; ++i) {
    const std::vector<uint8_t> a = Bytes(rng, rng() % 5000), b = Bytes(rng, rng() % (i < 100 ? 5000 : 300000));
    std::vector<uint8_t> ab = a;
    ab.insert(ab.end(), b.begin(), b.end());
    ASSERT_EQ(hd::Combine(kPowers, Crc32c(a), Crc32c(b), b.size()), Crc32c(ab)) << "seed " << seed << " i " << i;
    const uint64_t zeros = rng() % (i < 100 ? 9000 : (3 << 20));
    ASSERT_EQ(hd::ExtendZeros(kPowers, Crc32c(a), zeros), Crc32cExtendZeros(Crc32c(a), zeros));
    std::vector<uint8_t> az = a;
    az.resize(a.size() + zeros % 20000, 0);
    ASSERT_EQ(hd::ExtendZeros(kPowers, Crc32c(a), az.size() - a.size()), Crc32c(az)) << "seed " << seed;
  }
}

// A row of `row_bytes`, `used` of them data and the rest zero padding, its
// data cut into random segments and each segment into pieces of at most
// 64 KiB, as RowCrcPlan and the kernel do.
uint32_t RowFromPieces(std::mt19937_64& rng, const std::vector<uint8_t>& row, uint64_t used) {
  uint32_t reg = 0xffffffffu;
  for (uint64_t pos = 0; pos < used;) {
    const uint64_t seg = std::min<uint64_t>(used - pos, 1 + rng() % (rng() % 2 ? 513 : 200000));
    for (uint64_t off = 0; off < seg; off += 65536) {
      const uint64_t n = std::min<uint64_t>(65536, seg - off);
      reg = hd::Shift(kPowers, reg, n) ^ WarpRaw(row.data() + pos + off, n);
    }
    pos += seg;
  }
  return hd::Shift(kPowers, reg, row.size() - used) ^ 0xffffffffu;
}

TEST(Crc32cHd, RowsOfEverySizeFromOddSegmentsEqualIsal) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> sizes;
  for (uint64_t s = 4096; s <= (2u << 20); s *= 2) sizes.push_back(s);
  sizes.insert(sizes.end(), {3 * 4096, 5 * 4096 * 7, (2u << 20) + 4096, 4u << 20});
  for (uint64_t row_bytes : sizes) {
    std::vector<uint8_t> row = Bytes(rng, row_bytes);
    const uint64_t used = row_bytes - (rng() % 3 == 0 ? 0 : rng() % 4096);
    std::fill(row.begin() + static_cast<std::ptrdiff_t>(used), row.end(), 0);
    ASSERT_EQ(RowFromPieces(rng, row, used), Crc32c(row))
        << "seed " << seed << " row " << row_bytes << " used " << used;
  }
}

}  // namespace
}  // namespace kvtier::internal
