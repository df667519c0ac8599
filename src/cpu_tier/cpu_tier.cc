#include "cpu_tier/cpu_tier.h"

#include <cassert>

namespace kvtier::internal {

CpuTier::CpuTier(EvictionPolicy policy, uint32_t rows, uint32_t store_threshold, uint32_t max_tracker_size)
    : rows_(rows),
      store_threshold_(store_threshold),
      max_tracker_size_(max_tracker_size),
      policy_(MakeCachePolicy(policy, rows)) {}

void CpuTier::CountLookup(const OffloadKey& key) {
  if (store_threshold_ < 2) return;
  auto it = counts_.find(key);
  if (it != counts_.end()) {
    ++it->second.first;
    count_order_.splice(count_order_.end(), count_order_, it->second.second);
    return;
  }
  if (counts_.size() >= max_tracker_size_ && !count_order_.empty()) {
    counts_.erase(count_order_.front());
    count_order_.pop_front();
  }
  count_order_.push_back(key);
  counts_.emplace(key, std::make_pair(1u, std::prev(count_order_.end())));
}

bool CpuTier::PassesThreshold(const OffloadKey& key) const {
  if (store_threshold_ < 2) return true;
  auto it = counts_.find(key);
  return it != counts_.end() && it->second.first >= store_threshold_;
}

CpuVerdict CpuTier::Lookup(const OffloadKey& key) {
  CountLookup(key);
  const RowStatus* status = policy_->Get(key);
  if (status == nullptr) return CpuVerdict::kMiss;
  return status->ready() ? CpuVerdict::kHit : CpuVerdict::kHitPending;
}

std::optional<uint32_t> CpuTier::ReadyRow(const OffloadKey& key) {
  const RowStatus* status = policy_->Get(key);
  if (status == nullptr || !status->ready()) return std::nullopt;
  return status->row;
}

uint32_t CpuTier::AllocateRow() {
  if (allocated_ < rows_) return allocated_++;
  assert(!free_.empty());
  const uint32_t row = free_.back();
  free_.pop_back();
  return row;
}

std::optional<PreparedWrite> CpuTier::PrepareWrite(std::span<const OffloadKey> keys, bool apply_threshold,
                                                   const OffloadKeySet* also_protected) {
  PreparedWrite out;
  OffloadKeySet seen;
  for (const OffloadKey& key : keys) {
    if (apply_threshold && !PassesThreshold(key)) {
      out.disposition.push_back(WriteDisposition::kBelowThreshold);
      ++counters_.stores_skipped_threshold;
    } else if (policy_->Get(key) != nullptr || !seen.insert(key).second) {
      out.disposition.push_back(WriteDisposition::kPresent);
    } else {
      out.disposition.push_back(WriteDisposition::kAllocated);
      out.keys.push_back(key);
    }
  }
  if (out.keys.size() > FreeRows()) {
    const size_t need = out.keys.size() - FreeRows();
    // A key of this very batch must survive it (vLLM protects them all).
    OffloadKeySet protect(keys.begin(), keys.end());
    if (also_protected != nullptr) protect.insert(also_protected->begin(), also_protected->end());
    std::optional<EvictedRows> evicted =
        need > evictable_ ? std::nullopt : policy_->Evict(need, protect);
    if (!evicted) {
      ++counters_.allocations_failed;
      return std::nullopt;
    }
    for (auto& [key, status] : *evicted) {
      free_.push_back(status.row);
      out.evicted.push_back(key);
    }
    evictable_ -= static_cast<uint32_t>(evicted->size());
    counters_.rows_evicted += evicted->size();
  }
  for (const OffloadKey& key : out.keys) {
    const uint32_t row = AllocateRow();
    policy_->Insert(key, RowStatus{-1, row});
    out.rows.push_back(row);
  }
  write_pending_ += static_cast<uint32_t>(out.keys.size());
  return out;
}

void CpuTier::CompleteWrite(std::span<const OffloadKey> keys, bool success) {
  for (const OffloadKey& key : keys) {
    RowStatus* status = policy_->Get(key);
    if (status == nullptr || status->ready()) continue;
    --write_pending_;
    if (success) {
      status->ref_cnt = 0;
      ++evictable_;
      policy_->MarkEvictable(key);
    } else {
      free_.push_back(status->row);
      policy_->Remove(key);
    }
  }
}

std::vector<uint32_t> CpuTier::Acquire(std::span<const OffloadKey> keys) {
  std::vector<uint32_t> rows;
  rows.reserve(keys.size());
  for (const OffloadKey& key : keys) {
    RowStatus* status = policy_->Get(key);
    assert(status != nullptr && status->ready());
    if (status->ref_cnt++ == 0) {
      --evictable_;
      policy_->MarkNonEvictable(key);
    }
    rows.push_back(status->row);
  }
  return rows;
}

void CpuTier::Release(std::span<const OffloadKey> keys) {
  for (const OffloadKey& key : keys) {
    RowStatus* status = policy_->Get(key);
    assert(status != nullptr && status->ref_cnt > 0);
    if (--status->ref_cnt == 0) {
      ++evictable_;
      policy_->MarkEvictable(key);
      if (doomed_.erase(key) > 0) Discard(key);
    }
  }
}

bool CpuTier::Discard(const OffloadKey& key) {
  const RowStatus* status = policy_->Get(key);
  if (status == nullptr || status->ref_cnt < 0) return false;  // absent, or being written
  if (status->ref_cnt > 0) {
    doomed_.insert(key);
    return false;
  }
  --evictable_;
  free_.push_back(status->row);
  policy_->Remove(key);
  return true;
}

}  // namespace kvtier::internal
