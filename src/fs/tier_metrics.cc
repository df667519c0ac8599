// Fs tier metrics and their Prometheus text form.
#include "fs/tier_metrics.h"

#include <algorithm>
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

// Integers as integers; a scaled field (nanoseconds exported as seconds) or
// a double with six decimals.
static std::string Exported(const FsTierMetricField& f, const FsTierMetrics& m) {
  if (f.count != nullptr && f.scale == 1) return std::to_string(m.*f.count);
  const double value = f.count != nullptr ? static_cast<double>(m.*f.count) : m.*f.value;
  char text[32];
  std::snprintf(text, sizeof text, "%.6f", value * f.scale);
  return text;
}

std::string FormatPrometheus(const FsTierMetrics& m, std::string_view tier_name) {
  const std::string labels = "tier=\"" + std::string(tier_name) + "\"";
  std::string out;
  for (const MetricKind kind : {MetricKind::kCounter, MetricKind::kGauge}) {
    for (const FsTierMetricField& f : kFsTierMetricFields) {
      if (f.kind != kind || f.prometheus.empty()) continue;
      out += "# TYPE " + std::string(f.prometheus) + (kind == MetricKind::kCounter ? " counter\n" : " gauge\n");
      out += std::string(f.prometheus) + "{" + labels + "} " + Exported(f, m) + "\n";
    }
  }
  for (const FsTierLatencyHistogram& h : kFsTierLatencyHistograms) Histogram(&out, h.prometheus, labels, m.*h.buckets);
  return out;
}

template <class T>
static void MergeOne(MetricMerge merge, T part, T* into) {
  if (merge == MetricMerge::kSum) *into += part;
  if (merge == MetricMerge::kMax) *into = std::max(*into, part);
  if (merge == MetricMerge::kMin) *into = std::min(*into, part);
}

void MergeFsTierMetrics(const FsTierMetrics& part, FsTierMetrics* into) {
  for (const FsTierMetricField& f : kFsTierMetricFields) {
    if (f.count != nullptr) MergeOne(f.merge, part.*f.count, &(into->*f.count));
    if (f.value != nullptr) MergeOne(f.merge, part.*f.value, &(into->*f.value));
  }
  for (const FsTierLatencyHistogram& h : kFsTierLatencyHistograms) {
    for (int b = 0; b < FsTierMetrics::kLatencyBuckets; ++b) (into->*h.buckets)[b] += (part.*h.buckets)[b];
  }
}

}  // namespace kvtier::internal
