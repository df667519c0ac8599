// FORMAT.md L197-L202: the block-hash record's bytes, little-endian.
#include "format/block_hashes.h"

#include <algorithm>
#include <cstring>

#include "format/le_bytes.h"
#include "util/crc32c.h"

namespace kvtier::format {
namespace {

constexpr uint8_t kMagic[8] = {'K', 'V', 'T', 'B', 'L', 'K', 'H', '1'};
constexpr size_t kCountAt = 8, kHashBytesAt = 10, kReservedAt = 11, kHashesAt = 12;

}  // namespace

std::string EncodeBlockHashRecord(std::span<const BlockHash> hashes) {
  const size_t h = hashes.empty() ? 0 : hashes[0].size();
  std::string out(kHashesAt + hashes.size() * h + 4, '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  std::memcpy(p, kMagic, sizeof kMagic);
  p[kCountAt] = static_cast<uint8_t>(hashes.size());
  p[kCountAt + 1] = static_cast<uint8_t>(hashes.size() >> 8);
  p[kHashBytesAt] = static_cast<uint8_t>(h);
  p[kReservedAt] = 0;
  for (size_t i = 0; i < hashes.size(); ++i) std::memcpy(p + kHashesAt + i * h, hashes[i].bytes().data(), h);
  const size_t crc_at = out.size() - 4;
  PutLe32(p + crc_at, internal::Crc32c(std::span<const uint8_t>(p, crc_at)));
  return out;
}

std::optional<std::vector<BlockHash>> ParseBlockHashRecord(std::span<const uint8_t> bytes, const BlockHash& key) {
  if (bytes.size() < kHashesAt + 4 || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) return std::nullopt;
  const size_t n = bytes[kCountAt] | size_t{bytes[kCountAt + 1]} << 8;
  const size_t h = bytes[kHashBytesAt];
  if (n < 2 || h != key.size() || bytes[kReservedAt] != 0 || n * h > kBlockHashesBytesMax) return std::nullopt;
  const size_t crc_at = kHashesAt + n * h;
  if (bytes.size() < crc_at + 4 || GetLe32(bytes.data() + crc_at) != internal::Crc32c(bytes.first(crc_at))) {
    return std::nullopt;
  }
  std::vector<BlockHash> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    Result<BlockHash> hash = BlockHash::FromBytes(bytes.subspan(kHashesAt + i * h, h));
    if (!hash.ok()) return std::nullopt;
    out.push_back(*hash);
  }
  if (!(out.back() == key)) return std::nullopt;  // L200: another file's record, copied or planted here
  return out;
}

size_t HashesPerFile(const NamespaceSpec& spec, uint32_t group) {
  if (spec.inference_engine == "sglang" || spec.tokens_per_hash <= 0) return 1;
  const int64_t block = group < spec.kv_cache_groups.size() ? spec.kv_cache_groups[group].tokens_per_block
                                                            : spec.tokens_per_hash;
  const int64_t n = block * spec.blocks_per_file / spec.tokens_per_hash;
  return n > 1 ? static_cast<size_t>(n) : 1;
}

bool MayHoldSeveralBlocks(const NamespaceSpec& spec) {
  const size_t groups = std::max<size_t>(spec.kv_cache_groups.size(), 1);
  for (uint32_t g = 0; g < groups; ++g) {
    if (HashesPerFile(spec, g) > 1) return true;
  }
  return false;
}

std::string BlockHashListProblem(std::span<const BlockHash> hashes, const BlockHash& key, size_t expected) {
  if (hashes.empty()) return "no hashes";
  if (expected != 0 && hashes.size() != expected) {
    return std::to_string(hashes.size()) + " hashes for a file of " + std::to_string(expected) + " blocks";
  }
  for (const BlockHash& h : hashes) {
    if (h.size() != key.size()) return "a hash of " + std::to_string(h.size()) + " bytes beside a key of " + std::to_string(key.size());
  }
  if (!(hashes.back() == key)) return "the last hash is not the key (" + key.Hex() + ")";
  if (hashes.size() * key.size() > kBlockHashesBytesMax) {
    return std::to_string(hashes.size() * key.size()) + " bytes of hashes, more than the " +
           std::to_string(kBlockHashesBytesMax) + " a file records";
  }
  return "";
}

}  // namespace kvtier::format
