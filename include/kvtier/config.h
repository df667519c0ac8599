// Typed options parsed from vLLM's `kv_connector_extra_config` JSON: the
// extra config of the OffloadingConnector (vllm-fs-tier.md §4.4, §4.7).
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
#include "kvtier/fs_tier.h"
#include "kvtier/result.h"

namespace kvtier {

// `spec_name`: which vLLM OffloadingSpec the config is written for.
enum class SpecName {
  kCpuOffloading,      // "CPUOffloadingSpec": the CPU tier only (vLLM's default)
  kTieringOffloading,  // "TieringOffloadingSpec": CPU tier plus secondary tiers
};

// `eviction_policy` of the CPU (primary) tier (vllm-fs-tier.md §4.5).
enum class EvictionPolicy {
  kLru,  // "lru"
  kArc,  // "arc"
};

// `gpu_copy` (kvtier's own): how GPU pages move between device memory and
// CPU rows. The copy engines cost no SM time but move small scattered pages
// slowly; staging them in a device buffer (64 MiB per direction) or a copy
// kernel over the link moves them at close to the link's speed.
enum class GpuCopy {
  kAuto,    // "auto": pages averaging < 64 KiB: loads staged, stores by the kernel; else the copy engines
  kDma,     // "dma": the copy engines only, page by page
  kKernel,  // "kernel": the copy kernel over the link (no device memory)
  kStaged,  // "staged": through the device staging buffer
};

// `locality` of an fs tier. It is echoed in KV events and selects the
// backpressure defaults.
enum class Locality {
  kUnspecified,  // the key is absent (or null): treated as LOCAL for defaults
  kLocal,        // "LOCAL": assumed local SSD
  kRemote,       // "REMOTE": assumed network storage
};

// `secondary_tiers[i].type`. vLLM also has "obj", "p2p", "example" and
// out-of-tree classes; kvtier implements only the filesystem tier.
enum class TierType {
  kFs,  // "fs"
};

// `backpressure.backpressure_cls`: how store pressure is detected.
enum class BackpressureDetector {
  kEma,  // "EMABackpressureDetector": EMA of store latency per MiB
};

// `backpressure.policy_cls`: what happens to cascade stores under pressure.
enum class BackpressurePolicy {
  kDropStore,  // "DropStorePolicy": stores to the tier are dropped (blocks stay CPU-only)
};

// Store backpressure of one secondary tier (vllm-fs-tier.md §4.7): pressure
// starts when the EMA of store latency per MiB exceeds the high water mark
// and ends when it falls below the low water mark. Loads and promotions are
// never dropped. Invariant after parsing: 0 < low < high, 0 < alpha <= 1.
struct BackpressureOptions {
  // `backpressure_cls` (required in JSON).
  BackpressureDetector detector = BackpressureDetector::kEma;
  // `policy_cls`; default DropStorePolicy.
  BackpressurePolicy policy = BackpressurePolicy::kDropStore;
  // `high_water_s`, seconds of store latency per MiB. Default 0.005 for a
  // LOCAL or unspecified tier, 0.020 for REMOTE.
  double high_water_s_per_mib = 0.005;
  // `low_water_s`, seconds per MiB. Default 0.001 for LOCAL or unspecified,
  // 0.005 for REMOTE.
  double low_water_s_per_mib = 0.001;
  // `alpha`: EMA smoothing factor in (0, 1]; default 0.3.
  double ema_alpha = 0.3;
  // `warmup`: store completions observed before pressure can start; default 3.
  uint32_t warmup_completions = 3;

  bool operator==(const BackpressureOptions&) const = default;
};

// The default water marks for a locality (the rest of the struct keeps its
// member defaults).
KVTIER_API BackpressureOptions DefaultBackpressureOptions(Locality locality);

// One `fs` entry of `secondary_tiers` (vllm-fs-tier.md §4.4).
struct FsTierOptions {
  // `root_dir` (required): base directory of the tier; non-empty, no NUL.
  std::string root_dir;
  // `n_read_threads`: load-priority I/O parallelism, > 0; default 16.
  int n_read_threads = 16;
  // `n_write_threads`: store-priority I/O parallelism, > 0; default 16.
  int n_write_threads = 16;
  // `enable_kv_events`: emit BlockStored events (medium STORAGE); default false.
  bool enable_kv_events = false;
  // `locality`: "LOCAL", "REMOTE" or absent; default unspecified.
  Locality locality = Locality::kUnspecified;
  // `backpressure`: the tier's own object, else the top-level default (with
  // this tier's locality defaults), else none: stores are never dropped.
  std::optional<BackpressureOptions> backpressure;

  // kvtier's own keys (vLLM ignores them; see docs/config.md):
  // `io_timeout_ms`: deadline of every I/O, so a hung network mount fails the
  // job instead of the server; 0 disables; default 30000.
  uint32_t io_timeout_ms = 30000;
  // `durability`: "none" (as vLLM), "file" (fdatasync before rename) or
  // "full" (also fsync the directory); default "none".
  Durability durability = Durability::kNone;
  // `store_queue_bytes_max`: queued store bytes beyond which new stores are
  // dropped (loads never are); > 0; default 1 GiB.
  uint64_t store_queue_bytes_max = uint64_t{1} << 30;
  // `io_backend`: "auto" (io_uring, else syscall threads with a warning),
  // "uring" or "syscall"; default "auto".
  IoBackendKind io_backend = IoBackendKind::kAuto;
  // `o_direct`: use O_DIRECT when the startup probe allows it; default true.
  bool o_direct = true;
  // `stores_while_loading_max`: store operations running at once while loads
  // are active (read priority at the disk); 0: no cap; default 2.
  int stores_while_loading_max = 2;

  bool operator==(const FsTierOptions&) const = default;
};

// One entry of `secondary_tiers`.
struct SecondaryTierOptions {
  // `type` (required): only "fs" is supported.
  TierType type = TierType::kFs;
  // The options of an fs tier (type == kFs).
  FsTierOptions fs;

  bool operator==(const SecondaryTierOptions&) const = default;
};

// The whole `kv_connector_extra_config` (vllm-fs-tier.md §4.4).
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

// The FsTier options that an fs tier's config sets (root_dir, threads,
// deadlines, durability, queues, backpressure, backend, O_DIRECT). The
// caller fills what the config does not hold: ns, row_bytes,
// registered_memory and on_job_finished.
KVTIER_API FsTierOpenOptions FsTierOpenOptionsFromConfig(const FsTierOptions& tier);

// The normalized JSON of `config` (two-space indent, every key written, derived
// values as `block_size` when it was given, else `blocks_per_chunk`; each
// tier's effective backpressure written in the tier). For any config returned
// by ParseOffloadConfig(text, engine),
// ParseOffloadConfig(OffloadConfigToJson(config), engine) returns an equal one.
KVTIER_API std::string OffloadConfigToJson(const OffloadConfig& config);

// The JSON spellings of the enums ("TieringOffloadingSpec", "arc", "REMOTE", "fs", ...).
KVTIER_API std::string_view SpecNameToString(SpecName spec_name);
KVTIER_API std::string_view EvictionPolicyToString(EvictionPolicy policy);
KVTIER_API std::string_view LocalityToString(Locality locality);  // "" for kUnspecified
KVTIER_API std::string_view TierTypeToString(TierType type);

}  // namespace kvtier
