// The replay report: merging instances, JSON (also the worker-to-parent
// protocol) and the readable table.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <type_traits>

#include "replay/replay.h"
#include "util/name_escape.h"

namespace kvtier::internal {
namespace {

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t rank = static_cast<size_t>(p / 100.0 * static_cast<double>(values.size() - 1) + 0.5);
  return values[std::min(rank, values.size() - 1)];
}

double Ratio(double a, double b) { return b > 0 ? a / b : 0; }

// Reads j[key] into *out when it has the right JSON type (get<T>() on a
// wrong type would throw).
template <class T>
bool Get(const nlohmann::json& j, const char* key, T* out) {
  auto it = j.find(key);
  if (it == j.end()) return false;
  if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) return false;
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!it->is_number()) return false;
  } else {
    if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<int64_t>() >= 0)) return false;
  }
  *out = it->get<T>();
  return true;
}

std::string Fmt(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, value);
  return buf;
}

// Per tier: what it served, and what became of the stores it was asked for
// (failed and dropped stores are always printed, so a loss is never silent).
std::string TierLine(const PhaseReport& p) {
  std::string line;
  for (const auto& [name, c] : p.tiers) {
    line += "  " + name + ": " + std::to_string(c.hits) + " hits, " + std::to_string(c.misses) + " misses, " +
            Fmt("%.1f MB", static_cast<double>(c.bytes) / 1e6) + "; stores " + std::to_string(c.stores()) + ": " +
            std::to_string(c.stores_ok) + " written, " + std::to_string(c.stores_skipped) + " already there, " +
            std::to_string(c.stores_failed) + " failed, " + std::to_string(c.stores_dropped) + " dropped\n";
  }
  return line;
}

nlohmann::json TierJson(const TierCounts& c) {
  return {{"hits", c.hits},
          {"misses", c.misses},
          {"bytes", c.bytes},
          {"stores", c.stores()},
          {"stores_ok", c.stores_ok},
          {"stores_skipped", c.stores_skipped},
          {"stores_failed", c.stores_failed},
          {"stores_dropped", c.stores_dropped},
          {"stores_lost", c.stores_lost()}};
}

bool TierFromJson(const nlohmann::json& j, TierCounts* t) {
  return Get(j, "hits", &t->hits) && Get(j, "misses", &t->misses) && Get(j, "bytes", &t->bytes) &&
         Get(j, "stores_ok", &t->stores_ok) && Get(j, "stores_skipped", &t->stores_skipped) &&
         Get(j, "stores_failed", &t->stores_failed) && Get(j, "stores_dropped", &t->stores_dropped);
}

void AddTier(TierCounts* t, const TierCounts& c) {
  t->hits += c.hits, t->misses += c.misses, t->bytes += c.bytes;
  t->stores_ok += c.stores_ok, t->stores_skipped += c.stores_skipped;
  t->stores_failed += c.stores_failed, t->stores_dropped += c.stores_dropped;
}

}  // namespace

void MergePhase(PhaseReport* total, const PhaseReport& part) {
  total->name = part.name;
  total->requests += part.requests;
  total->requests_skipped += part.requests_skipped;
  total->prompt_tokens += part.prompt_tokens;
  total->tokens_gpu += part.tokens_gpu;
  total->tokens_kvtier += part.tokens_kvtier;
  total->tokens_recomputed += part.tokens_recomputed;
  total->repeated_tokens += part.repeated_tokens;
  total->repeated_gpu += part.repeated_gpu;
  total->repeated_kvtier += part.repeated_kvtier;
  total->repeated_recomputed += part.repeated_recomputed;
  total->first_touch_tokens += part.first_touch_tokens;
  total->first_touch_fs += part.first_touch_fs;
  total->first_touch_recomputed += part.first_touch_recomputed;
  for (const auto& [name, c] : part.tiers) AddTier(&total->tiers[name], c);
  total->rows_loaded += part.rows_loaded;
  total->rows_verified += part.rows_verified;
  total->rows_corrupt += part.rows_corrupt;
  total->load_bytes += part.load_bytes;
  total->load_busy_s += part.load_busy_s;
  total->load_ms.insert(total->load_ms.end(), part.load_ms.begin(), part.load_ms.end());
  total->ttft_with_s += part.ttft_with_s;
  total->ttft_without_s += part.ttft_without_s;
  total->device = part.device;
  total->points.insert(total->points.end(), part.points.begin(), part.points.end());
  std::sort(total->points.begin(), total->points.end(),
            [](const ReplayPoint& a, const ReplayPoint& b) { return a.arrival_s < b.arrival_s; });
}

