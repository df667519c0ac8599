// TieredStore metrics: a struct per tier and one Prometheus exposition for
// all of them (families grouped, so each appears once whatever the number of
// fs tiers).
#include <map>
#include <sstream>
#include <string>

#include "tiered_store/tiered_store_impl.h"

namespace kvtier::internal {
namespace {

// The family of a sample line: its metric name without a histogram suffix.
std::string FamilyOf(const std::string& sample) {
  std::string name = sample.substr(0, sample.find_first_of("{ "));
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string s(suffix);
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      return name.substr(0, name.size() - s.size());
    }
  }
  return name;
}

// Concatenates expositions, keeping one "# TYPE" line per family and every
// family's samples together, in first-seen order.
std::string MergeExpositions(const std::vector<std::string>& texts) {
  std::vector<std::string> order;
  std::map<std::string, std::string> type_line, samples;
  for (const std::string& text : texts) {
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("# TYPE ", 0) == 0) {
        const std::string family = line.substr(7, line.find(' ', 7) - 7);
        if (type_line.emplace(family, line).second) order.push_back(family);
      } else if (!line.empty() && line[0] != '#') {
        const std::string family = FamilyOf(line);
        if (!type_line.contains(family) && !samples.contains(family)) order.push_back(family);
        samples[family] += line + "\n";
      }
    }
  }
  std::string out;
  for (const std::string& family : order) {
    if (type_line.contains(family)) out += type_line[family] + "\n";
    out += samples[family];
  }
  return out;
}

void Family(std::string* out, const char* name, const char* type, const std::string& labels, double value) {
  std::ostringstream line;
  line << "# TYPE " << name << ' ' << type << '\n' << name << '{' << labels << "} " << value << '\n';
  *out += line.str();
}

}  // namespace

TieredStoreMetrics TieredStoreImpl::Metrics() const {
  std::lock_guard lock(mu_);
  TieredStoreMetrics m;
  m.row_bytes = row_bytes_;
  m.pins_refused = requests_.pins_refused();
  m.crc_staged_bytes = cpu_stats_.crc_staged_bytes;
  m.crc_staged_mismatches = cpu_stats_.crc_staged_mismatches;
  m.crc_staged_copy_faults = cpu_stats_.crc_staged_copy_faults;
  TierUsage cpu;
  cpu.name = "cpu";
  const CpuCounters& c = cpu_stats_;
  cpu.hits = c.hits;
  cpu.misses = c.misses;
  cpu.rows_in = c.rows_in, cpu.bytes_in = c.bytes_in, cpu.rows_out = c.rows_out, cpu.bytes_out = c.bytes_out;
  cpu.in_busy_s = c.in_clock.seconds(), cpu.out_busy_s = c.out_clock.seconds();
  cpu.rows = cpu_->rows();
  cpu.rows_used = cpu_->used_rows();
  cpu.usage = static_cast<double>(cpu.rows_used) / static_cast<double>(cpu.rows);
  cpu.rows_pinned = requests_.pinned_keys();
  cpu.rows_evicted = cpu_->counters().rows_evicted;
  cpu.stores_no_space = c.stores_no_space;
  m.tiers.push_back(cpu);
  for (size_t t = 0; t < router_.size(); ++t) m.tiers.push_back(router_.Usage(t));
  return m;
}

std::string TieredStoreImpl::PrometheusText() const {
  const TieredStoreMetrics m = Metrics();
  std::vector<std::string> texts;
  std::string own;
  for (const TierUsage& t : m.tiers) {
    const std::string labels = "tier=\"" + t.name + "\"";
    Family(&own, "kvtier_tier_hits_total", "counter", labels, static_cast<double>(t.hits));
    Family(&own, "kvtier_tier_misses_total", "counter", labels, static_cast<double>(t.misses));
    if (t.name != "cpu") {
      Family(&own, "kvtier_tier_promotions_total", "counter", labels, static_cast<double>(t.promotions));
      Family(&own, "kvtier_tier_promotions_failed_total", "counter", labels, static_cast<double>(t.promotions_failed));
      continue;
    }
    Family(&own, "kvtier_cpu_rows", "gauge", labels, static_cast<double>(t.rows));
    Family(&own, "kvtier_cpu_rows_used", "gauge", labels, static_cast<double>(t.rows_used));
    Family(&own, "kvtier_cpu_usage_ratio", "gauge", labels, t.usage);
    Family(&own, "kvtier_cpu_rows_pinned", "gauge", labels, static_cast<double>(t.rows_pinned));
    Family(&own, "kvtier_cpu_rows_evicted_total", "counter", labels, static_cast<double>(t.rows_evicted));
    Family(&own, "kvtier_cpu_stores_no_space_total", "counter", labels, static_cast<double>(t.stores_no_space));
    Family(&own, "kvtier_cpu_bytes_from_gpu_total", "counter", labels, static_cast<double>(t.bytes_in));
    Family(&own, "kvtier_cpu_bytes_to_gpu_total", "counter", labels, static_cast<double>(t.bytes_out));
    Family(&own, "kvtier_cpu_copy_busy_seconds_total", "counter", labels + ",direction=\"gpu_to_cpu\"", t.in_busy_s);
    Family(&own, "kvtier_cpu_copy_busy_seconds_total", "counter", labels + ",direction=\"cpu_to_gpu\"", t.out_busy_s);
  }
  Family(&own, "kvtier_cpu_pins_refused_total", "counter", "tier=\"cpu\"", static_cast<double>(m.pins_refused));
  Family(&own, "kvtier_cpu_crc_staged_bytes_total", "counter", "tier=\"cpu\"", static_cast<double>(m.crc_staged_bytes));
  Family(&own, "kvtier_cpu_crc_staged_mismatches_total", "counter", "tier=\"cpu\"",
         static_cast<double>(m.crc_staged_mismatches));
  Family(&own, "kvtier_cpu_crc_staged_copy_faults_total", "counter", "tier=\"cpu\"",
         static_cast<double>(m.crc_staged_copy_faults));
  texts.push_back(std::move(own));
  for (size_t t = 0; t < router_.size(); ++t) texts.push_back(router_.PrometheusText(t));
  return MergeExpositions(texts);
}

}  // namespace kvtier::internal
