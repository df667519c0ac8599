// `kvtier replay`: drives the whole stack as an inference server would and
// reports what was served from where.
//
// One worker is one server instance: a simulated GPU prefix cache (an LRU of
// block hashes over a pool of blocks in host memory, the stand-in device)
// in front of a TieredStore built from the config. For each of its requests,
// in arrival order, it hashes the prompt (vLLM's block hashes), finds the
// GPU-cached prefix, looks the rest up in the tiers (maximal prefix), loads
// the hits into GPU blocks and verifies every loaded block, "computes" the
// misses (fills their blocks with the content their hash implies; the time is
// estimated from prefill_tokens_per_s), stores the new chunks and finishes
// the request. Block content is a function of the block hash, so a block
// loaded under the wrong name, torn or stale fails verification.
//
// Instances and restarts are processes (tools/cmd_replay.cc): requests are
// routed to instance hash(session) % N; with a restart, each instance serves
// the first half of the trace (by arrival), drains its writes and exits, and
// a fresh process serves the second half.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvtier/hashing.h"
#include "cli/kv_groups.h"
#include "kvtier/result.h"
#include "replay/plot.h"
#include "replay/trace.h"

namespace kvtier::internal {

struct ReplayOptions {
  std::string config_json;            // kv_connector_extra_config (secondary tier 0's root_dir overridden by root)
  std::string root = "./kvcache";     // root_dir of the first fs tier
  std::string model = "kvtier/replay-model";  // names the namespace directory
  uint32_t gpu_block_tokens = 16;     // GPU block size (vLLM's block_size)
  uint32_t gpu_blocks = 8192;         // simulated GPU KV pool per instance
  uint64_t kv_bytes_per_token = 512;  // stand-in model: bytes of KV per token (all layers)
  double prefill_tokens_per_s = 8000; // compute speed, for the time-to-first-token estimate
  HashAlgo hash_algo = HashAlgo::kSha256;
  uint32_t lookup_timeout_ms = 30000;
  // Where the simulated GPU pool lives: a CUDA ordinal, -1 (host memory, the
  // host stand-in device) or -2 (a GPU when present, else the stand-in).
  int device = -2;
  // The model's KV-cache groups (--layers / --kv-groups): with the model name,
  // blocks_per_chunk and the block size they name the fs namespace, which is
  // then the one vLLM writes for that model.
  KvGroupFlags kv_groups;
};

struct TierCounts {
  uint64_t hits = 0;    // chunks served by the tier
  uint64_t misses = 0;  // chunks looked up that the tier did not serve
  uint64_t bytes = 0;   // bytes of the chunks it served
  // Chunks the tier was asked to store (cpu: the replay's Store jobs; fs: the
  // write-through of what the CPU tier took), by outcome. Skipped ones were
  // already there (cpu: cached or not offloadable; fs: the file existed):
  // nothing is lost. Failed ones hit an error (I/O, no space, deadline).
  // Dropped ones were refused without an error, nothing written (cpu: no row
  // could be freed; fs: backpressure). Lost = failed + dropped.
  uint64_t stores_ok = 0, stores_skipped = 0, stores_failed = 0, stores_dropped = 0;
  uint64_t stores() const { return stores_ok + stores_skipped + stores_failed + stores_dropped; }
  uint64_t stores_lost() const { return stores_failed + stores_dropped; }
};

// The figures of one phase (all requests, or before / after the restart).
struct PhaseReport {
  std::string name;
  uint64_t requests = 0, requests_skipped = 0;  // skipped: prompt larger than the GPU pool
  uint64_t prompt_tokens = 0;
  uint64_t tokens_gpu = 0;         // served by the GPU prefix cache
  uint64_t tokens_kvtier = 0;      // loaded from kvtier's tiers
  uint64_t tokens_recomputed = 0;  // neither: prefilled again
  // Tokens of full blocks that an earlier request of the trace (any
  // instance, by arrival) also had: the prefixes a cache could serve. After
  // a restart the GPU and CPU caches are empty, so the first request of each
  // session gets them from fs or recomputes them.
  uint64_t repeated_tokens = 0;
  uint64_t repeated_gpu = 0, repeated_kvtier = 0, repeated_recomputed = 0;
  // After a restart: tokens of blocks that requests before the restart had,
  // needed for the first time by this process, and how they were served:
  // from a secondary (fs) tier, or recomputed. The warm-restart proof.
  uint64_t first_touch_tokens = 0, first_touch_fs = 0, first_touch_recomputed = 0;
  std::map<std::string, TierCounts> tiers;  // "cpu", "fs0", ...
  uint64_t rows_loaded = 0, rows_verified = 0, rows_corrupt = 0;
  uint64_t load_bytes = 0;
  double load_busy_s = 0;              // sum over requests of their load time
  std::vector<double> load_ms;         // per request that loaded something
  double ttft_with_s = 0;              // sum over requests of estimated TTFT with kvtier
  double ttft_without_s = 0;           // ... and with the GPU cache alone
  std::vector<ReplayPoint> points;     // per request, for --plot
  int device = -1;                     // the one used (-1: the host stand-in)
};

// Runs the requests of `trace` selected for instance `instance` of
// `instances` and for `phase` (0: all; 1: the first half by arrival; 2: the
// second half) through a fresh TieredStore. Drains the store before
// returning.
Result<PhaseReport> RunReplayWorker(const ReplayOptions& options, const Trace& trace, uint32_t instance,
                                    uint32_t instances, int phase);

// The instance a session is routed to (stable across processes).
uint32_t RouteSession(const std::string& session, uint32_t instances);

// Adds `part` (another instance's report of the same phase) into `total`.
void MergePhase(PhaseReport* total, const PhaseReport& part);

// JSON of a phase and back (the worker-to-parent protocol and --json).
nlohmann::json PhaseToJson(const PhaseReport& phase, bool with_points);
Result<PhaseReport> PhaseFromJson(const nlohmann::json& json);

// The report: a readable table, or the JSON document
// {"trace", "instances", "restart", "phases": [...]}.
std::string FormatReplayTable(const std::vector<PhaseReport>& phases, const std::string& trace_name,
                              uint32_t instances);
nlohmann::json ReplayJson(const std::vector<PhaseReport>& phases, const std::string& trace_name, uint32_t instances,
                          bool restart);

// The default of `kvtier replay --store-loss-max`: a run whose worst tier
// lost more than 1 % of its stores (failed or dropped) exits
// kReplayExitStoresLost. A full or failing volume loses most of them; a
// healthy one none, so 1 % separates the two without flagging a few stray
// backpressure drops.
inline constexpr double kDefaultStoreLossMax = 0.01;
inline constexpr int kReplayExitStoresLost = 3;

// The tier that lost the largest share of its stores over all phases.
struct StoreLoss {
  std::string tier;      // empty when no tier stored anything
  uint64_t stores = 0, failed = 0, dropped = 0;
  double share() const { return stores > 0 ? static_cast<double>(failed + dropped) / static_cast<double>(stores) : 0; }
};
StoreLoss WorstStoreLoss(const std::vector<PhaseReport>& phases);
// {"tier", "stores", "failed", "dropped", "share", "max", "exceeded"}.
nlohmann::json StoreLossJson(const StoreLoss& loss, double share_max);

}  // namespace kvtier::internal
