// AES-256-GCM sealing and opening of one block row (FORMAT.md L166-L169),
// through OpenSSL's EVP interface (AES-NI and carry-less multiply where the
// CPU has them). One SealCipher per engine thread: it keeps its EVP
// contexts (a GCM context for seals, keyed once per salt; one for opens,
// re-keyed only when a block names another salt or key; an AES-ECB context
// per key for the block-key derivation, keyed once) and allocates nothing
// per block. Not thread-safe.
//
// A row is a list of pieces (SGLang's K and V halves, per-layer pieces):
// each piece is read from `in` and written to `out`, in order, as one
// message; `in == out` works in place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
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

  // L167, L168: with the primary key, under this cipher's current salt
  // (drawn anew every kSaltUsesMax seals) and a fresh random nonce, encrypts
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

  // L169 for a block streamed in parts (fsck, L183): OpenStart checks the
  // trailer at `page` as Open does and starts; OpenPart decrypts the next
  // `len` bytes of ciphertext (in == out works); OpenEnd checks the tag.
  // Each returns the reason of a failure ("": none so far, and from OpenEnd
  // a good block). The plaintext is the caller's to wipe.
  std::string_view OpenStart(size_t key_index, std::string_view rel_path, const uint8_t* page, uint64_t file_bytes);
  std::string_view OpenPart(const uint8_t* in, uint8_t* out, size_t len);
  std::string_view OpenEnd();

  const SealKeyring& ring() const { return *ring_; }

 private:
  SealCipher() = default;
  // L167: seals per salt before a new one is drawn. With random 96-bit
  // nonces, a repeated nonce under one block key has odds of about
  // n^2 / 2^97 for n seals: 2^-49 at 2^24.
  static constexpr uint64_t kSaltUsesMax = uint64_t{1} << 24;
  bool BlockKey(size_t key_index, const uint8_t* salt, uint8_t* block_key);
  bool NewSealSalt();
  bool KeyOpen(size_t key_index, const uint8_t* salt);
  bool Aad(EVP_CIPHER_CTX* ctx, std::string_view rel_path, const uint8_t* page);
  std::shared_ptr<const SealKeyring> ring_;
  EVP_CIPHER_CTX* gcm_ = nullptr;       // opens: keyed for (open_key_, open_salt_)
  EVP_CIPHER_CTX* seal_gcm_ = nullptr;  // seals: keyed for the primary key and seal_salt_
  std::vector<EVP_CIPHER_CTX*> kdf_;    // AES-256-ECB keyed with each key's K'
  size_t open_key_ = SIZE_MAX;
  uint8_t open_salt_[format::kSealSaltBytes] = {};
  uint8_t open_tag_[format::kSealTagBytes] = {};  // the tag of the block OpenStart began
  uint8_t seal_salt_[format::kSealSaltBytes] = {};
  uint64_t seal_uses_left_ = 0;
};

}  // namespace kvtier::internal
