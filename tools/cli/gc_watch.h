// `kvtier gc --watch`: gc as a long-running sidecar (issue 25 items 2, 3, 5).
//
// Every interval, and sooner when a root's free space falls below its floor
// (statvfs, sampled every check period), the holder of the volume's collector
// lease (src/ops/collector_lease.h, FORMAT.md L120-L123) runs one gc pass over
// all roots: the one-shot gc's bounds (max_bytes/low_water, older_than, stale
// temp files, short blocks) plus the free-space floor, turned into a number of
// block bytes to free on each root (GcOptions::reclaim_bytes). The other
// watchers only watch the lease, and take it over when its holder dies.
// What it did and sees is exported as Prometheus text (docs/metrics.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kvtier/ops.h"

namespace kvtier::internal {

// A free-space amount: a share of the file system's size, or bytes.
struct FreeSpace {
  double percent = 0;  // 0..100, used when bytes is empty
  std::optional<uint64_t> bytes;
  uint64_t Of(uint64_t fs_bytes) const;
};
// "10%", "12.5%", "50G", "1048576" -> a FreeSpace; kInvalidArgument otherwise.
Result<FreeSpace> ParseFreeSpace(std::string_view text);

struct GcWatchOptions {
  GcOptions gc;                   // what each pass enforces (root, bounds, keep, ...)
  uint64_t interval_ms = 60000;   // between full passes
  uint64_t check_ms = 2000;       // between statvfs samples (and metrics writes)
  std::optional<FreeSpace> min_free;         // a pass when a root's free space is below this ...
  std::optional<FreeSpace> min_free_target;  // ... frees blocks up to this (default: min_free + a quarter)
  uint64_t collector_ttl_ms = 30000;         // L122: a lease unchanged this long is taken over
  std::string metrics_file;                  // "" : none; written by temp file and rename
  std::optional<uint16_t> metrics_port;      // serve GET /metrics here (0: any free port, logged)
  std::string metrics_address = "127.0.0.1";  // ... on this IPv4 address
};

// Runs until *stop (exit 0), or a hung mount (exit 8, ExitHung). Logs one
// line per pass and per lease change to stderr. 1 when the lease directory
// cannot be made or the metrics port cannot be listened on, 2 for a root
// that does not look like one (without force).
int RunGcWatch(const GcWatchOptions& options, const std::atomic<bool>& stop);

}  // namespace kvtier::internal
