// FORMAT.md L166-L169 with OpenSSL EVP: the block key from the salt
// (RFC 8452-style derivation with AES-256 under K'), then AES-256-GCM over
// the row with the AAD of L166. A GCM context is keyed once per salt (a
// writer's salt serves many blocks, L167); per block only the nonce is set.
#include "seal/seal_cipher.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <climits>
#include <cstring>

namespace kvtier::internal {
namespace {

// EVP's lengths are ints: a piece is fed in parts of at most this.
constexpr size_t kUpdateBytesMax = size_t{1} << 30;
constexpr std::string_view kTagMismatch = "tag mismatch";

// Feeds `len` bytes from `in` to `out` through `ctx` (encrypt or decrypt, as inited).
bool Update(EVP_CIPHER_CTX* ctx, const uint8_t* in, uint8_t* out, size_t len) {
  while (len > 0) {
    const int part = static_cast<int>(std::min(len, kUpdateBytesMax));
    int done = 0;
    if (EVP_CipherUpdate(ctx, out, &done, in, part) != 1 || done != part) return false;
    in += part;
    out += part;
    len -= static_cast<size_t>(part);
  }
  return true;
}

void ZeroPieces(std::span<const SealPiece> pieces) {
  for (const SealPiece& p : pieces) std::memset(p.out, 0, p.len);
}

}  // namespace

Result<std::unique_ptr<SealCipher>> SealCipher::Create(std::shared_ptr<const SealKeyring> ring) {
  std::unique_ptr<SealCipher> c(new SealCipher());
  c->ring_ = std::move(ring);
  for (EVP_CIPHER_CTX** ctx : {&c->gcm_, &c->seal_gcm_}) {
    *ctx = EVP_CIPHER_CTX_new();
    if (*ctx == nullptr || EVP_CipherInit_ex(*ctx, EVP_aes_256_gcm(), nullptr, nullptr, nullptr, 1) != 1) {
      return Status(StatusCode::kInternal, "seal: OpenSSL has no AES-256-GCM");
    }
  }
  for (const std::unique_ptr<SealKey>& key : c->ring_->keys) {
    EVP_CIPHER_CTX* kdf = EVP_CIPHER_CTX_new();
    if (kdf != nullptr) c->kdf_.push_back(kdf);
    if (kdf == nullptr || EVP_EncryptInit_ex(kdf, EVP_aes_256_ecb(), nullptr, key->kdf_key(), nullptr) != 1 ||
        EVP_CIPHER_CTX_set_padding(kdf, 0) != 1) {
      return Status(StatusCode::kInternal, "seal: OpenSSL has no AES-256-ECB");
    }
  }
  return c;
}

// EVP_CIPHER_CTX_free cleanses the expanded key schedules it holds.
SealCipher::~SealCipher() {
  EVP_CIPHER_CTX_free(gcm_);
  EVP_CIPHER_CTX_free(seal_gcm_);
  for (EVP_CIPHER_CTX* kdf : kdf_) EVP_CIPHER_CTX_free(kdf);
}

// L167: the first 8 bytes of AES-256_K'(u32le(i) ‖ salt) for i = 0..3.
bool SealCipher::BlockKey(size_t key_index, const uint8_t* salt, uint8_t* block_key) {
  uint8_t in[64], out[64];
  for (uint32_t i = 0; i < 4; ++i) {
    uint8_t* b = in + 16 * i;
    for (int j = 0; j < 4; ++j) b[j] = static_cast<uint8_t>(i >> (8 * j));
    std::memcpy(b + 4, salt, format::kSealSaltBytes);
  }
  int done = 0;
  const bool ok = EVP_EncryptUpdate(kdf_[key_index], out, &done, in, sizeof in) == 1 && done == sizeof in;
  for (int i = 0; i < 4; ++i) std::memcpy(block_key + 8 * i, out + 16 * i, 8);
  OPENSSL_cleanse(out, sizeof out);
  return ok;
}

// L166: key id and record bytes 0-47, the path's length, the path.
bool SealCipher::Aad(EVP_CIPHER_CTX* ctx, std::string_view rel_path, const uint8_t* page) {
  uint8_t len_le[4];
  format::SealPathLength(rel_path, len_le);
  int done = 0;
  return EVP_CipherUpdate(ctx, nullptr, &done, page + format::kSealKeyIdAt,
                          static_cast<int>(format::kSealAadFixedBytes)) == 1 &&
         EVP_CipherUpdate(ctx, nullptr, &done, len_le, sizeof len_le) == 1 &&
         EVP_CipherUpdate(ctx, nullptr, &done, reinterpret_cast<const uint8_t*>(rel_path.data()),
                          static_cast<int>(rel_path.size())) == 1;
}

// L167: a writer's salt (and so its block key) serves at most kSaltUsesMax
// seals, each with a fresh random nonce; then it draws a new one.
bool SealCipher::NewSealSalt() {
  uint8_t key[kSealKeyBytes];
  bool ok = RAND_bytes(seal_salt_, sizeof seal_salt_) == 1 && BlockKey(0, seal_salt_, key) &&
            EVP_CipherInit_ex(seal_gcm_, nullptr, nullptr, key, nullptr, 1) == 1;
  OPENSSL_cleanse(key, sizeof key);
  seal_uses_left_ = ok ? kSaltUsesMax : 0;
  return ok;
}

Status SealCipher::Seal(std::string_view rel_path, std::span<const SealPiece> pieces, uint64_t row_bytes,
                        uint8_t* page) {
  if (seal_uses_left_ == 0 && !NewSealSalt()) {
    return Status(StatusCode::kInternal, "seal: OpenSSL failed to draw or key a block key");
  }
  --seal_uses_left_;
  format::SealRecord record;
  record.version = format::kSealVersion;
  record.row_bytes = row_bytes;
  std::memcpy(record.key_id, ring_->keys[0]->key_id(), format::kSealKeyIdBytes);
  std::memcpy(record.salt, seal_salt_, sizeof record.salt);
  if (RAND_bytes(record.nonce, sizeof record.nonce) != 1) {
    return Status(StatusCode::kInternal, "seal: OpenSSL's random generator failed");
  }
  format::EncodeSealTrailer(record, page);
  bool ok = EVP_CipherInit_ex(seal_gcm_, nullptr, nullptr, nullptr, record.nonce, 1) == 1 &&
            Aad(seal_gcm_, rel_path, page);
  for (size_t i = 0; ok && i < pieces.size(); ++i) ok = Update(seal_gcm_, pieces[i].in, pieces[i].out, pieces[i].len);
  int done = 0;
  uint8_t tag[format::kSealTagBytes];
  ok = ok && EVP_CipherFinal_ex(seal_gcm_, nullptr, &done) == 1 &&
       EVP_CIPHER_CTX_ctrl(seal_gcm_, EVP_CTRL_GCM_GET_TAG, sizeof tag, tag) == 1;
  if (!ok) return Status(StatusCode::kInternal, "seal: AES-256-GCM encryption failed (OpenSSL)");
  format::PutSealTag(tag, page);
  return Status::Ok();
}

// Keys the open context for (key_index, salt) unless it already is (the
// blocks of one writer share a salt, L167): a re-key costs as much as
// sealing a few KiB.
bool SealCipher::KeyOpen(size_t key_index, const uint8_t* salt) {
  if (open_key_ == key_index && std::memcmp(open_salt_, salt, sizeof open_salt_) == 0) return true;
  uint8_t key[kSealKeyBytes];
  const bool ok = BlockKey(key_index, salt, key) && EVP_CipherInit_ex(gcm_, nullptr, nullptr, key, nullptr, 0) == 1;
  OPENSSL_cleanse(key, sizeof key);
  open_key_ = ok ? key_index : SIZE_MAX;
  std::memcpy(open_salt_, salt, sizeof open_salt_);
  return ok;
}

std::string_view SealCipher::OpenStart(size_t key_index, std::string_view rel_path, const uint8_t* page,
                                       uint64_t file_bytes) {
  format::SealRecord record;
  const format::SealState state =
      format::ParseSealTail(page + format::kSealTrailerBytes - format::kSealTailBytes, file_bytes, &record);
  if (state != format::SealState::kValid) return format::SealStateName(state);
  if (std::memcmp(record.key_id, ring_->keys[key_index]->key_id(), format::kSealKeyIdBytes) != 0) {
    return "sealed with another key";
  }
  std::memcpy(open_tag_, record.tag, sizeof open_tag_);
  const bool ok = KeyOpen(key_index, record.salt) &&
                  EVP_CipherInit_ex(gcm_, nullptr, nullptr, nullptr, record.nonce, 0) == 1 && Aad(gcm_, rel_path, page);
  return ok ? std::string_view() : kTagMismatch;
}

std::string_view SealCipher::OpenPart(const uint8_t* in, uint8_t* out, size_t len) {
  return Update(gcm_, in, out, len) ? std::string_view() : kTagMismatch;
}

std::string_view SealCipher::OpenEnd() {
  int done = 0;
  const bool ok = EVP_CIPHER_CTX_ctrl(gcm_, EVP_CTRL_GCM_SET_TAG, format::kSealTagBytes, open_tag_) == 1 &&
                  EVP_CipherFinal_ex(gcm_, nullptr, &done) == 1;
  return ok ? std::string_view() : kTagMismatch;
}

std::string_view SealCipher::Open(size_t key_index, std::string_view rel_path, const uint8_t* page,
                                  uint64_t file_bytes, std::span<const SealPiece> pieces) {
  std::string_view why = OpenStart(key_index, rel_path, page, file_bytes);
  for (size_t i = 0; why.empty() && i < pieces.size(); ++i) why = OpenPart(pieces[i].in, pieces[i].out, pieces[i].len);
  if (why.empty()) why = OpenEnd();
  // GCM writes plaintext before the tag is known: none of it may look like data.
  if (!why.empty()) ZeroPieces(pieces);
  return why;
}

}  // namespace kvtier::internal
