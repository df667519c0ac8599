// Proves Crc32cExtendZeros, the CRC32C of a run of zero bytes computed
// without reading them (what fsck --verify-data does over a hole, FORMAT.md
// L109), equals Crc32cExtend over a real buffer of zeros: for the edge
// lengths around bytes, words and pages, for seeded random lengths (the seed
// is printed), from several starting CRCs, and inside a composition
// crc(a || zeros(n) || b); anchored by RFC 3720's known answer for 32 zeros.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "support/test_support.h"
#include "util/crc32c.h"

namespace kvtier::internal {
namespace {

uint32_t SlowZeros(uint32_t crc, uint64_t n) {
  static const std::vector<uint8_t> kZeros(1 << 20, 0);
  for (; n > 0; n -= std::min<uint64_t>(n, kZeros.size())) {
    crc = Crc32cExtend(crc, {kZeros.data(), static_cast<size_t>(std::min<uint64_t>(n, kZeros.size()))});
  }
  return crc;
}

std::vector<uint8_t> Bytes(std::mt19937_64& rng, size_t n) {
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

TEST(Crc32cZerosTest, KnownAnswerForThirtyTwoZeros) {
  EXPECT_EQ(Crc32cExtendZeros(0, 32), 0x8a9136aau);  // RFC 3720 B.4
  EXPECT_EQ(Crc32cExtendZeros(0, 0), 0u);
}

TEST(Crc32cZerosTest, MatchesRealZerosAtEdgeLengths) {
  const uint8_t digits[] = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
  for (uint32_t start : {0u, Crc32c(digits), 0xffffffffu, 0x12345678u}) {
    for (uint64_t n : {0, 1, 2, 3, 7, 8, 9, 15, 16, 63, 64, 65, 511, 512, 4095, 4096, 4097, 65536, (1 << 20) - 1,
                       1 << 20, (1 << 20) + 1, 3 << 20}) {
      EXPECT_EQ(Crc32cExtendZeros(start, n), SlowZeros(start, n)) << "start " << start << " n " << n;
    }
  }
}

TEST(Crc32cZerosTest, MatchesRealZerosAtRandomLengths) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 200; ++i) {
    const uint32_t start = static_cast<uint32_t>(rng());
    const uint64_t n = rng() % (i < 150 ? 70000 : 5 << 20);
    ASSERT_EQ(Crc32cExtendZeros(start, n), SlowZeros(start, n)) << "seed " << seed << " start " << start << " n " << n;
  }
}

TEST(Crc32cZerosTest, ComposesAroundData) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 50; ++i) {
    const std::vector<uint8_t> a = Bytes(rng, rng() % 5000), b = Bytes(rng, rng() % 5000);
    const uint64_t n = rng() % (2 << 20);
    std::vector<uint8_t> whole(a);
    whole.resize(a.size() + n, 0);
    whole.insert(whole.end(), b.begin(), b.end());
    const uint32_t fast = Crc32cExtend(Crc32cExtendZeros(Crc32c(a), n), b);
    ASSERT_EQ(fast, Crc32c(whole)) << "seed " << seed << " |a| " << a.size() << " n " << n << " |b| " << b.size();
  }
}

TEST(Crc32cZerosTest, HugeCountsAreLogarithmicAndSplitConsistently) {
  // 2^40 + 12345 zeros at once equals the same in two parts (no buffer could check it directly).
  const uint64_t tib = uint64_t{1} << 40;
  EXPECT_EQ(Crc32cExtendZeros(7, tib + 12345), Crc32cExtendZeros(Crc32cExtendZeros(7, tib), 12345));
  EXPECT_EQ(Crc32cExtendZeros(7, ~uint64_t{0}), Crc32cExtendZeros(Crc32cExtendZeros(7, ~uint64_t{0} - 4096), 4096));
}

}  // namespace
}  // namespace kvtier::internal
