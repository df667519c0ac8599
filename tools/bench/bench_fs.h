// `kvtier bench fs`: throughput, latency and CPU cost of the filesystem tier
// against fio and bench/vllm_baseline (bench/fio_compare.sh). The flags live
// in tools/cmd_bench.cc.
//
// What it does, in order:
//  1. Opens an FsTier on --root in its own namespace (model
//     "kvtier-bench/fs-<row_bytes>", so runs with different row sizes never
//     collide; the KV-cache groups of --layers / --kv-groups, one block per
//     file, 16 tokens per block: vLLM's namespace for that model), with n_read_threads = n_write_threads = queue depth. Files
//     left by an earlier run of the same row size are removed first.
//  2. Store phase: rows 0..N-1 of seeded random content, one job per
//     `batch` rows, keeping about queue-depth rows in flight; a slot buffer
//     is refilled only after PollFinished has returned its job.
//  3. Drops the page cache when allowed (sync; "1" > /proc/sys/vm/drop_caches).
//  4. Load phase: reads every row back and verifies every byte.
//  5. --mixed: mixed_rows loads at mixed_load_depth, first alone (unloaded),
//     then, on other rows, while a store stream on new keys (2 x queue-depth
//     rows outstanding, beyond the write slots; at most max(rows,
//     8 x the timed loads) rows) keeps the write side saturated. The loads start
//     once the stream has completed queue-depth rows.
//  6. With kv_events_config enabled (--events-endpoint), waits (at most 5 s)
//     for the publisher's queue to drain and reads its counters.
//  7. Removes the benchmark's namespace unless keep is set.
//
// Latency is per row: from SubmitStore/SubmitLoad to the PollFinished call
// that returned its job (polled every poll_us, so resolution is about
// poll_us). With batch > 1 every key gets its job's latency. The tier's own
// histogram (power-of-two buckets, Metrics()) is reported alongside.
// CPU is getrusage(RUSAGE_SELF) user+sys over the phase, which includes the
// tier's I/O and io_uring worker threads, minus the benchmark's own
// fill/verify passes and its sleeps between polls (both timed with the
// calling thread's CPU clock and reported separately, with a per-thread
// breakdown and the context switches, under "details").
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "bench/bench_common.h"
#include "cli/kv_groups.h"
#include "kvtier/fs_tier.h"
#include "kvtier/kv_events.h"
#include "kvtier/result.h"

