// CachePolicy: which CPU-tier rows to keep and which to evict, with vLLM's
// semantics (vLLM's vllm/v1/kv_offload/cpu/policies/{lru,arc}.py).
//
// The policy owns the key -> RowStatus map; the CPU tier (cpu_tier.h) owns
// the free-row pool and changes ref_cnt through the pointer Get() returns,
// telling the policy when a row becomes evictable (ref_cnt reaches 0) or
// stops being evictable (ref_cnt leaves 0), so a policy can index evictable
// rows without scanning.
//
// Not thread-safe: the CPU tier serializes every call under its own lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <unordered_set>
#include <utility>
#include <vector>

#include "kvtier/config.h"
#include "kvtier/hashing.h"

namespace kvtier::internal {

struct OffloadKeyHasher {
  size_t operator()(const OffloadKey& key) const noexcept;
};
using OffloadKeySet = std::unordered_set<OffloadKey, OffloadKeyHasher>;

// One cached row. ref_cnt: -1 = not ready (being written by a GPU store or a
// promotion from a secondary tier), 0 = ready and evictable, > 0 = ready and
// held by that many readers (GPU loads, secondary-tier stores, pins).
struct RowStatus {
  int32_t ref_cnt = -1;
  uint32_t row = 0;  // index of the row in the CPU tier's region
  bool ready() const { return ref_cnt >= 0; }
};

using EvictedRows = std::vector<std::pair<OffloadKey, RowStatus>>;

class CachePolicy {
 public:
  virtual ~CachePolicy() = default;

  // The status of `key`, or nullptr. The pointer stays valid until the key is
  // removed, evicted or cleared.
  virtual RowStatus* Get(const OffloadKey& key) = 0;
  // Adds a key that is not present (ARC: into T1, and out of the ghost lists).
  virtual void Insert(const OffloadKey& key, RowStatus status) = 0;
  // Drops a present key whatever its state (a failed store or promotion).
  virtual void Remove(const OffloadKey& key) = 0;
  // Marks keys recently used, processed in reverse so keys[0] ends most
  // recent. Absent keys are ignored (ARC: ghost hits adapt the target).
  virtual void Touch(std::span<const OffloadKey> keys) = 0;
  // Evicts exactly n rows with ref_cnt == 0 that are not in `protected_keys`,
  // in the policy's order, or returns nullopt and changes nothing.
  // n == 0 gives an empty vector. ARC, as arc.py, may return nullopt although
  // T1 has enough such rows: while |T1| is below int(target_t1_size) it only
  // takes from T2.
  virtual std::optional<EvictedRows> Evict(size_t n, const OffloadKeySet& protected_keys) = 0;
  // ref_cnt of a present key just became 0 / just left 0.
  // (The policies index evictable rows through these; both hooks re-read
  // ref_cnt, so an extra call is harmless, but a row whose ref_cnt reached 0
  // without MarkEvictable may be passed over by Evict.)
  virtual void MarkEvictable(const OffloadKey& key) = 0;
  virtual void MarkNonEvictable(const OffloadKey& key) = 0;
  // Forgets every key and all adaptive state (ghost lists, target).
  virtual void Clear() = 0;
  virtual size_t size() const = 0;
};

// capacity_rows: the CPU tier's row count (ARC bounds its target and ghost
// lists by it).
std::unique_ptr<CachePolicy> MakeCachePolicy(EvictionPolicy policy, size_t capacity_rows);

}  // namespace kvtier::internal
