// Hash algorithm names, BlockHash, NONE_HASH and offload keys.
#include <sys/random.h>

#include <cerrno>
#include <random>

#include <string>

#include "hash/byte_sink.h"
#include "hash/cbor_writer.h"
#include "hash/digest.h"
#include "hash/pickle_writer.h"
#include "kvtier/hashing.h"
#include "util/hex.h"
#include "util/log.h"

namespace kvtier {

Result<HashAlgo> ParseHashAlgo(std::string_view name) {
  if (name == "sha256") return HashAlgo::kSha256;
  if (name == "sha256_cbor") return HashAlgo::kSha256Cbor;
  if (name == "xxhash") return HashAlgo::kXxhash;
  if (name == "xxhash_cbor") return HashAlgo::kXxhashCbor;
  return InvalidArgument("unknown hash algorithm '" + std::string(name) +
                         "' (valid: sha256, sha256_cbor, xxhash, xxhash_cbor)");
}

std::string_view HashAlgoName(HashAlgo algo) {
  switch (algo) {
    case HashAlgo::kSha256: return "sha256";
    case HashAlgo::kSha256Cbor: return "sha256_cbor";
    case HashAlgo::kXxhash: return "xxhash";
    case HashAlgo::kXxhashCbor: return "xxhash_cbor";
  }
  return "unknown";
}

bool HashAlgoIsCryptographic(HashAlgo algo) {
  return algo == HashAlgo::kSha256 || algo == HashAlgo::kSha256Cbor;
}

size_t HashAlgoDigestBytes(HashAlgo algo) { return HashAlgoIsCryptographic(algo) ? 32 : 16; }

Result<BlockHash> BlockHash::FromBytes(std::span<const uint8_t> bytes) {
  if (bytes.empty() || bytes.size() > kMaxBytes) {
    return InvalidArgument("a block hash has 1 to 32 bytes, got " + std::to_string(bytes.size()));
  }
  BlockHash out;
  std::copy(bytes.begin(), bytes.end(), out.bytes_.begin());
  out.size_ = static_cast<uint8_t>(bytes.size());
  return out;
}

Result<BlockHash> BlockHash::FromHex(std::string_view hex) {
  auto bytes = internal::HexDecode(hex);
  if (!bytes) return InvalidArgument("not a hex string: '" + std::string(hex) + "'");
  return FromBytes(*bytes);
}

std::string BlockHash::Hex() const { return internal::HexEncode(bytes()); }

NoneHashSeed ResolveNoneHashSeed(HashAlgo algo, std::optional<std::string_view> pythonhashseed) {
  if (pythonhashseed) return {std::string(*pythonhashseed), false};
  if (HashAlgoIsCryptographic(algo)) return {"vllm-none-hash", false};
  uint8_t random[32];
  size_t got = 0;
  while (got < sizeof random) {
    ssize_t n = getrandom(random + got, sizeof random - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      std::random_device device;  // no getrandom (old kernel, sandbox): /dev/urandom
      for (; got < sizeof random; ++got) random[got] = static_cast<uint8_t>(device());
    }
  }
  internal::LogWarning(std::string("PYTHONHASHSEED is not set and the hash algorithm ") +
                       std::string(HashAlgoName(algo)) +
                       " is not cryptographic: NONE_HASH is random, so block hashes are not "
                       "reproducible across processes and no other instance will share them");
  return {internal::HexEncode(random), true};
}

BlockHash ComputeNoneHash(HashAlgo algo, std::string_view seed) {
  internal::ByteSink sink;
  if (algo == HashAlgo::kSha256 || algo == HashAlgo::kXxhash) {
    internal::PickleWriter w(&sink);
    w.Begin();
    w.Str(seed);
    w.Finish();
  } else {
    internal::CborWriter w(&sink);
    w.Begin();
    w.Text(seed);
  }
  uint8_t digest[32];
  size_t n = HashAlgoDigestBytes(algo);
  if (n == 32) {
    internal::Sha256(sink.view(), digest);
  } else {
    internal::Xxh3_128(sink.view(), digest);
  }
  return BlockHash::FromBytes({digest, n}).value();
}

std::vector<uint8_t> OffloadKey::Bytes() const {
  std::vector<uint8_t> out(hash.bytes().begin(), hash.bytes().end());
  uint8_t group[4];
  internal::PutBe(group, group_idx, 4);
  out.insert(out.end(), group, group + 4);
  return out;
}

std::string OffloadKey::Hex() const { return internal::HexEncode(Bytes()); }

Result<uint32_t> HashesPerChunk(uint32_t tokens_per_block, uint32_t blocks_per_chunk,
                                uint32_t tokens_per_hash) {
  if (tokens_per_block == 0 || blocks_per_chunk == 0 || tokens_per_hash == 0) {
    return InvalidArgument("tokens_per_block, blocks_per_chunk and tokens_per_hash must be > 0");
  }
  uint64_t tokens_per_chunk = uint64_t{tokens_per_block} * blocks_per_chunk;
  if (tokens_per_chunk % tokens_per_hash != 0) {
    return InvalidArgument("a chunk of " + std::to_string(tokens_per_chunk) +
                           " tokens is not a whole number of " + std::to_string(tokens_per_hash) +
                           "-token hash blocks");
  }
  return static_cast<uint32_t>(tokens_per_chunk / tokens_per_hash);
}

std::vector<OffloadKey> ChunkOffloadKeys(std::span<const BlockHash> block_hashes,
                                         uint32_t hashes_per_chunk, uint32_t group_idx) {
  std::vector<OffloadKey> keys;
  if (hashes_per_chunk == 0) return keys;
  for (size_t end = hashes_per_chunk; end <= block_hashes.size(); end += hashes_per_chunk) {
    keys.push_back(OffloadKey{block_hashes[end - 1], group_idx});
  }
  return keys;
}

}  // namespace kvtier
