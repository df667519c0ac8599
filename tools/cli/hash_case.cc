// Parsing of compat cases and config.json files into hash queries.
#include <set>

#include "cli/hash_command.h"
#include "cli/json_input.h"
#include "format/seal_record.h"

namespace kvtier::internal {
namespace {

using nlohmann::json;

Status CheckKeys(const json& obj, std::string_view where, const std::set<std::string>& allowed) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (allowed.count(it.key())) continue;
    std::string valid;
    for (const auto& k : allowed) valid += (valid.empty() ? "" : ", ") + k;
    return InvalidArgument(std::string(where) + ": unknown key '" + it.key() + "' (valid: " + valid + ")");
  }
  return Status::Ok();
}

Result<std::string> GetString(const json& obj, const std::string& key, std::string_view where) {
  if (!obj.contains(key)) return InvalidArgument(std::string(where) + ": missing key '" + key + "'");
  if (!obj[key].is_string()) return InvalidArgument(std::string(where) + "." + key + ": expected a string");
  return obj[key].get<std::string>();
}

Result<std::optional<std::string>> GetOptString(const json& obj, const std::string& key, std::string_view where) {
  if (!obj.contains(key) || obj[key].is_null()) return std::optional<std::string>();
  KVTIER_ASSIGN_OR_RETURN(std::string s, GetString(obj, key, where));
  return std::optional<std::string>(std::move(s));
}

Result<int64_t> GetInt(const json& obj, const std::string& key, std::string_view where,
                       std::optional<int64_t> fallback = std::nullopt) {
  if (!obj.contains(key)) {
    if (fallback) return *fallback;
    return InvalidArgument(std::string(where) + ": missing key '" + key + "'");
  }
  return JsonToInt64(obj[key], std::string(where) + "." + key);
}

Result<bool> GetBool(const json& obj, const std::string& key, std::string_view where, bool fallback) {
  if (!obj.contains(key)) return fallback;
  if (!obj[key].is_boolean()) return InvalidArgument(std::string(where) + "." + key + ": expected true or false");
  return obj[key].get<bool>();
}

Result<uint32_t> ToU32(int64_t v, std::string_view what) {
  if (v < 0 || v > UINT32_MAX) return InvalidArgument(std::string(what) + ": out of range");
  return static_cast<uint32_t>(v);
}

Result<std::vector<KvCacheGroupSpec>> ParseGroups(const json& groups, std::string_view where) {
  if (!groups.is_array()) return InvalidArgument(std::string(where) + ": expected a list");
  std::vector<KvCacheGroupSpec> out;
  for (size_t i = 0; i < groups.size(); ++i) {
    std::string at = std::string(where) + "[" + std::to_string(i) + "]";
    const json& g = groups[i];
    if (!g.is_object()) return InvalidArgument(at + ": expected an object");
    KVTIER_RETURN_IF_ERROR(CheckKeys(g, at, {"tokens_per_block", "layer_names"}));
    KvCacheGroupSpec spec;
    KVTIER_ASSIGN_OR_RETURN(spec.tokens_per_block, GetInt(g, "tokens_per_block", at));
    const json& names = g.contains("layer_names") ? g["layer_names"] : json::array();
    if (!names.is_array()) return InvalidArgument(at + ".layer_names: expected a list");
    for (const json& n : names) {
      if (!n.is_string()) return InvalidArgument(at + ".layer_names: expected strings");
      spec.layer_names.push_back(n.get<std::string>());
    }
    out.push_back(std::move(spec));
  }
  return out;
}

// FileMapper writes "parallel_agnostic" only as false. A config.json without
// it is agnostic, and then every size is 1; one with sizes > 1 and no key was
// written by vLLM before PR #49440 (2026-07-26), and its digest cannot be
// recomputed from the fields. Refuse both rather than guess.
Status CheckConfigAgnosticFlag(const json& obj, const NamespaceSpec& s) {
  if (obj.contains("parallel_agnostic") && s.parallel_agnostic) {
    return InvalidArgument("config.json: \"parallel_agnostic\": true never occurs in vLLM's fields");
  }
  if (s.parallel_agnostic && (s.tp_size != 1 || s.pp_size != 1 || s.pcp_size != 1 || s.dcp_size != 1)) {
    return InvalidArgument(
        "config.json: parallel sizes > 1 without \"parallel_agnostic\": false (written by vLLM "
        "before 2026-07-26?); its namespace digest cannot be recomputed");
  }
  return Status::Ok();
}

