// VllmTier: an FsTier driven by an inference engine's per-step
// secondary-tier contract (vLLM's SecondaryTierManager, as called by its
// TieringOffloadingManager: vllm/v1/kv_offload/tiering/{base,manager}.py).
//
// The engine owns one region of host rows (vLLM's primary CPU tier: row i at
// rows.data() + i * row_bytes) and names rows by slot index; jobs carry the
// engine's own ids. Every call returns at once, never waiting for I/O:
//
//  * Lookup(key, request) answers from a verdict cache: kHit / kMiss once the
//    key's existence check has finished, kRetry before that (the key joins
//    this step's batch). FlushLookups() at the end of the step submits the
//    batch as one asynchronous lookup job. A key is checked once while any
//    request that asked for it lives (FinishRequest drops the request's
//    interest); a failed load marks its failed keys kMiss, and a successful
//    store marks its keys kHit, so a request never asks forever.
//  * SubmitStore / SubmitLoad move rows by slot between the region and the
//    block files (zero-copy: the region is registered with the ring).
//  * PollFinished hands back exactly one EngineJobResult per submitted job,
//    in completion order; loads report which keys succeeded (partial success).
//  * Drain() waits until every submitted job has a result.
//
// Thread safety: every method but fs() may be called from any thread, racing
// Shutdown() included: a call racing it either completes or fails with
// kUnavailable, and no call touches the fs tier once Shutdown destroyed it.
// One mutex guards the caches; it is never held while the tier does I/O or
// while Drain waits, and kvtier never calls back into the caller with it held.
//
// Rows in use: a slot that an in-flight load writes is used by no other job,
// and a slot that an in-flight store reads is not loaded into (the store
// would write the loaded bytes under its own key). A job's slots and its
// engine id stay taken until its result has been polled.
//
// Names: VllmTier is kvtier's vLLM adapter (src/vllm/, Python kvtier.VllmTier
// behind kvtier.vllm); its SGLang counterpart is SglangTier (src/sglang/,
// include/kvtier/sglang.h). Each is named after its engine's own word (vLLM's
// secondary tier, SGLang's storage backend); both are thin fronts over a TierShell.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/export.h"
#include "kvtier/fs_tier.h"
#include "kvtier/hashing.h"
#include "kvtier/result.h"

namespace kvtier {

struct VllmTierOptions {
  // The fs tier. row_bytes is the engine's row stride (padding included);
  // registered_memory is set to `rows` by Open.
  FsTierOpenOptions fs;
  // The engine's rows (not owned; must outlive the tier, or at least its
  // Shutdown). Its size is a whole number of rows.
  std::span<uint8_t> rows;
};

enum class LookupVerdict : uint8_t { kMiss = 0, kHit = 1, kRetry = 2 };

struct EngineJobResult {
  int64_t job_id = 0;
  bool is_load = false;
  bool success = false;           // every key stored (or already present) / loaded
  std::vector<uint32_t> ok_keys;  // loads that failed in part: indices of the keys that loaded
  uint64_t bytes = 0;             // bytes moved (rows written or read)
  double transfer_time_s = 0;     // from submission to the last key's completion
};

struct VllmTierStats {
  uint64_t lookups_pending = 0;  // keys checked but not yet decided
  uint64_t lookup_cache_keys = 0;
  uint64_t jobs_in_flight = 0;
};

class KVTIER_API VllmTier {
 public:
  // kInvalidArgument for an empty region or one that is not whole rows; else
  // FsTier::Open's errors.
  static Result<std::unique_ptr<VllmTier>> Open(VllmTierOptions options);
  virtual ~VllmTier() = default;  // Shutdown()s

  virtual LookupVerdict Lookup(const OffloadKey& key, std::string_view request_id) = 0;
  // Submits the keys that Lookup() met since the last flush as one batch.
  virtual Status FlushLookups() = 0;
  // Drops `request_id`'s interest in the keys it looked up; keys no live
  // request asked for leave the cache.
  virtual void FinishRequest(std::string_view request_id) = 0;

  // kInvalidArgument (nothing submitted) for keys and slots of different
  // lengths, a slot outside the region, a load naming one slot twice, a slot
  // in use by a job whose result was not polled yet (see "Rows in use"), or a
  // job id whose result was not polled yet; kUnavailable once Shutdown began.
  // A job that the fs tier refuses as a whole still gets a failed result.
  virtual Status SubmitStore(int64_t job_id, std::span<const OffloadKey> keys,
                             std::span<const int64_t> slots) = 0;
  virtual Status SubmitLoad(int64_t job_id, std::span<const OffloadKey> keys,
                            std::span<const int64_t> slots) = 0;
  // Appends the jobs finished since the last call; never blocks.
  virtual size_t PollFinished(std::vector<EngineJobResult>* out) = 0;
  // True while a job or a lookup batch has no result yet, or results wait
  // to be polled.
  virtual bool HasPendingWork() = 0;
  // Blocks until every submitted job has a result (to be polled);
  // kTimedOut after timeout_ms (0 only checks; kWaitForever: no limit).
  virtual Status Drain(uint32_t timeout_ms) = 0;
  // Stops admitting jobs and lookups (from its first instant: a submitter
  // racing it cannot keep it waiting), drains, then destroys the fs tier: no
  // I/O touches the rows afterwards. Later Submit*/FlushLookups fail with
  // kUnavailable, Lookup answers kMiss; PollFinished, HasPendingWork, Stats
  // and Metrics still answer, so results not yet polled are not lost. Every
  // call returns only once the tier is stopped (a second caller waits).
  virtual void Shutdown() = 0;

  virtual VllmTierStats Stats() = 0;
  // The fs tier's counters (FsTier::Metrics); after Shutdown, their last values.
  virtual FsTierMetrics Metrics() = 0;
  // With enable_kv_events: the block files the tier stored and removed
  // since the last call, in order (FsTier::TakeKeyEvents), for vLLM's
  // take_events; after Shutdown, those of its drain, once.
  virtual std::vector<TierKeyEvent> TakeKeyEvents() = 0;
  // FsTier::PrometheusText; kUnavailable once Shutdown began.
  virtual Result<std::string> PrometheusText(std::string_view tier_name) = 0;
  // FsTier::BlockPath; kUnavailable once Shutdown began.
  virtual Result<std::string> BlockPath(const OffloadKey& key) = 0;
  // FsTier::backend_name, o_direct and checksum_place, as Open settled them
  // (valid for the tier's lifetime, after Shutdown too).
  virtual std::string_view backend_name() const = 0;
  virtual bool o_direct() const = 0;
  virtual std::string_view checksum_place() const = 0;
  // The underlying tier, for tests and tools on one thread: not to be used
  // racing Shutdown() (use the methods above), and valid until it.
  // kUnavailable "engine tier: closed" once Shutdown began (it destroys the
  // tier), so a call after it fails instead of reaching a destroyed tier.
  virtual Result<FsTier*> fs() = 0;
};

}  // namespace kvtier
