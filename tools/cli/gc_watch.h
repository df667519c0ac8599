// `kvtier gc --watch`: the library's watch collector (kvtier/collector.h)
// as a long-running sidecar (docs/ops.md), with its log on stderr and its
// metrics on a port.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "kvtier/collector.h"

namespace kvtier::internal {

// "10%", "12.5%", "50G", "1048576" -> a FreeSpace; kInvalidArgument otherwise.
Result<FreeSpace> ParseFreeSpace(std::string_view text);

struct GcWatchOptions {
  CollectorOptions collector;                 // log and on_metrics are set here
  std::optional<uint16_t> metrics_port;       // serve GET /metrics here (0: any free port, logged)
  std::string metrics_address = "127.0.0.1";  // ... on this IPv4 address
  // Called once the collector has stopped (or failed to open), before the
  // exit, a hung one's too (the CLI closes its KV-event publisher). Empty: none.
  std::function<void()> on_end;
};

// Runs until *stop (exit 0), or a hung mount (exit 8, ExitHung). Logs one
// line per pass and per lease change to stderr, and what keeps it from the
// lease once per TTL (FORMAT.md L153). 2 for a bad list of roots or a root
// that does not look like one (without force); 1 when the root cannot be
// listed, the lease directory cannot be made or the metrics port cannot be
// listened on; 4 when it stops while something other than a live collector
// keeps it from collecting (Collector::Run's kUnavailable).
int RunGcWatch(GcWatchOptions options, const std::atomic<bool>& stop);

}  // namespace kvtier::internal
