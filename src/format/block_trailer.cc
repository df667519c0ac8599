// FORMAT.md L132-L133: the trailer record's bytes, little-endian.
#include "format/block_trailer.h"

#include <cstring>
#include <span>

#include "format/le_bytes.h"
#include "util/crc32c.h"

namespace kvtier::format {
namespace {

// "KVTRAILR": eight ASCII bytes no row is likely to end with by chance; with
// the record's own CRC32C a random file passes as a trailer with odds of
// about 2^-96.
constexpr uint8_t kMagic[8] = {'K', 'V', 'T', 'R', 'A', 'I', 'L', 'R'};
constexpr size_t kVersionAt = 8, kTrailerBytesAt = 12, kDataBytesAt = 16, kDataCrcAt = 24, kRecordCrcAt = 60;

}  // namespace

void EncodeTrailer(uint64_t data_bytes, uint32_t data_crc, uint8_t* page) {
  std::memset(page, 0, kTrailerBytes);
  uint8_t* r = page + kTrailerBytes - kTrailerRecordBytes;
  std::memcpy(r, kMagic, sizeof kMagic);
  PutLe32(r + kVersionAt, kTrailerVersion);
  PutLe32(r + kTrailerBytesAt, static_cast<uint32_t>(kTrailerBytes));
  PutLe64(r + kDataBytesAt, data_bytes);
  PutLe32(r + kDataCrcAt, data_crc);
  PutLe32(r + kRecordCrcAt, internal::Crc32c(std::span<const uint8_t>(r, kRecordCrcAt)));
}

TrailerState ParseTrailerRecord(const uint8_t* record, uint64_t file_bytes, TrailerRecord* out) {
  if (std::memcmp(record, kMagic, sizeof kMagic) != 0) return TrailerState::kAbsent;
  if (GetLe32(record + kRecordCrcAt) != internal::Crc32c(std::span<const uint8_t>(record, kRecordCrcAt))) {
    return TrailerState::kDamaged;  // torn or overwritten: the record cannot be believed
  }
  out->version = GetLe32(record + kVersionAt);
  if (out->version != kTrailerVersion) return TrailerState::kNewer;
  out->data_bytes = GetLe64(record + kDataBytesAt);
  out->data_crc = GetLe32(record + kDataCrcAt);
  const bool sized = GetLe32(record + kTrailerBytesAt) == kTrailerBytes && file_bytes >= kTrailerBytes &&
                     out->data_bytes == file_bytes - kTrailerBytes;
  return sized ? TrailerState::kValid : TrailerState::kDamaged;  // truncated or grown since it was written
}

const char* TrailerStateName(TrailerState state) {
  switch (state) {
    case TrailerState::kAbsent: return "no trailer";
    case TrailerState::kValid: return "valid trailer";
    case TrailerState::kNewer: return "trailer of a later version";
    case TrailerState::kDamaged: return "damaged trailer";
  }
  return "?";
}

}  // namespace kvtier::format
