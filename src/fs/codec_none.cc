// checksum_blocks off (FORMAT.md L102), as vLLM with it false: stores write
// the row alone and no CRC is made, asked for or checked. Loads still check
// a trailer's record (PlainCodec): only a valid one says that a file's extra
// page is no part of a longer row (L66).
#include "fs/block_codec.h"

namespace kvtier::internal {
namespace {

class NoChecksumCodec final : public PlainCodec {
 public:
  NoChecksumCodec() : PlainCodec(/*checksum=*/false, /*asks_xattr=*/false, nullptr) {}
  std::string_view name() const override { return "off"; }
  Status Encode(const StoreRow&, StoreEncoding*) override { return Status::Ok(); }
};

}  // namespace

std::unique_ptr<BlockCodec> MakeNoChecksumCodec() { return std::make_unique<NoChecksumCodec>(); }

}  // namespace kvtier::internal
