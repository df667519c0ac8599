// Building blocks shared by the CPU tier's eviction policies (lru_policy.cc,
// arc_policy.cc): a recency order with an index of its evictable rows, and an
// intrusive list for ARC's ghost lists.
//
// Why not a plain linked list per policy list: eviction must visit rows in
// recency order but skip rows that are not evictable (ref_cnt != 0), and the
// CPU tier may hold tens of thousands of such rows (loads in flight, stores
// to secondary tiers, pinned prefixes). A RecencyOrder therefore stores its
// entries in a slot array in recency order (every move to the MRU end takes
// the next slot; the array is compacted when it runs out) and keeps a
// bitset of the slots whose row is evictable. Finding the next evictable row
// in recency order is then a few word operations however many held rows lie
// in between, and marking a row (non-)evictable is one bit flip. The price:
// after about `live` moves the array is compacted in one O(live) pass, a
// pause of a few milliseconds at 100k rows (amortized: tens of ns a move).
//
// Why not std::unordered_map for the keys: libstdc++'s lookup walks bucket ->
// previous node -> node (three dependent cache misses at 100k keys) and
// allocates per insert. EntryTable probes a flat array of (hash, index)
// slots and only touches the entry whose hash matches, and it recycles
// entries from chunks whose addresses never change.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "cpu_tier/cache_policy.h"

namespace kvtier::internal {

// One key known to a policy. Lives in an EntryTable, so its address (and
// &status, which Get() hands out) is stable until it is erased.
struct PolicyEntry {
  OffloadKey key;
  RowStatus status;
  uint32_t id = 0;              // its index in the EntryTable
  uint32_t pos = 0;             // slot in the owning RecencyOrder
  uint8_t where = 0;            // which list holds it (each policy defines the values)
  bool indexed = false;         // its slot is in the RecencyOrder's evictable index
  PolicyEntry* prev = nullptr;  // links while in a GhostList
  PolicyEntry* next = nullptr;
};

// The policy's entries by key: open addressing with linear probing over
// slots of (32-bit hash, entry index), at most half full, and backward-shift
// deletion (no tombstones, so probe runs stay short under churn).
class EntryTable {
 public:
  explicit EntryTable(size_t expected_keys = 0) { Reset(expected_keys); }

  size_t size() const { return size_; }
  PolicyEntry* Find(const OffloadKey& key) const {
    const uint32_t hash = Hash(key);
    for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
      const Slot slot = slots_[i];
      if (slot.index == 0) return nullptr;
      if (slot.hash == hash && At(slot.index - 1)->key == key) return At(slot.index - 1);
    }
  }
  // The entry of `key`; when absent, a new one (second: true) holding only
  // the key and default fields.
  std::pair<PolicyEntry*, bool> FindOrInsert(const OffloadKey& key);
  // Frees the entry; its address may be handed out again by FindOrInsert.
  void Erase(PolicyEntry* entry);
  // Forgets every entry, keeping room for `expected_keys`.
  void Reset(size_t expected_keys);

 private:
  static constexpr size_t kChunkBits = 10;  // 1024 entries per chunk
  struct Slot {
    uint32_t hash = 0;
    uint32_t index = 0;  // entry id + 1; 0: empty
  };
  static uint32_t Hash(const OffloadKey& key) {
    const uint64_t h = OffloadKeyHasher{}(key);
    return static_cast<uint32_t>(h ^ (h >> 32));
  }
  PolicyEntry* At(uint32_t id) const {
    return &chunks_[id >> kChunkBits][id & ((1u << kChunkBits) - 1)];
  }
  PolicyEntry* NewEntry();
  void Grow();
  void Place(Slot slot);

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
  std::vector<std::unique_ptr<PolicyEntry[]>> chunks_;
  uint32_t next_id_ = 0;            // ids below it have been handed out
  std::vector<uint32_t> free_ids_;  // erased entries, reused first
};

// A set of bit positions with "first set bit at or after i" in a few word
// operations: level 0 holds the bits, each higher level one bit per non-zero
// word of the level below.
class LevelBitset {
 public:
  static constexpr size_t kNone = SIZE_MAX;

  // Clears every bit and makes room for positions [0, bits).
  void Reset(size_t bits);
  void Set(size_t i) {
    for (auto& level : levels_) {
      uint64_t& word = level[i >> 6];
      const bool was_empty = word == 0;
      word |= uint64_t{1} << (i & 63);
      if (!was_empty) return;  // the levels above already know this word
      i >>= 6;
    }
  }
  void Clear(size_t i) {
    for (auto& level : levels_) {
      uint64_t& word = level[i >> 6];
      word &= ~(uint64_t{1} << (i & 63));
      if (word != 0) return;  // the word stays non-empty above
      i >>= 6;
    }
  }
  // The smallest set position >= i, or kNone.
  size_t FindFrom(size_t i) const;

 private:
  std::vector<std::vector<uint64_t>> levels_;
};

// The entries of one recency-ordered list (LRU's list, ARC's T1 or T2),
// oldest first, with the evictable ones indexed.
class RecencyOrder {
 public:
  static constexpr uint32_t kEnd = UINT32_MAX;

