// Reports of `kvtier bench tiers` (see bench_tiers.h): the JSON and table for
// people, and the load phase's report from the child process to the parent.
#include <cstdio>

#include "bench/bench_tiers.h"
#include "util/name_escape.h"

namespace kvtier::internal {
namespace {

using nlohmann::json;

// The figures the child sends, at full precision.
constexpr std::pair<const char*, double DirectionFigures::*> kWireSeconds[] = {
    {"wall_s", &DirectionFigures::wall_s},
    {"cpu_s", &DirectionFigures::cpu_s},
    {"harness_cpu_s", &DirectionFigures::harness_cpu_s},
    {"poll_wait_cpu_s", &DirectionFigures::poll_wait_cpu_s},
    {"caller_thread_cpu_s", &DirectionFigures::caller_thread_cpu_s},
    {"io_wq_cpu_s", &DirectionFigures::io_wq_cpu_s},
    {"other_threads_cpu_s", &DirectionFigures::other_threads_cpu_s},
    {"p50_us", &DirectionFigures::p50_us},
    {"p99_us", &DirectionFigures::p99_us}};
constexpr std::pair<const char*, uint64_t DirectionFigures::*> kWireCounts[] = {
    {"rows", &DirectionFigures::rows},
    {"bytes", &DirectionFigures::bytes},
    {"context_switches", &DirectionFigures::context_switches}};

// Type-checked reads: the report is parsed with exceptions off.
bool ReadCount(const json& j, const char* key, uint64_t* out) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number_unsigned()) return false;
  *out = it->get<uint64_t>();
  return true;
}

bool ReadSeconds(const json& j, const char* key, double* out) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return false;
  *out = it->get<double>();
  return true;
}

bool ReadHits(const json& j, std::map<std::string, uint64_t>* hits) {
  const auto it = j.find("hits");
  if (it == j.end() || !it->is_object()) return false;
  for (const auto& [name, value] : it->items()) {
    if (!value.is_number_unsigned()) return false;
    (*hits)[name] = value.get<uint64_t>();
  }
  return true;
}

}  // namespace

json BenchTiersLoadJson(const BenchTiersLoad& l) {
  json figures = json::object();
  for (const auto& [name, member] : kWireSeconds) figures[name] = l.figures.*member;
  for (const auto& [name, member] : kWireCounts) figures[name] = l.figures.*member;
  return {{"phase", "load"},
          {"figures", figures},
          {"hits", l.hits},
          {"rows_verified", l.verified},
          {"rows_corrupt", l.corrupt},
          {"rows_missing", l.missing},
          {"load_errors", l.errors},
          {"cpu_rows", l.cpu_rows},
          {"first_error", l.first_error}};
}

Result<BenchTiersLoad> ParseBenchTiersLoad(std::string_view text) {
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("the report is not a JSON object");
  const auto figures = j.find("figures");
  if (figures == j.end() || !figures->is_object())
    return InvalidArgument("the report has no figures");
  BenchTiersLoad l;
  bool ok = true;
  for (const auto& [name, member] : kWireSeconds)
    ok = ReadSeconds(*figures, name, &(l.figures.*member)) && ok;
  for (const auto& [name, member] : kWireCounts)
    ok = ReadCount(*figures, name, &(l.figures.*member)) && ok;
  uint64_t cpu_rows = 0;
  ok = ReadCount(j, "rows_verified", &l.verified) && ReadCount(j, "rows_corrupt", &l.corrupt) &&
       ReadCount(j, "rows_missing", &l.missing) && ReadCount(j, "load_errors", &l.errors) &&
       ReadCount(j, "cpu_rows", &cpu_rows) && ReadHits(j, &l.hits) && ok;
  if (!ok || cpu_rows > UINT32_MAX)
    return InvalidArgument("the report lacks a field or has a wrong type");
  l.cpu_rows = static_cast<uint32_t>(cpu_rows);
  const auto error = j.find("first_error");
  if (error != j.end() && error->is_string()) l.first_error = error->get<std::string>();
  return l;
}

