// Proves the checksum trailer's record (FORMAT.md L132, L133): the bytes a
// writer lays down parse back to the row's length and CRC; the record sits
// in the page's last 64 bytes after zero padding; every single-byte change
// of the record is caught (no magic: absent; otherwise damaged, or a later
// version when only the version moved and the record's CRC was redone); a
// record that names another file length is damaged (a truncated or grown
// file); random pages never pass as a trailer. Seeded; the seed is printed.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "format/block_trailer.h"
#include "support/test_support.h"
#include "util/crc32c.h"

namespace kvtier::format {
namespace {

constexpr uint64_t kRow = 2 << 20;

std::vector<uint8_t> Page(uint64_t row, uint32_t crc) {
  std::vector<uint8_t> page(kTrailerBytes, 0xAA);
  EncodeTrailer(row, crc, page.data());
  return page;
}
const uint8_t* Record(const std::vector<uint8_t>& page) { return page.data() + kTrailerBytes - kTrailerRecordBytes; }

TEST(BlockTrailer, RoundTripsTheRowLengthAndCrcAtTheEndOfAZeroPaddedPage) {
  const std::vector<uint8_t> page = Page(kRow, 0xE3069283u);
  for (size_t i = 0; i < kTrailerBytes - kTrailerRecordBytes; ++i) ASSERT_EQ(page[i], 0) << i;
  EXPECT_EQ(std::memcmp(Record(page), "KVTRAILR", 8), 0);
  TrailerRecord r;
  ASSERT_EQ(ParseTrailerRecord(Record(page), kRow + kTrailerBytes, &r), TrailerState::kValid);
  EXPECT_EQ(r.version, kTrailerVersion);
  EXPECT_EQ(r.data_bytes, kRow);
  EXPECT_EQ(r.data_crc, 0xE3069283u);
}

TEST(BlockTrailer, ANameOfAnotherLengthIsDamaged) {
  const std::vector<uint8_t> page = Page(kRow, 7);
  TrailerRecord r;
  EXPECT_EQ(ParseTrailerRecord(Record(page), kRow + kTrailerBytes + 4096, &r), TrailerState::kDamaged);
  EXPECT_EQ(ParseTrailerRecord(Record(page), kRow, &r), TrailerState::kDamaged);
  EXPECT_EQ(ParseTrailerRecord(Record(page), 100, &r), TrailerState::kDamaged);
}

TEST(BlockTrailer, EverySingleByteChangeOfTheRecordIsCaught) {
  const std::vector<uint8_t> good = Page(kRow, 0x12345678u);
  for (size_t at = 0; at < kTrailerRecordBytes; ++at) {
    for (uint8_t flip : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xFF}}) {
      std::vector<uint8_t> page = good;
      page[kTrailerBytes - kTrailerRecordBytes + at] ^= flip;
      TrailerRecord r;
      const TrailerState s = ParseTrailerRecord(Record(page), kRow + kTrailerBytes, &r);
      EXPECT_EQ(s, at < 8 ? TrailerState::kAbsent : TrailerState::kDamaged) << "byte " << at << " ^ " << int{flip};
    }
  }
}

TEST(BlockTrailer, ALaterVersionWithAWholeRecordIsNotTrusted) {
  std::vector<uint8_t> page = Page(kRow, 1);
  uint8_t* r = page.data() + kTrailerBytes - kTrailerRecordBytes;
  r[8] = 2;  // version 2, little-endian
  const uint32_t crc = internal::Crc32c(std::span<const uint8_t>(r, 60));
  for (int i = 0; i < 4; ++i) r[60 + i] = static_cast<uint8_t>(crc >> (8 * i));
  TrailerRecord out;
  EXPECT_EQ(ParseTrailerRecord(r, kRow + kTrailerBytes, &out), TrailerState::kNewer);
}

TEST(BlockTrailer, RandomPagesAndPlainRowsNeverPassAsATrailer) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> page(kTrailerBytes);
  for (int i = 0; i < 2000; ++i) {
    for (uint8_t& b : page) b = static_cast<uint8_t>(rng());
    if (i % 2 == 0) std::memcpy(page.data() + kTrailerBytes - kTrailerRecordBytes, "KVTRAILR", 8);  // magic, no CRC
    TrailerRecord r;
    const TrailerState s = ParseTrailerRecord(Record(page), kRow + kTrailerBytes, &r);
    ASSERT_NE(s, TrailerState::kValid) << "seed " << seed << " round " << i;
    ASSERT_EQ(s, i % 2 == 0 ? TrailerState::kDamaged : TrailerState::kAbsent) << "seed " << seed << " round " << i;
  }
  std::fill(page.begin(), page.end(), 0);  // a zero page: what a lost write leaves
  TrailerRecord r;
  EXPECT_EQ(ParseTrailerRecord(Record(page), kRow + kTrailerBytes, &r), TrailerState::kAbsent);
}

}  // namespace
}  // namespace kvtier::format