nlohmann::json PhaseToJson(const PhaseReport& p, bool with_points) {
  nlohmann::json j = {{"name", p.name},
                      {"requests", p.requests},
                      {"requests_skipped", p.requests_skipped},
                      {"prompt_tokens", p.prompt_tokens},
                      {"tokens_gpu", p.tokens_gpu},
                      {"tokens_kvtier", p.tokens_kvtier},
                      {"tokens_recomputed", p.tokens_recomputed},
                      {"repeated_tokens", p.repeated_tokens},
                      {"repeated_tokens_gpu", p.repeated_gpu},
                      {"repeated_tokens_kvtier", p.repeated_kvtier},
                      {"repeated_tokens_recomputed", p.repeated_recomputed},
                      // Of the repeated tokens the GPU cache did not have: the share kvtier served.
                      {"repeated_kvtier_share", Ratio(static_cast<double>(p.repeated_kvtier),
                                                      static_cast<double>(p.repeated_kvtier + p.repeated_recomputed))},
                      {"hit_rate", Ratio(static_cast<double>(p.tokens_gpu + p.tokens_kvtier),
                                         static_cast<double>(p.prompt_tokens))},
                      {"first_touch_tokens", p.first_touch_tokens},
                      {"first_touch_tokens_fs", p.first_touch_fs},
                      {"first_touch_tokens_recomputed", p.first_touch_recomputed},
                      {"first_touch_fs_share", Ratio(static_cast<double>(p.first_touch_fs),
                                                     static_cast<double>(p.first_touch_tokens))},
                      {"rows_loaded", p.rows_loaded},
                      {"rows_verified", p.rows_verified},
                      {"rows_corrupt", p.rows_corrupt},
                      {"load_bytes", p.load_bytes},
                      {"load_busy_s", p.load_busy_s},
                      {"load_gbps", Ratio(static_cast<double>(p.load_bytes) / 1e9, p.load_busy_s)},
                      {"load_p50_ms", Percentile(p.load_ms, 50)},
                      {"load_p99_ms", Percentile(p.load_ms, 99)},
                      {"ttft_s_with", Ratio(p.ttft_with_s, static_cast<double>(p.requests))},
                      {"ttft_s_without", Ratio(p.ttft_without_s, static_cast<double>(p.requests))},
                      {"ttft_sum_s_with", p.ttft_with_s},
                      {"ttft_sum_s_without", p.ttft_without_s},
                      {"device", p.device}};
  nlohmann::json tiers = nlohmann::json::object();
  for (const auto& [name, c] : p.tiers) tiers[name] = TierJson(c);
  j["tiers"] = tiers;
  if (with_points) {
    j["load_ms"] = p.load_ms;
    nlohmann::json points = nlohmann::json::array();
    for (const ReplayPoint& pt : p.points) points.push_back({pt.arrival_s, pt.hit_fraction, pt.load_ms, pt.phase});
    j["points"] = points;
  }
  return j;
}

