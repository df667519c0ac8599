// The two digests behind vLLM's hash functions: SHA-256 (OpenSSL, which uses
// the CPU's SHA extensions) and XXH3-128 with seed 0 in canonical big-endian
// byte order (xxHash), as Python's xxhash.xxh3_128_digest returns it.
#pragma once

#include <cstdint>
#include <span>

namespace kvtier::internal {

void Sha256(std::span<const uint8_t> data, uint8_t out[32]);
void Xxh3_128(std::span<const uint8_t> data, uint8_t out[16]);

}  // namespace kvtier::internal
