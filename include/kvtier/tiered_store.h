// TieredStore: the API an inference engine embeds. It is handed the engine's
// KV cache (kv_cache.h), answers which prefix chunks of a request are cached
// in any tier, loads them back into GPU blocks, and stores new chunks
// GPU -> CPU -> every secondary tier. Semantics follow vLLM's
// TieringOffloadingSpec (vllm/v1/kv_offload/tiering/), so a vLLM
// `kv_connector_extra_config` works unchanged (docs/config.md).
//
// Tiers: "cpu" (the primary tier: one host region of cpu_bytes_to_use carved
// into rows, LRU or ARC) and "fs0", "fs1", ... (the config's secondary_tiers,
// in lookup order). Every GPU transfer is staged through a CPU row.
//
//  - Lookup walks a request's chunks from a given one: HIT and HIT_PENDING
//    count and continue, RETRY (a secondary lookup in flight) continues so
//    the lookups of later chunks start too, MISS stops. A secondary hit
//    reserves a CPU row and starts a promotion at once (HIT_PENDING); rows
//    promoted from a secondary tier are never written back to it.
//  - Store copies GPU blocks into CPU rows; when the copy finishes the job is
//    reported (the GPU blocks may be reused) and the rows are written through
//    to every secondary tier in the background.
//  - Load copies ready CPU rows into GPU blocks.
//  - Prefetch promotes keys from the secondary tiers ahead of requests (warm
//    restart of long agent prefixes).
//  - Pinned prefixes: a request may pin the rows of its first pin_tokens
//    tokens; they are not evicted while any request that pinned them lives,
//    within pinned_bytes_max.
//
// Jobs (Store, Load, Prefetch) return an id at once; PollFinished hands back
// one result per chunk, so the caller keeps the prefix that worked. Nothing
// here blocks on I/O except WaitIdle and LookupWait.
//
// Thread-safety: every method may be called from any thread; the engine's
// CUDA streams are never used or synchronized. Ownership: the registered KV
// tensors must stay valid until the store is destroyed; the destructor waits
// (up to shutdown_timeout_ms) for running jobs.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/config.h"
#include "kvtier/export.h"
#include "kvtier/fs_tier.h"
#include "kvtier/hashing.h"
#include "kvtier/kv_cache.h"
#include "kvtier/layout.h"
#include "kvtier/result.h"

