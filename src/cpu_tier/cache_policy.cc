// The policy factory, the key hasher and the shared list machinery of
// policy_list.h.
#include "cpu_tier/cache_policy.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "cpu_tier/arc_policy.h"
#include "cpu_tier/policy_list.h"

namespace kvtier::internal {

size_t OffloadKeyHasher::operator()(const OffloadKey& key) const noexcept {
  // Real keys are SHA-256 or XXH3 output, so a few bytes are as good as all
  // of them. The last 8 bytes join the first 8 and the murmur finalizer
  // mixes the lot, so that structured keys (tests, tools) spread as well.
  const std::span<const uint8_t> bytes = key.hash.bytes();
  const size_t n = bytes.size();
  uint64_t head = 0;
  uint64_t tail = 0;
  std::memcpy(&head, bytes.data(), std::min<size_t>(n, 8));
  if (n > 8) std::memcpy(&tail, bytes.data() + n - 8, 8);
  uint64_t h =
      head ^ std::rotl(tail, 29) ^ (((uint64_t{key.group_idx} << 8) | n) * 0x9e3779b97f4a7c15ull);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return static_cast<size_t>(h);
}

std::pair<PolicyEntry*, bool> EntryTable::FindOrInsert(const OffloadKey& key) {
  if (PolicyEntry* found = Find(key)) return {found, false};
  if (2 * (size_ + 1) > slots_.size()) Grow();
  PolicyEntry* entry = NewEntry();
  entry->key = key;
  Place(Slot{Hash(key), entry->id + 1});
  ++size_;
  return {entry, true};
}

void EntryTable::Erase(PolicyEntry* entry) {
  size_t hole = Hash(entry->key) & mask_;
  while (slots_[hole].index != entry->id + 1) hole = (hole + 1) & mask_;
  // Backward shift: a later slot of the probe run moves into the hole when
  // the hole lies between its home and itself, so every key stays reachable
  // from its home without tombstones.
  for (size_t next = (hole + 1) & mask_; slots_[next].index != 0; next = (next + 1) & mask_) {
    const size_t home = slots_[next].hash & mask_;
    if (((next - home) & mask_) >= ((next - hole) & mask_)) {
      slots_[hole] = slots_[next];
      hole = next;
    }
  }
  slots_[hole] = Slot{};
  --size_;
  free_ids_.push_back(entry->id);
}

void EntryTable::Reset(size_t expected_keys) {
  size_t slots = 16;
  while (slots < 2 * expected_keys) slots <<= 1;
  slots_.assign(slots, Slot{});
  mask_ = slots - 1;
  size_ = 0;
  chunks_.clear();
  next_id_ = 0;
  free_ids_.clear();
}

PolicyEntry* EntryTable::NewEntry() {
  uint32_t id = next_id_;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    ++next_id_;
    if ((id >> kChunkBits) == chunks_.size()) {
      chunks_.push_back(std::make_unique<PolicyEntry[]>(size_t{1} << kChunkBits));
    }
  }
  PolicyEntry* entry = At(id);
  *entry = PolicyEntry{};
  entry->id = id;
  return entry;
}

void EntryTable::Place(Slot slot) {
  size_t i = slot.hash & mask_;
  while (slots_[i].index != 0) i = (i + 1) & mask_;
  slots_[i] = slot;
}

void EntryTable::Grow() {
  const std::vector<Slot> old = std::move(slots_);
  slots_.assign(2 * old.size(), Slot{});
  mask_ = slots_.size() - 1;
  for (const Slot& slot : old) {
    if (slot.index != 0) Place(slot);
  }
}

void LevelBitset::Reset(size_t bits) {
  size_t words = std::max<size_t>(1, (bits + 63) / 64);
  size_t levels = 1;
  for (size_t w = words; w > 1; w = (w + 63) / 64) ++levels;
  levels_.resize(levels);
  for (auto& level : levels_) {
    level.assign(words, 0);
    words = (words + 63) / 64;
  }
}

size_t LevelBitset::FindFrom(size_t i) const {
  // Climb until some word at or after i's holds a set bit...
  size_t level = 0;
  size_t pos = i;
  for (;;) {
    const std::vector<uint64_t>& words = levels_[level];
    const size_t w = pos >> 6;
    if (w >= words.size()) return kNone;
    const uint64_t bits = words[w] & (~uint64_t{0} << (pos & 63));
    if (bits != 0) {
      pos = (w << 6) | static_cast<size_t>(std::countr_zero(bits));
      break;
    }
    if (++level == levels_.size()) return kNone;
    pos = w + 1;  // the words after w, as bits of the level above
  }
  // ...then descend along the lowest set bits.
  while (level > 0) {
    --level;
    pos = (pos << 6) | static_cast<size_t>(std::countr_zero(levels_[level][pos]));
  }
  return pos;
}

void RecencyOrder::PushMru(PolicyEntry* entry) {
  if (tail_ == slots_.size()) Compact();
  entry->pos = tail_;
  entry->indexed = false;
  slots_[tail_++] = entry;
  ++live_;
  SyncEvictable(entry);
}

void RecencyOrder::Compact() {
  // Sliding entries down in place keeps their order; slot p only ever
  // receives an entry from a slot >= p.
  uint32_t live = 0;
  for (uint32_t pos = 0; pos < tail_; ++pos) {
    if (PolicyEntry* entry = slots_[pos]) {
      entry->pos = live;
      slots_[live++] = entry;
    }
  }
  const size_t slots = std::max(kMinSlots, 2 * size_t{live});
  slots_.resize(slots);
  std::fill(slots_.begin() + live, slots_.end(), nullptr);
  evictable_bits_.Reset(slots);
  for (uint32_t pos = 0; pos < live; ++pos) {
    if (slots_[pos]->indexed) evictable_bits_.Set(pos);
  }
  tail_ = live;
}

void RecencyOrder::Clear() {
  slots_.assign(kMinSlots, nullptr);
  evictable_bits_.Reset(kMinSlots);
  tail_ = 0;
  live_ = 0;
  evictable_ = 0;
}

std::unique_ptr<CachePolicy> MakeCachePolicy(EvictionPolicy policy, size_t capacity_rows) {
  switch (policy) {
    case EvictionPolicy::kLru:
      return NewLruPolicy(capacity_rows);
    case EvictionPolicy::kArc:
      return NewArcPolicy(capacity_rows);
  }
  return NewLruPolicy(capacity_rows);
}

}  // namespace kvtier::internal
