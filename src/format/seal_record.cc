// FORMAT.md L164-L166: the seal trailer's bytes, little-endian.
#include "format/seal_record.h"

#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "format/le_bytes.h"
#include "util/hex.h"

namespace kvtier::format {
namespace {

// "KVTSEAL1": a checksum trailer (KVTRAILR) or a plain row never starts its
// last 64 bytes with it except by a 2^-64 chance; the tag, not the magic,
// is what makes a sealed block trusted.
constexpr uint8_t kMagic[8] = {'K', 'V', 'T', 'S', 'E', 'A', 'L', '1'};
// Offsets in the record (the file's last 64 bytes).
constexpr size_t kVersionAt = 8, kTrailerBytesAt = 12, kRowBytesAt = 16, kSaltAt = 24, kNonceAt = 36,
                 kTagAt = 48;
static_assert(kTagAt + kSealTagBytes == kSealRecordBytes);
static_assert(kNonceAt + kSealNonceBytes == kTagAt && kSaltAt + kSealSaltBytes == kNonceAt);

}  // namespace

void EncodeSealTrailer(const SealRecord& record, uint8_t* page) {
  std::memset(page, 0, kSealTrailerBytes);
  std::memcpy(page + kSealKeyIdAt, record.key_id, kSealKeyIdBytes);
  uint8_t* r = page + kSealTrailerBytes - kSealRecordBytes;
  std::memcpy(r, kMagic, sizeof kMagic);
  PutLe32(r + kVersionAt, record.version);
  PutLe32(r + kTrailerBytesAt, static_cast<uint32_t>(kSealTrailerBytes));
  PutLe64(r + kRowBytesAt, record.row_bytes);
  std::memcpy(r + kSaltAt, record.salt, kSealSaltBytes);
  std::memcpy(r + kNonceAt, record.nonce, kSealNonceBytes);
  std::memcpy(r + kTagAt, record.tag, kSealTagBytes);
}

void PutSealTag(const uint8_t* tag, uint8_t* page) { std::memcpy(page + kSealTagAt, tag, kSealTagBytes); }

SealState ParseSealTail(const uint8_t* tail, uint64_t file_bytes, SealRecord* out) {
  const uint8_t* r = tail + kSealKeyIdBytes;
  if (std::memcmp(r, kMagic, sizeof kMagic) != 0) return SealState::kAbsent;
  out->version = GetLe32(r + kVersionAt);
  if (out->version != kSealVersion) return SealState::kNewer;
  out->row_bytes = GetLe64(r + kRowBytesAt);
  // Cut or grown since it was written: the record names another size.
  if (GetLe32(r + kTrailerBytesAt) != kSealTrailerBytes || file_bytes < kSealTrailerBytes ||
      out->row_bytes != file_bytes - kSealTrailerBytes) {
    return SealState::kDamaged;
  }
  std::memcpy(out->key_id, tail, kSealKeyIdBytes);
  std::memcpy(out->salt, r + kSaltAt, kSealSaltBytes);
  std::memcpy(out->nonce, r + kNonceAt, kSealNonceBytes);
  std::memcpy(out->tag, r + kTagAt, kSealTagBytes);
  return SealState::kValid;
}

const char* SealStateName(SealState state) {
  static constexpr const char* kNames[] = {"no seal record", "seal record", "seal record of a later version",
                                           "seal record that does not fit the file's size"};
  return kNames[static_cast<int>(state)];
}

std::string SealKeyIdHex(const uint8_t* key_id) {
  return internal::HexEncode(std::span<const uint8_t>(key_id, kSealKeyIdBytes));
}

bool ParseSealKeyIdHex(std::string_view hex, uint8_t* key_id) {
  const std::optional<std::vector<uint8_t>> bytes = internal::HexDecode(hex);
  if (!bytes || bytes->size() != kSealKeyIdBytes) return false;
  std::memcpy(key_id, bytes->data(), kSealKeyIdBytes);
  return true;
}

void SealPathLength(std::string_view rel_path, uint8_t* len_le) {
  PutLe32(len_le, static_cast<uint32_t>(rel_path.size()));
}

}  // namespace kvtier::format
