// `kvtier hash --engine sglang`: SGLang's page keys of a prompt (chained
// SHA-256 over 4-byte little-endian token ids, include/kvtier/sglang_hash.h)
// and where each page's file lies (FORMAT.md L103-L106).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvtier/big_int.h"
#include "kvtier/result.h"
#include "kvtier/sglang.h"

namespace kvtier::internal {

struct SglangHashQuery {
  std::vector<BigInt> token_ids;  // as parsed; each must be a u32
  // SGLang's --page-size; 0 takes the namespace's (an error without one).
  uint32_t page_size = 0;
  std::optional<std::string> prior_hash;  // continues a chain (hex)
  // The namespace seed's parts (sgl-project/sglang#38577, kvtier's reading);
  // refused together with prior_hash, which replaces the seed.
  std::optional<std::string> extra_key, cache_salt;
  // The namespace the pages belong to (paths relative to the root); its
  // page_size must equal page_size when both are given.
  std::optional<SglangPageSpec> ns;
  std::optional<std::string> root_dir;  // adds absolute paths and existence (needs ns)
};

// The namespace flags of `kvtier hash --engine sglang` (FORMAT.md L104,
// L105): either config_text (an SGLang config.json, --namespace-config) or
// model and the page geometry; the ranks place the block directory.
struct SglangNamespaceFlags {
  std::optional<std::string> config_text;  // the file's bytes
  std::string config_file;                 // its name, for messages
  std::optional<std::string> model, model_path, model_revision, mem_layout;
  std::string dtype = "bfloat16";
  std::optional<int64_t> k_bytes_per_token, v_bytes_per_token, layer_num;
  bool mla = false;
  int64_t tp_size = 1, tp_rank = 0, pp_size = 1, pp_rank = 0, cp_size = 1, cp_rank = 0;
  // The first namespace-defining flag given (with config_text: an error).
  std::string first_geometry_flag;
};

// The spec those flags give (nullopt: neither --model nor a config),
// page_size 0 unless the config sets it. kInvalidArgument naming the flag:
// a geometry flag missing after --model, or given with a config; a config
// that is not an SGLang namespace's.
Result<std::optional<SglangPageSpec>> SglangSpecFromFlags(const SglangNamespaceFlags& f);

// The report as JSON: engine, page_size, num_tokens, prior_hash_hex (the
// chain's head: the prior hash, the seed, or null), namespace_seed
// ({extra_key, cache_salt, seed_hex, verified: false} or null), page_keys,
// and pages [{key, first_token, last_token, block_dir_relpath}] where
// block_dir_relpath is "<hhh>/<hh>_g0/<key>.bin" (L106), relative to the
// namespace's "<NS>_r<rank>" directory. With a namespace also
// namespace_dir, block_dir, config_json, page_bytes and per page relpath
// (from the root), and with a root its path and whether it exists.
// kInvalidArgument naming the flag for a bad input.
Result<nlohmann::json> RunSglangHashQuery(const SglangHashQuery& query);

// For people: one page key per line, followed by its file's path when the
// report has one (and "[present]"/"[absent]" with a root).
std::string FormatSglangHashReport(const nlohmann::json& report);

}  // namespace kvtier::internal
