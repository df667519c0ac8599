// kvtier.EngineTier for Python: the engine-contract tier behind
// kvtier.vllm.KvtierFsTier (include/kvtier/engine_tier.h). It holds one export
// of the engine's row region from construction to shutdown(), and nothing
// else; shutdown() stops all I/O into the region before releasing it, so the
// engine can unmap it afterwards.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "kvtier/engine_tier.h"
#include "py_common.h"

namespace kvtier::py {

FsTierOpenOptions EngineOpenOptions(const Namespace& ns, uint64_t row_bytes, const pb::object& config);
pb::dict FsMetricsDict(const FsTierMetrics& m);

namespace {

using Slots = pb::array_t<int64_t, pb::array::c_style | pb::array::forcecast>;

class PyEngineTier {
 public:
  PyEngineTier(const Namespace& ns, const pb::object& rows, uint64_t row_bytes, const pb::object& config)
      : rows_(rows, true) {
    EngineTierOptions o{.fs = EngineOpenOptions(ns, row_bytes, config), .rows = {rows_.data(), rows_.size()}};
    tier_ = Unwrap(WithoutGil([&] { return EngineTier::Open(std::move(o)); }));
  }
  ~PyEngineTier() { Shutdown(); }

  int Lookup(const pb::object& key, const std::string& request_id) {
    if (!tier_) return static_cast<int>(LookupVerdict::kMiss);
    return static_cast<int>(tier_->Lookup(KeyFromObject(key), request_id));
  }

  void Submit(int64_t job_id, const pb::iterable& keys, const Slots& slots, bool load) {
    std::vector<OffloadKey> k = KeysFromList(keys);
    std::span<const int64_t> s(slots.data(), static_cast<size_t>(slots.size()));
    EngineTier& tier = Live();
    ThrowIfError(WithoutGil([&] { return load ? tier.SubmitLoad(job_id, k, s) : tier.SubmitStore(job_id, k, s); }));
  }

  // [(job_id, is_load, success, ok_key_indices, bytes, transfer_time_s), ...]
  pb::list Poll() {
    pb::list out;
    if (!tier_) return out;
    std::vector<EngineJobResult> done;
    tier_->PollFinished(&done);
    for (const EngineJobResult& r : done) {
      out.append(pb::make_tuple(r.job_id, r.is_load, r.success, pb::cast(r.ok_keys), r.bytes, r.transfer_time_s));
    }
    return out;
  }

  void FinishRequest(const std::string& request_id) {
    if (tier_) tier_->FinishRequest(request_id);  // after shutdown: nothing to forget
  }

  void Drain(uint32_t timeout_ms) {
    EngineTier& tier = Live();
    ThrowIfError(WithoutGil([&] { return tier.Drain(timeout_ms); }));
  }

  void Shutdown() {
    if (tier_) {
      pb::gil_scoped_release release;
      tier_->Shutdown();
      tier_.reset();
    }
    rows_.Release();
  }

  EngineTier& Live() {
    if (!tier_) ThrowStatus(Status(StatusCode::kUnavailable, "engine tier: shut down"));
    return *tier_;
  }

 private:
  HeldBuffer rows_;
  std::unique_ptr<EngineTier> tier_;
};

}  // namespace

void BindEngineTier(pb::module_& m) {
  pb::class_<PyEngineTier>(m, "EngineTier",
                           "An fs tier driven by an engine's per-step secondary-tier contract over one row region.")
      .def(pb::init<const Namespace&, const pb::object&, uint64_t, const pb::object&>(), pb::arg("namespace"),
           pb::arg("rows"), pb::arg("row_bytes"), pb::arg("config"))
      .def("lookup", &PyEngineTier::Lookup, pb::arg("key"), pb::arg("request_id"),
           "0 miss, 1 hit, 2 retry (checked in the next flush_lookups batch); never blocks.")
      .def("flush_lookups", [](PyEngineTier& t) { ThrowIfError(t.Live().FlushLookups()); })
      .def("finish_request", &PyEngineTier::FinishRequest, pb::arg("request_id"))
      .def("submit_store", [](PyEngineTier& t, int64_t id, const pb::iterable& keys, const Slots& slots) {
             t.Submit(id, keys, slots, false);
           }, pb::arg("job_id"), pb::arg("keys"), pb::arg("slots"))
      .def("submit_load", [](PyEngineTier& t, int64_t id, const pb::iterable& keys, const Slots& slots) {
             t.Submit(id, keys, slots, true);
           }, pb::arg("job_id"), pb::arg("keys"), pb::arg("slots"))
      .def("poll_finished", &PyEngineTier::Poll,
           "[(job_id, is_load, success, ok_key_indices, bytes, seconds)] for jobs finished since the last call.")
      .def("has_pending_work", [](PyEngineTier& t) { return t.Live().HasPendingWork(); })
      .def("drain", &PyEngineTier::Drain, pb::arg("timeout_ms") = 0,
           "Waits (GIL released) until every job has a result; 0: no limit.")
      .def("shutdown", &PyEngineTier::Shutdown, "Drains, stops all I/O into the rows and releases their buffer.")
      .def("stats", [](PyEngineTier& t) {
        const EngineTierStats s = t.Live().Stats();
        pb::dict d;
        d["lookups_pending"] = s.lookups_pending;
        d["lookup_cache_keys"] = s.lookup_cache_keys;
        d["jobs_in_flight"] = s.jobs_in_flight;
        return d;
      })
      .def("metrics", [](PyEngineTier& t) { return FsMetricsDict(t.Live().fs().Metrics()); })
      .def("prometheus_text", [](PyEngineTier& t, const std::string& name) {
        return t.Live().fs().PrometheusText(name);
      }, pb::arg("tier_name") = "fs0")
      .def("block_path", [](PyEngineTier& t, pb::bytes key) { return t.Live().fs().BlockPath(KeyFromBytes(key)); })
      .def_property_readonly("backend", [](PyEngineTier& t) { return std::string(t.Live().fs().backend_name()); })
      .def_property_readonly("o_direct", [](PyEngineTier& t) { return t.Live().fs().o_direct(); });
}

}  // namespace kvtier::py
