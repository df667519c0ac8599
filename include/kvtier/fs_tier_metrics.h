// FsTierMetrics, the counters of an fs tier (FsTier::Metrics()), and the one
// table that describes each of its fields: its kind, how several roots merge
// it, its unit, its Prometheus family, its name in vLLM's stats and its help.
// The Prometheus text (FsTier::PrometheusText), the multi-root merge, the
// Python binding's metrics() dict and kvtier.vllm's metric definitions are
// generated from kFsTierMetricFields; docs/metrics.md is checked against it
// (tests/unit/fs_tier_metrics_test.cc). A field added to the struct without
// a row does not compile (the static_assert below).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string_view>

namespace kvtier {

// Cumulative counters since Open (the queue depths, in_flight,
// store_queue_bytes, backpressure_active and the EMA are current values).
// rows_* count keys by their outcome; *_errors count kError keys. With
// several roots: merged as each field's row says (summed, or the worst
// root's). Every field is 8 bytes, a uint64_t or a double.
struct FsTierMetrics {
  uint64_t rows_stored = 0, bytes_stored = 0, rows_skipped_exists = 0, rows_dropped = 0;
  uint64_t rows_loaded = 0, bytes_loaded = 0, rows_missed = 0, rows_corrupt = 0;
  // Sealed tiers (FORMAT.md L169): blocks that failed their tag or carry no
  // valid seal (never returned; also counted in rows_corrupt).
  uint64_t auth_failures = 0;
  uint64_t lookups_hit = 0, lookups_miss = 0;
  uint64_t store_errors = 0, load_errors = 0, lookup_errors = 0;
  uint64_t read_queue_depth = 0, write_queue_depth = 0, in_flight = 0;
  uint64_t store_queue_bytes = 0;
  uint64_t backpressure_active = 0;  // 1 while stores are being dropped for latency
  double store_latency_ema_s_per_mib = 0;
  uint64_t fixed_buffer_ios = 0;  // reads and writes into registered memory
  // Rows whose pieces are not page-aligned, stored or loaded with O_DIRECT
  // through a page-aligned row of the tier's (one memcpy each way) instead
  // of through the page cache.
  uint64_t staged_ios = 0;
  uint64_t checksum_ns = 0;       // time spent computing CRC32C, stores and loads
  // A sick volume (docs/sick-volumes.md): root_up is 1
  // while the root answers (several roots: 1 only when all do), roots_down
  // how many do not; deadline_misses counts requests that got no answer
  // within io_timeout_ms; requests_stuck those abandoned to the kernel and
  // not yet returned by it (bounded by n_read_threads + n_write_threads + 1
  // per root).
  uint64_t root_up = 1, roots_down = 0, deadline_misses = 0, requests_stuck = 0;
  // Space (docs/metrics.md, "Capacity and usage"), sampled, never a scan
  // per call: the volume's used and free bytes (statvfs of root_dir, every
  // 5 s; free is what an unprivileged writer may still use); this tier's
  // <ns>_r<rank> directory's bytes and block files (the max_bytes index, or
  // the startup scan plus this tier's stores; without a scan, startup_scan,
  // only what this tier stored or found since it opened);
  // namespace_scan_complete is 1 once the startup scan finished, or from the
  // start when there is none (before, the namespace counts are partial). With max_bytes: the budget (0: none), the blocks and bytes
  // evicted for it, and the store rows refused because a batch could not
  // fit (also counted in rows_dropped). Several roots: summed (roots on one
  // volume count its bytes once per root).
  uint64_t volume_used_bytes = 0, volume_free_bytes = 0;
  uint64_t namespace_bytes = 0, namespace_blocks = 0, namespace_scan_complete = 0;
  uint64_t capacity_bytes_max = 0, capacity_evicted_blocks = 0, capacity_evicted_bytes = 0;
  uint64_t capacity_refused_rows = 0;
  // KV events (docs/kv-events.md), of the publisher this tier sends to (tiers
  // and roots naming one endpoint share it, so several roots take the
  // highest): events sent, events dropped (queue full), batches sent, replay
  // requests served, events queued now. All 0 with events off.
  uint64_t kv_events_published = 0, kv_events_dropped = 0, kv_events_batches = 0;
  uint64_t kv_events_replay_requests = 0, kv_events_queue_depth = 0;
  // With enable_kv_events: the stores and removals vLLM's channel could not
  // keep (its log per root full: take_events not called). Several roots: summed.
  uint64_t kv_events_channel_dropped = 0;
  // Stores of a file of several blocks whose block-hash attribute could not
  // be set (FORMAT.md L199): stored, but their removals name the key alone.
  uint64_t block_hash_records_lost = 0;
  // Latency histograms per direction: bucket i counts operations that took
  // < 2^i microseconds (the last bucket is everything slower).
  static constexpr int kLatencyBuckets = 24;
  uint64_t store_latency_us[kLatencyBuckets] = {};
  uint64_t load_latency_us[kLatencyBuckets] = {};
};

enum class MetricKind { kCounter, kGauge };
// How a field of several roots (path_sharding) becomes the tier's: summed,
// or the worst root's (kMax: the highest, kMin: the lowest).
enum class MetricMerge { kSum, kMax, kMin };

// One field of FsTierMetrics. Exactly one of `count` and `value` is set.
struct FsTierMetricField {
  std::string_view name = {};                // the member's name; the key of Python's metrics()
  uint64_t FsTierMetrics::*count = nullptr;  // the member, when a uint64_t
  double FsTierMetrics::*value = nullptr;    // the member, when a double
  MetricKind kind = MetricKind::kCounter;
  MetricMerge merge = MetricMerge::kSum;
  std::string_view unit = {};        // of the member: rows, bytes, requests, ns, s/MiB, ... ("1": a flag)
  std::string_view prometheus = {};  // its family in PrometheusText ("": not exported)
  double scale = 1;                  // the exported value is the member times this (ns to s: 1e-9)
  std::string_view vllm = {};        // its name in vLLM's stats, reported by kvtier.vllm ("": none)
  std::string_view help = {};        // one sentence, in the exported unit (vLLM's documentation)
};

// The member and its name, spelled once.
#define KVTIER_METRIC_COUNT(f) .name = #f, .count = &FsTierMetrics::f
#define KVTIER_METRIC_VALUE(f) .name = #f, .value = &FsTierMetrics::f

// Every field of FsTierMetrics but the histograms, in declaration order
// (PrometheusText's order within each kind).
inline constexpr FsTierMetricField kFsTierMetricFields[] = {
    {KVTIER_METRIC_COUNT(rows_stored), .unit = "rows", .prometheus = "kvtier_fs_rows_stored_total",
     .help = "Block files written (renamed into place)."},
    {KVTIER_METRIC_COUNT(bytes_stored), .unit = "bytes", .prometheus = "kvtier_fs_bytes_stored_total",
     .help = "Bytes of the block files written."},
    {KVTIER_METRIC_COUNT(rows_skipped_exists), .unit = "rows", .prometheus = "kvtier_fs_rows_skipped_exists_total",
     .help = "Stores skipped because the block file already existed (another writer)."},
    {KVTIER_METRIC_COUNT(rows_dropped), .unit = "rows", .prometheus = "kvtier_fs_rows_dropped_total",
     .vllm = "kvtier:fs_rows_dropped", .help = "Stores kvtier dropped under backpressure or a full queue."},
    {KVTIER_METRIC_COUNT(rows_loaded), .unit = "rows", .prometheus = "kvtier_fs_rows_loaded_total",
     .help = "Blocks loaded and verified (size, and CRC32C when present)."},
    {KVTIER_METRIC_COUNT(bytes_loaded), .unit = "bytes", .prometheus = "kvtier_fs_bytes_loaded_total",
     .help = "Bytes of the blocks loaded."},
    {KVTIER_METRIC_COUNT(rows_missed), .unit = "rows", .prometheus = "kvtier_fs_rows_missed_total",
     .help = "Loads of block files that did not exist."},
    {KVTIER_METRIC_COUNT(rows_corrupt), .unit = "rows", .prometheus = "kvtier_fs_rows_corrupt_total",
     .vllm = "kvtier:fs_rows_corrupt", .help = "Block files kvtier refused (wrong size or CRC32C) and removed."},
    {KVTIER_METRIC_COUNT(auth_failures), .unit = "rows", .prometheus = "kvtier_fs_auth_failures_total",
     .vllm = "kvtier:fs_auth_failures", .help = "Sealed-tier loads refused: no valid seal or a failing tag (never returned)."},
    {KVTIER_METRIC_COUNT(lookups_hit), .unit = "lookups", .prometheus = "kvtier_fs_lookups_hit_total",
     .help = "Existence lookups that found the block file."},
    {KVTIER_METRIC_COUNT(lookups_miss), .unit = "lookups", .prometheus = "kvtier_fs_lookups_miss_total",
     .help = "Existence lookups that did not find the block file."},
    {KVTIER_METRIC_COUNT(store_errors), .unit = "rows", .prometheus = "kvtier_fs_store_errors_total",
     .vllm = "kvtier:fs_store_errors", .help = "Stores that failed with an I/O error or deadline."},
    {KVTIER_METRIC_COUNT(load_errors), .unit = "rows", .prometheus = "kvtier_fs_load_errors_total",
     .vllm = "kvtier:fs_load_errors", .help = "Loads that failed with an I/O error or deadline."},
    {KVTIER_METRIC_COUNT(lookup_errors), .unit = "lookups", .prometheus = "kvtier_fs_lookup_errors_total",
     .vllm = "kvtier:fs_lookup_errors", .help = "Existence checks that failed with an I/O error."},
    {KVTIER_METRIC_COUNT(read_queue_depth), .kind = MetricKind::kGauge, .unit = "requests",
     .prometheus = "kvtier_fs_read_queue_depth", .vllm = "kvtier:fs_read_queue_depth",
     .help = "Loads and lookups queued in kvtier's I/O loop."},
    {KVTIER_METRIC_COUNT(write_queue_depth), .kind = MetricKind::kGauge, .unit = "requests",
     .prometheus = "kvtier_fs_write_queue_depth", .vllm = "kvtier:fs_write_queue_depth",
     .help = "Stores queued in kvtier's I/O loop."},
    {KVTIER_METRIC_COUNT(in_flight), .kind = MetricKind::kGauge, .unit = "requests",
     .prometheus = "kvtier_fs_in_flight", .help = "Block operations running."},
    {KVTIER_METRIC_COUNT(store_queue_bytes), .kind = MetricKind::kGauge, .unit = "bytes",
     .prometheus = "kvtier_fs_store_queue_bytes", .help = "Bytes of stores queued or running."},
    {KVTIER_METRIC_COUNT(backpressure_active), .kind = MetricKind::kGauge, .merge = MetricMerge::kMax, .unit = "1",
     .prometheus = "kvtier_fs_backpressure_active", .vllm = "kvtier:fs_backpressure_active",
     .help = "1 while kvtier drops stores for latency."},
    {KVTIER_METRIC_VALUE(store_latency_ema_s_per_mib), .kind = MetricKind::kGauge, .merge = MetricMerge::kMax,
     .unit = "s/MiB", .help = "Moving average of store latency per MiB, which backpressure compares with its marks."},
    {KVTIER_METRIC_COUNT(fixed_buffer_ios), .unit = "requests",
     .help = "Reads and writes into memory registered with io_uring."},
    {KVTIER_METRIC_COUNT(staged_ios), .unit = "rows",
     .help = "Rows stored or loaded with O_DIRECT through a page-aligned row of the tier's."},
    {KVTIER_METRIC_COUNT(checksum_ns), .unit = "ns", .prometheus = "kvtier_fs_checksum_seconds_total", .scale = 1e-9,
     .vllm = "kvtier:fs_checksum_seconds", .help = "CPU seconds spent on CRC32C, stores and loads."},
    {KVTIER_METRIC_COUNT(root_up), .kind = MetricKind::kGauge, .merge = MetricMerge::kMin, .unit = "1",
     .prometheus = "kvtier_fs_root_up", .vllm = "kvtier:fs_root_up",
     .help = "1 while the tier's root answers; 0 while it is down."},
    {KVTIER_METRIC_COUNT(roots_down), .kind = MetricKind::kGauge, .unit = "roots",
     .prometheus = "kvtier_fs_roots_down", .help = "Roots of the tier that are down."},
    {KVTIER_METRIC_COUNT(deadline_misses), .unit = "requests", .prometheus = "kvtier_fs_deadline_misses_total",
     .vllm = "kvtier:fs_deadline_misses", .help = "Requests with no answer within io_timeout_ms."},
    {KVTIER_METRIC_COUNT(requests_stuck), .kind = MetricKind::kGauge, .unit = "requests",
     .prometheus = "kvtier_fs_requests_stuck", .vllm = "kvtier:fs_requests_stuck",
     .help = "Requests abandoned to the kernel, not yet returned."},
    {KVTIER_METRIC_COUNT(volume_used_bytes), .kind = MetricKind::kGauge, .unit = "bytes",
     .prometheus = "kvtier_fs_volume_used_bytes", .vllm = "kvtier:fs_volume_used_bytes",
     .help = "Used bytes of the tier's volume (statvfs, sampled)."},
    {KVTIER_METRIC_COUNT(volume_free_bytes), .kind = MetricKind::kGauge, .unit = "bytes",
     .prometheus = "kvtier_fs_volume_free_bytes", .vllm = "kvtier:fs_volume_free_bytes",
     .help = "Free bytes of the tier's volume for unprivileged writers."},
    {KVTIER_METRIC_COUNT(namespace_bytes), .kind = MetricKind::kGauge, .unit = "bytes",
     .prometheus = "kvtier_fs_namespace_bytes", .vllm = "kvtier:fs_namespace_bytes",
     .help = "Bytes of this tier's <model>_<digest>_r<rank> directory."},
    {KVTIER_METRIC_COUNT(namespace_blocks), .kind = MetricKind::kGauge, .unit = "blocks",
     .prometheus = "kvtier_fs_namespace_blocks", .vllm = "kvtier:fs_namespace_blocks",
     .help = "Block files of this tier's <model>_<digest>_r<rank> directory."},
    {KVTIER_METRIC_COUNT(namespace_scan_complete), .kind = MetricKind::kGauge, .merge = MetricMerge::kMin,
     .unit = "1", .prometheus = "kvtier_fs_namespace_scan_complete",
     .help = "1 once the startup scan of the namespace directory finished, or from the open when none runs."},
    {KVTIER_METRIC_COUNT(capacity_bytes_max), .kind = MetricKind::kGauge, .unit = "bytes",
     .prometheus = "kvtier_fs_capacity_bytes_max", .vllm = "kvtier:fs_capacity_bytes_max",
     .help = "The tier's max_bytes (0: unbounded)."},
    {KVTIER_METRIC_COUNT(capacity_evicted_blocks), .unit = "blocks",
     .prometheus = "kvtier_fs_capacity_evicted_blocks_total", .vllm = "kvtier:fs_capacity_evicted_blocks",
     .help = "Blocks evicted to keep max_bytes."},
    {KVTIER_METRIC_COUNT(capacity_evicted_bytes), .unit = "bytes",
     .prometheus = "kvtier_fs_capacity_evicted_bytes_total", .vllm = "kvtier:fs_capacity_evicted_bytes",
     .help = "Bytes evicted to keep max_bytes."},
    {KVTIER_METRIC_COUNT(capacity_refused_rows), .unit = "rows",
     .prometheus = "kvtier_fs_capacity_refused_rows_total", .vllm = "kvtier:fs_capacity_refused_rows",
     .help = "Stores refused: the batch could not fit max_bytes."},
    {KVTIER_METRIC_COUNT(kv_events_published), .merge = MetricMerge::kMax, .unit = "events",
     .prometheus = "kvtier_kv_events_published_total", .help = "KV events sent to subscribers."},
    {KVTIER_METRIC_COUNT(kv_events_dropped), .merge = MetricMerge::kMax, .unit = "events",
     .prometheus = "kvtier_kv_events_dropped_total", .vllm = "kvtier:kv_events_dropped",
     .help = "KV events dropped because the publisher's queue was full."},
    {KVTIER_METRIC_COUNT(kv_events_batches), .merge = MetricMerge::kMax, .unit = "batches",
     .prometheus = "kvtier_kv_events_batches_total", .help = "KV event batches sent (the next sequence number)."},
    {KVTIER_METRIC_COUNT(kv_events_replay_requests), .merge = MetricMerge::kMax, .unit = "requests",
     .prometheus = "kvtier_kv_events_replay_requests_total", .help = "Replay requests the replay socket served."},
    {KVTIER_METRIC_COUNT(kv_events_queue_depth), .kind = MetricKind::kGauge, .merge = MetricMerge::kMax,
     .unit = "events", .prometheus = "kvtier_kv_events_queue_depth", .help = "KV events queued, not yet sent."},
    {KVTIER_METRIC_COUNT(kv_events_channel_dropped), .unit = "events",
     .prometheus = "kvtier_kv_events_channel_dropped_total", .vllm = "kvtier:kv_events_channel_dropped",
     .help = "Stores and removals vLLM's channel (enable_kv_events) could not keep: take_events was not called."},
    {KVTIER_METRIC_COUNT(block_hash_records_lost), .unit = "rows", .prometheus = "kvtier_fs_block_hash_records_lost_total",
     .help = "Stores of a file of several blocks whose block-hash attribute could not be set: its removals name its key alone."},
};

#undef KVTIER_METRIC_COUNT
#undef KVTIER_METRIC_VALUE

// The latency histograms of FsTierMetrics: summed over roots bucket by
// bucket, exported as Prometheus histograms in seconds.
struct FsTierLatencyHistogram {
  std::string_view name;
  uint64_t (FsTierMetrics::*buckets)[FsTierMetrics::kLatencyBuckets];
  std::string_view prometheus;
  std::string_view help;
};

inline constexpr FsTierLatencyHistogram kFsTierLatencyHistograms[] = {
    {"store_latency_us", &FsTierMetrics::store_latency_us, "kvtier_fs_store_latency_seconds",
     "Store latency per block, from submission to completion."},
    {"load_latency_us", &FsTierMetrics::load_latency_us, "kvtier_fs_load_latency_seconds",
     "Load latency per block, from submission to completion."},
};

namespace internal {

// Each field has exactly one row: the rows name distinct members, each set
// exactly one member pointer, and together they cover the struct's bytes.
consteval bool EachMetricFieldOnce() {
  size_t bytes = 0;
  for (size_t i = 0; i < std::size(kFsTierMetricFields); ++i) {
    const FsTierMetricField& a = kFsTierMetricFields[i];
    if ((a.count == nullptr) == (a.value == nullptr)) return false;
    bytes += a.count != nullptr ? sizeof(uint64_t) : sizeof(double);
    for (size_t j = i + 1; j < std::size(kFsTierMetricFields); ++j) {
      const FsTierMetricField& b = kFsTierMetricFields[j];
      if (a.name == b.name || (a.count != nullptr && a.count == b.count) || (a.value != nullptr && a.value == b.value) ||
          (!a.prometheus.empty() && a.prometheus == b.prometheus) || (!a.vllm.empty() && a.vllm == b.vllm)) {
        return false;
      }
    }
  }
  bytes += std::size(kFsTierLatencyHistograms) * sizeof(uint64_t) * FsTierMetrics::kLatencyBuckets;
  return bytes == sizeof(FsTierMetrics);
}

}  // namespace internal

static_assert(internal::EachMetricFieldOnce(),
              "every field of FsTierMetrics needs exactly one row in kFsTierMetricFields (or "
              "kFsTierLatencyHistograms), with distinct names");

}  // namespace kvtier
