// The keys of the cache policy tests (cache_policy_test,
// cache_policy_model_test): 16-byte keys made from integer ids (MixedKey,
// Keys, KeySet), and the ids back from keys (Id, IdsOf).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu_tier/cache_policy.h"

namespace kvtier::internal::policytest {

using Ids = std::vector<uint64_t>;

// A 16-byte key (XXH3-sized) whose first 8 bytes are `id`; the second half
// differs too, so no test depends on which bytes the hasher reads.
inline OffloadKey MixedKey(uint64_t id, uint32_t group = 0) {
  uint8_t bytes[16];
  const uint64_t other = ~id * 0x9e3779b97f4a7c15ull;
  std::memcpy(bytes, &id, 8);
  std::memcpy(bytes + 8, &other, 8);
  return OffloadKey{*BlockHash::FromBytes(bytes), group};
}

inline uint64_t Id(const OffloadKey& key) {
  uint64_t id = 0;
  std::memcpy(&id, key.hash.bytes().data(), 8);
  return id;
}

inline Ids IdsOf(const std::vector<OffloadKey>& keys) {
  Ids ids;
  for (const OffloadKey& key : keys) ids.push_back(Id(key));
  return ids;
}

inline std::vector<OffloadKey> Keys(const Ids& ids) {
  std::vector<OffloadKey> keys;
  for (uint64_t id : ids) keys.push_back(MixedKey(id));
  return keys;
}

inline OffloadKeySet KeySet(const Ids& ids) {
  const std::vector<OffloadKey> keys = Keys(ids);
  return OffloadKeySet(keys.begin(), keys.end());
}

}  // namespace kvtier::internal::policytest
