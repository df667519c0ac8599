// The options of one fs tier: the keys of an `fs` entry of
// `secondary_tiers` (vLLM's keys and kvtier's own, docs/config.md), each
// with its one default. The config parser fills FsTierOptions from its key
// table (config.cc) and FsTier::Open takes the same struct
// (FsTierOpenOptions::tier, fs_tier.h), so nothing copies the options field
// by field between the two. Shared enums: options.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/kv_events.h"
#include "kvtier/options.h"

namespace kvtier {

// The most I/O slots one fs tier (one root of a path_sharding list) may have:
// n_read_threads + n_write_threads <= 8192. The io_uring backend sizes its ring
// at four submission entries per slot, and the kernel refuses a ring above
// IORING_MAX_ENTRIES (32768); the syscall fallback runs one OS thread per
// slot. The config parser and FsTier::Open refuse a larger sum with
// kInvalidArgument.
inline constexpr int kFsTierIoSlotsMax = 8192;

// Store backpressure of one fs tier (vLLM's EMABackpressureDetector,
// PR #50045): pressure starts when the EMA of store
// latency per MiB exceeds the high water mark and ends when it falls below
// the low water mark; while it lasts, new stores are dropped. Loads and
// promotions are never dropped. Invariant after parsing: 0 < low < high,
// 0 < alpha <= 1.
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
  // `alpha`: EMA smoothing factor in (0, 1] (the weight of the newest
  // sample); default 0.3.
  double ema_alpha = 0.3;
  // `warmup`: store completions observed before pressure can start; default 3.
  uint32_t warmup_completions = 3;

  bool operator==(const BackpressureOptions&) const = default;
};

// One `fs` entry of `secondary_tiers`.
struct FsTierOptions {
  // `root_dir` (required): base directory of the tier, used verbatim as vLLM
  // does; non-empty, no NUL.
  // With path_sharding, a comma-separated list of roots (FORMAT.md L99).
  std::string root_dir;
  // `path_sharding`: "by_block_hash" (or absent/null: one root). A root_dir
  // with a comma requires it (as vLLM PR #53133).
  PathSharding path_sharding = PathSharding::kNone;
  // `n_read_threads`: load/lookup block operations at once, > 0; default 16.
  // With n_write_threads, at most kFsTierIoSlotsMax in all.
  int n_read_threads = 16;
  // `n_write_threads`: store block operations at once, > 0; default 16.
  // With n_read_threads, at most kFsTierIoSlotsMax in all.
  int n_write_threads = 16;
  // `enable_kv_events`: emit BlockStored and BlockRemoved events (medium
  // STORAGE) through vLLM's own publisher (the tier's take_events); default
  // false. The vLLM integration reads it; FsTier keeps what it stored and
  // removed for it (FsTier::TakeKeyEvents) when its opener drains them
  // (FsTierOpenOptions::keep_key_events: VllmTier).
  bool enable_kv_events = false;
  // `kv_events_config` (kvtier's; vLLM's KVEventsConfig keys and kvtier's,
  // kv_events.h): kvtier's own publisher of the tier's stores and removals.
  // A tier without one takes the top level's. Off by default.
  KvEventsConfig kv_events_config;
  // `locality`: "LOCAL", "REMOTE" or absent; default unspecified. It selects
  // the backpressure defaults when parsing; FsTier itself ignores it.
  Locality locality = Locality::kUnspecified;
  // `backpressure`: the tier's own object, else the top-level default (with
  // this tier's locality defaults), else none: stores are never dropped for
  // latency.
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
  // `io_backend`: "auto" (io_uring on a local filesystem, the syscall
  // threads on a network or FUSE one, logged at open; where the kernel
  // refuses a ring, the syscall threads with a warning), "uring" or
  // "syscall"; default "auto".
  IoBackendKind io_backend = IoBackendKind::kAuto;
  // `o_direct`: use O_DIRECT when the startup probe allows it (buffered
  // otherwise); default true.
  bool o_direct = true;
  // `inline_metadata`: "auto" (on where root_dir is a local filesystem),
  // "on" or "off": whether the io_uring backend runs mkdirat, renameat,
  // unlinkat and fsetxattr on its own thread instead of io_uring's workers
  // (options.h says why); default "auto". The syscall backend ignores it.
  InlineMetadata inline_metadata = InlineMetadata::kAuto;
  // `bounce_loads`: "auto" (on where root_dir is not a local filesystem),
  // "on" or "off": whether loads read into kvtier-owned rows first, so that
  // a read abandoned at its deadline can never write a row the caller has
  // reused (options.h says why); default "auto".
  BounceLoads bounce_loads = BounceLoads::kAuto;
  // `max_bytes` (vLLM PR #54327): the byte budget of this tier's
  // <model>_<digest>_r<rank> directory (not of the whole root); absent or
  // null: unbounded (no index, no eviction). Set: a store batch reserves its
  // bytes and evicts least recently used blocks that nothing reads or
  // writes; a batch that cannot fit is refused whole (kDropped). With
  // path_sharding each root gets max_bytes / (number of roots). > 0, and at
  // least one row per root (FsTier::Open checks). docs/config.md.
  std::optional<uint64_t> capacity_bytes_max;
  // `startup_scan`: "auto" (walk the block directory in the background at
  // open only with max_bytes), "on" or "off"; default "auto". Without the
  // walk the open makes the same filesystem calls whatever the directory
  // holds (docs/config.md, docs/metrics.md).
  StartupScan startup_scan = StartupScan::kAuto;
  // `checksum_blocks` (vLLM PR #57912, where vLLM's default is false): store
  // each block's CRC32C and verify it on load (FORMAT.md L60, L67, L102,
  // L130), in the place checksum_place picks. false: no CRC is computed,
  // written or checked. kvtier's default: true.
  bool checksum_blocks = true;
  // `checksum_place`: "auto" (the xattr user.vllm.kv_crc32c where user
  // xattrs work, else a trailer after the row), "xattr" or "trailer";
  // default "auto". docs/checksums.md.
  ChecksumPlaceKind checksum_place = ChecksumPlaceKind::kAuto;
  // `stores_while_loading_max`: read priority at the disk. While loads are
  // running or queued (and for 10 ms after the last; lookups do not count),
  // at most this many stores run at once, so a load never queues in the
  // device behind a full set of store writes. Running stores finish; new
  // ones wait (and, past store_queue_bytes_max, are dropped). 0: no cap
  // (stores keep all n_write_threads slots); default 2.
  int stores_while_loading_max = 2;
  // Sealed namespaces (FORMAT.md L160-L173, docs/config.md): blocks
  // encrypted and authenticated with AES-256-GCM under a key only the
  // instances hold. Sealed exactly when a primary key is given, by
  // `seal_key_file` (a path: 32 raw bytes, or 64 hex digits and an optional
  // newline) or `seal_key_fd` (an inherited fd with the same content, read
  // once at open, not closed), never both. `seal_read_key_files`: older keys
  // accepted for loads only (rotation, L171); needs a primary key. These
  // hold where the key is, never the key.
  std::string seal_key_file;
  int seal_key_fd = -1;
  std::vector<std::string> seal_read_key_files;
  // FORMAT.md L174: a key file must be owned by this user or root and
  // readable by nobody else; true also accepts one readable by its group
  // (a Kubernetes secret mounted with fsGroup). Never one others can write.
  bool seal_key_group_read = false;
  bool sealed() const { return !seal_key_file.empty() || seal_key_fd >= 0; }

  bool operator==(const FsTierOptions&) const = default;
};

}  // namespace kvtier
