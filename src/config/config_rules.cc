// ParseOffloadConfig(): the key tables (config.cc) read each key on its own;
// the rules here involve several keys or the engine: block_size against
// blocks_per_chunk and the GPU block size, the spec-dependent rules, the tier
// type check that must precede the fs key table, distinct root_dirs, and the
// top-level backpressure default that each tier inherits with its own
// locality's water marks.

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "config/config_json.h"
#include "config/config_keys.h"
#include "format/root_list.h"
#include "kvtier/config.h"
#include "util/read_file.h"

namespace kvtier {
namespace {

using internal::DescribeValue;
using internal::JoinKeyPath;
using internal::Json;
using internal::KeyError;

// vLLM tier types that kvtier recognizes but does not implement.
constexpr std::string_view kVllmOnlyTierTypes[] = {"obj", "p2p", "example"};

Status ResolveChunkSize(const Json& root, const EngineContext& engine, OffloadConfig& config) {
  if (!config.block_size_tokens.has_value()) return Status::Ok();
  if (root.contains("blocks_per_chunk")) {
    return KeyError("block_size", "cannot be combined with 'blocks_per_chunk'; give only one");
  }
  const uint32_t tokens = *config.block_size_tokens;
  const uint32_t gpu_tokens = engine.gpu_block_size_tokens;
  if (tokens % gpu_tokens != 0) {
    return KeyError("block_size", "must be a positive multiple of the GPU block size (" +
                                      std::to_string(gpu_tokens) + " tokens), got " +
                                      std::to_string(tokens));
  }
  config.blocks_per_chunk = tokens / gpu_tokens;
  return Status::Ok();
}

Status CheckSpecRules(const OffloadConfig& config) {
  if (config.spec_name == SpecName::kTieringOffloading && config.store_threshold >= 2) {
    return KeyError("store_threshold",
                    "must be 0 or 1 under TieringOffloadingSpec (vLLM rejects a store threshold "
                    "with secondary tiers), got " +
                        std::to_string(config.store_threshold));
  }
  return Status::Ok();
}

Result<BackpressureOptions> ParseBackpressure(const Json& value, const std::string& path,
                                              Locality locality) {
  if (!value.is_object()) {
    return KeyError(path, "expected an object with \"backpressure_cls\", got " + DescribeValue(value));
  }
  BackpressureOptions out = DefaultBackpressureOptions(locality);
  KVTIER_RETURN_IF_ERROR(internal::ApplyBackpressureKeys(value, path, out));
  if (!(out.low_water_s_per_mib < out.high_water_s_per_mib)) {
    return KeyError(JoinKeyPath(path, "low_water_s"),
                    "must be below high_water_s, got low " + Json(out.low_water_s_per_mib).dump() +
                        " and high " + Json(out.high_water_s_per_mib).dump() +
                        " s/MiB (an absent mark takes the locality's default)");
  }
  return out;
}

// The tier's own backpressure object, else the top-level one, else none.
Result<std::optional<BackpressureOptions>> ResolveTierBackpressure(const Json& tier,
                                                                   const std::string& path,
                                                                   Locality locality,
                                                                   const Json* top_level) {
  const auto it = tier.find("backpressure");
  if (it != tier.end()) {
    KVTIER_ASSIGN_OR_RETURN(BackpressureOptions own,
                            ParseBackpressure(*it, JoinKeyPath(path, "backpressure"), locality));
    return std::optional<BackpressureOptions>(own);
  }
  if (top_level == nullptr) return std::optional<BackpressureOptions>();
  Result<BackpressureOptions> inherited = ParseBackpressure(*top_level, "backpressure", locality);
  if (!inherited.ok()) {
    const std::string where(locality == Locality::kUnspecified ? "unspecified"
                                                                : LocalityToString(locality));
    return InvalidArgument(inherited.status().message() + " (the top-level default, as inherited by " +
                           path + " with locality " + where + ")");
  }
  return std::optional<BackpressureOptions>(*inherited);
}

// Runs before the fs key table: the keys of other tier types differ, so the
// type decides which message the user needs.
Status CheckTierType(const Json& tier, const std::string& path) {
  if (tier.contains("module_path")) {
    return KeyError(JoinKeyPath(path, "module_path"),
                    "out-of-tree tier classes are not supported by kvtier; only type \"fs\" is");
  }
  const std::string type_path = JoinKeyPath(path, "type");
  const auto it = tier.find("type");
  if (it == tier.end()) return KeyError(type_path, "missing required key (kvtier supports \"fs\")");
  if (it->is_string()) {
    const std::string& type = it->get_ref<const std::string&>();
    if (type == TierTypeToString(TierType::kFs)) return Status::Ok();
    if (std::find(std::begin(kVllmOnlyTierTypes), std::end(kVllmOnlyTierTypes), type) !=
        std::end(kVllmOnlyTierTypes)) {
      return KeyError(type_path, "tier type \"" + type + "\" is not supported by kvtier; only \"fs\" is");
    }
  }
  return KeyError(type_path, "expected \"fs\" (the only tier type kvtier supports), got " +
                                 DescribeValue(*it));
}

// vLLM PR #53133: a ',' in root_dir needs path_sharding "by_block_hash";
// the listed roots are stripped and must be non-empty and distinct (L99).
Status CheckRootList(const FsTierOptions& tier, const std::string& path) {
  Result<std::vector<std::string>> roots =
      format::SplitRootDirs(tier.root_dir, tier.path_sharding == PathSharding::kByBlockHash);
  if (roots.ok()) return Status::Ok();
  std::string why = roots.status().message();
  if (why.starts_with("root_dir: ")) why = why.substr(10);
  return KeyError(JoinKeyPath(path, "root_dir"), why);
}

// kFsTierIoSlotsMax: the ring's four entries per slot must stay within the
// kernel's IORING_MAX_ENTRIES, and the syscall fallback starts a thread per
// slot, so a larger sum is refused here rather than failing (or spinning) at
// the tier's open. The larger of the two keys is named: it is the one to cut.
Status CheckIoSlots(const FsTierOptions& tier, const std::string& path) {
  const int64_t slots = int64_t{tier.n_read_threads} + tier.n_write_threads;
  if (slots <= kFsTierIoSlotsMax) return Status::Ok();
  const char* key = tier.n_read_threads >= tier.n_write_threads ? "n_read_threads" : "n_write_threads";
  return KeyError(JoinKeyPath(path, key),
                  "n_read_threads + n_write_threads must be at most " + std::to_string(kFsTierIoSlotsMax) +
                      " (the io_uring ring takes 4 entries per slot, at most 32768; the syscall fallback a "
                      "thread per slot), got " + std::to_string(tier.n_read_threads) + " + " +
                      std::to_string(tier.n_write_threads));
}

// `top_level_*`: the top level's backpressure and kv_events_config objects
// (nullptr: absent), which a tier without its own takes.
Result<SecondaryTierOptions> ParseTier(const Json& tier, const std::string& path, const Json* top_level_backpressure,
                                       const Json* top_level_events) {
  if (!tier.is_object()) return KeyError(path, "expected a tier object, got " + DescribeValue(tier));
  KVTIER_RETURN_IF_ERROR(CheckTierType(tier, path));
  SecondaryTierOptions out;
  out.type = TierType::kFs;
  KVTIER_RETURN_IF_ERROR(internal::ApplyFsTierKeys(tier, path, out.fs));
  KVTIER_RETURN_IF_ERROR(CheckIoSlots(out.fs, path));
  KVTIER_RETURN_IF_ERROR(CheckRootList(out.fs, path));
  KVTIER_RETURN_IF_ERROR(internal::CheckSealKeys(out.fs, path));
  KVTIER_ASSIGN_OR_RETURN(out.fs.backpressure,
                          ResolveTierBackpressure(tier, path, out.fs.locality, top_level_backpressure));
  if (top_level_events != nullptr && !tier.contains("kv_events_config")) {  // the tier's own replaces it
    KVTIER_RETURN_IF_ERROR(internal::ParseKvEventsConfig(*top_level_events, "kv_events_config", out.fs.kv_events_config));
  }
  return out;
}

// "/mnt/kv", "/mnt/kv/" and "/mnt/./kv" name one directory. Symlinks are not
// resolved: parsing does no I/O.
std::string NormalizedDir(const std::string& dir) {
  std::string normal = std::filesystem::path(dir).lexically_normal().string();
  while (normal.size() > 1 && normal.back() == '/') normal.pop_back();
  return normal;
}

bool IsList(const FsTierOptions& tier) {
  return tier.path_sharding == PathSharding::kByBlockHash && tier.root_dir.find(',') != std::string::npos;
}

// Each root of every tier (a tier's root_dir may list several, L99).
Status CheckDistinctRootDirs(const std::vector<SecondaryTierOptions>& tiers) {
  std::map<std::string, size_t> first_tier_of_dir;
  for (size_t i = 0; i < tiers.size(); ++i) {
    const bool sharded = tiers[i].fs.path_sharding == PathSharding::kByBlockHash;
    const Result<std::vector<std::string>> roots = format::SplitRootDirs(tiers[i].fs.root_dir, sharded);
    for (const std::string& root : roots.value()) {  // CheckRootList passed
      const auto [it, inserted] = first_tier_of_dir.emplace(NormalizedDir(root), i);
      if (inserted) continue;
      return KeyError("secondary_tiers[" + std::to_string(i) + "].root_dir",
                      Json(root).dump(-1, ' ', false, Json::error_handler_t::replace) +
                          " is the same directory as " + (it->second == i ? "another root of this tier" :
                          std::string(IsList(tiers[it->second].fs) ? "a root of " : "") + "secondary_tiers[" +
                          std::to_string(it->second) + "].root_dir") +
                          "; each fs tier needs its own root_dir");
    }
  }
  return Status::Ok();
}

Status ParseSecondaryTiers(const Json& root, OffloadConfig& config) {
  const auto top_it = root.find("backpressure");
  const Json* top_backpressure = top_it == root.end() ? nullptr : &*top_it;
  bool top_backpressure_used = false;
  const auto events_it = root.find("kv_events_config");
  const Json* top_events = events_it == root.end() ? nullptr : &*events_it;
  if (top_events != nullptr) {  // checked whether or not a tier takes it, so typos do not hide
    KvEventsConfig checked;
    KVTIER_RETURN_IF_ERROR(internal::ParseKvEventsConfig(*top_events, "kv_events_config", checked));
  }
  const auto it = root.find("secondary_tiers");
  if (it != root.end()) {
    if (!it->is_array()) {
      return KeyError("secondary_tiers", "expected an array of tier objects, got " + DescribeValue(*it));
    }
    if (!it->empty() && config.spec_name != SpecName::kTieringOffloading) {
      return KeyError("secondary_tiers",
                      "needs spec_name \"TieringOffloadingSpec\"; CPUOffloadingSpec has no secondary tiers");
    }
    for (const Json& tier : *it) {
      const std::string path = "secondary_tiers[" + std::to_string(config.secondary_tiers.size()) + "]";
      KVTIER_ASSIGN_OR_RETURN(SecondaryTierOptions parsed, ParseTier(tier, path, top_backpressure, top_events));
      top_backpressure_used = top_backpressure_used || !tier.contains("backpressure");
      config.secondary_tiers.push_back(std::move(parsed));
    }
    KVTIER_RETURN_IF_ERROR(CheckDistinctRootDirs(config.secondary_tiers));
  }
  // A default that no tier inherits is still checked, so typos do not hide.
  if (top_backpressure != nullptr && !top_backpressure_used) {
    KVTIER_RETURN_IF_ERROR(
        ParseBackpressure(*top_backpressure, "backpressure", Locality::kUnspecified).status());
  }
  return Status::Ok();
}

// The keys of one tier as vLLM's factory passes them (ParseFsTierConfig).
Result<FsTierOptions> ParseFsTierJson(Json tier) {
  for (const char* consumed : {"type", "module_path"}) {
    if (tier.contains(consumed)) {
      return KeyError(consumed, "is consumed by vLLM's SecondaryTierFactory and never reaches the tier; "
                                "remove it from the tier's keys");
    }
  }
  tier["type"] = TierTypeToString(TierType::kFs);
  FsTierOptions out;
  KVTIER_RETURN_IF_ERROR(internal::ApplyFsTierKeys(tier, "", out, /*type_consumed=*/true));
  KVTIER_RETURN_IF_ERROR(CheckIoSlots(out, ""));
  KVTIER_RETURN_IF_ERROR(CheckRootList(out, ""));
  KVTIER_RETURN_IF_ERROR(internal::CheckSealKeys(out, ""));
  KVTIER_ASSIGN_OR_RETURN(out.backpressure, ResolveTierBackpressure(tier, "", out.locality, nullptr));
  return out;
}

Result<std::string> ReadConfigFile(const std::string& path) {
  return internal::ReadFileCapped(path, "config file", kOffloadConfigBytesMax);
}

}  // namespace

Result<OffloadConfig> ParseOffloadConfig(std::string_view json_text, const EngineContext& engine) {
  if (engine.gpu_block_size_tokens == 0) {
    return InvalidArgument("engine context: gpu_block_size_tokens must be positive, got 0");
  }
  KVTIER_ASSIGN_OR_RETURN(const Json root,
                          internal::ParseJsonObjectText(json_text, kOffloadConfigDepthMax));
  OffloadConfig config;
  KVTIER_RETURN_IF_ERROR(internal::ApplyTopLevelKeys(root, config));
  KVTIER_RETURN_IF_ERROR(ResolveChunkSize(root, engine, config));
  KVTIER_RETURN_IF_ERROR(CheckSpecRules(config));
  KVTIER_RETURN_IF_ERROR(ParseSecondaryTiers(root, config));
  return config;
}

Result<FsTierOptions> ParseFsTierConfig(std::string_view json_text) {
  KVTIER_ASSIGN_OR_RETURN(Json tier, internal::ParseJsonObjectText(json_text, kOffloadConfigDepthMax));
  return ParseFsTierJson(std::move(tier));
}

Result<FsTierOptions> ParseFsTierConfig(std::string_view json_text, std::string_view root_dir) {
  KVTIER_ASSIGN_OR_RETURN(Json tier, internal::ParseJsonObjectText(json_text, kOffloadConfigDepthMax));
  if (tier.contains("root_dir")) {
    return KeyError("root_dir", "is given beside the text as raw bytes; remove it from the text");
  }
  // nlohmann keeps any bytes in a string value; only parsing and dumping
  // check UTF-8, and the key rules neither parse nor dump it strictly.
  tier["root_dir"] = std::string(root_dir);
  return ParseFsTierJson(std::move(tier));
}

Result<OffloadConfig> LoadOffloadConfigFile(const std::string& path, const EngineContext& engine) {
  KVTIER_ASSIGN_OR_RETURN(const std::string text, ReadConfigFile(path));
  Result<OffloadConfig> config = ParseOffloadConfig(text, engine);
  if (!config.ok()) return config.status().WithContext("config file " + path);
  return config;
}

}  // namespace kvtier
