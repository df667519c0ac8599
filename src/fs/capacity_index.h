// CapacityIndex: the byte budget of one block directory (`max_bytes`, vLLM
// PR #54327): which blocks of this tier's <ns>_r<rank> directory exist, their
// bytes and their recency, so that a store batch can reserve room and evict
// the least recently used blocks that nothing reads or writes.
//
// It holds one entry per block of the directory (about 200 bytes each: a
// hash-map node and an ordered-set node; 10^6 blocks ~ 200 MB), seeded by the
// startup scan (TierSpace) with each file's size and mtime, and kept by the
// tier's own stores, loads and lookups. It never scans by itself and never
// blocks anything but its own short critical sections; a volume-wide
// `kvtier gc` may remove files it lists (a later load or lookup misses and
// the entry is dropped; an eviction of a vanished file is fine).
//
// Pure bookkeeping, no syscalls. Thread safety: every method may be called
// from any thread; the counters (bytes(), blocks(), ...) are atomics read
// without the lock.
#pragma once

#include <array>
#include <atomic>
#include <compare>
#include <cstdint>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvtier/fs_tier.h"
#include "kvtier/hashing.h"

namespace kvtier::internal {

// A block file's identity: its hash bytes and its group (L6, L7).
struct CapacityKey {
  std::array<uint8_t, BlockHash::kMaxBytes> hash{};
  uint8_t size = 0;
  uint32_t group = 0;

  static CapacityKey Of(const OffloadKey& key);
  // "<h[0:3]>/<h[3:5]>_g<g>/<h>.bin", relative to the block directory (L8).
  std::string RelPath() const;
  auto operator<=>(const CapacityKey&) const = default;
};

struct CapacityKeyHash {
  size_t operator()(const CapacityKey& key) const;
};

// A block file the startup scan found.
struct ScannedBlock {
  CapacityKey key;
  uint64_t bytes = 0;
  uint64_t mtime_ns = 0;  // CLOCK_REALTIME, as the recency of a block used now
};

class CapacityIndex {
 public:
  explicit CapacityIndex(uint64_t bytes_max) : bytes_max_(bytes_max) {}
  CapacityIndex(const CapacityIndex&) = delete;
  CapacityIndex& operator=(const CapacityIndex&) = delete;

  struct Admission {
    // OK, or kRejected naming why the batch cannot fit (nothing reserved).
    Status status;
    // Blocks taken out of the index to make room: their files are to be
    // unlinked before the batch counts as written.
    std::vector<CapacityKey> victims;
  };
  // Reserves `bytes_each` for every key of a store batch not already listed
  // (a listed one is being written or exists: the store skips it), evicting
  // least recently used blocks that no load pins and no store writes. The
  // batch is refused whole, with nothing evicted, when its new bytes exceed
  // max_bytes or when the evictable blocks cannot make room.
  Admission Reserve(std::span<const CapacityKey> keys, uint64_t bytes_each);
  // A reserved key's store ended. kOk, kSkippedExists: the block is there,
  // used now. kError: it stays counted (a partial file, or a late rename of
  // an abandoned store, may exist; as the PR, partial writes stay in the
  // accounting until evicted). kDropped: nothing was written; the
  // reservation is released.
  void StoreDone(const CapacityKey& key, KeyOutcome outcome);
  // A load of `key` is running: it is not evicted until Unpin.
  void Pin(const CapacityKey& key);
  void Unpin(const CapacityKey& key);
  // A load or lookup found the block: it is used now (added at `bytes` when
  // unknown: a file the scan has not reached, or another writer's).
  void Used(const CapacityKey& key, uint64_t bytes);
  // A load or lookup found no block (gc removed it), or a corrupt one the
  // load removed: the entry goes, unless a store of it is in flight.
  void Gone(const CapacityKey& key);
  // Scanned files, each added unless its key is already listed.
  void Seed(std::span<const ScannedBlock> blocks);

  uint64_t bytes_max() const { return bytes_max_; }
  uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  uint64_t blocks() const { return blocks_.load(std::memory_order_relaxed); }
  uint64_t evicted_blocks() const { return evicted_blocks_.load(std::memory_order_relaxed); }
  uint64_t evicted_bytes() const { return evicted_bytes_.load(std::memory_order_relaxed); }
  uint64_t refused_rows() const { return refused_rows_.load(std::memory_order_relaxed); }

 private:
  struct Entry {
    uint64_t bytes = 0;
    uint64_t stamp_ns = 0;  // recency: the lru_ position
    uint32_t writers = 0;   // stores of this key in flight
    bool written = false;   // a file may exist (not only a reservation)
  };
  using Map = std::unordered_map<CapacityKey, Entry, CapacityKeyHash>;

  // Called with mu_ held.
  void Insert(const CapacityKey& key, Entry entry);
  void Erase(Map::iterator it);
  void Restamp(Map::iterator it, uint64_t stamp_ns);
  uint64_t NowStampLocked();
  bool Evictable(const CapacityKey& key, const Entry& entry) const;
  Status PickVictims(uint64_t need, std::vector<CapacityKey>* victims) const;
  Status Refuse(size_t rows, std::string why);

  const uint64_t bytes_max_;
  std::mutex mu_;
  Map entries_;
  std::set<std::pair<uint64_t, CapacityKey>> lru_;  // (stamp_ns, key), least recent first
  std::unordered_map<CapacityKey, uint32_t, CapacityKeyHash> pins_;
  uint64_t last_stamp_ns_ = 0;
  std::atomic<uint64_t> bytes_{0}, blocks_{0}, evicted_blocks_{0}, evicted_bytes_{0}, refused_rows_{0};
};

}  // namespace kvtier::internal
