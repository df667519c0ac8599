// The TieredStore implementation, split over tiered_store_*.cc by concern:
// open (setup), lookup (prefix walk, secondary verdicts, promotions), jobs
// (store, load, prefetch), progress (completion handling on the progress
// thread) and metrics.
//
// Concurrency: one mutex (mu_) guards all state. Completions arrive from the
// Stager's and the fs tiers' threads as a bare wake-up (Wake()); the progress
// thread then polls them and applies them under mu_. Jobs are submitted to
// the Stager and the fs tiers under mu_ (their Submit never blocks on I/O),
// and the record of a submission is written before mu_ is released, so a
// completion can never be applied before its record exists.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kvtier/tiered_store.h"
#include "tier/cpu_tier.h"
#include "tier/host_region.h"
#include "tier/job_table.h"
#include "tier/request_table.h"
#include "tier/stager.h"
#include "tier/tier_router.h"

namespace kvtier::internal {

// Seconds during which at least one copy of a direction was in flight.
class BusyClock {
 public:
  void Start();
  void Stop();
  double seconds() const;

 private:
  using Clock = std::chrono::steady_clock;
  int in_flight_ = 0;
  Clock::time_point since_;
  double total_s_ = 0;
};

class TieredStoreImpl final : public TieredStore {
 public:
  TieredStoreImpl(const TieredStoreOptions& options, const OffloadConfig& config);
  ~TieredStoreImpl() override;
  // Builds the stager, region, tiers; starts the progress thread.
  Status Init();

  Status StartRequest(uint64_t request_id, RequestSpec spec) override;
  Status AppendChunkKeys(uint64_t request_id, std::span<const OffloadKey> keys) override;
  Status FinishRequest(uint64_t request_id) override;
  Result<PrefixLookup> Lookup(uint64_t request_id, size_t first_chunk) override;
  Result<PrefixLookup> LookupWait(uint64_t request_id, size_t first_chunk, uint32_t timeout_ms) override;
  Result<uint64_t> Store(uint64_t request_id, size_t first_chunk, std::span<const uint32_t> gpu_blocks) override;
  Result<uint64_t> Load(uint64_t request_id, size_t first_chunk, std::span<const uint32_t> gpu_blocks) override;
  Result<uint64_t> Prefetch(std::span<const OffloadKey> keys) override;
  size_t PollFinished(std::vector<TransferResult>* out) override;
  Status WaitIdle(uint32_t timeout_ms) override;
  TieredStoreMetrics Metrics() const override;
  std::string PrometheusText() const override;
  uint64_t row_bytes() const override { return row_bytes_; }
  uint32_t cpu_rows() const override { return cpu_->rows(); }
  uint32_t blocks_per_chunk() const override { return config_.blocks_per_chunk; }
  size_t secondary_tier_count() const override { return router_.size(); }
  const FsTier& secondary_tier(size_t i) const override { return router_.tier(i); }

 private:
  // --- setup (tiered_store_open.cc)
  Status OpenSecondaryTiers();
  // --- lookup (tiered_store_lookup.cc); all with mu_ held
  PrefixLookup WalkPrefix(uint64_t request_id, RequestState& req, size_t first_chunk);
  // The walk of one Lookup call: what it must start and what it protects.
  struct Walk {
    std::vector<std::vector<OffloadKey>> to_lookup;  // per tier
    std::vector<FsJobRecord> promote;                // per tier
    OffloadKeySet walked;  // keys of the prefix so far: promotions may not evict them
  };
  ChunkVerdict SecondaryLookup(RequestState& req, const OffloadKey& key, int* source, Walk* walk);
  void CountVerdict(RequestState& req, size_t chunk, ChunkVerdict verdict, int source);
  void SubmitLookups(uint64_t request_id, std::vector<std::vector<OffloadKey>>& to_lookup);
  void SubmitPromotion(size_t tier, FsJobRecord record);
  void PinIfWanted(RequestState& req, size_t chunk, const OffloadKey& key);
  // --- jobs (tiered_store_jobs.cc); all with mu_ held
  std::vector<uint32_t> PlanStoreCopies(std::span<const OffloadKey> keys, std::span<const size_t> index,
                                        const std::optional<PreparedWrite>& prepared,
                                        std::span<const uint32_t> gpu_blocks, CopyRecord* record);
  void SubmitCopy(CopyRecord record, std::span<const uint32_t> rows, std::vector<uint32_t> gpu_blocks);
  void MaybeFinishJob(uint64_t job_id);
  // --- progress (tiered_store_progress.cc)
  void Wake();
  void ProgressLoop();
  void ApplyCompletions(std::vector<FinishedCopy>& copies, std::vector<std::vector<JobResult>>& fs_results);
  void OnCopyFinished(CopyRecord& record, const Status& status);
  void OnStoreCopied(CopyRecord& record);
  void WriteThrough(std::span<const OffloadKey> keys);
  void OnFsJobFinished(size_t tier, FsJobRecord& record, JobResult& result);
  void OnPromotionFinished(size_t tier, FsJobRecord& record, JobResult& result);
  void OnLookupFinished(size_t tier, FsJobRecord& record, JobResult& result);
  bool IdleLocked() const;
  uint8_t* RowPtr(uint32_t row) const { return region_->bytes().data() + uint64_t{row} * row_bytes_; }

  const TieredStoreOptions options_;
  const OffloadConfig config_;
  uint64_t row_bytes_ = 0;

  // Wake-ups from completion threads (never held with mu_ by those threads).
  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  bool wake_pending_ = false;
  bool stop_ = false;

  mutable std::mutex mu_;
  std::condition_variable changed_cv_;  // something completed (LookupWait, WaitIdle)
  // Destroyed in reverse: tiers and stager (which may still touch rows)
  // before the region.
  std::unique_ptr<HostRegion> region_;
  std::unique_ptr<Stager> stager_;
  std::unique_ptr<CpuTier> cpu_;
  TierRouter router_;
  RequestTable requests_;
  JobTable jobs_;
  uint64_t stores_no_space_ = 0;
  uint64_t cpu_hits_ = 0, cpu_misses_ = 0;
  uint64_t rows_in_ = 0, bytes_in_ = 0, rows_out_ = 0, bytes_out_ = 0;
  BusyClock in_clock_, out_clock_;

  std::thread progress_;
};

}  // namespace kvtier::internal
