// The seal trailer of a block in a sealed namespace (layout-spec/FORMAT.md
// L160-L179): `ciphertext ‖ 4096-byte seal trailer`. The trailer's last 64
// bytes are the seal record (magic KVTSEAL1, distinct from the checksum
// trailer's KVTRAILR), the 16 bytes before it the key id of the key that
// sealed the block; everything else is zero. The record and the key id are
// plain, so tools without the key can check a sealed block's structure
// (size, magic, version, key id); only the key checks its tag.
//
// No cryptography here: the bytes, and which of them the tag authenticates
// (src/seal/ does the AES-256-GCM).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvtier::format {

// L163: the trailer's bytes after the ciphertext; a sealed file is row + this.
inline constexpr uint64_t kSealTrailerBytes = 4096;
// L164: the record, the trailer's (and the file's) last bytes.
inline constexpr size_t kSealRecordBytes = 64;
inline constexpr uint32_t kSealVersion = 1;
inline constexpr size_t kSealKeyIdBytes = 16;  // L161: the raw key id, 32 hex digits in config.json
inline constexpr size_t kSealSaltBytes = 12;
inline constexpr size_t kSealNonceBytes = 12;
inline constexpr size_t kSealTagBytes = 16;
// The key id and the record's bytes up to the tag: the fixed part of the AAD
// (L166), contiguous in the trailer. The tools read these last
// kSealTailBytes of a file (key id and record) in one pread.
inline constexpr size_t kSealKeyIdAt = kSealTrailerBytes - kSealRecordBytes - kSealKeyIdBytes;  // 4016
inline constexpr size_t kSealTailBytes = kSealKeyIdBytes + kSealRecordBytes;                     // 80
inline constexpr size_t kSealAadFixedBytes = kSealTailBytes - kSealTagBytes;                     // 64
inline constexpr size_t kSealTagAt = kSealTrailerBytes - kSealTagBytes;                          // 4080

// config.json's object (L162) and its cipher name.
inline constexpr std::string_view kSealConfigKey = "kvtier_seal";
inline constexpr std::string_view kSealCipherName = "aes-256-gcm";

struct SealRecord {
  uint32_t version = 0;
  uint64_t row_bytes = 0;  // the ciphertext's bytes: the file's size less kSealTrailerBytes
  uint8_t key_id[kSealKeyIdBytes] = {};
  uint8_t salt[kSealSaltBytes] = {};    // random per block: picks the block's subkey (L167)
  uint8_t nonce[kSealNonceBytes] = {};  // random per block: the GCM nonce (L167)
  uint8_t tag[kSealTagBytes] = {};      // the GCM tag (L166)
};

// L164: writes the whole trailer (kSealTrailerBytes at `page`): zeros, the
// key id, the record. The tag goes in as `record.tag` says; a writer fills
// it after the encryption (the tag's bytes are not authenticated).
void EncodeSealTrailer(const SealRecord& record, uint8_t* page);
// Writes `tag` into an encoded trailer page.
void PutSealTag(const uint8_t* tag, uint8_t* page);

// L165: what a file's last kSealTailBytes (`tail`: key id then record) say.
enum class SealState {
  kAbsent,   // no KVTSEAL1 magic: not a sealed block (a plain row, a checksum trailer, anything)
  kValid,    // a version-1 record for a file of `file_bytes`: the tag is still to be checked
  kNewer,    // the magic and a later version: not understood, never trusted
  kDamaged,  // the magic, but a trailer size or row size that does not fit the file
};
// `out`: the version (unless kAbsent), the row size (kValid, kDamaged), and
// the key id, salt, nonce and tag (kValid only).
SealState ParseSealTail(const uint8_t* tail, uint64_t file_bytes, SealRecord* out);
const char* SealStateName(SealState state);

// L161: the key id's 32 lowercase hex digits, and back (false: not 32 hex digits).
std::string SealKeyIdHex(const uint8_t* key_id);
bool ParseSealKeyIdHex(std::string_view hex, uint8_t* key_id);

// L166: the AAD's variable part after the fixed kSealAadFixedBytes (taken
// from the trailer at kSealKeyIdAt): the block's root-relative path
// "<model>_<digest>_r<rank>/<hhh>/<hh>_g<g>/<hex>.bin", preceded by its
// length as u32le (`len_le`, 4 bytes, filled here).
void SealPathLength(std::string_view rel_path, uint8_t* len_le);

}  // namespace kvtier::format
