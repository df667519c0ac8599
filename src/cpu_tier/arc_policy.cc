// ARC, as vLLM's cpu/policies/arc.py: rows seen once live in T1, rows seen
// again in T2; B1/B2 remember recently evicted keys of each, and a hit on a
// ghost moves target_t1_size (the share of T1 that eviction aims to keep)
// towards the list that would have kept it.
//
// Rows and ghosts sit in separate tables: Get() and most Touch() calls only
// need the rows, and a table of ~capacity keys stays far more cache-resident
// than one that also holds up to 2 x capacity ghosts.
#include "cpu_tier/arc_policy.h"

#include <algorithm>

#include "cpu_tier/policy_list.h"

namespace kvtier::internal {
namespace {

enum Where : uint8_t { kT1, kT2, kB1, kB2 };

class ArcPolicy final : public CachePolicy {
 public:
  // The ghost table grows as evictions fill B1 and B2.
  explicit ArcPolicy(size_t capacity_rows)
      : capacity_(capacity_rows),
        expected_rows_(InitialKeys(capacity_rows)),
        rows_(expected_rows_) {}

  RowStatus* Get(const OffloadKey& key) override {
    PolicyEntry* entry = rows_.Find(key);
    return entry != nullptr ? &entry->status : nullptr;
  }
  void Insert(const OffloadKey& key, RowStatus status) override;
  void Remove(const OffloadKey& key) override;
  void Touch(std::span<const OffloadKey> keys) override {
    for (auto key = keys.rbegin(); key != keys.rend(); ++key) {
      if (PolicyEntry* row = rows_.Find(*key)) {
        TouchRow(row);
      } else if (PolicyEntry* ghost = ghosts_.Find(*key)) {
        TouchGhost(ghost);
      }
    }
  }
  std::optional<EvictedRows> Evict(size_t n, const OffloadKeySet& protected_keys) override;
  void MarkEvictable(const OffloadKey& key) override { Sync(key); }
  void MarkNonEvictable(const OffloadKey& key) override { Sync(key); }
  void Clear() override;
  size_t size() const override { return t1_.size() + t2_.size(); }

  ArcDebugState DebugState() const;

 private:
  struct Choice {
    PolicyEntry* entry;
    bool from_t1;
  };

  RecencyOrder& Rows(const PolicyEntry& entry) { return entry.where == kT1 ? t1_ : t2_; }
  GhostList& Ghosts(const PolicyEntry& entry) { return entry.where == kB1 ? b1_ : b2_; }
  // Both hooks re-read ref_cnt, so a repeated or redundant call is harmless.
  void Sync(const OffloadKey& key) {
    if (PolicyEntry* entry = rows_.Find(key)) Rows(*entry).SyncEvictable(entry);
  }
  void TouchRow(PolicyEntry* row);
  void TouchGhost(PolicyEntry* ghost);
  bool Choose(size_t n, const OffloadKeySet& protected_keys, std::vector<Choice>* chosen) const;
  EvictedRows Commit(const std::vector<Choice>& chosen);
  void TrimGhosts(GhostList* ghosts);

