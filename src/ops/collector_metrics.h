// What a watch collector (kvtier/collector.h) counts, and its Prometheus
// text (docs/metrics.md), written for node-exporter's textfile collector.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "events/kv_event_publisher.h"
#include "kvtier/ops.h"

namespace kvtier::internal {

struct RootUsage {
  std::string root;
  bool ok = false;  // statvfs answered
  uint64_t size = 0, used = 0, avail = 0;  // bytes; avail: free to unprivileged writers
  uint64_t floor = 0, target = 0;          // min_free and its target, in bytes (0: none)
};

struct CollectorMetrics {
  std::map<std::string, std::pair<uint64_t, uint64_t>> reclaimed;  // reason -> files, bytes
  uint64_t failed = 0, passes = 0, pass_errors = 0, passes_stopped = 0, passes_min_free = 0;
  double last_pass_s = 0;
  int64_t last_pass_end_unix = 0;
  std::vector<RootUsage> roots;
  bool holding = false;
  uint64_t acquisitions = 0;
};

// Adds a pass's removals and failures.
void Accumulate(const GcReport& r, CollectorMetrics* m);
std::string MetricsText(const CollectorMetrics& m);
// The kvtier_kv_events_* families of a KV-event publisher (docs/metrics.md):
// its counters, and the block names RemovedNamed skipped.
std::string KvEventsMetricsText(const KvEventMetrics& m, uint64_t names_skipped);
// Writes `text` to `path` by a temp file and a rename, so a reader never
// sees half a file: "" or why not.
std::string WriteMetricsFile(const std::string& path, const std::string& text);

}  // namespace kvtier::internal