json BenchTiersJson(const BenchTiersResult& r) {
  json j;
  j["store"] = FiguresJson(r.store);
  j["load"] = FiguresJson(r.load.figures);
  j["hits"] = r.load.hits;
  j["rows_verified"] = r.load.verified;
  j["rows_corrupt"] = r.load.corrupt;
  j["rows_missing"] = r.load.missing;
  j["load_errors"] = r.load.errors;
  j["rows"] = r.rows;
  j["row_bytes"] = r.row_bytes;
  j["cpu_bytes"] = r.cpu_bytes;
  j["cpu_rows"] = r.cpu_rows;
  j["batch"] = r.batch;
  j["device"] = r.device;  // a CUDA ordinal, or -1: the host stand-in
  j["rows_stored"] = r.rows_stored;
  j["rows_already_cached"] = r.rows_already_cached;
  j["store_errors"] = r.store_errors;
  j["fs0_stores_failed"] = r.fs_stores_failed;
  j["fs0_stores_dropped"] = r.fs_stores_dropped;
  j["store_s"] = Round(r.store.wall_s, 4);
  j["load_s"] = Round(r.load.figures.wall_s, 4);
  j["model"] = r.model;
  j["kept"] = r.kept;
  if (r.kept) j["namespace_dir"] = r.namespace_dir;
  if (!r.first_error.empty()) j["store_first_error"] = r.first_error;
  if (!r.load.first_error.empty()) j["load_first_error"] = r.load.first_error;
  json d;
  d["store"] = FiguresDetailJson(r.store);
  d["store"]["idle_waits"] = r.idle_waits;
  d["store"]["cpu_rows_evicted"] = r.rows_evicted;
  d["store"]["fs0_rows_written"] = r.rows_written_through;
  d["load"] = FiguresDetailJson(r.load.figures);
  d["load"]["cpu_rows"] = r.load.cpu_rows;
  d["gbps"] =
      "bytes moved / wall time of the phase: store until WaitIdle (all rows on fs), load bytes "
      "verified";
  d["latency"] =
      "per job of batch chunks: store from Store to its copy reported; load from StartRequest to "
      "Load reported";
  d["units"] = "GB = 1e9 bytes";
  j["details"] = std::move(d);
  return j;
}

std::string FormatBenchTiers(const BenchTiersResult& r) {
  char line[512];
  const std::string device =
      r.device < 0 ? std::string("the host stand-in device") : "CUDA device " + std::to_string(r.device);
  std::snprintf(line, sizeof line, "kvtier bench tiers: %llu rows x %s, model %s under %s, through %s\n",
                static_cast<unsigned long long>(r.rows), HumanBytes(r.row_bytes).c_str(),
                QuoteName(r.model).c_str(), QuoteName(r.root).c_str(), device.c_str());
  std::string out = line;
  std::snprintf(line, sizeof line,
                "CPU tier %u rows x %s (%s) in front of fs0; %u chunks per request; load in a "
                "fresh process\n\n",
                r.cpu_rows, HumanBytes(r.row_bytes).c_str(), HumanBytes(r.cpu_bytes).c_str(),
                r.batch);
  out += line;
  out += FormatFiguresTableWithRows(r.store, r.load.figures);
  out += "\n";
  out += FormatRowCounts({r.rows_stored, r.rows_already_cached, r.store_errors, r.load.verified,
                          r.load.corrupt, r.load.missing, r.load.errors},
                         r.first_error.empty() ? r.load.first_error : r.first_error);
  std::string hits;
  for (const auto& [name, n] : r.load.hits) {
    hits += (hits.empty() ? "" : ", ") + name + " " + std::to_string(n);
  }
  out += "load hits by tier (fresh process): " + hits + "\n";
  std::snprintf(line, sizeof line,
                "store: %llu rows written through to fs0 (%llu failed, %llu dropped), %llu CPU rows "
                "evicted, %llu waits for the write-through to drain\n",
                static_cast<unsigned long long>(r.rows_written_through),
                static_cast<unsigned long long>(r.fs_stores_failed),
                static_cast<unsigned long long>(r.fs_stores_dropped),
                static_cast<unsigned long long>(r.rows_evicted),
                static_cast<unsigned long long>(r.idle_waits));
  out += line;
  std::snprintf(line, sizeof line,
                "GB/s over the phase's wall time (store: until every row is on fs); latency per "
                "job of %u chunks; CPU excludes fill/verify (store %.3f s, load %.3f s); GB = 1e9 "
                "bytes\n",
                r.batch, r.store.harness_cpu_s, r.load.figures.harness_cpu_s);
  out += line;
  if (r.kept) out += "files kept under " + QuoteName(r.namespace_dir) + " (and its _r0 sibling)\n";
  return out;
}

}  // namespace kvtier::internal
