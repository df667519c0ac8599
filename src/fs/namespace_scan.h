// The startup scan of one tier's block directory (<ns>_r<rank>, FORMAT.md
// L2-L8): every block file with its size and mtime, for the max_bytes index
// (capacity_index.h) and the namespace usage metrics (tier_space.h). Only
// names that match the layout exactly count (a temp file, a probe, a stray
// file or a symlink does not); nothing is followed, opened for data or
// changed. Runs on TierSpace's own thread: on a hung mount only that thread
// waits.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "fs/capacity_index.h"

namespace kvtier::internal {

struct ScanTotals {
  uint64_t bytes = 0, blocks = 0;
  int err = 0;  // the first errno of opening or listing a directory (0: none); the rest was still walked
};

// Walks `block_dir` below `root_fd`, handing each shard directory's blocks to
// `found` (one call per <hhh>/<hh>_g<g> directory that holds any). Stops
// early, between directories, once `stop()` is true.
ScanTotals ScanBlockDir(int root_fd, const std::string& block_dir, const std::function<bool()>& stop,
                        const std::function<void(std::span<const ScannedBlock>)>& found);

}  // namespace kvtier::internal