Result<PhaseReport> PhaseFromJson(const nlohmann::json& j) {
  PhaseReport p;
  bool ok = j.is_object() && Get(j, "name", &p.name) && Get(j, "requests", &p.requests) &&
            Get(j, "requests_skipped", &p.requests_skipped) && Get(j, "prompt_tokens", &p.prompt_tokens) &&
            Get(j, "tokens_gpu", &p.tokens_gpu) && Get(j, "tokens_kvtier", &p.tokens_kvtier) &&
            Get(j, "tokens_recomputed", &p.tokens_recomputed) && Get(j, "repeated_tokens", &p.repeated_tokens) &&
            Get(j, "repeated_tokens_gpu", &p.repeated_gpu) && Get(j, "repeated_tokens_kvtier", &p.repeated_kvtier) &&
            Get(j, "repeated_tokens_recomputed", &p.repeated_recomputed) &&
            Get(j, "first_touch_tokens", &p.first_touch_tokens) && Get(j, "first_touch_tokens_fs", &p.first_touch_fs) &&
            Get(j, "first_touch_tokens_recomputed", &p.first_touch_recomputed) && Get(j, "rows_loaded", &p.rows_loaded) &&
            Get(j, "rows_verified", &p.rows_verified) && Get(j, "rows_corrupt", &p.rows_corrupt) &&
            Get(j, "load_bytes", &p.load_bytes) && Get(j, "load_busy_s", &p.load_busy_s) &&
            Get(j, "ttft_sum_s_with", &p.ttft_with_s) && Get(j, "ttft_sum_s_without", &p.ttft_without_s);
  if (!ok) return Status(StatusCode::kInvalidArgument, "replay: a worker's report is incomplete");
  if (auto d = j.find("device"); d != j.end() && d->is_number_integer()) p.device = d->get<int>();
  auto tiers = j.find("tiers");
  if (tiers != j.end() && tiers->is_object()) {
    for (const auto& [name, c] : tiers->items()) ok = ok && TierFromJson(c, &p.tiers[name]);
  }
  auto load_ms = j.find("load_ms");
  if (load_ms != j.end() && load_ms->is_array()) {
    for (const auto& v : *load_ms) ok = ok && v.is_number() && (p.load_ms.push_back(v.get<double>()), true);
  }
  auto points = j.find("points");
  if (points != j.end() && points->is_array()) {
    for (const auto& v : *points) {
      if (!v.is_array() || v.size() != 4 || !v[0].is_number() || !v[1].is_number() || !v[2].is_number() ||
          !v[3].is_number_integer()) {
        return Status(StatusCode::kInvalidArgument, "replay: a worker's report has a bad point");
      }
      p.points.push_back(ReplayPoint{v[0].get<double>(), v[1].get<double>(), v[2].get<double>(), v[3].get<int>()});
    }
  }
  if (!ok) return Status(StatusCode::kInvalidArgument, "replay: a worker's report is malformed");
  return p;
}

// The lines on prefix tokens seen before (by an earlier request, or before a restart).
static std::string RepeatLines(const PhaseReport& p, const nlohmann::json& j) {
  std::string out;
  if (p.repeated_tokens > 0) {
    const double rep = static_cast<double>(p.repeated_tokens);
    out += "  repeated prefix tokens (seen by an earlier request) " + std::to_string(p.repeated_tokens) +
           ": GPU cache " + Fmt("%5.1f %%", 100.0 * static_cast<double>(p.repeated_gpu) / rep) + ", kvtier " +
           Fmt("%5.1f %%", 100.0 * static_cast<double>(p.repeated_kvtier) / rep) + ", recomputed " +
           Fmt("%5.1f %%", 100.0 * static_cast<double>(p.repeated_recomputed) / rep);
    if (p.repeated_kvtier + p.repeated_recomputed > 0) {
      out += "; of those not on the GPU, " + Fmt("%.1f %%", 100.0 * j["repeated_kvtier_share"].get<double>()) +
             " served by kvtier";
    }
    out += "\n";
  }
  if (p.first_touch_tokens > 0) {
    out += "  warm restart: " + std::to_string(p.first_touch_tokens) +
           " tokens from before the restart needed again: " +
           Fmt("%.1f %%", 100.0 * j["first_touch_fs_share"].get<double>()) + " loaded from the fs tier(s), " +
           std::to_string(p.first_touch_recomputed) + " recomputed\n";
  }
  return out;
}

