// The max_bytes bookkeeping (capacity_index.h).
#include "fs/capacity_index.h"

#include <time.h>

#include <algorithm>
#include <cstring>

#include "format/layout_names.h"

namespace kvtier::internal {

CapacityKey CapacityKey::Of(const OffloadKey& key) {
  CapacityKey out;
  const std::span<const uint8_t> bytes = key.hash.bytes();
  std::copy(bytes.begin(), bytes.end(), out.hash.begin());
  out.size = static_cast<uint8_t>(bytes.size());
  out.group = key.group_idx;
  return out;
}

std::string CapacityKey::RelPath() const {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (size_t i = 0; i < size; ++i) {
    hex += kHex[hash[i] >> 4];
    hex += kHex[hash[i] & 15];
  }
  return format::BlockRelPath(hex, group);
}

size_t CapacityKeyHash::operator()(const CapacityKey& key) const {
  // The hash bytes are a digest already: their first 8 mixed with the group suffice.
  uint64_t h = 0;
  std::memcpy(&h, key.hash.data(), sizeof h);
  return static_cast<size_t>(h ^ (uint64_t{key.group} * 0x9e3779b97f4a7c15ULL) ^ key.size);
}

namespace {

uint64_t RealtimeNs() {
  struct timespec ts {};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

// Strictly increasing, so that blocks used one after the other keep that
// order even within one clock tick.
uint64_t CapacityIndex::NowStampLocked() {
  last_stamp_ns_ = std::max(RealtimeNs(), last_stamp_ns_ + 1);
  return last_stamp_ns_;
}

void CapacityIndex::Insert(const CapacityKey& key, Entry entry) {
  lru_.emplace(entry.stamp_ns, key);
  bytes_ += entry.bytes;
  ++blocks_;
  entries_.emplace(key, entry);
}

void CapacityIndex::Erase(Map::iterator it) {
  lru_.erase({it->second.stamp_ns, it->first});
  bytes_ -= it->second.bytes;
  --blocks_;
  entries_.erase(it);
}

void CapacityIndex::Restamp(Map::iterator it, uint64_t stamp_ns) {
  lru_.erase({it->second.stamp_ns, it->first});
  it->second.stamp_ns = stamp_ns;
  lru_.emplace(stamp_ns, it->first);
}

bool CapacityIndex::Evictable(const CapacityKey& key, const Entry& entry) const {
  return entry.writers == 0 && !pins_.contains(key);
}

// The least recently used evictable blocks that free at least `need` bytes,
// or kRejected when all of them together do not.
Status CapacityIndex::PickVictims(uint64_t need, std::vector<CapacityKey>* victims) const {
  uint64_t freed = 0;
  for (auto it = lru_.begin(); it != lru_.end() && freed < need; ++it) {
    const Entry& entry = entries_.at(it->second);
    if (!Evictable(it->second, entry)) continue;
    victims->push_back(it->second);
    freed += entry.bytes;
  }
  if (freed >= need) return Status::Ok();
  victims->clear();
  return Status(StatusCode::kRejected, "max_bytes " + std::to_string(bytes_max_) + ": the batch needs " +
                                           std::to_string(need) + " bytes freed, and blocks being read or "
                                           "written hold all but " + std::to_string(freed));
}

Status CapacityIndex::Refuse(size_t rows, std::string why) {
  refused_rows_ += rows;
  return Status(StatusCode::kRejected, std::move(why));
}

CapacityIndex::Admission CapacityIndex::Reserve(std::span<const CapacityKey> keys, uint64_t bytes_each) {
  Admission out;
  std::lock_guard lock(mu_);
  // Listed keys (the batch's own repeats included) are held as writers
  // first, so the eviction below cannot pick them.
  std::vector<CapacityKey> fresh;
  for (const CapacityKey& key : keys) {
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      ++it->second.writers;
    } else if (std::find(fresh.begin(), fresh.end(), key) == fresh.end()) {
      fresh.push_back(key);
    }
  }
  const uint64_t new_bytes = fresh.size() * bytes_each;
  const uint64_t used = bytes();
  const uint64_t need = used + new_bytes > bytes_max_ ? used + new_bytes - bytes_max_ : 0;
  if (new_bytes > bytes_max_) {
    out.status = Refuse(keys.size(), "a store batch of " + std::to_string(new_bytes) +
                                         " new bytes is larger than max_bytes " + std::to_string(bytes_max_));
  } else if (Status s = PickVictims(need, &out.victims); !s.ok()) {
    out.status = Refuse(keys.size(), s.message());
  }
  if (!out.status.ok()) {
    for (const CapacityKey& key : keys) {
      if (std::find(fresh.begin(), fresh.end(), key) == fresh.end()) --entries_.at(key).writers;
    }
    return out;
  }
  for (const CapacityKey& key : out.victims) {
    auto it = entries_.find(key);
    evicted_bytes_ += it->second.bytes;
    ++evicted_blocks_;
    Erase(it);
  }
  for (const CapacityKey& key : fresh) Insert(key, Entry{bytes_each, NowStampLocked(), 0, false});
  for (const CapacityKey& key : keys) {
    if (std::find(fresh.begin(), fresh.end(), key) != fresh.end()) ++entries_.at(key).writers;
  }
  return out;
}

void CapacityIndex::StoreDone(const CapacityKey& key, KeyOutcome outcome) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return;  // not reserved (defensive: a writer is never evicted)
  if (it->second.writers > 0) --it->second.writers;
  switch (outcome) {
    case KeyOutcome::kOk:
    case KeyOutcome::kSkippedExists:
      it->second.written = true;
      Restamp(it, NowStampLocked());
      return;
    case KeyOutcome::kError:
      it->second.written = true;
      return;
    default:
      if (!it->second.written && it->second.writers == 0) Erase(it);
      return;
  }
}

void CapacityIndex::Pin(const CapacityKey& key) {
  std::lock_guard lock(mu_);
  ++pins_[key];
}

void CapacityIndex::Unpin(const CapacityKey& key) {
  std::lock_guard lock(mu_);
  auto it = pins_.find(key);
  if (it != pins_.end() && --it->second == 0) pins_.erase(it);
}

void CapacityIndex::Used(const CapacityKey& key, uint64_t bytes) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    Insert(key, Entry{bytes, NowStampLocked(), 0, true});
  } else {
    Restamp(it, NowStampLocked());
  }
}

void CapacityIndex::Gone(const CapacityKey& key) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(key);
  if (it != entries_.end() && it->second.writers == 0) Erase(it);
}

void CapacityIndex::Seed(std::span<const ScannedBlock> blocks) {
  std::lock_guard lock(mu_);
  for (const ScannedBlock& block : blocks) {
    if (entries_.contains(block.key)) continue;
    Insert(block.key, Entry{block.bytes, block.mtime_ns, 0, true});
  }
}

}  // namespace kvtier::internal
