// `kvtier bench tiers`: the end-to-end proof of the tiered store, through a
// CUDA device's memory where one is present (CudaKvCache), else through the
// host stand-in device (HostKvCache). The flags live in tools/cmd_bench.cc.
//
// What it does, in order:
//  1. Opens a TieredStore from the config vLLM would pass
//     ({"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": B,
//       "blocks_per_chunk": 1, "secondary_tiers": [{"type": "fs",
//       "root_dir": DIR}]}) over a HostKvCache with one tensor whose page is
//     row_bytes, so one chunk = one block = one row. The fs namespace is the
//     model "kvtier-bench/tiers-<row_bytes>" unless --model is given, with
//     the KV-cache groups of --layers / --kv-groups (kv_groups.h): the
//     namespace vLLM writes for that model with one block per chunk.
//  2. Store phase: N rows of seeded content, one request of `batch` chunks
//     each (keys: BenchRows::Key(seed, row)); fill the GPU blocks, Store,
//     wait for the copy, and let the rows write through to fs in the
//     background. Rows being written through are held in the CPU tier, so a
//     batch that might not fit next to the rows stored since the store was
//     last idle first waits for it to go idle (a CPU tier much smaller than
//     N is the point). The phase ends when WaitIdle returns: every row is on
//     fs.
//  3. Load phase, in a fresh process (this binary re-executed with the
//     hidden `--phase load`): an empty CPU tier, as after a restart. Per
//     batch: StartRequest, LookupWait, Load the hit prefix, verify each row
//     (HostKvCache::Matches). The next batch's request starts as soon as the
//     Load is reported, so its fs reads overlap the verification. The child
//     prints JSON that the parent merges.
//  4. Removes the namespace directories the run created (unless keep); in a
//     namespace that existed before, only the benchmark's own block files.
//
// GB/s = bytes moved / wall time of the phase (store: to the end of the
// write-through; load: bytes verified). The benchmark's own fill/verify
// passes are inside the wall time (they overlap the write-through and the
// next batch's reads, so they cannot be subtracted) but are excluded from
// the CPU figures, as in `kvtier bench fs`. Latency is per job (`batch` chunks):
// store: Store to its copy reported; load: StartRequest to Load reported.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "bench/bench_common.h"
#include "cli/kv_groups.h"
#include "kvtier/result.h"

namespace kvtier::internal {

struct BenchTiersOptions {
  std::string root;
  int device = -2;  // a CUDA ordinal, -1 (the host stand-in) or -2 (kAutoDevice: a GPU when present)
  uint64_t rows = 0;
  uint64_t cpu_bytes = 0;          // cpu_bytes_to_use
  uint64_t row_bytes = 256 << 10;  // a multiple of 4096
  uint32_t batch = 32;             // chunks per request / job; at most the CPU tier's rows
  uint64_t seed = 1;
  bool keep = false;
  std::string model;  // empty: "kvtier-bench/tiers-<row_bytes>"
  KvGroupFlags kv_groups;  // the model's KV-cache groups (name the namespace)
};

// What the load phase (the fresh process) measured.
struct BenchTiersLoad {
  DirectionFigures figures;              // rows/bytes: verified ones
  std::map<std::string, uint64_t> hits;  // "cpu", "fs0", ...: hit chunks by source tier
  uint64_t verified = 0;                 // loaded and byte-exact
  uint64_t corrupt = 0;                  // loaded but different
  uint64_t missing = 0;                  // not in the lookup's hit prefix
  uint64_t errors = 0;                   // hit but the Load did not return them
  uint32_t cpu_rows = 0;
  std::string first_error;
};

struct BenchTiersResult {
  std::string root, model, namespace_dir;
  uint64_t rows = 0, row_bytes = 0, cpu_bytes = 0;
  uint32_t cpu_rows = 0, batch = 0;
  int device = -1;  // the one used: a CUDA ordinal or kHostStandInDevice
  DirectionFigures store;
  uint64_t rows_stored = 0, rows_already_cached = 0, store_errors = 0;
  uint64_t idle_waits = 0;            // times a batch waited for the write-through to drain
  uint64_t rows_evicted = 0;          // CPU tier evictions in the store phase
  uint64_t rows_written_through = 0;  // rows fs0 wrote in the store phase
  uint64_t fs_stores_failed = 0;      // write-through rows fs0 failed (I/O error, no space) in the store phase
  uint64_t fs_stores_dropped = 0;     // ... and refused (backpressure): neither is on fs
  BenchTiersLoad load;
  std::string first_error;  // of the store phase
  bool kept = false;
  // The command's success criterion (exit 0): every row verified, and none
  // lost on the way to fs.
  bool ok() const {
    return load.verified == rows && load.corrupt == 0 && fs_stores_failed == 0 && fs_stores_dropped == 0;
  }
};

// kInvalidArgument for bad options (exit 2); other codes for runtime
// failures (exit 1). Rows that fail to verify still give a result: check ok().
Result<BenchTiersResult> RunBenchTiers(const BenchTiersOptions& options);
// The load phase alone, on whatever the store phase left under root (what
// the re-executed child runs).
Result<BenchTiersLoad> RunBenchTiersLoad(const BenchTiersOptions& options);

// A warning for stderr when the rows fit in the CPU tier (the store phase
// then never evicts); empty otherwise.
std::string BenchTiersWarning(const BenchTiersOptions& options);

// {"store": {gbps, ...}, "load": {gbps, ...}, "hits": {"cpu": n, "fs0": n},
//  "rows_verified", "rows_corrupt", "rows_missing", "rows", "row_bytes",
//  "cpu_rows", "store_s", "load_s", ..., "details": {...}}
nlohmann::json BenchTiersJson(const BenchTiersResult& result);
std::string FormatBenchTiers(const BenchTiersResult& result);

// The child's report to the parent (full precision) and its parser.
nlohmann::json BenchTiersLoadJson(const BenchTiersLoad& load);
Result<BenchTiersLoad> ParseBenchTiersLoad(std::string_view text);

}  // namespace kvtier::internal
