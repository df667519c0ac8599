// Small pieces of the fs tier that its start-up and its I/O loop share
// (fs_tier_internal.h).
#include "fs/fs_tier_internal.h"

#include "format/layout_names.h"
#include "fs/sick_volume_policy.h"

namespace kvtier::internal {

SchedulerLimits SchedulerLimitsFor(const FsTierOpenOptions& o) {
  SchedulerLimits limits;
  limits.reads_in_flight_max = o.tier.n_read_threads;
  limits.writes_in_flight_max = o.tier.n_write_threads;
  limits.stores_while_loading_max = o.tier.stores_while_loading_max;
  if (o.tier.io_timeout_ms > 0) limits.abandon_after_ns = (uint64_t{o.tier.io_timeout_ms} + kAbandonGraceMs) * 1'000'000;
  return limits;
}

BlockPathParts BlockParts(const Namespace& ns, const OffloadKey& key) {
  const std::string hex = key.hash.Hex();
  return {ns.block_dir_name(), format::Shard1Name(hex), format::Shard2Name(hex, key.group_idx),
          format::BlockFileName(hex)};
}

}  // namespace kvtier::internal
