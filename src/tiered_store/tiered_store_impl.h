// The TieredStore implementation: orchestration over three parts, each with
// one job and testable alone:
//  - RequestTable (request_table.h): per-request state (chunk keys,
//    offloadable range, tier verdicts, pins, promotion sources);
//  - JobTable (job_table.h): the caller's transfer jobs, their pending
//    chunks, the Stager copies serving them and the results to poll;
//  - TierRouter (tier_router.h): the secondary tiers, their job records and
//    counters, and the order that picks a tier for a lookup, a prefetch
//    cascade and a write-through.
// This class owns the CPU tier, the region and the Stager, and ties them
// together, split over tiered_store_*.cc by concern: open (setup), lookup
// (prefix walk, secondary verdicts, promotions), jobs (store, load,
// prefetch), progress (completion handling on the progress thread), crc
// (checksums computed and checked at the copies, fs/staged_crc.h) and
// metrics.
//
// Concurrency: one mutex (mu_) guards all state, the three parts included
// (they are not thread-safe themselves). Every operation touches at least
// two of them at once (a store: request, job, CPU tier; a completion: job
// or tier record, CPU tier, request), so locks of their own would be taken
// together every time and only add ordering rules; what runs long (I/O,
// copies) already runs outside mu_ in the Stager and the fs tiers.
// Completions arrive from the Stager's and the fs tiers' threads as a bare
// wake-up (Wake()); the progress thread then polls them without mu_ (the
// tier list is fixed after Init) and applies them under mu_. Jobs are
// submitted to the Stager and the fs tiers under mu_ (their Submit never
// blocks on I/O), and the record of a submission is written before mu_ is
// released, so a completion can never be applied before its record exists.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "kvtier/tiered_store.h"
#include "cpu_tier/cpu_tier.h"
#include "cpu_tier/host_region.h"
#include "tiered_store/job_table.h"
#include "tiered_store/request_table.h"
#include "staging/stager.h"
#include "tiered_store/tier_router.h"

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

// The CPU tier's lookup and copy counters (Metrics(); the fs tiers' are in
// TierRouter and the tiers themselves).
struct CpuCounters {
  uint64_t hits = 0, misses = 0;  // each request chunk once, at its first definite verdict
  uint64_t rows_in = 0, bytes_in = 0, rows_out = 0, bytes_out = 0;
  uint64_t stores_no_space = 0;
  uint64_t crc_staged_bytes = 0;       // rows whose CRC32C their copy computed or checked
  uint64_t crc_staged_mismatches = 0;  // rows that failed the check after their copy to the GPU
  uint64_t crc_staged_copy_faults = 0;  // failed checks whose CPU row was good (the copy went wrong)
  BusyClock in_clock, out_clock;  // GPU->CPU, CPU->GPU
  BusyClock& clock(CopyDirection d) { return d == CopyDirection::kDeviceToHost ? in_clock : out_clock; }
};

// What a CPU row promoted unchecked (staged_crc.h) must be checked against
// when it is copied to the GPU: the CRC its block carries, and the file it
// came from, removed if the check fails and the CPU row hashes wrong too
// (FORMAT.md L67, L69). Cleared once a copy passes.
struct RowCheck {
  bool armed = false;         // the row's copies to the GPU check it (until one passes)
  bool removal_sent = false;  // its block's removal was submitted already
  size_t tier = 0;            // the tier it was promoted from
  LoadedBlock read;           // read.crc: what the row must hash to
};

class TieredStoreImpl final : public TieredStore {
 public:
  TieredStoreImpl(const TieredStoreOptions& options, const OffloadConfig& config);
  ~TieredStoreImpl() override;
  // Builds the stager, region, tiers; starts the progress thread.
  Status Init();

  Status StartRequest(uint64_t request_id, RequestSpec spec) override;
  Status AppendChunkKeys(uint64_t request_id, std::span<const OffloadKey> keys,
                         std::span<const BlockHash> block_hashes) override;
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
  bool StagerChecksums() const;
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
  Result<uint64_t> OpenJob(TransferKind kind, uint64_t request_id, size_t first_chunk,
                           std::span<const uint32_t> gpu_blocks, RequestState** req);
  Status CheckGpuBlocks(std::span<const uint32_t> gpu_blocks) const;
  std::vector<uint32_t> PlanStoreCopies(const RequestState& req, std::span<const OffloadKey> keys,
                                        std::span<const size_t> index,
                                        const std::optional<PreparedWrite>& prepared,
                                        std::span<const uint32_t> gpu_blocks, CopyRecord* record);
  void SubmitCopy(CopyRecord record, std::vector<uint32_t> gpu_blocks, const CopyChecksums& checksums = {});
  // --- checksums at the copies (tiered_store_crc.cc); all with mu_ held
  void SubmitLoadCopies(CopyRecord record, std::vector<uint32_t> rows, std::span<const uint32_t> gpu_blocks);
  void OnLoadCopied(CopyRecord& record, const Status& status, const FinishedCopy* done);
  ChunkResult CheckFailed(const CopyRecord& record, size_t k, std::vector<FsJobRecord>* removals);
  ChunkResult DropCorruptRow(const CopyRecord& record, size_t k, std::vector<FsJobRecord>* removals);
  void NoteRowCheck(size_t tier, const FsJobRecord& record, size_t k);
  void MaybeFinishJob(uint64_t job_id);
  // --- progress (tiered_store_progress.cc)
  void Wake();
  void ProgressLoop();
  void ApplyCompletions(std::vector<FinishedCopy>& copies, std::vector<std::vector<JobResult>>& fs_results);
  void OnCopyFinished(CopyRecord& record, const Status& status, FinishedCopy* done = nullptr);
  void OnStoreCopied(CopyRecord& record, std::vector<uint32_t> crcs);
  void WriteThrough(std::span<const OffloadKey> keys, std::span<const uint32_t> crcs,
                    std::span<const std::vector<BlockHash>> block_hashes);
  void OnFsJobFinished(size_t tier, FsJobRecord& record, JobResult& result);
  void OnPromotionFinished(size_t tier, FsJobRecord& record, JobResult& result);
  void OnLookupFinished(size_t tier, FsJobRecord& record, JobResult& result);
  bool IdleLocked() const;
  uint8_t* RowPtr(uint32_t row) const { return region_->bytes().data() + uint64_t{row} * row_bytes_; }

  const TieredStoreOptions options_;
  const OffloadConfig config_;
  uint64_t row_bytes_ = 0;
  // Rows' CRC32C are computed by their copy from the GPU and written by the
  // fs tiers that can (TierRouter::staged); promoted rows are checked by
  // their copy to the GPU (row_checks_).
  bool staged_crc_ = false;

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
  CpuCounters cpu_stats_;
  std::vector<RowCheck> row_checks_;  // per CPU row

  std::thread progress_;
};

}  // namespace kvtier::internal
