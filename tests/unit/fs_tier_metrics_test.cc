// Proves that the one table of an fs tier's metrics (kFsTierMetricFields,
// include/kvtier/fs_tier_metrics.h) covers FsTierMetrics and that every
// place a metric is spelled follows it:
//  * the rows reach every byte of the struct (the runtime twin of the
//    header's static_assert), with distinct names, families and vLLM names;
//  * FormatPrometheus exports exactly the rows with a family, each with its
//    # TYPE kind and its value (scaled where the row says), plus the two
//    histograms;
//  * MergeFsTierMetrics folds each row by its MetricMerge (and pins the
//    rows whose merge is not a sum: root_up, namespace_scan_complete,
//    backpressure_active, the EMA) and the histograms bucket by bucket;
//  * docs/metrics.md holds the row the table gives for each field ("Fields")
//    and names no kvtier_fs_ family or kvtier:fs_ vLLM name the table lacks;
//  * python/kvtier/vllm.py spells no vLLM name of its own (it reads them
//    from the table; tests/python/test_metrics_table.py checks what vLLM
//    sees).
// Field values are drawn from a seeded generator (printed on failure).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <iterator>
#include <random>
#include <regex>
#include <set>
#include <string>

#include "fs/tier_metrics.h"
#include "kvtier/fs_tier_metrics.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

using internal::FormatPrometheus;
using internal::MergeFsTierMetrics;

// Every field and histogram bucket set to a value drawn from rng, through
// the table only; flags (unit "1") are 0 or 1.
FsTierMetrics Drawn(std::mt19937_64& rng) {
  FsTierMetrics m;
  for (const FsTierMetricField& f : kFsTierMetricFields) {
    const uint64_t v = f.unit == "1" ? rng() % 2 : 1 + rng() % 1000000000000;
    if (f.count != nullptr) m.*f.count = v;
    if (f.value != nullptr) m.*f.value = static_cast<double>(v) / 1024;
  }
  for (const FsTierLatencyHistogram& h : kFsTierLatencyHistograms) {
    for (uint64_t& b : m.*h.buckets) b = rng() % 1000000;
  }
  return m;
}

std::string Exported(const FsTierMetricField& f, const FsTierMetrics& m) {
  if (f.count != nullptr && f.scale == 1) return std::to_string(m.*f.count);
  char text[64];
  std::snprintf(text, sizeof text, "%.6f", (f.count != nullptr ? static_cast<double>(m.*f.count) : m.*f.value) * f.scale);
  return text;
}

TEST(FsTierMetricsTable, RowsReachEveryByteOfTheStruct) {
  FsTierMetrics m;
  std::memset(static_cast<void*>(&m), 0, sizeof m);
  for (const FsTierMetricField& f : kFsTierMetricFields) {
    if (f.count != nullptr) m.*f.count = ~uint64_t{0};
    if (f.value != nullptr) std::memset(static_cast<void*>(&(m.*f.value)), 0xff, sizeof(double));
  }
  for (const FsTierLatencyHistogram& h : kFsTierLatencyHistograms) {
    for (uint64_t& b : m.*h.buckets) b = ~uint64_t{0};
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(&m);
  for (size_t i = 0; i < sizeof m; ++i) ASSERT_EQ(bytes[i], 0xff) << "byte " << i << " of FsTierMetrics has no row";
  std::set<std::string_view> names, families, vllm;
  for (const FsTierMetricField& f : kFsTierMetricFields) {
    EXPECT_TRUE(names.insert(f.name).second) << f.name;
    EXPECT_FALSE(f.unit.empty()) << f.name;
    EXPECT_FALSE(f.help.empty()) << f.name;
    EXPECT_TRUE(f.prometheus.empty() || families.insert(f.prometheus).second) << f.prometheus;
    EXPECT_TRUE(f.vllm.empty() || vllm.insert(f.vllm).second) << f.vllm;
    if (f.kind == MetricKind::kCounter && !f.prometheus.empty()) {
      EXPECT_TRUE(f.prometheus.ends_with("_total")) << f.name;
    }
  }
}

TEST(FsTierMetricsTable, PrometheusTextExportsEveryRowWithAFamily) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  const FsTierMetrics m = Drawn(rng);
  const std::string text = FormatPrometheus(m, "fs9");
  size_t exported = 0;
  for (const FsTierMetricField& f : kFsTierMetricFields) {
    if (f.prometheus.empty()) continue;
    ++exported;
    const std::string family(f.prometheus);
    const std::string sample = "# TYPE " + family + (f.kind == MetricKind::kCounter ? " counter\n" : " gauge\n") +
                               family + "{tier=\"fs9\"} " + Exported(f, m) + "\n";
    EXPECT_NE(text.find(sample), std::string::npos) << "seed " << seed << ": no\n" << sample << "in\n" << text;
  }
  for (const FsTierLatencyHistogram& h : kFsTierLatencyHistograms) {
    uint64_t total = 0;
    for (const uint64_t b : m.*h.buckets) total += b;
    const std::string family(h.prometheus);
    EXPECT_NE(text.find("# TYPE " + family + " histogram\n"), std::string::npos) << text;
    EXPECT_NE(text.find(family + "_count{tier=\"fs9\"} " + std::to_string(total) + "\n"), std::string::npos) << text;
  }
  size_t types = 0;
  for (size_t at = 0; (at = text.find("# TYPE ", at)) != std::string::npos; ++at) ++types;
  EXPECT_EQ(types, exported + std::size(kFsTierLatencyHistograms)) << text;
}

