// `kvtier bench fs`'s result header (BenchFsHeader), its JSON report
// (BenchFsJson), and what the run's kv-events publisher did
// (--events-endpoint: CollectBenchFsEvents and its JSON and text), beside
// the rest of bench_fs.cc (see bench_fs.h).
#include <chrono>
#include <cstdio>
#include <thread>

#include "bench/bench_fs.h"
#include "kvtier/layout.h"

namespace kvtier::internal {
namespace {

// BenchFsJson's parts: "mixed", "lookup" and "details" (figures a person
// rarely needs: per-thread CPU, the tier's histogram, how things were measured).
nlohmann::json MixedJson(const BenchFsMixed& m) {
  return {{"load_p50_us", Round(m.loaded_load.p50_us, 1)},
          {"load_p99_us", Round(m.loaded_load.p99_us, 1)},
          {"unloaded_load_p99_us", Round(m.unloaded_load.p99_us, 1)},
          {"ratio_p99", Round(m.ratio_p99(), 3)}};
}

nlohmann::json LookupJson(const BenchFsResult::Lookups& l) {
  return {{"keys", l.keys},
          {"hits", l.hits},
          {"keys_per_s", Round(l.keys_per_s(), 0)},
          {"wall_s", Round(l.wall_s, 4)},
          {"cpu_s", Round(l.cpu_s, 4)},
          {"keys_per_job", kBenchLookupBatch}};
}

nlohmann::json PhaseDetailJson(const DirectionFigures& f, double hist_p50_us, double hist_p99_us) {
  nlohmann::json d = FiguresDetailJson(f);
  d["tier_hist_p50_us"] = Round(hist_p50_us, 1);
  d["tier_hist_p99_us"] = Round(hist_p99_us, 1);
  return d;
}

nlohmann::json MixedDetailJson(const BenchFsResult& r) {
  const BenchFsMixed& m = *r.mixed;
  return {{"unloaded_load_p50_us", Round(m.unloaded_load.p50_us, 1)},
          {"unloaded_load_gbps", Round(m.unloaded_load.gbps(), 4)},
          {"load_gbps", Round(m.loaded_load.gbps(), 4)},
          {"load_rows", m.loaded_load.rows},
          {"store_stream_gbps", Round(m.store_stream.gbps(), 4)},
          {"store_stream_rows", m.store_stream.rows},
          {"store_stream_exhausted", m.stream_exhausted},
          {"load_depth", r.mixed_load_depth},
          {"store_depth", r.mixed_store_depth}};
}

nlohmann::json DetailsJson(const BenchFsResult& r) {
  nlohmann::json d;
  d["store"] = PhaseDetailJson(r.store, r.store_hist_p50_us, r.store_hist_p99_us);
  d["load"] = PhaseDetailJson(r.load, r.load_hist_p50_us, r.load_hist_p99_us);
  if (r.mixed) d["mixed"] = MixedDetailJson(r);
  d["latency"] =
      "per row, SubmitStore/SubmitLoad to the PollFinished that returned it (polled every " +
      std::to_string(r.poll_us) +
      " us); tier_hist_*: the tier's power-of-two histogram, interpolated";
  d["cpu"] =
      "getrusage(RUSAGE_SELF) user+sys over the phase (the tier's I/O thread and io_uring workers included), "
      "minus the "
      "benchmark's fill/verify (harness_cpu_s) and its sleeps between polls (poll_wait_cpu_s)";
  d["units"] = "GB = 1e9 bytes";
  return d;
}

nlohmann::json EventsJson(const BenchFsResult::Events& e) {
  return {{"endpoint", e.endpoint},
          {"published", e.published},
          {"dropped", e.dropped},
          {"batches", e.batches},
          {"queue_depth", e.queue_depth}};
}

}  // namespace

BenchFsResult BenchFsHeader(const BenchFsOptions& o, const FsTier& tier, const Namespace& ns,
                            int stream_depth, size_t hashes_per_file) {
  BenchFsResult r;
  r.backend = std::string(tier.backend_name());
  r.o_direct = tier.o_direct();
  r.xattrs = tier.xattrs_supported();
  r.root = o.root;
  r.namespace_dir = JoinRoot(o.root, ns.dir_name());
  r.row_bytes = o.row_bytes;
  r.rows = o.rows;
  r.queue_depth = o.queue_depth;
  r.batch = o.batch;
  r.poll_us = o.poll_us;
  r.mixed_load_depth = o.mixed_load_depth;
  r.mixed_store_depth = stream_depth;
  r.io_timeout_ms = o.io_timeout_ms;
  r.stores_while_loading_max = o.stores_while_loading_max;
  r.hashes_per_file = hashes_per_file;
  return r;
}

std::string FilesOfBlocksNote(const BenchFsResult& r) {
  if (r.hashes_per_file <= 1) return "";
  return ", files of " + std::to_string(r.hashes_per_file) +
         " blocks (each store records their hashes)";
}

void CollectBenchFsEvents(const BenchFsOptions& o, const FsTier& tier, uint32_t wait_ms,
                          BenchFsResult* r) {
  if (!o.kv_events_config.enable_kv_cache_events) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  FsTierMetrics m = tier.Metrics();
  // The publisher's thread sends without waiting, so its queue empties fast
  // unless the first batch still waits for a subscriber (at most 1 s).
  while (m.kv_events_queue_depth > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    m = tier.Metrics();
  }
  r->events.enabled = true;
  r->events.endpoint = o.kv_events_config.endpoint;
  r->events.published = m.kv_events_published;
  r->events.dropped = m.kv_events_dropped;
  r->events.batches = m.kv_events_batches;
  r->events.queue_depth = m.kv_events_queue_depth;
}

nlohmann::json BenchFsJson(const BenchFsResult& r) {
  nlohmann::json j;
  j["store"] = FiguresJson(r.store);
  j["load"] = FiguresJson(r.load);
  if (r.mixed) j["mixed"] = MixedJson(*r.mixed);
  j["backend"] = r.backend;
  j["o_direct"] = r.o_direct;
  j["fixed_buffer_ios"] = r.fixed_buffer_ios;
  j["lookup"] = LookupJson(r.lookups);
  j["xattrs"] = r.xattrs;
  j["row_bytes"] = r.row_bytes;
  j["rows"] = r.rows;
  j["queue_depth"] = r.queue_depth;
  j["batch"] = r.batch;
  j["io_timeout_ms"] = r.io_timeout_ms;
  j["stores_while_loading_max"] = r.stores_while_loading_max;
  j["hashes_per_file"] = r.hashes_per_file;
  j["page_cache_dropped"] = r.page_cache_dropped;
  if (!r.page_cache_dropped) j["page_cache_note"] = r.page_cache_note;
  j["rows_stored"] = r.rows_stored;
  j["rows_skipped_exists"] = r.rows_skipped;
  j["store_errors"] = r.store_errors;
  j["rows_verified"] = r.rows_verified;
  j["rows_corrupt"] = r.rows_corrupt;
  j["rows_missing"] = r.rows_missing;
  j["load_errors"] = r.load_errors;
  if (!r.first_error.empty()) j["first_error"] = r.first_error;
  if (r.events.enabled) j["kv_events"] = EventsJson(r.events);
  j["details"] = DetailsJson(r);
  j["kept"] = r.kept;
  if (r.kept) j["namespace_dir"] = r.namespace_dir;
  return j;
}
std::string FormatBenchFsEvents(const BenchFsResult& r) {
  if (!r.events.enabled) return "";
  const BenchFsResult::Events& e = r.events;
  char line[512];
  std::snprintf(line, sizeof line,
                "kv events to %s: %llu published in %llu batches, %llu dropped, %llu still queued\n",
                e.endpoint.c_str(), static_cast<unsigned long long>(e.published),
                static_cast<unsigned long long>(e.batches), static_cast<unsigned long long>(e.dropped),
                static_cast<unsigned long long>(e.queue_depth));
  return line;
}

}  // namespace kvtier::internal
