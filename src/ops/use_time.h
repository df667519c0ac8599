// How gc and du count a block's use time (max(atime, mtime)) that lies after
// their own clock (FORMAT.md L155): a writer whose clock is ahead, or a
// co-tenant who dated its blocks in the future to keep them.
//
// Within kFutureUseToleranceS of now it counts as now (ordinary skew between
// hosts); further ahead it counts as the epoch, least recently used of all.
// Counting such a time as now, or as itself, would keep the block ahead of
// every block really in use for as long as the date lies ahead (centuries,
// for one utime call); counted oldest, dating a block ahead gains its writer
// nothing: it can only date its own blocks, and those go first. What dating
// within the tolerance buys is the same as touching the block for that long.
#pragma once

#include <algorithm>
#include <cstdint>
#include <ctime>

namespace kvtier::internal {

// Kerberos' default for the skew it accepts between hosts.
inline constexpr int64_t kFutureUseToleranceS = 300;

// The use time gc orders blocks by, in a run whose ages are measured from
// `now` (unix seconds both). How far ahead a use lies is judged against the
// later of `now` and the clock at the call, so that a block written during a
// long run (after `now`) is never taken for one dated ahead.
inline int64_t CountedUse(int64_t now, int64_t use) {
  if (use <= now) return use;
  const int64_t wall = std::max<int64_t>(now, std::time(nullptr));
  if (use <= wall) return now;
  const uint64_t ahead = static_cast<uint64_t>(use) - static_cast<uint64_t>(wall);  // modular: exact, use > wall
  return ahead <= static_cast<uint64_t>(kFutureUseToleranceS) ? now : 0;
}

// Whether a use time is so far ahead that it counts as the epoch.
inline bool FarFuture(int64_t now, int64_t use) { return use > now && CountedUse(now, use) != now; }

}  // namespace kvtier::internal
