// The unsealed kinds' loads (PlainCodec, block_codec.h): one rule for every
// tier that is not sealed, so a block stored under one checksum_place loads
// under another (a tier writing xattrs still reads a block that carries a
// trailer, FORMAT.md L130).
#include "fs/block_codec.h"

#include <cerrno>
#include <string>

#include "format/block_trailer.h"

namespace kvtier::internal {
namespace {

// L66: never returned, left in place (it may be a row of a larger page size).
Status Longer(std::string_view shown, uint64_t size, const std::string& why) {
  return Corruption(std::string(shown) + " is longer than a row (" + std::to_string(size) + " bytes" + why + ")");
}

}  // namespace

uint32_t PlainCodec::RowCrc(const StoreRow& row) const {
  return row.crc ? *row.crc : TimedCrc32c(crc_ns_, *row.data);
}

LoadPlan PlainCodec::Plan(uint64_t size, uint64_t row_bytes, const std::string& shown) {
  if (size < row_bytes) {  // L65: a short file is corrupt and goes
    return LoadPlan::Refuse(
        Corruption(shown + " is " + std::to_string(size) + " bytes, a row is " + std::to_string(row_bytes)),
        /*unlink=*/true);
  }
  if (size == row_bytes + format::kTrailerBytes) return LoadPlan::Then(LoadPlan::kReadWithPage);  // L134: the row and its trailer
  if (size > row_bytes) return LoadPlan::Refuse(Longer(shown, size, ""), /*unlink=*/false);
  // Off: no getxattr, no CRC (L102); nor where user xattrs do not work.
  return LoadPlan::Then(checksum_ && asks_xattr_ ? LoadPlan::kXattrThenRead : LoadPlan::kRead);
}

// L134: what the trailer's record says. No magic, or a later version: not a
// trailer kvtier understands, so a longer file (L66), left in place. A
// damaged record (torn, or the file truncated or grown since) is corrupt and
// removed, as a CRC mismatch (L67). A valid one gives the CRC the row is
// checked against, with checksum_blocks on.
LoadVerdict PlainCodec::Check(const LoadedRow& in) {
  LoadVerdict v;
  if (in.xattr_crc) v.has_crc = true, v.crc = *in.xattr_crc;
  if (in.page != nullptr) {
    format::TrailerRecord record;
    const uint8_t* at = in.page + format::kTrailerBytes - format::kTrailerRecordBytes;
    const format::TrailerState state = format::ParseTrailerRecord(at, in.file_bytes, &record);
    if (state == format::TrailerState::kAbsent || state == format::TrailerState::kNewer) {
      const std::string why = std::string(", ") + format::TrailerStateName(state) + " in its last page";
      return LoadVerdict::Refuse(Longer(in.shown, in.file_bytes, why), /*unlink=*/false);
    }
    if (state == format::TrailerState::kDamaged) {
      return LoadVerdict::Refuse(ErrnoToStatus(EBADMSG, std::string(in.shown) + ": damaged checksum trailer"), /*unlink=*/true);
    }
    v.has_crc = checksum_;
    v.crc = record.data_crc;
  }
  // L67: a mismatch is never served. Unchecked, the caller checks v.crc after its copy.
  if (in.verify && v.has_crc && TimedCrc32c(crc_ns_, *in.read) != v.crc) v.kind = LoadVerdict::kMismatch;
  return v;
}

}  // namespace kvtier::internal
