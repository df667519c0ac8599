// The tier router: the secondary tiers of a tiered store, in config order,
// and the rules that pick one (as vLLM's TieringOffloadingManager,
// vllm/v1/kv_offload/tiering/manager.py):
//  - lookup: the first tier (in order) whose verdict is not a miss answers
//    for a key (FirstAnswer);
//  - promotion: a prefetched key that one tier misses is tried in the next
//    one (NextTier);
//  - write-through: a stored row cascades to every tier (the caller submits
//    one kWriteThrough record per tier).
// It starts the tiers' jobs on CPU rows (Submit) and keeps the record of each
// until its completion takes it (Take), and counts the per-tier lookup and
// promotion metrics.
//
// Invariants:
//  - the tier list is fixed once the store is set up (AddTier only during
//    setup); tier t is named by its index everywhere;
//  - each record names rows inside the attached row memory, and belongs to
//    exactly one job the tier is running, until Take;
//  - a lookup counted once adds one miss to each tier before the answering
//    one, and one hit to that one (or a miss to every tier).
//
// Thread-safety: size(), tier() and Poll() read only the fixed tier list and
// the (thread-safe) FsTier, so the progress thread polls without the
// store's mutex; everything else is called with TieredStoreImpl's mutex
// held. The records are touched by every Submit and completion, both under
// that mutex already, and a record must exist before its completion is
// applied: a lock of their own would add a lock and keep that ordering only
// through the outer one.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "fs/staged_crc.h"
#include "kvtier/fs_tier.h"
#include "kvtier/tiered_store.h"
#include "tiered_store/request_table.h"  // TierVerdict

namespace kvtier::internal {

// An fs tier job started by the store.
struct FsJobRecord {
  // kRemove: blocks whose promoted rows failed their check after the copy
  // to the GPU (staged_crc.h).
  enum class Kind { kWriteThrough, kPromote, kLookup, kRemove } kind = Kind::kLookup;
  std::vector<OffloadKey> keys;
  std::vector<uint32_t> rows;  // kWriteThrough, kPromote: the CPU rows of the keys
  uint64_t request_id = 0;     // kLookup: whose verdicts these are
  uint64_t job_id = 0;         // kPromote from Prefetch: the user job, else 0
  std::vector<size_t> index;   // kPromote from Prefetch: positions in the job
  // kWriteThrough: each row's CRC32C from its copy, written by a staged tier
  // instead of its own (empty: the tier computes them).
  std::vector<uint32_t> crcs;
  // kPromote on a staged tier: what each unchecked load read (filled by the
  // tier); kRemove: the files to remove.
  std::vector<LoadedBlock> loaded;
  // kWriteThrough: each key's block hashes, what its file records for the
  // KV events (FsTier::SubmitStore's block_hashes); empty: the keys alone.
  std::vector<std::vector<BlockHash>> block_hashes;
};

class TierRouter {
 public:
  // Which tier answers a lookup: the first whose verdict is not kMiss;
  // kInFlight (and kUnknown) answer "ask again". tier is -1 for kMiss.
  struct Route {
    TierVerdict verdict = TierVerdict::kMiss;
    int tier = -1;
  };
  static Route FirstAnswer(std::span<const TierVerdict> verdicts);

  // Setup, before any Submit: the CPU rows (row r is region[r * row_bytes,
  // (r + 1) * row_bytes)) and the tiers, in lookup order.
  void AttachRows(std::span<uint8_t> region, uint64_t row_bytes);
  // `staged_crc`: the copies compute and check rows' CRC32C (staged_crc.h),
  // so a tier that can (checksums on, unsealed, one root) neither computes
  // nor checks them itself.
  void AddTier(std::string name, std::unique_ptr<FsTier> fs, bool staged_crc = false);

  size_t size() const { return tiers_.size(); }
  bool empty() const { return tiers_.empty(); }
  // Tier t; std::out_of_range beyond size() (the public API's contract).
  const FsTier& tier(size_t t) const { return *tiers_.at(t).fs; }
  // Tier t stores given CRCs and loads unchecked (AddTier); any tier does.
  bool staged(size_t t) const { return tiers_[t].staged != nullptr; }
  bool any_staged() const;
  // The tier a prefetched key that tier t missed is tried in next.
  std::optional<size_t> NextTier(size_t t) const;

  // Starts the job `record` describes on tier t (a store of its rows, a load
  // into its rows, a lookup of its keys, or the removal of corrupt blocks:
  // kRemove on a staged tier only) and keeps the record. A staged tier
  // stores record.crcs when given and loads unchecked into record.loaded. On error
  // nothing started and `record` is left as it was, for the caller to undo.
  // kInvalidArgument: no tier t, or a row outside the attached memory.
  [[nodiscard]] Status Submit(size_t t, FsJobRecord& record);
  // Tier t's finished jobs; needs no lock (see the header comment).
  size_t Poll(size_t t, std::vector<JobResult>* out);
  // The record of tier t's job `fs_job_id`, once; nullopt if none.
  std::optional<FsJobRecord> Take(size_t t, uint64_t fs_job_id);
  // No tier job is running.
  bool Idle() const;

  // A chunk's first definite lookup verdict: hit in tier `hit_tier` after a
  // miss in every tier before it, or (nullopt) a miss in every tier.
  void CountLookup(std::optional<size_t> hit_tier);
  // A promotion from tier t finished (or found no CPU row: ok = false).
  void CountPromotion(size_t t, bool ok);
  // Tier t's usage (lookup and promotion counters, the tier's own I/O
  // counters) and its Prometheus text, labelled with its name.
  TierUsage Usage(size_t t) const;
  std::string PrometheusText(size_t t) const;

 private:
  struct Tier {
    std::string name;
    std::unique_ptr<FsTier> fs;
    StagedCrcTier* staged = nullptr;  // fs, where AddTier's staged_crc applies
    std::unordered_map<uint64_t, FsJobRecord> jobs;  // by fs job id
    uint64_t hits = 0, misses = 0, promotions = 0, promotions_failed = 0;
  };
  Result<uint64_t> Start(Tier& tier, FsJobRecord& record);

  std::span<uint8_t> region_;
  uint64_t row_bytes_ = 0;
  std::vector<Tier> tiers_;
};

}  // namespace kvtier::internal
