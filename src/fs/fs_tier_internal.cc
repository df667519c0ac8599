// Small pieces of the fs tier that its start-up and its I/O loop share
// (fs_tier_internal.h).
#include "fs/fs_tier_internal.h"

#include "format/block_hashes.h"
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

Result<std::vector<std::string>> BlockHashRecords(const Namespace& ns, std::span<const OffloadKey> keys,
                                                  std::span<const std::vector<BlockHash>> hashes) {
  std::vector<std::string> out;
  if (hashes.empty()) return out;
  if (hashes.size() != keys.size()) return InvalidArgument("fs tier: block_hashes: one list per key is required");
  out.resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (hashes[i].empty()) continue;
    const size_t blocks = format::HashesPerFile(ns.spec(), keys[i].group_idx);
    const std::string problem = format::BlockHashListProblem(hashes[i], keys[i].hash, blocks);
    if (!problem.empty()) return InvalidArgument("fs tier: block_hashes of key " + keys[i].Hex() + ": " + problem);
    if (blocks > 1) out[i] = format::EncodeBlockHashRecord(hashes[i]);
  }
  return out;
}

}  // namespace kvtier::internal
