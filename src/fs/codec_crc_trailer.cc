// The CRC32C of the row in a 4096-byte trailer page after it (FORMAT.md
// L130-L138): the file is the row, then the page, written in the same
// transfer, so the temp file is never renamed without it (L57), and the
// store costs no request more than a row alone. Where user xattrs work
// (checksum_place "trailer" chosen there), loads still ask for the attribute
// of a block without a trailer (a vLLM writer's, L67).
#include "fs/block_codec.h"
#include "format/block_trailer.h"

namespace kvtier::internal {
namespace {

class TrailerCrcCodec final : public PlainCodec {
 public:
  TrailerCrcCodec(bool asks_xattr, std::atomic<uint64_t>* crc_ns) : PlainCodec(/*checksum=*/true, asks_xattr, crc_ns) {}
  std::string_view name() const override { return "trailer"; }
  uint64_t page_bytes() const override { return format::kTrailerBytes; }
  Status Encode(const StoreRow& row, StoreEncoding* out) override {
    out->page = NewTrailerPage();
    format::EncodeTrailer(row.data->size(), RowCrc(row), out->page.get());  // L132
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<BlockCodec> MakeTrailerCrcCodec(bool asks_xattr, std::atomic<uint64_t>* crc_ns) {
  return std::make_unique<TrailerCrcCodec>(asks_xattr, crc_ns);
}

}  // namespace kvtier::internal
