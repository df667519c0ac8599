// LRU, as vLLM's cpu/policies/lru.py: one recency order, new keys at the
// MRU end, eviction from the LRU end of the rows that are ready, unheld and
// not protected, all or nothing.
#include "cpu_tier/policy_list.h"

namespace kvtier::internal {
namespace {

class LruPolicy final : public CachePolicy {
 public:
  explicit LruPolicy(size_t capacity_rows)
      : expected_keys_(InitialKeys(capacity_rows)), entries_(expected_keys_) {}

  RowStatus* Get(const OffloadKey& key) override {
    PolicyEntry* entry = Find(key);
    return entry != nullptr ? &entry->status : nullptr;
  }

  void Insert(const OffloadKey& key, RowStatus status) override {
    auto [entry, inserted] = entries_.FindOrInsert(key);
    entry->status = status;
    if (!inserted) {
      // Not the contract, but what lru.py does: a new status, same place.
      order_.SyncEvictable(entry);
      return;
    }
    order_.PushMru(entry);
  }

  void Remove(const OffloadKey& key) override {
    PolicyEntry* entry = entries_.Find(key);
    if (entry == nullptr) return;
    order_.Erase(entry);
    entries_.Erase(entry);
  }

  void Touch(std::span<const OffloadKey> keys) override {
    for (auto key = keys.rbegin(); key != keys.rend(); ++key) {
      if (PolicyEntry* entry = Find(*key)) order_.MoveToMru(entry);
    }
  }

  std::optional<EvictedRows> Evict(size_t n, const OffloadKeySet& protected_keys) override;

  void MarkEvictable(const OffloadKey& key) override { Sync(key); }
  void MarkNonEvictable(const OffloadKey& key) override { Sync(key); }

  void Clear() override {
    entries_.Reset(expected_keys_);
    order_.Clear();
  }
  size_t size() const override { return entries_.size(); }

 private:
  PolicyEntry* Find(const OffloadKey& key) const { return entries_.Find(key); }
  // Both hooks re-read ref_cnt, so a repeated or redundant call is harmless.
  void Sync(const OffloadKey& key) {
    if (PolicyEntry* entry = Find(key)) order_.SyncEvictable(entry);
  }

  const size_t expected_keys_;
  EntryTable entries_;
  RecencyOrder order_;
};

std::optional<EvictedRows> LruPolicy::Evict(size_t n, const OffloadKeySet& protected_keys) {
  if (n == 0) return EvictedRows{};
  // Fewer indexed rows than asked for: no scan can succeed.
  if (order_.evictable() < n) return std::nullopt;
  // Choose first, commit after: a failed eviction changes nothing.
  std::vector<PolicyEntry*> chosen;
  chosen.reserve(n);
  uint32_t cursor = 0;
  while (chosen.size() < n) {
    PolicyEntry* entry = NextEvictable(order_, &cursor, protected_keys);
    if (entry == nullptr) return std::nullopt;
    chosen.push_back(entry);
  }
  EvictedRows evicted;
  evicted.reserve(n);
  for (PolicyEntry* entry : chosen) {
    evicted.emplace_back(entry->key, entry->status);
    order_.Erase(entry);
    entries_.Erase(entry);
  }
  return evicted;
}

}  // namespace

std::unique_ptr<CachePolicy> NewLruPolicy(size_t capacity_rows) {
  return std::make_unique<LruPolicy>(capacity_rows);
}

}  // namespace kvtier::internal
