// An fs tier's metrics for Python, generated from the library's table of
// them (kvtier/fs_tier_metrics.h): metrics() dicts, and
// kvtier.fs_metric_fields(), from which kvtier.vllm names and documents the
// metrics it reports to vLLM.
#include <iterator>
#include <string>

#include "kvtier/fs_tier_metrics.h"
#include "py_common.h"

namespace kvtier::py {
namespace {

pb::object Text(std::string_view s) { return s.empty() ? pb::object(pb::none()) : pb::object(pb::str(std::string(s))); }

const char* MergeName(MetricMerge merge) {
  return merge == MetricMerge::kSum ? "sum" : merge == MetricMerge::kMax ? "max" : "min";
}

// One row: name, kind ("counter" / "gauge"), merge ("sum" / "max" / "min"),
// unit, prometheus (None: not exported), scale, vllm (None: not reported),
// help.
pb::dict FieldDict(const FsTierMetricField& f) {
  pb::dict d;
  d["name"] = std::string(f.name);
  d["kind"] = f.kind == MetricKind::kCounter ? "counter" : "gauge";
  d["merge"] = MergeName(f.merge);
  d["unit"] = std::string(f.unit);
  d["prometheus"] = Text(f.prometheus);
  d["scale"] = f.scale;
  d["vllm"] = Text(f.vllm);
  d["help"] = std::string(f.help);
  return d;
}

}  // namespace

// Every field but the histograms, by name: ints, and floats for the doubles.
pb::dict FsMetricsDict(const FsTierMetrics& m) {
  pb::dict d;
  for (const FsTierMetricField& f : kFsTierMetricFields) {
    const pb::str key(std::string(f.name));
    if (f.count != nullptr) d[key] = m.*f.count;
    if (f.value != nullptr) d[key] = m.*f.value;
  }
  return d;
}

void BindMetrics(pb::module_& m) {
  m.def(
      "fs_metric_fields",
      [] {
        pb::list rows;
        for (const FsTierMetricField& f : kFsTierMetricFields) rows.append(FieldDict(f));
        return pb::tuple(rows);
      },
      "The fields of an fs tier's metrics() in declaration order, one dict each: name, kind, merge, unit, "
      "prometheus, scale, vllm, help.");
}

}  // namespace kvtier::py
