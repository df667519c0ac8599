// Typed options parsed from vLLM's `kv_connector_extra_config` JSON: the
// extra config of the OffloadingConnector (docs/config.md; backpressure:
// vLLM PR #50045).
//
// ParseOffloadConfig() is strict where vLLM is lenient: unknown keys, wrong
// JSON types, integers written as floats and out-of-range numbers are all
// errors, and so are the features kvtier does not implement (out-of-tree
// Python classes, non-fs secondary tiers). Every error is a
// kInvalidArgument Status whose message starts with
// "config key '<path>': " (e.g. 'secondary_tiers[0].n_read_threads') and
// states the rule that was broken. The key table and the rules are listed in
// docs/config.md.
//
// The parsed value is the *effective* config: derived values (blocks_per_chunk
// from block_size) are filled in, and a top-level `backpressure` default is
// copied into every tier that has none, with the water marks for that tier's
// locality. OffloadConfigToJson() prints it back in normalized form, and
// parsing that output yields an equal OffloadConfig (with the same
// EngineContext).
//
// Thread-safety: the functions are pure (LoadOffloadConfigFile reads one
// file) and may be called concurrently. Nothing here throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/export.h"
#include "kvtier/fs_tier_options.h"
#include "kvtier/options.h"
#include "kvtier/result.h"

namespace kvtier {

// `spec_name`: which vLLM OffloadingSpec the config is written for.
enum class SpecName {
  kCpuOffloading,      // "CPUOffloadingSpec": the CPU tier only (vLLM's default)
  kTieringOffloading,  // "TieringOffloadingSpec": CPU tier plus secondary tiers
};

// `eviction_policy` of the CPU (primary) tier (vLLM's
// vllm/v1/kv_offload/cpu/policies/{lru,arc}.py).
enum class EvictionPolicy {
  kLru,  // "lru"
  kArc,  // "arc"
};

// `secondary_tiers[i].type`. vLLM also has "obj", "p2p", "example" and
// out-of-tree classes; kvtier implements only the filesystem tier.
enum class TierType {
  kFs,  // "fs"
};

// The default water marks for a locality (the rest of the struct keeps its
// member defaults).
KVTIER_API BackpressureOptions DefaultBackpressureOptions(Locality locality);

// One entry of `secondary_tiers`.
struct SecondaryTierOptions {
  // `type` (required): only "fs" is supported.
  TierType type = TierType::kFs;
  // The options of an fs tier (type == kFs).
  FsTierOptions fs;

  bool operator==(const SecondaryTierOptions&) const = default;
};

// The whole `kv_connector_extra_config` (docs/config.md).
struct OffloadConfig {
  // `spec_name`; default CPUOffloadingSpec.
  SpecName spec_name = SpecName::kCpuOffloading;
  // `cpu_bytes_to_use` (required, > 0): total host bytes of the CPU tier,
  // across all workers.
  uint64_t cpu_bytes_to_use = 0;
  // Offloaded chunk size in GPU blocks, > 0. `blocks_per_chunk` when given,
  // block_size / gpu_block_size when `block_size` is given, else 1.
  uint32_t blocks_per_chunk = 1;
  // `block_size` as written (tokens per offloaded chunk), when present. It is
  // a positive multiple of EngineContext::gpu_block_size_tokens and excludes
  // `blocks_per_chunk`.
  std::optional<uint32_t> block_size_tokens;
  // `eviction_policy`; default lru.
  EvictionPolicy eviction_policy = EvictionPolicy::kLru;
  // `store_threshold`: store a block only after it was looked up this many
  // times (< 2 disables the filter); default 0. Must be < 2 under
  // TieringOffloadingSpec.
  uint32_t store_threshold = 0;
  // `max_tracker_size`: LRU cap of the lookup counter of store_threshold;
  // default 64000.
  uint32_t max_tracker_size = 64000;
  // `offload_prompt_only`: offload prompt tokens only; default true.
  bool offload_prompt_only = true;
  // `self_describing_kv_events`: richer KV events; default false.
  bool self_describing_kv_events = false;
  // `canonical_layout`: canonical byte format of blocks; default false.
  bool canonical_layout = false;
  // `gpu_copy` (kvtier): the GPU copy path; default auto.
  GpuCopy gpu_copy = GpuCopy::kAuto;
  // `secondary_tiers`, in lookup order; default empty. Non-empty only under
  // TieringOffloadingSpec. No two tiers share a root_dir.
  std::vector<SecondaryTierOptions> secondary_tiers;