  RecencyOrder() { Clear(); }

  size_t size() const { return live_; }
  size_t evictable() const { return evictable_; }
  // Appends at the MRU end; indexed as evictable when its ref_cnt is 0.
  void PushMru(PolicyEntry* entry);
  void Erase(PolicyEntry* entry) {
    slots_[entry->pos] = nullptr;
    --live_;
    SetEvictable(entry, false);
  }
  void MoveToMru(PolicyEntry* entry) {
    if (entry->pos + 1 == tail_) return;  // already the most recent
    Erase(entry);
    PushMru(entry);
  }
  // Re-reads the entry's ref_cnt (the MarkEvictable/MarkNonEvictable hooks).
  void SyncEvictable(PolicyEntry* entry) { SetEvictable(entry, entry->status.ref_cnt == 0); }

  // The slot of the oldest indexed entry at slot >= from, or kEnd. Slots are
  // stable while nothing is pushed, so an eviction can scan without mutating.
  uint32_t NextEvictable(uint32_t from) const {
    if (from >= tail_) return kEnd;
    const size_t found = evictable_bits_.FindFrom(from);
    return found == LevelBitset::kNone ? kEnd : static_cast<uint32_t>(found);
  }
  PolicyEntry* At(uint32_t pos) const { return slots_[pos]; }

  // Calls fn(entry) oldest first (tests and debugging; O(slots)).
  template <class Fn>
  void ForEach(Fn&& fn) const {
    for (uint32_t pos = 0; pos < tail_; ++pos) {
      if (slots_[pos] != nullptr) fn(slots_[pos]);
    }
  }
  void Clear();

 private:
  void SetEvictable(PolicyEntry* entry, bool evictable) {
    if (entry->indexed == evictable) return;
    entry->indexed = evictable;
    if (evictable) {
      evictable_bits_.Set(entry->pos);
      ++evictable_;
    } else {
      evictable_bits_.Clear(entry->pos);
      --evictable_;
    }
  }
  // Renumbers the live entries 0..live-1 in an array sized twice their
  // number, so its cost is amortized over the pushes that filled the array.
  void Compact();

  static constexpr size_t kMinSlots = 64;

  std::vector<PolicyEntry*> slots_;  // nullptr: vacated by Erase or a move
  uint32_t tail_ = 0;                // the next slot PushMru takes
  size_t live_ = 0;
  size_t evictable_ = 0;
  LevelBitset evictable_bits_;
};

// A doubly-linked list threaded through PolicyEntry::prev/next, oldest
// first (ARC's ghost lists B1 and B2).
class GhostList {
 public:
  size_t size() const { return size_; }
  PolicyEntry* front() const { return head_; }
  void PushBack(PolicyEntry* entry) {
    entry->prev = tail_;
    entry->next = nullptr;
    (tail_ != nullptr ? tail_->next : head_) = entry;
    tail_ = entry;
    ++size_;
  }
  void Unlink(PolicyEntry* entry) {
    (entry->prev != nullptr ? entry->prev->next : head_) = entry->next;
    (entry->next != nullptr ? entry->next->prev : tail_) = entry->prev;
    entry->prev = entry->next = nullptr;
    --size_;
  }
  void MoveToBack(PolicyEntry* entry) {
    Unlink(entry);
    PushBack(entry);
  }
  void Clear() {
    head_ = tail_ = nullptr;
    size_ = 0;
  }

 private:
  PolicyEntry* head_ = nullptr;
  PolicyEntry* tail_ = nullptr;
  size_t size_ = 0;
};

// Whether Evict may take `entry`: ready, unheld and not protected. The
// ref_cnt check also covers a caller that skipped MarkNonEvictable.
inline bool Evictable(const PolicyEntry& entry, const OffloadKeySet& protected_keys) {
  return entry.status.ref_cnt == 0 &&
         (protected_keys.empty() || !protected_keys.contains(entry.key));
}

// The next entry of `order` that Evict may take, scanning from *cursor
// (monotonic: *cursor moves past it); nullptr once the scan is exhausted.
inline PolicyEntry* NextEvictable(const RecencyOrder& order, uint32_t* cursor,
                                  const OffloadKeySet& protected_keys) {
  for (uint32_t pos = order.NextEvictable(*cursor); pos != RecencyOrder::kEnd;
       pos = order.NextEvictable(pos + 1)) {
    PolicyEntry* entry = order.At(pos);
    if (Evictable(*entry, protected_keys)) {
      *cursor = pos + 1;
      return entry;
    }
  }
  *cursor = RecencyOrder::kEnd;
  return nullptr;
}

// How many keys a policy makes room for up front: a typical CPU tier's,
// bounded so that a huge capacity does not allocate eagerly.
inline size_t InitialKeys(size_t keys) { return keys < (size_t{1} << 20) ? keys : size_t{1} << 20; }

std::unique_ptr<CachePolicy> NewLruPolicy(size_t capacity_rows);

}  // namespace kvtier::internal