  const size_t capacity_;
  const size_t expected_rows_;
  double target_t1_size_ = 0;
  EntryTable rows_;    // T1 and T2
  EntryTable ghosts_;  // B1 and B2
  RecencyOrder t1_, t2_;
  GhostList b1_, b2_;
};

void ArcPolicy::Insert(const OffloadKey& key, RowStatus status) {
  auto [entry, inserted] = rows_.FindOrInsert(key);
  entry->status = status;
  if (!inserted) {
    // Not the contract; keep the row where it is with its new status.
    Rows(*entry).SyncEvictable(entry);
    return;
  }
  if (PolicyEntry* ghost = ghosts_.Find(key)) {  // a new row is no ghost
    Ghosts(*ghost).Unlink(ghost);
    ghosts_.Erase(ghost);
  }
  entry->where = kT1;
  t1_.PushMru(entry);
}

void ArcPolicy::Remove(const OffloadKey& key) {
  PolicyEntry* entry = rows_.Find(key);
  if (entry == nullptr) return;  // ghosts stay, as in arc.py
  Rows(*entry).Erase(entry);
  rows_.Erase(entry);
}

void ArcPolicy::TouchRow(PolicyEntry* row) {
  if (row->where == kT2) {
    t2_.MoveToMru(row);
  } else if (!row->status.ready()) {
    // Just allocated for a store, not a second use: stays in T1.
    t1_.MoveToMru(row);
  } else {
    t1_.Erase(row);
    row->where = kT2;
    t2_.PushMru(row);
  }
}

void ArcPolicy::TouchGhost(PolicyEntry* ghost) {
  const double b1 = static_cast<double>(b1_.size());
  const double b2 = static_cast<double>(b2_.size());
  if (ghost->where == kB1) {  // T1 evicted it too early: grow T1's share
    target_t1_size_ =
        std::min(target_t1_size_ + std::max(1.0, b2 / b1), static_cast<double>(capacity_));
    b1_.MoveToBack(ghost);
  } else {  // T2 evicted it too early: shrink T1's share
    target_t1_size_ = std::max(target_t1_size_ - std::max(1.0, b1 / b2), 0.0);
    b2_.MoveToBack(ghost);
  }
}

std::optional<EvictedRows> ArcPolicy::Evict(size_t n, const OffloadKeySet& protected_keys) {
  if (n == 0) return EvictedRows{};
  if (t1_.evictable() + t2_.evictable() < n) return std::nullopt;
  std::vector<Choice> chosen;
  chosen.reserve(n);
  if (!Choose(n, protected_keys, &chosen)) return std::nullopt;
  return Commit(chosen);
}

// ARC's choice of n victims, made without mutating anything: T1 while its
// (virtual) size is at least the target, else T2; T2 also when T1 has no
// victim left. Both scans only move forward, as arc.py's iterators.
bool ArcPolicy::Choose(size_t n, const OffloadKeySet& protected_keys,
                       std::vector<Choice>* chosen) const {
  // int(target_t1_size) in arc.py: the target is >= 0, so truncation.
  const auto target = static_cast<size_t>(target_t1_size_);
  size_t virtual_t1 = t1_.size();
  uint32_t t1_cursor = 0;
  uint32_t t2_cursor = 0;
  while (chosen->size() < n) {
    if (virtual_t1 >= target) {
      if (PolicyEntry* entry = NextEvictable(t1_, &t1_cursor, protected_keys)) {
        chosen->push_back({entry, true});
        --virtual_t1;
        continue;
      }
    }
    PolicyEntry* entry = NextEvictable(t2_, &t2_cursor, protected_keys);
    if (entry == nullptr) return false;
    chosen->push_back({entry, false});
  }
  return true;
}

// Moves the chosen rows to the MRU ends of their ghost lists, in order, then
// bounds both ghost lists by the capacity.
EvictedRows ArcPolicy::Commit(const std::vector<Choice>& chosen) {
  EvictedRows evicted;
  evicted.reserve(chosen.size());
  for (const Choice& choice : chosen) {
    PolicyEntry* row = choice.entry;
    evicted.emplace_back(row->key, row->status);
    Rows(*row).Erase(row);
    rows_.Erase(row);
    PolicyEntry* ghost = ghosts_.FindOrInsert(evicted.back().first).first;
    ghost->where = choice.from_t1 ? kB1 : kB2;
    Ghosts(*ghost).PushBack(ghost);
  }
  TrimGhosts(&b1_);
  TrimGhosts(&b2_);
  return evicted;
}

void ArcPolicy::TrimGhosts(GhostList* ghosts) {
  while (ghosts->size() > capacity_) {
    PolicyEntry* oldest = ghosts->front();
    ghosts->Unlink(oldest);
    ghosts_.Erase(oldest);
  }
}

void ArcPolicy::Clear() {
  rows_.Reset(expected_rows_);
  ghosts_.Reset(0);
  t1_.Clear();
  t2_.Clear();
  b1_.Clear();
  b2_.Clear();
  target_t1_size_ = 0;
}

ArcDebugState ArcPolicy::DebugState() const {
  ArcDebugState state;
  state.target_t1_size = target_t1_size_;
  t1_.ForEach([&](const PolicyEntry* e) { state.t1.push_back(e->key); });
  t2_.ForEach([&](const PolicyEntry* e) { state.t2.push_back(e->key); });
  for (const PolicyEntry* e = b1_.front(); e != nullptr; e = e->next) state.b1.push_back(e->key);
  for (const PolicyEntry* e = b2_.front(); e != nullptr; e = e->next) state.b2.push_back(e->key);
  return state;
}

}  // namespace

std::unique_ptr<CachePolicy> NewArcPolicy(size_t capacity_rows) {
  return std::make_unique<ArcPolicy>(capacity_rows);
}

std::optional<ArcDebugState> GetArcDebugState(const CachePolicy& policy) {
  const auto* arc = dynamic_cast<const ArcPolicy*>(&policy);
  if (arc == nullptr) return std::nullopt;
  return arc->DebugState();
}

}  // namespace kvtier::internal
