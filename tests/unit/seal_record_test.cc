// Proves the seal trailer's bytes (FORMAT.md L163-L166): a record a writer
// lays down parses back to every field, sits in the page's last 64 bytes
// with the key id just before it and zeros elsewhere; a record naming
// another file length is damaged, a later version is not trusted, a page
// without the magic (a checksum trailer's page, random bytes) is not a seal
// record; the key id's hex round-trips; the path length of the AAD is
// little-endian. Seeded; the seed is printed.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "format/block_trailer.h"
#include "format/seal_record.h"

namespace kvtier::format {
namespace {

constexpr uint64_t kRow = 2 << 20;

SealRecord Sample(uint64_t row) {
  SealRecord r;
  r.version = kSealVersion;
  r.row_bytes = row;
  for (size_t i = 0; i < kSealKeyIdBytes; ++i) r.key_id[i] = static_cast<uint8_t>(0xA0 + i);
  for (size_t i = 0; i < kSealSaltBytes; ++i) r.salt[i] = static_cast<uint8_t>(0x10 + i);
  for (size_t i = 0; i < kSealNonceBytes; ++i) r.nonce[i] = static_cast<uint8_t>(0x30 + i);
  for (size_t i = 0; i < kSealTagBytes; ++i) r.tag[i] = static_cast<uint8_t>(0x50 + i);
  return r;
}
std::vector<uint8_t> Page(const SealRecord& r) {
  std::vector<uint8_t> page(kSealTrailerBytes, 0xAA);
  EncodeSealTrailer(r, page.data());
  return page;
}
const uint8_t* Tail(const std::vector<uint8_t>& page) { return page.data() + kSealTrailerBytes - kSealTailBytes; }

TEST(SealRecord, RoundTripsEveryFieldAtTheEndOfAZeroPaddedPage) {
  const SealRecord want = Sample(kRow);
  const std::vector<uint8_t> page = Page(want);
  for (size_t i = 0; i < kSealKeyIdAt; ++i) ASSERT_EQ(page[i], 0) << i;
  EXPECT_EQ(std::memcmp(page.data() + kSealKeyIdAt, want.key_id, kSealKeyIdBytes), 0);
  EXPECT_EQ(std::memcmp(page.data() + kSealTrailerBytes - kSealRecordBytes, "KVTSEAL1", 8), 0);
  EXPECT_EQ(std::memcmp(page.data() + kSealTagAt, want.tag, kSealTagBytes), 0);
  SealRecord got;
  ASSERT_EQ(ParseSealTail(Tail(page), kRow + kSealTrailerBytes, &got), SealState::kValid);
  EXPECT_EQ(got.version, kSealVersion);
  EXPECT_EQ(got.row_bytes, kRow);
  EXPECT_EQ(std::memcmp(got.key_id, want.key_id, kSealKeyIdBytes), 0);
  EXPECT_EQ(std::memcmp(got.salt, want.salt, kSealSaltBytes), 0);
  EXPECT_EQ(std::memcmp(got.nonce, want.nonce, kSealNonceBytes), 0);
  EXPECT_EQ(std::memcmp(got.tag, want.tag, kSealTagBytes), 0);
}

TEST(SealRecord, PutSealTagChangesOnlyTheTag) {
  std::vector<uint8_t> page = Page(Sample(kRow));
  const std::vector<uint8_t> before = page;
  const uint8_t tag[kSealTagBytes] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  PutSealTag(tag, page.data());
  EXPECT_EQ(std::memcmp(page.data(), before.data(), kSealTagAt), 0);
  EXPECT_EQ(std::memcmp(page.data() + kSealTagAt, tag, kSealTagBytes), 0);
}

TEST(SealRecord, ARecordOfAnotherFileLengthIsDamaged) {
  const std::vector<uint8_t> page = Page(Sample(kRow));
  SealRecord r;
  EXPECT_EQ(ParseSealTail(Tail(page), kRow + kSealTrailerBytes + 4096, &r), SealState::kDamaged);  // extended
  EXPECT_EQ(ParseSealTail(Tail(page), kRow + kSealTrailerBytes - 1, &r), SealState::kDamaged);     // cut
  EXPECT_EQ(ParseSealTail(Tail(page), 100, &r), SealState::kDamaged);
  std::vector<uint8_t> other = page;  // the trailer size field
  other[kSealTrailerBytes - kSealRecordBytes + 12] ^= 1;
  EXPECT_EQ(ParseSealTail(Tail(other), kRow + kSealTrailerBytes, &r), SealState::kDamaged);
}

TEST(SealRecord, ALaterVersionIsNotTrustedAndNoMagicIsAbsent) {
  SealRecord later = Sample(kRow);
  later.version = 2;
  SealRecord r;
  EXPECT_EQ(ParseSealTail(Tail(Page(later)), kRow + kSealTrailerBytes, &r), SealState::kNewer);
  std::vector<uint8_t> checksum_page(kTrailerBytes);
  EncodeTrailer(kRow, 1234, checksum_page.data());  // a checksum trailer is no seal record
  EXPECT_EQ(ParseSealTail(Tail(checksum_page), kRow + kTrailerBytes, &r), SealState::kAbsent);
  for (size_t at = 0; at < 8; ++at) {
    std::vector<uint8_t> page = Page(Sample(kRow));
    page[kSealTrailerBytes - kSealRecordBytes + at] ^= 0x20;
    EXPECT_EQ(ParseSealTail(Tail(page), kRow + kSealTrailerBytes, &r), SealState::kAbsent) << at;
  }
}

TEST(SealRecord, RandomPagesAreNotSealRecords) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::vector<uint8_t> page(kSealTrailerBytes);
  for (int round = 0; round < 2000; ++round) {
    for (uint8_t& b : page) b = static_cast<uint8_t>(rng());
    SealRecord r;
    ASSERT_EQ(ParseSealTail(Tail(page), kRow + kSealTrailerBytes, &r), SealState::kAbsent);
  }
}

TEST(SealRecord, KeyIdHexRoundTripsAndRejectsOtherText) {
  const SealRecord s = Sample(kRow);
  const std::string hex = SealKeyIdHex(s.key_id);
  EXPECT_EQ(hex, "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf");
  uint8_t back[kSealKeyIdBytes] = {};
  ASSERT_TRUE(ParseSealKeyIdHex(hex, back));
  EXPECT_EQ(std::memcmp(back, s.key_id, kSealKeyIdBytes), 0);
  EXPECT_FALSE(ParseSealKeyIdHex(hex.substr(2), back));
  EXPECT_FALSE(ParseSealKeyIdHex(hex.substr(0, 31) + "g", back));
}

TEST(SealRecord, ThePathLengthIsLittleEndian) {
  uint8_t len[4] = {};
  SealPathLength(std::string(0x0102, 'x'), len);
  EXPECT_EQ(len[0], 0x02);
  EXPECT_EQ(len[1], 0x01);
  EXPECT_EQ(len[2], 0);
  EXPECT_EQ(len[3], 0);
}

}  // namespace
}  // namespace kvtier::format