namespace kvtier {

struct TieredStoreOptions {
  // vLLM's kv_connector_extra_config JSON, verbatim (docs/config.md).
  std::string config_json;
  // What the engine tells kvtier (its GPU block size).
  EngineContext engine;
  // The model configuration that names the fs tiers' directories. Its
  // blocks_per_file is set from the config's blocks_per_chunk.
  NamespaceSpec ns;
  // The engine's KV caches, one per worker slot, in slot order; non-empty.
  std::vector<DeviceKvCache> devices;
  // Cap on the bytes of rows held by pinned prefixes; default 0 = pinning off.
  uint64_t pinned_bytes_max = 0;
  // How long the destructor waits for running jobs; default 30 s.
  uint32_t shutdown_timeout_ms = 30000;
};

// Per-request parameters (vLLM's request and kv_transfer_params).
struct RequestSpec {
  // One key per complete chunk of the request's tokens, in order
  // (ChunkOffloadKeys of its block hashes).
  std::vector<OffloadKey> chunk_keys;
  // Prompt length; with offload_prompt_only only chunks that end within the
  // prompt are stored. 0 means "all chunk_keys are prompt".
  uint64_t prompt_tokens = 0;
  // kv_transfer_params.max_offload_tokens: chunks that end beyond it are not
  // stored; 0 disables storing for the request.
  std::optional<uint64_t> max_offload_tokens;
  // Pin the rows of chunks that end within the first pin_tokens tokens.
  uint64_t pin_tokens = 0;
  // The request's block hashes, the ones chunk_keys were made from, so
  // that each chunk's file records all its blocks and the KV events
  // (docs/kv-events.md) announce every block of the chunk, on its store and
  // on its removal wherever it is made, not only the chunk's key. Chunk i
  // is block_hashes[i * hpc, (i + 1) * hpc), its key the last of them; hpc
  // is how many blocks a chunk file holds (tokens_per_block x
  // blocks_per_chunk / tokens_per_hash of TieredStoreOptions::ns: the keys'
  // group's tokens_per_block, tokens_per_hash where ns lists no groups), as
  // ChunkOffloadKeys made the keys. Empty (the default): the chunk keys
  // alone. Given, chunk_keys must be ChunkOffloadKeys(block_hashes, hpc,
  // group) exactly, all of one group (the hashes of an incomplete last chunk may follow),
  // every hash as long as the keys', at most 2048 bytes of them a chunk;
  // else StartRequest fails with kInvalidArgument naming the chunk. Chunks
  // added by AppendChunkKeys are named by the hashes given with them, else
  // by their keys alone.
  std::vector<BlockHash> block_hashes;
};

enum class ChunkVerdict : uint8_t {
  kHit,         // ready in the CPU tier: Load can copy it now
  kHitPending,  // being written into the CPU tier (a store or a promotion)
  kRetry,       // a secondary-tier lookup is in flight: ask again
  kMiss,        // in no tier (or no CPU row could be reserved for it)
};
KVTIER_API std::string_view ChunkVerdictName(ChunkVerdict verdict);

struct PrefixLookup {
  // Verdicts from first_chunk on, up to and including the first kMiss.
  std::vector<ChunkVerdict> verdicts;
  // Where each hit came from: 0 = cpu, i + 1 = secondary tier i; -1 for
  // kRetry and kMiss.
  std::vector<int> source_tier;
  // Leading chunks (from first_chunk) that are kHit or kHitPending, before
  // any kRetry or kMiss.
  size_t hit_chunks = 0;
  // True while some verdict before the first kMiss is kHitPending or kRetry.
  bool pending = false;
};

enum class ChunkOutcome : uint8_t {
  kOk,             // copied (store: into CPU; load: into GPU; prefetch: promoted)
  kAlreadyCached,  // store/prefetch: the CPU tier already held (or was writing) it
  kNotOffloaded,   // store: beyond the request's offloadable range or below store_threshold
  kMiss,           // load: not ready in the CPU tier; prefetch: in no secondary tier
  kNoSpace,        // no CPU row could be made free (all held, pinned or being written)
  kError,          // a copy or I/O failed; see ChunkResult::status
};
KVTIER_API std::string_view ChunkOutcomeName(ChunkOutcome outcome);

struct ChunkResult {
  ChunkOutcome outcome = ChunkOutcome::kError;
  Status status;
};

enum class TransferKind { kStore, kLoad, kPrefetch };

struct TransferResult {
  uint64_t job_id = 0;
  TransferKind kind = TransferKind::kLoad;
  uint64_t request_id = 0;  // 0 for Prefetch
  std::vector<ChunkResult> chunks;
  // Leading chunks whose outcome is kOk (or kAlreadyCached).
  KVTIER_API size_t OkPrefix() const;
};

struct TierUsage {
  std::string name;      // "cpu", "fs0", ...
  uint64_t hits = 0;     // lookups answered HIT / HIT_PENDING by this tier
  uint64_t misses = 0;   // cpu: lookups it missed; fs: secondary lookups that missed
  uint64_t promotions = 0;          // fs: rows promoted into the CPU tier
  uint64_t promotions_failed = 0;   // fs: promotions that found no row, or failed
  uint64_t rows_in = 0, bytes_in = 0;    // cpu: GPU->CPU; fs: rows written to the tier
  uint64_t rows_out = 0, bytes_out = 0;  // cpu: CPU->GPU; fs: rows read from the tier
  uint64_t stores_dropped = 0;      // fs: cascade stores refused by backpressure
  uint64_t stores_failed = 0;       // fs: cascade stores that failed (I/O error, no space, deadline)
  uint64_t stores_skipped = 0;      // fs: cascade stores skipped because the file already existed
  double in_busy_s = 0, out_busy_s = 0;  // cpu: seconds with a copy in flight per direction
  // cpu only:
  double usage = 0;                 // used rows / rows
  uint64_t rows = 0, rows_used = 0, rows_pinned = 0, rows_evicted = 0;
  uint64_t stores_no_space = 0;     // stores refused because nothing could be evicted
};

struct TieredStoreMetrics {
  std::vector<TierUsage> tiers;  // cpu first, then secondary tiers in order
  uint64_t row_bytes = 0;
  uint64_t pins_refused = 0;     // chunks not pinned because of pinned_bytes_max
  // With checksums on: bytes of rows whose CRC32C their copy computed (to
  // the CPU) or checked (to the GPU) where the data is, on the GPU (the host
  // stand-in's copy workers without one), instead of the fs tier on the CPU
  // (docs/gpu.md); the rows that failed that check (corrupt blocks); and the
  // failed checks whose CPU row hashed right on the CPU (the copy went
  // wrong: the chunk is kError, the row and its block are kept).
  uint64_t crc_staged_bytes = 0;
  uint64_t crc_staged_mismatches = 0;
  uint64_t crc_staged_copy_faults = 0;
};

class KVTIER_API TieredStore {
 public:
  // Parses the config (errors name the key), lays out rows, allocates the CPU
  // region, opens the secondary tiers and starts the progress thread.
  // kInvalidArgument: bad config or KV layout, cpu_bytes_to_use below one row;
  // kUnavailable: CUDA device missing, allocation failed; fs errors from
  // FsTier::Open.
  static Result<std::unique_ptr<TieredStore>> Open(const TieredStoreOptions& options);
  virtual ~TieredStore() = default;