  bool operator==(const OffloadConfig&) const = default;
};

// What the engine tells kvtier; the config is interpreted against it.
struct EngineContext {
  // The GPU KV-cache block size in tokens (vLLM's cache_config.block_size),
  // > 0; default 16.
  uint32_t gpu_block_size_tokens = 16;
};

// Largest config file LoadOffloadConfigFile() reads, in bytes (configs are a
// few hundred bytes).
inline constexpr size_t kOffloadConfigBytesMax = 1 << 20;
// Deepest JSON nesting accepted (objects and arrays).
inline constexpr int kOffloadConfigDepthMax = 32;

// Parses and validates `json_text`. Returns kInvalidArgument for empty text,
// malformed JSON (with line, column and byte offset), a non-object top level,
// nesting deeper than kOffloadConfigDepthMax, an EngineContext with a zero
// block size, and every broken key rule (docs/config.md).
KVTIER_API Result<OffloadConfig> ParseOffloadConfig(std::string_view json_text, const EngineContext& engine);

// Reads the file at `path` and parses it as above. File errors come from
// ErrnoToStatus (kNotFound for ENOENT, kPermissionDenied, kIoError, ...); a
// file larger than kOffloadConfigBytesMax is kInvalidArgument; parse errors
// are prefixed with "config file <path>: ".
KVTIER_API Result<OffloadConfig> LoadOffloadConfigFile(const std::string& path, const EngineContext& engine);

// Parses the keys of one fs tier as an out-of-tree vLLM secondary tier
// receives them (`secondary_tiers[i]` without `type` and `module_path`, which
// vLLM's SecondaryTierFactory consumes): vLLM's fs-tier keys and kvtier's own,
// with the same rules and error messages (paths without the
// "secondary_tiers[i]." prefix) as ParseOffloadConfig. A `backpressure` object
// gets the tier's locality defaults. kInvalidArgument for malformed JSON, a
// non-object, unknown keys, `type` or `module_path`, and broken rules.
KVTIER_API Result<FsTierOptions> ParseFsTierConfig(std::string_view json_text);

// The keys ParseFsTierConfig accepts, in the parser's table order: every
// key of an fs tier less `type` and `module_path`. The one list of them:
// front ends that sort an engine's keys (kvtier.sglang) take it from here.
KVTIER_API std::vector<std::string_view> FsTierConfigKeys();

// As ParseFsTierConfig(json_text), with the tier's `root_dir` given as raw
// bytes beside the text instead of in it: a POSIX path need not be UTF-8,
// and JSON text must be (Python passes os.fsencode(root_dir) here, the bytes
// vLLM's own tier would open). The root_dir rules apply to these bytes;
// kInvalidArgument also when `json_text` holds a root_dir of its own.
KVTIER_API Result<FsTierOptions> ParseFsTierConfig(std::string_view json_text, std::string_view root_dir);

// The normalized JSON of `config` (two-space indent, every key written, derived
// values as `block_size` when it was given, else `blocks_per_chunk`; each
// tier's effective backpressure written in the tier). For any config returned
// by ParseOffloadConfig(text, engine),
// ParseOffloadConfig(OffloadConfigToJson(config), engine) returns an equal one.
KVTIER_API std::string OffloadConfigToJson(const OffloadConfig& config);

// One line for each key of `config` that vLLM also defines and whose value
// is kvtier's default where vLLM's default differs, e.g.
// "secondary_tiers[0].checksum_blocks: true (kvtier's default; vLLM's default
// is false)". `kvtier config check` prints them on stderr (stdout stays JSON).
KVTIER_API std::vector<std::string> KvtierDefaultNotes(const OffloadConfig& config);

// The JSON spellings of the enums ("TieringOffloadingSpec", "arc", "REMOTE", "fs", ...).
KVTIER_API std::string_view SpecNameToString(SpecName spec_name);
KVTIER_API std::string_view EvictionPolicyToString(EvictionPolicy policy);
KVTIER_API std::string_view LocalityToString(Locality locality);  // "" for kUnspecified
KVTIER_API std::string_view TierTypeToString(TierType type);

}  // namespace kvtier
