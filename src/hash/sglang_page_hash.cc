// SGLang's page keys and kvtier's reading of its namespace seed
// (include/kvtier/sglang_hash.h). One SHA-256 per page over a buffer that
// holds the previous key's bytes and the page's ids: pages are small (SGLang
// pages are 1..a few hundred tokens), so building the input beats streaming.
#include "kvtier/sglang_hash.h"

#include <algorithm>

#include "hash/digest.h"
#include "util/hex.h"
#include "util/utf8.h"

namespace kvtier {
namespace {

// The domain tag of kvtier's seed encoding (see the header): versioned so a
// corrected encoding can never alias this one.
constexpr std::string_view kSeedDomain{"sglang-storage-namespace-v1\0", 28};

void AppendU32Le(uint32_t v, std::vector<uint8_t>* out) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}

Status CheckArgs(std::span<const int64_t> ids, uint32_t page_size, uint32_t ids_per_token) {
  if (page_size == 0) return InvalidArgument("page_size must be >= 1, got 0");
  if (ids_per_token != 1 && ids_per_token != 2) {
    return InvalidArgument("ids_per_token must be 1 or 2 (EAGLE bigram pairs), got " + std::to_string(ids_per_token));
  }
  if (ids.size() % ids_per_token != 0) {
    return InvalidArgument("token_ids: " + std::to_string(ids.size()) + " ids do not make whole pairs");
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] > kSglangTokenIdMax) {
      // SGLang's own hash refuses these too (OverflowError / std::out_of_range).
      return InvalidArgument("token_ids[" + std::to_string(i) + "]: " + std::to_string(ids[i]) +
                             " is outside SGLang's 4-byte token id range [0, 4294967295]");
    }
  }
  return Status::Ok();
}

// A seed part: 0x00 when absent, else 0x01 || u32le(length) || bytes, so that
// ("a", "bc") cannot alias ("ab", "c") and absent cannot alias "".
Status AppendPart(std::optional<std::string_view> part, const char* what, std::vector<uint8_t>* out) {
  if (!part) {
    out->push_back(0x00);
    return Status::Ok();
  }
  if (part->size() > kSglangTokenIdMax) return InvalidArgument(std::string(what) + " is longer than 2^32-1 bytes");
  if (!internal::IsValidUtf8(*part)) return InvalidArgument(std::string(what) + " is not valid UTF-8");
  out->push_back(0x01);
  AppendU32Le(static_cast<uint32_t>(part->size()), out);
  out->insert(out->end(), part->begin(), part->end());
  return Status::Ok();
}

}  // namespace

Result<std::vector<std::string>> SglangPageKeys(std::span<const int64_t> token_ids, uint32_t page_size,
                                                std::optional<std::string_view> prior_hash_hex,
                                                uint32_t ids_per_token) {
  KVTIER_RETURN_IF_ERROR(CheckArgs(token_ids, page_size, ids_per_token));
  std::vector<uint8_t> prior;
  if (prior_hash_hex && !prior_hash_hex->empty()) {  // SGLang: `if prior_hash:`
    std::optional<std::vector<uint8_t>> bytes = internal::HexDecode(*prior_hash_hex);
    if (!bytes) return InvalidArgument("prior_hash: expected an even number of hex digits");
    prior = std::move(*bytes);
  }
  const size_t ids_per_page = size_t{page_size} * ids_per_token;
  std::vector<std::string> keys;
  std::vector<uint8_t> input;
  for (size_t start = 0; start < token_ids.size(); start += ids_per_page) {
    const size_t end = std::min(token_ids.size(), start + ids_per_page);
    input.assign(prior.begin(), prior.end());
    for (size_t i = start; i < end; ++i) AppendU32Le(static_cast<uint32_t>(token_ids[i]), &input);
    prior.resize(32);
    internal::Sha256(input, prior.data());
    keys.push_back(internal::HexEncode(prior));
  }
  return keys;
}

Result<std::optional<std::string>> SglangNamespaceSeed(std::optional<std::string_view> extra_key,
                                                       std::optional<std::string_view> cache_salt) {
  if (!extra_key && !cache_salt) return std::optional<std::string>();  // the default namespace: unseeded
  std::vector<uint8_t> input(kSeedDomain.begin(), kSeedDomain.end());
  KVTIER_RETURN_IF_ERROR(AppendPart(extra_key, "extra_key", &input));
  KVTIER_RETURN_IF_ERROR(AppendPart(cache_salt, "cache_salt", &input));
  uint8_t digest[32];
  internal::Sha256(input, digest);
  return std::optional<std::string>(internal::HexEncode(digest));
}

}  // namespace kvtier