namespace kvtier::internal {

struct BenchFsOptions {
  std::string root;
  uint64_t row_bytes = 0;
  uint64_t rows = 0;
  int queue_depth = 32;
  IoBackendKind backend = IoBackendKind::kAuto;
  bool o_direct = true;
  bool checksum_blocks = true;     // the tier's checksum_blocks (CRC32C xattr per block)
  InlineMetadata inline_metadata = InlineMetadata::kAuto;  // the tier's inline_metadata
  BounceLoads bounce_loads = BounceLoads::kAuto;           // the tier's bounce_loads
  bool mixed = false;
  bool keep = false;
  uint64_t seed = 1;
  int batch = 1;                   // rows per job
  int poll_us = 100;               // PollFinished interval when nothing finished
  int mixed_load_depth = 4;        // rows in flight of the timed loads in --mixed
  uint64_t mixed_rows = 1000;      // timed loads per mixed sub-phase (at most rows)
  int mixed_store_depth = 0;       // store rows outstanding in the stream; 0: 2 x queue_depth
  uint32_t io_timeout_ms = FsTierOptions{}.io_timeout_ms;  // the tier's default (0: none)
  int stores_while_loading_max = FsTierOptions{}.stores_while_loading_max;  // the tier's default
  KvGroupFlags kv_groups;          // the model's KV-cache groups (name the namespace)
  // The namespace's blocks_per_file. Above 1, each row is a file of that
  // many blocks and every store is given their hashes (FsTier::SubmitStore's
  // block_hashes), so the file records them (FORMAT.md L197-L202: in the
  // trailer page, else one attribute more) and BlockStored names them all.
  uint32_t blocks_per_file = 1;
  std::string seal_key_file;       // the tier's seal_key_file: a sealed namespace (docs/sealed.md)
  bool seal_key_group_read = false;  // the tier's seal_key_group_read (FORMAT.md L174)
  // The tier's kv_events_config (--events-endpoint and companions,
  // docs/kv-events.md); default off. On, every stored row publishes one
  // BlockStored, so the run measures what publishing costs.
  KvEventsConfig kv_events_config;
};

struct BenchFsMixed {
  DirectionFigures unloaded_load;  // loads alone
  DirectionFigures loaded_load;    // the same kind of loads under the store stream
  DirectionFigures store_stream;   // the store stream while they ran
  bool stream_exhausted = false;   // the stream (at most max(rows, 8 x the loads) rows) ended first
  double ratio_p99() const {
    return unloaded_load.p99_us > 0 ? loaded_load.p99_us / unloaded_load.p99_us : 0;
  }
};

// Keys per lookup job in the lookup phase (a request's chunks, roughly).
inline constexpr uint32_t kBenchLookupBatch = 64;

struct BenchFsResult {
  std::string backend;
  bool o_direct = false;
  bool xattrs = false;
  std::string root;
  std::string namespace_dir;
  uint64_t row_bytes = 0, rows = 0;
  int queue_depth = 0, batch = 1, poll_us = 0, mixed_load_depth = 0, mixed_store_depth = 0;
  uint32_t io_timeout_ms = 0;
  int stores_while_loading_max = 0;
  size_t hashes_per_file = 1;  // the block hashes each store gave (1: the key alone)
  bool page_cache_dropped = false;
  uint64_t fixed_buffer_ios = 0;  // reads and writes into the registered slot arena
  std::string page_cache_note;  // why not, when not dropped
  DirectionFigures store, load;
  double store_hist_p50_us = 0, store_hist_p99_us = 0;  // from the tier's histogram
  double load_hist_p50_us = 0, load_hist_p99_us = 0;
  uint64_t rows_stored = 0, rows_skipped = 0, store_errors = 0;
  uint64_t rows_verified = 0, rows_corrupt = 0, rows_missing = 0, load_errors = 0;
  std::string first_error;
  std::optional<BenchFsMixed> mixed;
  // Existence lookups of every stored row after the load phase (warm
  // dentries: statx through the ring), jobs of kBenchLookupBatch keys,
  // queue_depth jobs in flight.
  struct Lookups {
    uint64_t keys = 0, hits = 0;
    double wall_s = 0, cpu_s = 0;
    double keys_per_s() const { return wall_s > 0 ? static_cast<double>(keys) / wall_s : 0; }
  } lookups;
  // The tier's publisher after the run (with kv_events_config enabled): its
  // counters once its queue drained (FsTierMetrics::kv_events_*).
  struct Events {
    bool enabled = false;
    std::string endpoint;
    uint64_t published = 0, dropped = 0, batches = 0, queue_depth = 0;
  } events;
  bool kept = false;
  // False when any row failed to store, load or verify (the command exits 1).
  bool ok() const {
    return store_errors == 0 && rows_corrupt == 0 && rows_missing == 0 && load_errors == 0 &&
           rows_verified == rows;
  }
};

// kInvalidArgument for bad options (exit 2); other codes for runtime
// failures (exit 1). A run whose rows fail verification still returns a
// result; check ok().
Result<BenchFsResult> RunBenchFs(const BenchFsOptions& options);

// The namespace the run's tier writes: `spec`'s, or with seal_key_file its
// key's sealed namespace (FORMAT.md L162), whose directories the run removes.
Result<Namespace> BenchNamespace(const BenchFsOptions& options, const NamespaceSpec& spec);

// With kv_events_config enabled: waits up to `wait_ms` for the publisher's
// queue to drain (events still queued are not yet counted as published), then
// copies its counters into r->events. Nothing without events.
void CollectBenchFsEvents(const BenchFsOptions& options, const FsTier& tier, uint32_t wait_ms,
                          BenchFsResult* r);

// The result's description of the run, before any phase: `options`, the
// tier's backend and checksums, the namespace's directory.
BenchFsResult BenchFsHeader(const BenchFsOptions& options, const FsTier& tier, const Namespace& ns,
                            int stream_depth, size_t hashes_per_file);
// ", files of N blocks (...)" where each store gave N > 1 block hashes, else "".
std::string FilesOfBlocksNote(const BenchFsResult& r);
// {"store": {gbps, rows_per_s, p50_us, p99_us, cpu_s_per_gb}, "load": {...},
//  ["mixed": {load_p50_us, load_p99_us, unloaded_load_p99_us, ratio_p99}],
//  backend, o_direct, row_bytes, rows, queue_depth, page_cache_dropped,
//  rows_verified, rows_corrupt, ..., "lookup": {keys, hits, keys_per_s, ...},
//  ["kv_events": {endpoint, published, dropped, batches, queue_depth}],
//  "details": {...}}
nlohmann::json BenchFsJson(const BenchFsResult& result);
// A small table for people.
std::string FormatBenchFs(const BenchFsResult& result);
// FormatBenchFs's line of the publisher's counters; "" without events.
std::string FormatBenchFsEvents(const BenchFsResult& result);

}  // namespace kvtier::internal
