// Proves the unsealed block codecs (src/fs/block_codec.h) on their own: each
// kind writes what its place says (the CRC attribute big-endian, L60; a
// trailer page whose record parses valid, L131-L132), and a CRC given by the
// GPU staging (staged_crc.h) is written as given, none computed; and loads
// check whichever a block carries whatever this tier writes (L130): a tier
// writing xattrs serves a block with a good trailer and calls a bad one a
// mismatch, a short file is refused and removed (L65), a longer one refused
// and kept (L66), and with checksum_blocks off no attribute is asked for and
// no CRC checked, while a page without a trailer record is still refused.
#include "fs/block_codec.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "format/block_trailer.h"
#include "util/crc32c.h"

namespace kvtier::internal {
namespace {

constexpr uint64_t kRow = 8192;

class BlockCodecTest : public ::testing::Test {
 protected:
  BlockCodecTest() : bytes_(kRow, 0x5a), row_(std::span<uint8_t>(bytes_)) {}
  uint32_t RowCrc() const { return Crc32c(std::span<const uint8_t>(bytes_)); }
  StoreEncoding Encode(BlockCodec* codec, std::optional<uint32_t> given = std::nullopt) {
    StoreEncoding out;
    EXPECT_TRUE(codec->Encode(StoreRow{"ns_r0/abc/de_g0/x.bin", &row_, nullptr, given}, &out).ok());
    return out;
  }
  LoadVerdict CheckWithPage(BlockCodec* codec, const uint8_t* page) {
    LoadedRow in;
    in.shown = "/root/x.bin";
    in.file_bytes = kRow + format::kTrailerBytes;
    in.read = &row_;
    in.row = &row_;
    in.page = page;
    return codec->Check(in);
  }

  std::atomic<uint64_t> crc_ns_{0};
  std::vector<uint8_t> bytes_;
  RowPieces row_;
};

TEST_F(BlockCodecTest, EachKindWritesWhatItsPlaceSays) {
  auto xattr = MakeXattrCrcCodec(&crc_ns_);
  StoreEncoding e = Encode(xattr.get());
  EXPECT_TRUE(e.xattr);
  EXPECT_EQ(e.page, nullptr);
  const uint32_t crc = RowCrc();
  const uint8_t be[4] = {uint8_t(crc >> 24), uint8_t(crc >> 16), uint8_t(crc >> 8), uint8_t(crc)};
  EXPECT_EQ(std::memcmp(e.xattr_value, be, 4), 0);
  EXPECT_TRUE(xattr->writes_xattr());
  EXPECT_EQ(xattr->page_bytes(), 0u);

  auto trailer = MakeTrailerCrcCodec(/*asks_xattr=*/false, &crc_ns_);
  e = Encode(trailer.get());
  EXPECT_FALSE(e.xattr);
  ASSERT_NE(e.page, nullptr);
  format::TrailerRecord record;
  const uint8_t* at = e.page.get() + format::kTrailerBytes - format::kTrailerRecordBytes;
  ASSERT_EQ(format::ParseTrailerRecord(at, kRow + format::kTrailerBytes, &record), format::TrailerState::kValid);
  EXPECT_EQ(record.data_crc, crc);
  EXPECT_EQ(trailer->page_bytes(), format::kTrailerBytes);

  auto off = MakeNoChecksumCodec();
  e = Encode(off.get());
  EXPECT_FALSE(e.xattr);
  EXPECT_EQ(e.page, nullptr);
  EXPECT_EQ(off->name(), "off");
}

TEST_F(BlockCodecTest, AGivenCrcIsWrittenAsGiven) {
  auto xattr = MakeXattrCrcCodec(&crc_ns_);
  StoreEncoding e = Encode(xattr.get(), 0x01020304u);
  const uint8_t be[4] = {1, 2, 3, 4};
  EXPECT_EQ(std::memcmp(e.xattr_value, be, 4), 0);
  auto trailer = MakeTrailerCrcCodec(false, &crc_ns_);
  e = Encode(trailer.get(), 0x01020304u);
  format::TrailerRecord record;
  const uint8_t* at = e.page.get() + format::kTrailerBytes - format::kTrailerRecordBytes;
  ASSERT_EQ(format::ParseTrailerRecord(at, kRow + format::kTrailerBytes, &record), format::TrailerState::kValid);
  EXPECT_EQ(record.data_crc, 0x01020304u);
  EXPECT_EQ(crc_ns_.load(), 0u);  // no CRC computed here
}

TEST_F(BlockCodecTest, AnXattrTierChecksABlockThatCarriesATrailer) {
  auto xattr = MakeXattrCrcCodec(&crc_ns_);
  EXPECT_EQ(xattr->Plan(kRow + format::kTrailerBytes, kRow, "p").step, LoadPlan::kReadWithPage);
  EXPECT_EQ(xattr->Plan(kRow, kRow, "p").step, LoadPlan::kXattrThenRead);
  TrailerPage page = NewTrailerPage();
  format::EncodeTrailer(kRow, RowCrc(), page.get());
  EXPECT_EQ(CheckWithPage(xattr.get(), page.get()).kind, LoadVerdict::kServe);
  format::EncodeTrailer(kRow, RowCrc() ^ 1, page.get());
  EXPECT_EQ(CheckWithPage(xattr.get(), page.get()).kind, LoadVerdict::kMismatch);
}

TEST_F(BlockCodecTest, SizesARowCannotHaveAreRefused) {
  auto trailer = MakeTrailerCrcCodec(/*asks_xattr=*/true, &crc_ns_);
  LoadPlan shorter = trailer->Plan(kRow - 1, kRow, "p");
  EXPECT_EQ(shorter.step, LoadPlan::kRefuse);
  EXPECT_TRUE(shorter.unlink);
  LoadPlan longer = trailer->Plan(kRow + 1, kRow, "p");
  EXPECT_EQ(longer.step, LoadPlan::kRefuse);
  EXPECT_FALSE(longer.unlink);
  EXPECT_EQ(trailer->Plan(kRow, kRow, "p").step, LoadPlan::kXattrThenRead);  // a vLLM writer's block
  EXPECT_EQ(MakeTrailerCrcCodec(false, &crc_ns_)->Plan(kRow, kRow, "p").step, LoadPlan::kRead);
}

TEST_F(BlockCodecTest, OffAsksNoAttributeAndChecksNoCrcButStillReadsTheRecord) {
  auto off = MakeNoChecksumCodec();
  EXPECT_EQ(off->Plan(kRow, kRow, "p").step, LoadPlan::kRead);
  TrailerPage page = NewTrailerPage();
  format::EncodeTrailer(kRow, RowCrc() ^ 1, page.get());
  LoadVerdict v = CheckWithPage(off.get(), page.get());
  EXPECT_EQ(v.kind, LoadVerdict::kServe);
  EXPECT_FALSE(v.has_crc);
  std::memset(page.get(), 0, format::kTrailerBytes);  // no record: the page is part of a longer row (L66)
  v = CheckWithPage(off.get(), page.get());
  EXPECT_EQ(v.kind, LoadVerdict::kRefuse);
  EXPECT_FALSE(v.unlink);
}

}  // namespace
}  // namespace kvtier::internal
