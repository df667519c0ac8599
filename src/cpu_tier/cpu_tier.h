// CpuTier: the bookkeeping of the CPU primary tier, as vLLM's
// CPUOffloadingManager (vllm/v1/kv_offload/cpu/manager.py): which key sits
// in which row, whether the row is ready, how many readers hold it, and
// which rows to evict. It moves no bytes; TieredStore drives the copies.
//
// Row states (RowStatus::ref_cnt): -1 while being written (a GPU store or a
// promotion from a secondary tier), 0 ready and evictable, > 0 ready and held
// (GPU loads, secondary-tier stores, pinned prefixes).
//
// Not thread-safe: TieredStore calls it under its own lock.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvtier/config.h"
#include "cpu_tier/cache_policy.h"

namespace kvtier::internal {

enum class CpuVerdict { kHit, kHitPending, kMiss };

struct CpuTierCounters {
  uint64_t rows_evicted = 0;
  uint64_t stores_skipped_threshold = 0;  // keys filtered by store_threshold
  uint64_t allocations_failed = 0;        // PrepareWrite found no evictable room
};

// What PrepareWrite did with each input key.
enum class WriteDisposition : uint8_t {
  kAllocated,       // got a not-yet-ready row
  kPresent,         // already cached or being written (or repeated in the input)
  kBelowThreshold,  // filtered by store_threshold
};

struct PreparedWrite {
  std::vector<WriteDisposition> disposition;  // one per input key
  std::vector<OffloadKey> keys;  // keys that got a (not yet ready) row, in input order
  std::vector<uint32_t> rows;    // their rows
  std::vector<OffloadKey> evicted;
};

class CpuTier {
 public:
  // rows > 0. store_threshold >= 2 enables vLLM's lookup-count filter of
  // stores (CPUOffloadingSpec only), tracking at most max_tracker_size keys.
  CpuTier(EvictionPolicy policy, uint32_t rows, uint32_t store_threshold, uint32_t max_tracker_size);

  uint32_t rows() const { return rows_; }
  // A request-driven lookup: counts toward store_threshold.
  CpuVerdict Lookup(const OffloadKey& key);
  // The ready row of `key`, or nullopt (absent or not ready). Counts nothing.
  std::optional<uint32_t> ReadyRow(const OffloadKey& key);
  bool Contains(const OffloadKey& key) { return policy_->Get(key) != nullptr; }

  // Allocates not-ready rows for the keys that are absent, evicting as needed
  // without evicting any key of `keys`. All or nothing: nullopt (and no
  // change) when the room cannot be made. `apply_threshold`: filter by
  // store_threshold (GPU stores only; promotions are never filtered).
  // `also_protected`: more keys that must not be evicted (a lookup protects
  // the prefix it has walked, so its promotions cannot evict each other).
  std::optional<PreparedWrite> PrepareWrite(std::span<const OffloadKey> keys, bool apply_threshold,
                                            const OffloadKeySet* also_protected = nullptr);
  // Ends writes started by PrepareWrite: success makes the rows ready
  // (ref_cnt 0), failure frees them. Keys that are absent or already ready
  // are ignored.
  void CompleteWrite(std::span<const OffloadKey> keys, bool success);

  // Takes a reader reference on ready keys (the caller checked readiness).
  // Returns their rows in order.
  std::vector<uint32_t> Acquire(std::span<const OffloadKey> keys);
  void Release(std::span<const OffloadKey> keys);
  // Drops a ready key (its row failed a check): true if it was dropped now.
  // A key a reader holds (a pin, a copy) stays until its last Release, which
  // drops it then (its next check fails again meanwhile), so a later store
  // of the key writes fresh bytes instead of finding it cached.
  bool Discard(const OffloadKey& key);
  void Touch(std::span<const OffloadKey> keys) { policy_->Touch(keys); }

  // Rows currently holding data or being written (used), being written, held.
  uint32_t used_rows() const { return allocated_ - static_cast<uint32_t>(free_.size()); }
  uint32_t write_pending_rows() const { return write_pending_; }
  uint32_t evictable_rows() const { return evictable_; }
  const CpuTierCounters& counters() const { return counters_; }

 private:
  uint32_t FreeRows() const { return rows_ - allocated_ + static_cast<uint32_t>(free_.size()); }
  uint32_t AllocateRow();
  bool PassesThreshold(const OffloadKey& key) const;
  void CountLookup(const OffloadKey& key);

  const uint32_t rows_;
  const uint32_t store_threshold_;
  const uint32_t max_tracker_size_;
  std::unique_ptr<CachePolicy> policy_;
  uint32_t allocated_ = 0;       // rows ever handed out (fresh rows come first)
  std::vector<uint32_t> free_;   // rows freed by eviction or failed writes
  uint32_t evictable_ = 0;       // ready rows with ref_cnt 0
  uint32_t write_pending_ = 0;   // rows with ref_cnt -1
  CpuTierCounters counters_;
  OffloadKeySet doomed_;  // held keys Discard asked to drop: dropped at their last Release
  // store_threshold's lookup counts, most recent last (an LRU of keys).
  std::list<OffloadKey> count_order_;
  std::unordered_map<OffloadKey, std::pair<uint32_t, std::list<OffloadKey>::iterator>, OffloadKeyHasher> counts_;
};

}  // namespace kvtier::internal
