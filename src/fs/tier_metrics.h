// Counters of one fs tier, updated by its I/O thread and read by anyone,
// their Prometheus text exposition and their merge over several roots, both
// generated from kFsTierMetricFields (kvtier/fs_tier_metrics.h).
#pragma once

#include <atomic>
#include <string>
#include <string_view>

#include "kvtier/fs_tier.h"

namespace kvtier::internal {

class TierMetricsCounters {
 public:
  void Record(JobKind kind, KeyOutcome outcome, uint64_t bytes, uint64_t latency_ns);
  // A corrupt block's removal (staged_crc.h): a corrupt load, but no load
  // and no latency sample (its read was counted when it was loaded).
  void RecordRemoval(KeyOutcome outcome) {
    if (outcome == KeyOutcome::kCorrupt) ++rows_corrupt_;
  }
  void SetQueues(size_t read_queued, size_t write_queued, size_t in_flight);
  void SetBackpressure(bool active, double ema_s_per_mib) {
    backpressure_active_ = active;
    ema_ = ema_s_per_mib;
  }
  void SetStuck(size_t stuck) { requests_stuck_ = stuck; }
  FsTierMetrics Snapshot() const;

  std::atomic<uint64_t> store_queue_bytes{0};
  std::atomic<uint64_t> rows_dropped{0};

 private:
  std::atomic<uint64_t> rows_stored_{0}, bytes_stored_{0}, rows_skipped_{0};
  std::atomic<uint64_t> rows_loaded_{0}, bytes_loaded_{0}, rows_missed_{0}, rows_corrupt_{0};
  std::atomic<uint64_t> lookups_hit_{0}, lookups_miss_{0};
  std::atomic<uint64_t> store_errors_{0}, load_errors_{0}, lookup_errors_{0};
  std::atomic<uint64_t> read_queue_{0}, write_queue_{0}, in_flight_{0}, requests_stuck_{0};
  std::atomic<bool> backpressure_active_{false};
  std::atomic<double> ema_{0};
  std::atomic<uint64_t> store_latency_[FsTierMetrics::kLatencyBuckets] = {};
  std::atomic<uint64_t> load_latency_[FsTierMetrics::kLatencyBuckets] = {};
};

// Prometheus text of every exported field of kFsTierMetricFields (counters,
// then gauges, in the table's order) and of the latency histograms.
std::string FormatPrometheus(const FsTierMetrics& m, std::string_view tier_name);

// Folds one root's metrics into `into` by each field's MetricMerge (the
// histograms bucket by bucket). Start `into` from the first root's.
void MergeFsTierMetrics(const FsTierMetrics& part, FsTierMetrics* into);

}  // namespace kvtier::internal
