// Digest wrappers. OpenSSL and xxHash stay behind this file.
#include "hash/digest.h"

#include <openssl/evp.h>
#include <openssl/sha.h>
#include <xxhash.h>

#include <cstdlib>

namespace kvtier::internal {

void Sha256(std::span<const uint8_t> data, uint8_t out[32]) {
  // The one-shot SHA256() skips EVP's per-call context allocation, which is
  // a large share of the cost for ~100-byte block inputs.
  SHA256(data.data(), data.size(), out);
}

void Xxh3_128(std::span<const uint8_t> data, uint8_t out[16]) {
  XXH128_hash_t h = XXH3_128bits(data.data(), data.size());
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, h);
  static_assert(sizeof(canonical.digest) == 16);
  for (int i = 0; i < 16; ++i) out[i] = canonical.digest[i];
}

}  // namespace kvtier::internal