// The namespace object of a case, or the fields of a config.json (where the
// effective parallel-agnostic flag is "no parallel_agnostic key").
Result<NamespaceSpec> ParseNamespace(const json& obj, std::string_view where, bool config_fields) {
  if (!obj.is_object()) return InvalidArgument(std::string(where) + ": expected an object");
  std::set<std::string> allowed = {"model_name", "tokens_per_hash", "blocks_per_file", "tp_size",
                                   "pp_size", "pcp_size", "dcp_size", "dtype", "kv_cache_groups",
                                   "inference_engine", "parallel_agnostic", "replicated_layout",
                                   "canonical_format", "storage_format"};
  if (!config_fields) allowed.insert("rank");
  KVTIER_RETURN_IF_ERROR(CheckKeys(obj, where, allowed));
  NamespaceSpec s;
  KVTIER_ASSIGN_OR_RETURN(s.model_name, GetString(obj, "model_name", where));
  KVTIER_ASSIGN_OR_RETURN(s.tokens_per_hash, GetInt(obj, "tokens_per_hash", where));
  KVTIER_ASSIGN_OR_RETURN(s.blocks_per_file, GetInt(obj, "blocks_per_file", where));
  KVTIER_ASSIGN_OR_RETURN(s.tp_size, GetInt(obj, "tp_size", where, 1));
  KVTIER_ASSIGN_OR_RETURN(s.pp_size, GetInt(obj, "pp_size", where, 1));
  KVTIER_ASSIGN_OR_RETURN(s.pcp_size, GetInt(obj, "pcp_size", where, 1));
  KVTIER_ASSIGN_OR_RETURN(s.dcp_size, GetInt(obj, "dcp_size", where, 1));
  KVTIER_ASSIGN_OR_RETURN(s.rank, GetInt(obj, "rank", where, 0));
  KVTIER_ASSIGN_OR_RETURN(s.dtype, GetString(obj, "dtype", where));
  if (obj.contains("kv_cache_groups") && !obj["kv_cache_groups"].is_null()) {
    KVTIER_ASSIGN_OR_RETURN(s.kv_cache_groups, ParseGroups(obj["kv_cache_groups"], std::string(where) + ".kv_cache_groups"));
  }
  if (obj.contains("inference_engine")) {
    KVTIER_ASSIGN_OR_RETURN(s.inference_engine, GetString(obj, "inference_engine", where));
  }
  KVTIER_ASSIGN_OR_RETURN(s.parallel_agnostic, GetBool(obj, "parallel_agnostic", where, config_fields));
  KVTIER_ASSIGN_OR_RETURN(s.replicated_layout, GetBool(obj, "replicated_layout", where, false));
  if (config_fields) KVTIER_RETURN_IF_ERROR(CheckConfigAgnosticFlag(obj, s));
  KVTIER_ASSIGN_OR_RETURN(s.canonical_format, GetOptString(obj, "canonical_format", where));
  KVTIER_ASSIGN_OR_RETURN(s.storage_format, GetOptString(obj, "storage_format", where));
  return s;
}

Result<std::vector<MmFeature>> ParseMm(const json& mm) {
  if (mm.is_null()) return std::vector<MmFeature>();
  if (!mm.is_array()) return InvalidArgument("case.mm_features: expected a list");
  std::vector<MmFeature> out;
  for (size_t i = 0; i < mm.size(); ++i) {
    std::string at = "case.mm_features[" + std::to_string(i) + "]";
    const json& f = mm[i];
    if (!f.is_array() || f.size() != 3 || !f[0].is_string()) {
      return InvalidArgument(at + ": expected [identifier, offset, length]");
    }
    MmFeature feature;
    feature.identifier = f[0].get<std::string>();
    KVTIER_ASSIGN_OR_RETURN(feature.offset, JsonToInt64(f[1], at + ".offset"));
    KVTIER_ASSIGN_OR_RETURN(feature.length, JsonToInt64(f[2], at + ".length"));
    out.push_back(std::move(feature));
  }
  return out;
}