TEST(FsTierMetricsTable, MergeFollowsEachRow) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  const FsTierMetrics a = Drawn(rng), b = Drawn(rng);
  FsTierMetrics merged = a;
  MergeFsTierMetrics(b, &merged);
  for (const FsTierMetricField& f : kFsTierMetricFields) {
    const double x = f.count != nullptr ? static_cast<double>(a.*f.count) : a.*f.value;
    const double y = f.count != nullptr ? static_cast<double>(b.*f.count) : b.*f.value;
    const double got = f.count != nullptr ? static_cast<double>(merged.*f.count) : merged.*f.value;
    const double want = f.merge == MetricMerge::kSum ? x + y : f.merge == MetricMerge::kMax ? std::max(x, y)
                                                                                            : std::min(x, y);
    EXPECT_EQ(got, want) << "seed " << seed << ": " << f.name;
  }
  for (const FsTierLatencyHistogram& h : kFsTierLatencyHistograms) {
    for (int i = 0; i < FsTierMetrics::kLatencyBuckets; ++i) {
      EXPECT_EQ((merged.*h.buckets)[i], (a.*h.buckets)[i] + (b.*h.buckets)[i]) << h.name << "[" << i << "]";
    }
  }
  // The documented exceptions to a sum: all roots up, every scan complete,
  // the worst root's backpressure.
  for (const auto& [name, merge] : {std::pair{"root_up", MetricMerge::kMin},
                                    std::pair{"namespace_scan_complete", MetricMerge::kMin},
                                    std::pair{"backpressure_active", MetricMerge::kMax},
                                    std::pair{"store_latency_ema_s_per_mib", MetricMerge::kMax}}) {
    bool found = false;
    for (const FsTierMetricField& f : kFsTierMetricFields) {
      if (f.name != name) continue;
      found = true;
      EXPECT_EQ(f.merge, merge) << name;
    }
    EXPECT_TRUE(found) << name;
  }
}

// The row of docs/metrics.md's "Fields" table for `f`.
std::string DocsRow(const FsTierMetricField& f) {
  auto code = [](std::string_view s) { return s.empty() ? std::string("–") : "`" + std::string(s) + "`"; };
  std::string help;
  for (const char c : f.help) help += c == '<' ? std::string("\\<") : std::string(1, c);  // not an HTML tag
  const char* merge = f.merge == MetricMerge::kSum ? "sum" : f.merge == MetricMerge::kMax ? "max" : "min";
  return "| `" + std::string(f.name) + "` | " + (f.kind == MetricKind::kCounter ? "counter" : "gauge") + " | " +
         std::string(f.unit) + " | " + merge + " | " + code(f.prometheus) + " | " + code(f.vllm) + " | " + help + " |";
}

std::set<std::string> Matches(const std::string& text, const std::regex& re) {
  std::set<std::string> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) {
    out.insert(it->str());
  }
  return out;
}

TEST(FsTierMetricsTable, DocsListEveryFieldAsTheTableSays) {
  const std::string docs = testing::ReadFileOrDie(testing::SourceDir() / "docs/metrics.md");
  std::set<std::string> families, vllm;
  for (const FsTierMetricField& f : kFsTierMetricFields) {
    EXPECT_NE(docs.find("\n" + DocsRow(f) + "\n"), std::string::npos)
        << "docs/metrics.md, \"Fields\", lacks (or has another) row for " << f.name << "; the table says:\n"
        << DocsRow(f);
    if (!f.prometheus.empty()) families.insert(std::string(f.prometheus));
    if (!f.vllm.empty()) vllm.insert(std::string(f.vllm));
  }
  for (const FsTierLatencyHistogram& h : kFsTierLatencyHistograms) families.insert(std::string(h.prometheus));
  // The families' own table names each one, in full (the Fields table
  // names only those of fields).
  for (const std::string& family : families) {
    const size_t fields = docs.find("### Fields");
    EXPECT_LT(docs.find("`" + family + "`"), fields) << family << " is missing from the families' table";
  }
  for (const std::string& name : Matches(docs, std::regex("kvtier_fs_[a-z_]+"))) {
    EXPECT_TRUE(families.count(name)) << "docs/metrics.md names " << name << ", which FsTierMetrics does not export";
  }
  for (const std::string& name : Matches(docs, std::regex("kvtier:fs_[a-z_]+"))) {
    EXPECT_TRUE(vllm.count(name)) << "docs/metrics.md names " << name << ", which kvtier.vllm does not report";
  }
}

TEST(FsTierMetricsTable, VllmAdapterSpellsNoNameOfItsOwn) {
  const std::string adapter = testing::ReadFileOrDie(testing::SourceDir() / "python/kvtier/vllm.py");
  EXPECT_EQ(Matches(adapter, std::regex("kvtier:fs_[a-z_]+")), std::set<std::string>{})
      << "python/kvtier/vllm.py names metrics itself; take them from kvtier.fs_metric_fields()";
  EXPECT_NE(adapter.find("fs_metric_fields()"), std::string::npos);
}

}  // namespace
}  // namespace kvtier