  // kInvalidArgument for an id already started or 0, or block_hashes that
  // do not make the chunk keys (RequestSpec::block_hashes).
  virtual Status StartRequest(uint64_t request_id, RequestSpec spec) = 0;
  // Adds chunk keys as the request grows (decode); kNotFound for an unknown
  // id. block_hashes: empty, or the appended chunks' block hashes, each
  // chunk's hpc of them as RequestSpec::block_hashes says (the hashes of an
  // incomplete chunk after them are ignored, and give way to that chunk's
  // own when it is appended). Given, the keys must be made from them, of
  // the request's group, and every chunk so far have its hashes (the
  // request started with them, or with no chunks: then the hashes it
  // started with were counted by group 0's chunks), else kInvalidArgument
  // and nothing is appended.
  virtual Status AppendChunkKeys(uint64_t request_id, std::span<const OffloadKey> keys,
                                 std::span<const BlockHash> block_hashes = {}) = 0;
  // Releases the request's pins and lookup verdicts; running jobs continue.
  virtual Status FinishRequest(uint64_t request_id) = 0;

  // Maximal-prefix lookup from first_chunk (the first chunk not cached on the
  // GPU). Never blocks on I/O. kNotFound: unknown request.
  virtual Result<PrefixLookup> Lookup(uint64_t request_id, size_t first_chunk) = 0;
  // Lookup, repeated as tiers make progress until nothing is pending or
  // timeout_ms passes (then the last answer is returned).
  virtual Result<PrefixLookup> LookupWait(uint64_t request_id, size_t first_chunk, uint32_t timeout_ms) = 0;

  // Copies chunks [first_chunk, first_chunk + n) from GPU blocks into the CPU
  // tier and on to every secondary tier, n = gpu_blocks.size() /
  // blocks_per_chunk. gpu_blocks holds blocks_per_chunk ids per chunk.
  // kInvalidArgument for a bad range or block id; kNotFound: unknown request.
  virtual Result<uint64_t> Store(uint64_t request_id, size_t first_chunk, std::span<const uint32_t> gpu_blocks) = 0;
  // Copies the ready CPU rows of chunks [first_chunk, first_chunk + n) into
  // GPU blocks; the first chunk that is not ready and all after it are kMiss.
  // The result is a prefix: a chunk not served (a failed copy, kError, or a
  // row that failed its check after the copy, kMiss or kError; docs/gpu.md)
  // makes every later chunk kMiss, though their copies ran.
  // kInvalidArgument for a bad range or block id (nothing started);
  // kNotFound: unknown request.
  virtual Result<uint64_t> Load(uint64_t request_id, size_t first_chunk, std::span<const uint32_t> gpu_blocks) = 0;
  // Promotes keys from the secondary tiers (in order) into the CPU tier.
  virtual Result<uint64_t> Prefetch(std::span<const OffloadKey> keys) = 0;

  // Appends finished jobs to `out`; never blocks. Returns how many.
  virtual size_t PollFinished(std::vector<TransferResult>* out) = 0;
  // Blocks until no job, write-through or promotion is running; kTimedOut
  // after timeout_ms (0 only checks; kWaitForever: no limit).
  virtual Status WaitIdle(uint32_t timeout_ms) = 0;

  virtual TieredStoreMetrics Metrics() const = 0;
  // Prometheus text of every tier (kvtier_cpu_* and kvtier_fs_* families).
  virtual std::string PrometheusText() const = 0;

  virtual uint64_t row_bytes() const = 0;
  virtual uint32_t cpu_rows() const = 0;
  virtual uint32_t blocks_per_chunk() const = 0;
  virtual size_t secondary_tier_count() const = 0;
  // The fs tier i (for paths, o_direct, backend name).
  virtual const FsTier& secondary_tier(size_t i) const = 0;
};

}  // namespace kvtier
