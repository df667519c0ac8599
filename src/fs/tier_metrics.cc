// Fs tier metrics and their Prometheus text form.
#include "fs/tier_metrics.h"

#include <bit>
#include <cstdio>

namespace kvtier::internal {
namespace {

int LatencyBucket(uint64_t latency_ns) {
  const uint64_t us = latency_ns / 1000;
  const int bucket = us == 0 ? 0 : std::bit_width(us);  // us < 2^bucket
  return std::min(bucket, FsTierMetrics::kLatencyBuckets - 1);
}

}  // namespace

void TierMetricsCounters::Record(JobKind kind, KeyOutcome outcome, uint64_t bytes, uint64_t latency_ns) {
  const bool ok = outcome == KeyOutcome::kOk;
  switch (kind) {
    case JobKind::kStore:
      if (ok) ++rows_stored_, bytes_stored_ += bytes;
      if (outcome == KeyOutcome::kSkippedExists) ++rows_skipped_;
      if (outcome == KeyOutcome::kError) ++store_errors_;
      if (outcome == KeyOutcome::kDropped) ++rows_dropped;  // queued when its root went down
      ++store_latency_[LatencyBucket(latency_ns)];
      break;
    case JobKind::kLoad:
      if (ok) ++rows_loaded_, bytes_loaded_ += bytes;
      if (outcome == KeyOutcome::kMiss) ++rows_missed_;
      if (outcome == KeyOutcome::kCorrupt) ++rows_corrupt_;
      if (outcome == KeyOutcome::kError) ++load_errors_;
      ++load_latency_[LatencyBucket(latency_ns)];
      break;
    case JobKind::kLookup:
      if (ok) ++lookups_hit_;
      if (outcome == KeyOutcome::kMiss) ++lookups_miss_;
      if (outcome == KeyOutcome::kError) ++lookup_errors_;
      break;
  }
}

void TierMetricsCounters::SetQueues(size_t read_queued, size_t write_queued, size_t in_flight) {
  read_queue_ = read_queued;
  write_queue_ = write_queued;
  in_flight_ = in_flight;
}

FsTierMetrics TierMetricsCounters::Snapshot() const {
  FsTierMetrics m;
  m.rows_stored = rows_stored_, m.bytes_stored = bytes_stored_, m.rows_skipped_exists = rows_skipped_;
  m.rows_dropped = rows_dropped;
  m.rows_loaded = rows_loaded_, m.bytes_loaded = bytes_loaded_, m.rows_missed = rows_missed_;
  m.rows_corrupt = rows_corrupt_;
  m.lookups_hit = lookups_hit_, m.lookups_miss = lookups_miss_;
  m.store_errors = store_errors_, m.load_errors = load_errors_, m.lookup_errors = lookup_errors_;
  m.read_queue_depth = read_queue_, m.write_queue_depth = write_queue_, m.in_flight = in_flight_;
  m.store_queue_bytes = store_queue_bytes;
  m.backpressure_active = backpressure_active_ ? 1 : 0;
  m.requests_stuck = requests_stuck_;
  m.store_latency_ema_s_per_mib = ema_;
  for (int i = 0; i < FsTierMetrics::kLatencyBuckets; ++i) {
    m.store_latency_us[i] = store_latency_[i];
    m.load_latency_us[i] = load_latency_[i];
  }
  return m;
}

static void Line(std::string* out, std::string_view name, std::string_view labels, uint64_t value) {
  *out += name;
  *out += '{';
  *out += labels;
  *out += "} ";
  *out += std::to_string(value);
  *out += '\n';
}

static void Histogram(std::string* out, std::string_view name, std::string_view labels, const uint64_t* buckets) {
  *out += "# TYPE " + std::string(name) + " histogram\n";
  uint64_t cumulative = 0;
  for (int i = 0; i < FsTierMetrics::kLatencyBuckets; ++i) {
    cumulative += buckets[i];
    std::string le = i + 1 == FsTierMetrics::kLatencyBuckets ? "+Inf" : std::to_string((uint64_t{1} << i) * 1e-6);
    Line(out, std::string(name) + "_bucket", std::string(labels) + ",le=\"" + le + "\"", cumulative);
  }
  Line(out, std::string(name) + "_count", labels, cumulative);
}

std::string FormatPrometheus(const FsTierMetrics& m, std::string_view tier_name) {
  const std::string labels = "tier=\"" + std::string(tier_name) + "\"";
  std::string out;
  const std::pair<const char*, uint64_t> counters[] = {
      {"kvtier_fs_rows_stored_total", m.rows_stored}, {"kvtier_fs_bytes_stored_total", m.bytes_stored},
      {"kvtier_fs_rows_skipped_exists_total", m.rows_skipped_exists},
      {"kvtier_fs_rows_dropped_total", m.rows_dropped}, {"kvtier_fs_rows_loaded_total", m.rows_loaded},
      {"kvtier_fs_bytes_loaded_total", m.bytes_loaded}, {"kvtier_fs_rows_missed_total", m.rows_missed},
      {"kvtier_fs_rows_corrupt_total", m.rows_corrupt}, {"kvtier_fs_lookups_hit_total", m.lookups_hit},
      {"kvtier_fs_lookups_miss_total", m.lookups_miss}, {"kvtier_fs_store_errors_total", m.store_errors},
      {"kvtier_fs_load_errors_total", m.load_errors}, {"kvtier_fs_lookup_errors_total", m.lookup_errors},
      {"kvtier_fs_deadline_misses_total", m.deadline_misses},
      {"kvtier_fs_capacity_evicted_blocks_total", m.capacity_evicted_blocks},
      {"kvtier_fs_capacity_evicted_bytes_total", m.capacity_evicted_bytes},
      {"kvtier_fs_capacity_refused_rows_total", m.capacity_refused_rows}};
  for (const auto& [name, value] : counters) {
    out += std::string("# TYPE ") + name + " counter\n";
    Line(&out, name, labels, value);
  }
  const std::pair<const char*, uint64_t> gauges[] = {
      {"kvtier_fs_read_queue_depth", m.read_queue_depth}, {"kvtier_fs_write_queue_depth", m.write_queue_depth},
      {"kvtier_fs_in_flight", m.in_flight}, {"kvtier_fs_store_queue_bytes", m.store_queue_bytes},
      {"kvtier_fs_backpressure_active", m.backpressure_active}, {"kvtier_fs_root_up", m.root_up},
      {"kvtier_fs_roots_down", m.roots_down}, {"kvtier_fs_requests_stuck", m.requests_stuck},
      {"kvtier_fs_volume_used_bytes", m.volume_used_bytes}, {"kvtier_fs_volume_free_bytes", m.volume_free_bytes},
      {"kvtier_fs_namespace_bytes", m.namespace_bytes}, {"kvtier_fs_namespace_blocks", m.namespace_blocks},
      {"kvtier_fs_namespace_scan_complete", m.namespace_scan_complete},
      {"kvtier_fs_capacity_bytes_max", m.capacity_bytes_max}};
  for (const auto& [name, value] : gauges) {
    out += std::string("# TYPE ") + name + " gauge\n";
    Line(&out, name, labels, value);
  }
  out += "# TYPE kvtier_fs_checksum_seconds_total counter\n";
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.6f", static_cast<double>(m.checksum_ns) * 1e-9);
  out += "kvtier_fs_checksum_seconds_total{" + labels + "} " + seconds + "\n";
  Histogram(&out, "kvtier_fs_store_latency_seconds", labels, m.store_latency_us);
  Histogram(&out, "kvtier_fs_load_latency_seconds", labels, m.load_latency_us);
  return out;
}

}  // namespace kvtier::internal
