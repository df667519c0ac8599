// The checksum trailer of a block file (layout-spec/FORMAT.md L130-L138):
// where user xattrs do not work (NFSv3/v4.0/v4.1, Lustre without
// user_xattr, JuiceFS, FUSE mounts that refuse them), kvtier stores a
// block's CRC32C in 4096 bytes after the row instead of in L60's attribute.
// vLLM reads exactly row_size bytes (L65, L66), so it reads such a file's row
// unchanged and never sees the trailer.
//
// The trailer is one page so that a row and its trailer go to the file in
// one O_DIRECT transfer (every piece page-aligned in address and length);
// its record sits in the file's last 64 bytes, where a reader that knows no
// row size (fsck) finds it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvtier::format {

// L131: the trailer's bytes, after the row; a trailer block is row + this.
inline constexpr uint64_t kTrailerBytes = 4096;
// L132: the record, the trailer's (and the file's) last bytes.
inline constexpr size_t kTrailerRecordBytes = 64;
inline constexpr uint32_t kTrailerVersion = 1;

struct TrailerRecord {
  uint32_t version = 0;
  uint64_t data_bytes = 0;  // the row's bytes: the file's size less kTrailerBytes
  uint32_t data_crc = 0;    // CRC32C of the row (L60's algorithm)
};

// L132: writes the whole trailer (kTrailerBytes at `page`) of a row of
// `data_bytes` bytes whose CRC32C is `data_crc`.
void EncodeTrailer(uint64_t data_bytes, uint32_t data_crc, uint8_t* page);

// L133: what a file's last kTrailerRecordBytes (`record`) say.
enum class TrailerState {
  kAbsent,   // no magic: not a trailer (a plain row, or a longer one: L66)
  kValid,    // a version-1 record, whole (its CRC), for a file of `file_bytes`
  kNewer,    // a whole record of a later version: not understood, never trusted
  kDamaged,  // the magic, but a record that fails its CRC or names another length
};
TrailerState ParseTrailerRecord(const uint8_t* record, uint64_t file_bytes, TrailerRecord* out);
const char* TrailerStateName(TrailerState state);

}  // namespace kvtier::format
