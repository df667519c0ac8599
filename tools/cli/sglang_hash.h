// `kvtier hash --engine sglang`: SGLang's page keys of a prompt (chained
// SHA-256 over 4-byte little-endian token ids, include/kvtier/sglang_hash.h)
// and where each page's file lies in a namespace's block directory.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvtier/big_int.h"
#include "kvtier/result.h"

namespace kvtier::internal {

struct SglangHashQuery {
  std::vector<BigInt> token_ids;  // as parsed; each must be a u32
  uint32_t page_size = 0;         // SGLang's --page-size (required)
  std::optional<std::string> prior_hash;  // continues a chain (hex)
  // The namespace seed's parts (sgl-project/sglang#38577, kvtier's reading);
  // refused together with prior_hash, which replaces the seed.
  std::optional<std::string> extra_key, cache_salt;
};

// The report as JSON: engine, page_size, num_tokens, prior_hash_hex (the
// chain's head: the prior hash, the seed, or null), namespace_seed
// ({extra_key, cache_salt, seed_hex, verified: false} or null), page_keys,
// and pages [{key, first_token, last_token, block_dir_relpath}] where
// block_dir_relpath is "<hhh>/<hh>_g0/<key>.bin" (FORMAT.md L6-L8, group 0),
// relative to the namespace's "<NS>_r<rank>" directory.
// kInvalidArgument naming the flag for a bad input.
Result<nlohmann::json> RunSglangHashQuery(const SglangHashQuery& query);

// For people: one page key per line (nothing else, so scripts can read it).
std::string FormatSglangHashReport(const nlohmann::json& report);

}  // namespace kvtier::internal
