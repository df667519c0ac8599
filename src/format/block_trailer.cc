// FORMAT.md L132-L133: the trailer record's bytes, little-endian.
#include "format/block_trailer.h"

#include <cstring>
#include <span>

#include "util/crc32c.h"

namespace kvtier::format {
namespace {

// "KVTRAILR": eight ASCII bytes no row is likely to end with by chance; with
// the record's own CRC32C a random file passes as a trailer with odds of
// about 2^-96.
constexpr uint8_t kMagic[8] = {'K', 'V', 'T', 'R', 'A', 'I', 'L', 'R'};
constexpr size_t kVersionAt = 8, kTrailerBytesAt = 12, kDataBytesAt = 16, kDataCrcAt = 24, kRecordCrcAt = 60;

void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void Put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t Get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | p[i];
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

}  // namespace

void EncodeTrailer(uint64_t data_bytes, uint32_t data_crc, uint8_t* page) {
  std::memset(page, 0, kTrailerBytes);
  uint8_t* r = page + kTrailerBytes - kTrailerRecordBytes;
  std::memcpy(r, kMagic, sizeof kMagic);
  Put32(r + kVersionAt, kTrailerVersion);
  Put32(r + kTrailerBytesAt, static_cast<uint32_t>(kTrailerBytes));
  Put64(r + kDataBytesAt, data_bytes);
  Put32(r + kDataCrcAt, data_crc);
  Put32(r + kRecordCrcAt, internal::Crc32c(std::span<const uint8_t>(r, kRecordCrcAt)));
}

TrailerState ParseTrailerRecord(const uint8_t* record, uint64_t file_bytes, TrailerRecord* out) {
  if (std::memcmp(record, kMagic, sizeof kMagic) != 0) return TrailerState::kAbsent;
  if (Get32(record + kRecordCrcAt) != internal::Crc32c(std::span<const uint8_t>(record, kRecordCrcAt))) {
    return TrailerState::kDamaged;  // torn or overwritten: the record cannot be believed
  }
  out->version = Get32(record + kVersionAt);
  if (out->version != kTrailerVersion) return TrailerState::kNewer;
  out->data_bytes = Get64(record + kDataBytesAt);
  out->data_crc = Get32(record + kDataCrcAt);
  const bool sized = Get32(record + kTrailerBytesAt) == kTrailerBytes && file_bytes >= kTrailerBytes &&
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
