// vLLM-compatible prefix-cache block hashing.
//
// A block hash is H((parent, tuple(token_ids), extra_keys)) where H is one of
// vLLM's four hash functions (pickle protocol 5 or canonical CBOR, then
// SHA-256 or XXH3-128), the chain starts at NONE_HASH, and extra_keys carries
// the LoRA name, multimodal items, the cache salt and prompt-embeds digests.
// Every rule is in layout-spec/FORMAT.md (section "Block keys and hashing");
// the golden cases in tests/data/compat pin the bytes.
//
// Thread safety: every type here is a value type; const methods may be called
// from many threads at once.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/big_int.h"
#include "kvtier/export.h"
#include "kvtier/result.h"
#include "kvtier/status.h"

namespace kvtier {

enum class HashAlgo {
  kSha256,      // "sha256": pickle protocol 5 + SHA-256 (vLLM's default)
  kSha256Cbor,  // "sha256_cbor": canonical CBOR + SHA-256
  kXxhash,      // "xxhash": pickle protocol 5 + XXH3-128
  kXxhashCbor,  // "xxhash_cbor": canonical CBOR + XXH3-128
};

// "sha256" -> kSha256 ...; kInvalidArgument naming the valid names otherwise.
KVTIER_API Result<HashAlgo> ParseHashAlgo(std::string_view name);
KVTIER_API std::string_view HashAlgoName(HashAlgo algo);
// 32 for the SHA-256 variants, 16 for the XXH3-128 variants.
KVTIER_API size_t HashAlgoDigestBytes(HashAlgo algo);
// xxhash variants are not collision resistant, so vLLM keeps their seed secret.
KVTIER_API bool HashAlgoIsCryptographic(HashAlgo algo);

// The bytes of one block hash: 32 (SHA-256) or 16 (XXH3-128) from the
// hashers; any 1..32 bytes are accepted as a key (vLLM's own tests name files
// after 8-byte keys).
class KVTIER_API BlockHash {
 public:
  static constexpr size_t kMaxBytes = 32;
  BlockHash() = default;
  // kInvalidArgument unless 1 <= bytes.size() <= 32.
  static Result<BlockHash> FromBytes(std::span<const uint8_t> bytes);
  static Result<BlockHash> FromHex(std::string_view hex);

  std::span<const uint8_t> bytes() const { return {bytes_.data(), size_}; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Lowercase hex, two characters per byte, no prefix (the file-name form).
  std::string Hex() const;

  friend bool operator==(const BlockHash& a, const BlockHash& b) {
    return a.size_ == b.size_ && a.bytes_ == b.bytes_;
  }

 private:
  friend class BlockHasher;
  std::array<uint8_t, kMaxBytes> bytes_{};
  uint8_t size_ = 0;
};

// The seed of NONE_HASH, resolved as vLLM does (PR #51875).
struct NoneHashSeed {
  std::string seed;     // the string NONE_HASH is the hash of
  bool random = false;  // true when it was drawn at random (xxhash, no PYTHONHASHSEED)
};

// `pythonhashseed` is $PYTHONHASHSEED (nullopt when unset). Set: that string,
// whatever it holds. Unset: "vllm-none-hash" for the SHA-256 variants; 32
// random bytes as hex for the xxhash variants (logs a warning: such hashes
// never match another process's).
KVTIER_API NoneHashSeed ResolveNoneHashSeed(HashAlgo algo, std::optional<std::string_view> pythonhashseed);
// NONE_HASH = H(seed as a Python str).
KVTIER_API BlockHash ComputeNoneHash(HashAlgo algo, std::string_view seed);

struct MmFeature {
  std::string identifier;  // the item's mm hash / identifier string
  int64_t offset = 0;      // first token position of the placeholder
  int64_t length = 0;      // number of placeholder tokens
};

// Per-request inputs to the extra keys, in vLLM's terms.
struct RequestExtras {
  // LoRA adapter name; when set it is an extra key of every block.
  std::optional<std::string> lora_name;
  // Cache salt; an extra key of the block at token 0 only, and only if non-empty.
  std::optional<std::string> cache_salt;
  // Multimodal items sorted by offset (vLLM assumes this order too).
  std::vector<MmFeature> mm_features;
  // Prompt embeddings as raw bytes (not owned; must outlive the call). When
  // has_prompt_embeds, every block gets SHA-256(bytes of its token range).
  bool has_prompt_embeds = false;
  std::span<const uint8_t> prompt_embeds;
  size_t prompt_embeds_bytes_per_token = 0;
};

// Optional per-block record of what was hashed, for golden tests and for
// `kvtier hash --explain`.
struct BlockHashTrace {
  std::vector<std::vector<uint8_t>> serialized_inputs;  // the bytes fed to the digest
  std::vector<std::string> extra_keys_repr;             // Python repr of extra_keys ("None", ...)
};

class KVTIER_API BlockHasher {
 public:
  // hash_block_size (tokens per hash, > 0) is vLLM's tokens_per_hash.
  // kInvalidArgument when it is 0 or none_hash has the wrong length for algo.
  static Result<BlockHasher> Create(HashAlgo algo, const BlockHash& none_hash,
                                    uint32_t hash_block_size);

