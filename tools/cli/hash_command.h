// `kvtier hash`: from a prompt's tokens to its block hashes, offload keys and
// file paths, for the compatibility cases (--input) and for operators.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvtier/hashing.h"
#include "kvtier/layout.h"

namespace kvtier::internal {

struct HashQuery {
  HashAlgo algo = HashAlgo::kSha256;
  std::optional<std::string> pythonhashseed;  // nullopt: PYTHONHASHSEED unset
  uint32_t hash_block_size = 16;
  std::vector<BigInt> token_ids;
  RequestExtras extras;
  std::optional<NamespaceSpec> ns;  // paths are computed only with a namespace
  uint32_t blocks_per_chunk = 1;
  uint32_t group_idx = 0;
  // The GPU block size of group_idx, in tokens; 0 takes the namespace's
  // group (or hash_block_size when the namespace lists no groups).
  uint32_t tokens_per_block = 0;
  std::optional<std::string> root_dir;  // adds absolute paths and existence
  bool explain = false;                 // adds each block's serialized input
  // The key id (32 hex digits) of a seal key: the paths are those of that
  // key's sealed namespace (FORMAT.md L162, L184).
  std::optional<std::string> seal_key_id;
};

// Everything `kvtier hash` reports, as JSON: none_hash_hex, block_hashes_hex,
// chunks [{offload_key_hex, relpath[, path, exists]}], namespace_dir,
// config_json (the last three only with a namespace), plus algo and seed.
Result<nlohmann::json> RunHashQuery(const HashQuery& query);

// Parses a case of tests/data/compat/vllm_cases.json (format kvtier-compat-cases/1).
Result<HashQuery> HashQueryFromCase(std::string_view case_json_text);

// The compat contract: exactly the members of a case's "expected".
nlohmann::json CaseOutput(const nlohmann::json& report);

// A table for people.
std::string FormatHashReport(const nlohmann::json& report);

// Reads a config.json written by vLLM or kvtier back into a NamespaceSpec.
// The rank is not part of the fields; it is taken from `rank`. A sealed
// namespace's (FORMAT.md L162) sets *seal_key_id to its key id (without
// `seal_key_id` such a file is refused); any other, to nullopt.
Result<NamespaceSpec> NamespaceSpecFromConfigJson(std::string_view text, int64_t rank,
                                                  std::optional<std::string>* seal_key_id = nullptr);

}  // namespace kvtier::internal