std::string FormatReplayTable(const std::vector<PhaseReport>& phases, const std::string& trace_name,
                              uint32_t instances) {
  const int device = phases.empty() ? -1 : phases.front().device;
  std::string out = "kvtier replay: " + QuoteName(trace_name) + ", " + std::to_string(instances) +
                    " instance(s), GPU pool " +
                    (device < 0 ? std::string("in host memory (the host stand-in device)")
                                : "on CUDA device " + std::to_string(device)) +
                    "\n";
  for (const PhaseReport& p : phases) {
    const double prompt = static_cast<double>(std::max<uint64_t>(p.prompt_tokens, 1));
    out += "\n== phase " + p.name + ": " + std::to_string(p.requests) + " requests, " +
           std::to_string(p.prompt_tokens) + " prompt tokens";
    if (p.requests_skipped > 0) out += " (" + std::to_string(p.requests_skipped) + " skipped: larger than the GPU pool)";
    out += "\n";
    out += "  tokens from the GPU cache " + Fmt("%5.1f %%", 100.0 * static_cast<double>(p.tokens_gpu) / prompt) +
           ", loaded from kvtier " + Fmt("%5.1f %%", 100.0 * static_cast<double>(p.tokens_kvtier) / prompt) +
           ", recomputed " + Fmt("%5.1f %%", 100.0 * static_cast<double>(p.tokens_recomputed) / prompt) + "\n";
    const nlohmann::json j = PhaseToJson(p, false);
    out += RepeatLines(p, j);
    out += TierLine(p);
    out += "  load: " + Fmt("%.2f GB/s", j["load_gbps"].get<double>()) + ", per request p50 " +
           Fmt("%.2f ms", j["load_p50_ms"].get<double>()) + ", p99 " + Fmt("%.2f ms", j["load_p99_ms"].get<double>()) +
           "; rows loaded " + std::to_string(p.rows_loaded) + ", verified " + std::to_string(p.rows_verified) +
           ", corrupt " + std::to_string(p.rows_corrupt) + "\n";
    out += "  est. time to first token, mean: " + Fmt("%.3f s", j["ttft_s_with"].get<double>()) + " with kvtier, " +
           Fmt("%.3f s", j["ttft_s_without"].get<double>()) + " with the GPU cache alone\n";
  }
  return out;
}

nlohmann::json ReplayJson(const std::vector<PhaseReport>& phases, const std::string& trace_name, uint32_t instances,
                          bool restart) {
  nlohmann::json j = {{"trace", trace_name}, {"instances", instances}, {"restart", restart}};
  j["phases"] = nlohmann::json::array();
  for (const PhaseReport& p : phases) j["phases"].push_back(PhaseToJson(p, false));
  return j;
}

StoreLoss WorstStoreLoss(const std::vector<PhaseReport>& phases) {
  std::map<std::string, TierCounts> total;
  for (const PhaseReport& p : phases) {
    for (const auto& [name, c] : p.tiers) AddTier(&total[name], c);
  }
  StoreLoss worst;
  for (const auto& [name, c] : total) {
    if (c.stores() == 0) continue;
    const StoreLoss loss{name, c.stores(), c.stores_failed, c.stores_dropped};
    if (worst.tier.empty() || loss.share() > worst.share()) worst = loss;
  }
  return worst;
}

nlohmann::json StoreLossJson(const StoreLoss& loss, double share_max) {
  return {{"tier", loss.tier},   {"stores", loss.stores},     {"failed", loss.failed},
          {"dropped", loss.dropped}, {"share", loss.share()}, {"max", share_max},
          {"exceeded", loss.share() > share_max}};
}

}  // namespace kvtier::internal
