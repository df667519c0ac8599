// ARC's constructor and a read-only view of its state for tests.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include "cpu_tier/cache_policy.h"

namespace kvtier::internal {

std::unique_ptr<CachePolicy> NewArcPolicy(size_t capacity_rows);

// Everything ARC decides by, each list oldest (LRU) first.
struct ArcDebugState {
  double target_t1_size = 0;
  std::vector<OffloadKey> t1, t2;  // rows
  std::vector<OffloadKey> b1, b2;  // ghosts
};

// The state of an ARC policy; nullopt for any other policy. O(size): tests only.
std::optional<ArcDebugState> GetArcDebugState(const CachePolicy& policy);

}  // namespace kvtier::internal
