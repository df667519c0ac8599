// The CRC32C of the row in the user xattr user.vllm.kv_crc32c (FORMAT.md
// L60), as vLLM's tier with checksum_blocks: the store sets it after the data
// (and its fdatasync), before the rename, so no block is published without
// it (L57). The tier's open chose it where the probe showed that user xattrs
// work (L102).
#include "fs/block_codec.h"

namespace kvtier::internal {
namespace {

class XattrCrcCodec final : public PlainCodec {
 public:
  explicit XattrCrcCodec(std::atomic<uint64_t>* crc_ns) : PlainCodec(/*checksum=*/true, /*asks_xattr=*/true, crc_ns) {}
  std::string_view name() const override { return "xattr"; }
  bool writes_xattr() const override { return true; }
  Status Encode(const StoreRow& row, StoreEncoding* out) override {
    const uint32_t crc = RowCrc(row);
    for (int i = 0; i < 4; ++i) out->xattr_value[i] = static_cast<uint8_t>(crc >> (24 - 8 * i));  // big-endian
    out->xattr = true;
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<BlockCodec> MakeXattrCrcCodec(std::atomic<uint64_t>* crc_ns) {
  return std::make_unique<XattrCrcCodec>(crc_ns);
}

}  // namespace kvtier::internal