  HashAlgo algo() const { return algo_; }
  uint32_t hash_block_size() const { return hash_block_size_; }
  const BlockHash& none_hash() const { return none_hash_; }

  // Hashes the full blocks of all_token_ids that `block_hashes` does not yet
  // cover and appends them, exactly as vLLM's request block hasher: the first
  // call (empty block_hashes) scans multimodal items from the first one; later
  // calls (blocks completed during decode) scan from the last item only.
  // kInvalidArgument for a negative mm offset/length or bad prompt embeds.
  Status AppendBlockHashes(std::span<const int64_t> all_token_ids, const RequestExtras& extras,
                           std::vector<BlockHash>* block_hashes,
                           BlockHashTrace* trace = nullptr) const;
  // The same for token ids of any size (the slow path).
  Status AppendBlockHashes(std::span<const BigInt> all_token_ids, const RequestExtras& extras,
                           std::vector<BlockHash>* block_hashes,
                           BlockHashTrace* trace = nullptr) const;

 private:
  BlockHasher(HashAlgo algo, const BlockHash& none_hash, uint32_t hash_block_size)
      : algo_(algo), none_hash_(none_hash), hash_block_size_(hash_block_size) {}
  template <class Token>
  Status AppendImpl(std::span<const Token> tokens, const RequestExtras& extras,
                    std::vector<BlockHash>* block_hashes, BlockHashTrace* trace) const;

  HashAlgo algo_;
  BlockHash none_hash_;
  uint32_t hash_block_size_;
};

// The key of one offloaded chunk of one KV-cache group: the block hash
// followed by the group index as a 4-byte big-endian unsigned integer.
struct OffloadKey {
  BlockHash hash;
  uint32_t group_idx = 0;

  KVTIER_API std::vector<uint8_t> Bytes() const;
  KVTIER_API std::string Hex() const;
  friend bool operator==(const OffloadKey& a, const OffloadKey& b) = default;
};

// hashes_per_chunk = tokens_per_block * blocks_per_chunk / tokens_per_hash.
// kInvalidArgument when any input is 0 or the chunk is not a whole number of hashes.
KVTIER_API Result<uint32_t> HashesPerChunk(uint32_t tokens_per_block, uint32_t blocks_per_chunk,
                                uint32_t tokens_per_hash);

// One key per complete chunk: chunk i takes block_hashes[(i+1)*hashes_per_chunk - 1].
KVTIER_API std::vector<OffloadKey> ChunkOffloadKeys(std::span<const BlockHash> block_hashes,
                                         uint32_t hashes_per_chunk, uint32_t group_idx);

}  // namespace kvtier
