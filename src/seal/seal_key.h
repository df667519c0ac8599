// The keys of a sealed fs tier (FORMAT.md L160, L161, L173): loaded from a
// file or an inherited fd, held in memory that is locked against swapping
// (best effort) and kept out of core dumps, wiped when dropped and on every
// error path. What is kept is not the key itself but what the tier needs
// from it: the key id (public) and the block-key derivation key
// K' = HMAC-SHA256(key, "kvtier seal kdf v1") (secret). The raw key lives
// only while it is being read, in the same locked page.
//
// Error messages name the path (or fd) and what is wrong, never a byte of
// the content.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "format/seal_record.h"
#include "kvtier/fs_tier_options.h"
#include "kvtier/result.h"

namespace kvtier::internal {

inline constexpr size_t kSealKeyBytes = 32;

class SealKey {
 public:
  // L161: 32 raw bytes, or 64 hex digits and at most one trailing "\n" or
  // "\r\n". kInvalidArgument (or the errno's code) naming `path`; first
  // the file's access as L174 says (kPermissionDenied), group-readable only
  // with `group_read`.
  static Result<std::unique_ptr<SealKey>> FromFile(const std::string& path, bool group_read);
  // The same from an fd the caller keeps: read from offset 0 (pread) where
  // it can seek, else read to its end; never closed here.
  static Result<std::unique_ptr<SealKey>> FromFd(int fd);
  // From the key's bytes as a file would hold them; `what` names the source
  // in errors (tests and tools).
  static Result<std::unique_ptr<SealKey>> FromContent(std::span<const uint8_t> content, std::string_view what);
  ~SealKey();
  SealKey(const SealKey&) = delete;
  SealKey& operator=(const SealKey&) = delete;

  const uint8_t* key_id() const { return key_id_; }  // format::kSealKeyIdBytes
  const std::string& key_id_hex() const { return key_id_hex_; }
  const uint8_t* kdf_key() const;  // K', kSealKeyBytes, in the locked page

 private:
  SealKey() = default;
  static Result<std::unique_ptr<SealKey>> FromSource(int fd, bool seekable, std::string_view what);
  Status Finish(size_t content_bytes, std::string_view what);
  uint8_t* page_ = nullptr;  // one locked, non-dumpable page (read buffer, key, K')
  uint8_t key_id_[format::kSealKeyIdBytes] = {};
  std::string key_id_hex_;
};

// A sealed tier's keys: [0] the primary (stores, loads), then the read keys
// in seal_read_key_files' order (loads only, L171).
struct SealKeyring {
  std::vector<std::unique_ptr<SealKey>> keys;
};

// The keys that `tier` names, or nullptr when it is not sealed (L160).
Result<std::shared_ptr<const SealKeyring>> LoadSealKeyring(const FsTierOptions& tier);

}  // namespace kvtier::internal
