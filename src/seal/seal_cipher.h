// AES-256-GCM sealing and opening of one block row (FORMAT.md L166-L169),
// through OpenSSL's EVP interface (AES-NI and carry-less multiply where the
// CPU has them). One SealCipher per engine thread: it keeps its EVP
// contexts (one GCM context, one AES-ECB context per key for the block-key
// derivation, keyed once) and allocates nothing per block. Not thread-safe.
//
// A row is a list of pieces (SGLang's K and V halves, per-layer pieces):
// each piece is read from `in` and written to `out`, in order, as one
// message; `in == out` works in place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "format/seal_record.h"
#include "kvtier/result.h"
#include "seal/seal_key.h"

typedef struct evp_cipher_ctx_st EVP_CIPHER_CTX;

namespace kvtier::internal {

struct SealPiece {
  const uint8_t* in = nullptr;
  uint8_t* out = nullptr;
  size_t len = 0;
};

class SealCipher {
 public:
  // The contexts for every key of `ring` (kept alive by the cipher).
  static Result<std::unique_ptr<SealCipher>> Create(std::shared_ptr<const SealKeyring> ring);
  ~SealCipher();
  SealCipher(const SealCipher&) = delete;
  SealCipher& operator=(const SealCipher&) = delete;

  // L167, L168: with the primary key, draws a fresh salt and nonce, encrypts
  // the pieces (their lengths summing to `row_bytes`) and writes the whole
  // trailer, tag included, at `page` (kSealTrailerBytes). `rel_path`: the
  // block's root-relative path (L166). kInternal only if OpenSSL fails.
  Status Seal(std::string_view rel_path, std::span<const SealPiece> pieces, uint64_t row_bytes, uint8_t* page);

  // L169: checks the trailer at `page` (a file of `file_bytes`) with key
  // `key_index` of the ring and decrypts the pieces. On any failure (the
  // record, the key id, the tag) every `out` byte is zeroed and the reason
  // (never key material) is returned; a block is good only when it is empty.
  std::string_view Open(size_t key_index, std::string_view rel_path, const uint8_t* page, uint64_t file_bytes,
                        std::span<const SealPiece> pieces);

  const SealKeyring& ring() const { return *ring_; }

 private:
  SealCipher() = default;
  bool BlockKey(size_t key_index, const uint8_t* salt, uint8_t* block_key);
  bool Aad(std::string_view rel_path, const uint8_t* page);
  std::shared_ptr<const SealKeyring> ring_;
  EVP_CIPHER_CTX* gcm_ = nullptr;
  std::vector<EVP_CIPHER_CTX*> kdf_;  // AES-256-ECB keyed with each key's K'
};

}  // namespace kvtier::internal