Result<std::vector<BigInt>> ParseTokens(const json& tokens, std::string_view where) {
  if (!tokens.is_array()) return InvalidArgument(std::string(where) + ": expected a list of integers");
  std::vector<BigInt> out;
  out.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    KVTIER_ASSIGN_OR_RETURN(BigInt t, JsonToBigInt(tokens[i], std::string(where) + "[" + std::to_string(i) + "]"));
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

Result<HashQuery> HashQueryFromCase(std::string_view case_json_text) {
  KVTIER_ASSIGN_OR_RETURN(json c, ParseJsonKeepingBigInts(case_json_text, "case"));
  if (!c.is_object()) return InvalidArgument("case: expected a JSON object");
  KVTIER_RETURN_IF_ERROR(CheckKeys(c, "case", {"name", "description", "algo", "pythonhashseed",
      "hash_block_size", "token_ids", "lora_name", "cache_salt", "mm_features", "namespace",
      "blocks_per_chunk", "group_idx", "expected"}));
  HashQuery q;
  KVTIER_ASSIGN_OR_RETURN(std::string algo, GetString(c, "algo", "case"));
  KVTIER_ASSIGN_OR_RETURN(q.algo, ParseHashAlgo(algo));
  KVTIER_ASSIGN_OR_RETURN(q.pythonhashseed, GetOptString(c, "pythonhashseed", "case"));
  KVTIER_ASSIGN_OR_RETURN(int64_t hbs, GetInt(c, "hash_block_size", "case"));
  KVTIER_ASSIGN_OR_RETURN(q.hash_block_size, ToU32(hbs, "case.hash_block_size"));
  if (!c.contains("token_ids")) return InvalidArgument("case: missing key 'token_ids'");
  KVTIER_ASSIGN_OR_RETURN(q.token_ids, ParseTokens(c["token_ids"], "case.token_ids"));
  KVTIER_ASSIGN_OR_RETURN(q.extras.lora_name, GetOptString(c, "lora_name", "case"));
  KVTIER_ASSIGN_OR_RETURN(q.extras.cache_salt, GetOptString(c, "cache_salt", "case"));
  if (c.contains("mm_features")) {
    KVTIER_ASSIGN_OR_RETURN(q.extras.mm_features, ParseMm(c["mm_features"]));
  }
  if (!c.contains("namespace")) return InvalidArgument("case: missing key 'namespace'");
  KVTIER_ASSIGN_OR_RETURN(q.ns, ParseNamespace(c["namespace"], "case.namespace", false));
  KVTIER_ASSIGN_OR_RETURN(int64_t bpc, GetInt(c, "blocks_per_chunk", "case", 1));
  KVTIER_ASSIGN_OR_RETURN(q.blocks_per_chunk, ToU32(bpc, "case.blocks_per_chunk"));
  KVTIER_ASSIGN_OR_RETURN(int64_t group, GetInt(c, "group_idx", "case", 0));
  KVTIER_ASSIGN_OR_RETURN(q.group_idx, ToU32(group, "case.group_idx"));
  return q;
}

// L184: a sealed namespace's config.json names its key by id; the member is
// exactly the one Namespace::Sealed adds (L162), else the digest would not be
// this file's.
Status TakeSealMember(json* fields, std::optional<std::string>* seal_key_id) {
  const std::string name(format::kSealConfigKey);
  if (!fields->is_object() || !fields->contains(name)) return Status::Ok();
  const json seal = (*fields)[name];
  fields->erase(name);
  uint8_t raw[format::kSealKeyIdBytes];
  const bool ok = seal.is_object() && seal.size() == 3 && seal.value("cipher", "") == format::kSealCipherName &&
                  seal.value("version", json()) == json(format::kSealVersion) && seal.contains("key_id") &&
                  seal["key_id"].is_string() && format::ParseSealKeyIdHex(seal["key_id"].get<std::string>(), raw) &&
                  format::SealKeyIdHex(raw) == seal["key_id"].get<std::string>();
  if (!ok) return InvalidArgument("config.json: " + name + " is not a sealed namespace's member (FORMAT.md L162)");
  *seal_key_id = seal["key_id"].get<std::string>();
  return Status::Ok();
}

Result<NamespaceSpec> NamespaceSpecFromConfigJson(std::string_view text, int64_t rank,
                                                  std::optional<std::string>* seal_key_id) {
  KVTIER_ASSIGN_OR_RETURN(json fields, ParseJsonKeepingBigInts(text, "config.json"));
  if (fields.is_object() && fields.contains("inference_engine") && fields["inference_engine"] == "sglang") {
    return InvalidArgument("config.json is an SGLang namespace's (FORMAT.md L103): add --engine sglang");
  }
  std::optional<std::string> sealed;
  KVTIER_RETURN_IF_ERROR(TakeSealMember(&fields, &sealed));
  if (sealed && seal_key_id == nullptr) return InvalidArgument("config.json: a sealed namespace's (FORMAT.md L162)");
  if (seal_key_id != nullptr) *seal_key_id = sealed;
  KVTIER_ASSIGN_OR_RETURN(NamespaceSpec spec, ParseNamespace(fields, "config.json", true));
  spec.rank = rank;
  return spec;
}

}  // namespace kvtier::internal
