// kvtier.FsTier and kvtier.EngineTier for Python: thin wrappers over the C++
// classes that hold the callers' buffer exports while their jobs run (so a
// buffer cannot be freed under the I/O) and release the GIL while waiting.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "kvtier/config.h"
#include "kvtier/engine_tier.h"
#include "kvtier/fs_tier.h"
#include "py_common.h"
#include "py_config.h"

namespace kvtier::py {
namespace {

FsTierOpenOptions OpenOptions(const Namespace& ns, uint64_t row_bytes, const pb::object& config) {
  FsTierOpenOptions o;
  o.tier = ParseTierConfig(config);
  o.ns = ns.spec();
  o.row_bytes = row_bytes;
  return o;
}

pb::dict MetricsDict(const FsTierMetrics& m) {
  pb::dict d;
#define KVTIER_PY_FIELD(f) d[#f] = m.f
  KVTIER_PY_FIELD(rows_stored); KVTIER_PY_FIELD(bytes_stored); KVTIER_PY_FIELD(rows_skipped_exists);
  KVTIER_PY_FIELD(rows_dropped); KVTIER_PY_FIELD(rows_loaded); KVTIER_PY_FIELD(bytes_loaded);
  KVTIER_PY_FIELD(rows_missed); KVTIER_PY_FIELD(rows_corrupt); KVTIER_PY_FIELD(lookups_hit);
  KVTIER_PY_FIELD(lookups_miss); KVTIER_PY_FIELD(store_errors); KVTIER_PY_FIELD(load_errors);
  KVTIER_PY_FIELD(lookup_errors); KVTIER_PY_FIELD(read_queue_depth); KVTIER_PY_FIELD(write_queue_depth);
  KVTIER_PY_FIELD(in_flight); KVTIER_PY_FIELD(store_queue_bytes); KVTIER_PY_FIELD(backpressure_active);
  KVTIER_PY_FIELD(store_latency_ema_s_per_mib); KVTIER_PY_FIELD(fixed_buffer_ios); KVTIER_PY_FIELD(checksum_ns);
  KVTIER_PY_FIELD(root_up); KVTIER_PY_FIELD(roots_down); KVTIER_PY_FIELD(deadline_misses);
  KVTIER_PY_FIELD(requests_stuck);
#undef KVTIER_PY_FIELD
  return d;
}

struct PyJobResult {
  uint64_t job_id = 0;
  std::string kind;                  // "store", "load", "lookup"
  std::vector<std::string> outcomes;  // per key: ok, skipped_exists, miss, corrupt, dropped, error
  std::vector<std::string> errors;    // per key: the status text ("" when none)
  size_t ok_prefix = 0;
};

PyJobResult ToPy(const JobResult& r) {
  PyJobResult out;
  out.job_id = r.job_id;
  out.kind = r.kind == JobKind::kStore ? "store" : r.kind == JobKind::kLoad ? "load" : "lookup";
  for (const KeyResult& k : r.keys) {
    out.outcomes.emplace_back(KeyOutcomeName(k.outcome));
    out.errors.push_back(k.status.ok() ? "" : k.status.ToString());
  }
  out.ok_prefix = r.OkPrefix();
  return out;
}

// kvtier.FsTier: jobs over caller buffers; see include/kvtier/fs_tier.h.
class PyFsTier {
 public:
  PyFsTier(const Namespace& ns, uint64_t row_bytes, const pb::object& config) {
    FsTierOpenOptions o = OpenOptions(ns, row_bytes, config);
    o.on_job_finished = [state = state_] {
      std::lock_guard lock(state->mu);
      ++state->finished;
      state->cv.notify_all();
    };
    tier_ = Unwrap(WithoutGil([&] { return FsTier::Open(o); }));
  }
  ~PyFsTier() { Close(); }

  uint64_t SubmitStore(const pb::iterable& keys, const pb::sequence& rows) {
    return Submit(keys, rows, false);
  }
  uint64_t SubmitLoad(const pb::iterable& keys, const pb::sequence& rows) { return Submit(keys, rows, true); }
  uint64_t SubmitLookup(const pb::iterable& keys) {
    std::vector<OffloadKey> k = KeysFromList(keys);
    const uint64_t id = Unwrap(Live().SubmitLookup(k));
    held_[id];  // outstanding, with no buffers
    return id;
  }

  std::vector<PyJobResult> Poll() {
    std::vector<JobResult> done;
    Live().PollFinished(&done);
    std::vector<PyJobResult> out;
    for (const JobResult& r : done) {
      held_.erase(r.job_id);  // the job no longer touches its buffers
      out.push_back(ToPy(r));
    }
    return out;
  }

  // Blocks (without the GIL) until a job finishes or timeout_ms passes; returns Poll().
  std::vector<PyJobResult> Wait(uint32_t timeout_ms) {
    std::vector<PyJobResult> out = Poll();
    if (!out.empty() || held_.empty()) return out;
    {
      pb::gil_scoped_release release;
      std::unique_lock lock(state_->mu);
      const uint64_t seen = state_->finished;
      state_->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return state_->finished != seen; });
    }
    return Poll();
  }

  void WaitIdle(uint32_t timeout_ms) {
    FsTier& tier = Live();
    ThrowIfError(WithoutGil([&] { return tier.WaitIdle(timeout_ms); }));
  }

  void Close() {
    if (!tier_) return;
    {
      pb::gil_scoped_release release;
      while (!tier_->WaitIdle(1000).ok()) {  // every I/O has a deadline: this ends
      }
      tier_.reset();
    }
    held_.clear();
  }

  FsTier& Live() {
    if (!tier_) ThrowStatus(Status(StatusCode::kUnavailable, "fs tier: closed"));
    return *tier_;
  }

 private:
  struct WakeState {
    std::mutex mu;
    std::condition_variable cv;
    uint64_t finished = 0;
  };

  uint64_t Submit(const pb::iterable& keys, const pb::sequence& rows, bool load) {
    std::vector<OffloadKey> k = KeysFromList(keys);
    std::vector<HeldBuffer> held;
    std::vector<std::span<uint8_t>> spans;
    for (pb::handle row : rows) {
      held.emplace_back(row, load);
      spans.emplace_back(held.back().data(), held.back().size());
    }
    const std::vector<std::span<const uint8_t>> src(spans.begin(), spans.end());
    // Submitting only queues the job (no I/O), so the GIL stays held: no
    // other Python thread can poll this job before its buffers are recorded.
    const uint64_t id = Unwrap(load ? Live().SubmitLoad(k, spans) : Live().SubmitStore(k, src));
    held_[id] = std::move(held);
    return id;
  }

  std::unique_ptr<FsTier> tier_;
  std::shared_ptr<WakeState> state_ = std::make_shared<WakeState>();
  std::unordered_map<uint64_t, std::vector<HeldBuffer>> held_;
};

void BindFsTier(pb::module_& m) {
  pb::class_<PyJobResult>(m, "JobResult", "One finished FsTier job: per-key outcomes in submission order.")
      .def_readonly("job_id", &PyJobResult::job_id)
      .def_readonly("kind", &PyJobResult::kind)
      .def_readonly("outcomes", &PyJobResult::outcomes)
      .def_readonly("errors", &PyJobResult::errors)
      .def_readonly("ok_prefix", &PyJobResult::ok_prefix)
      .def("__repr__", [](const PyJobResult& r) {
        return "<kvtier.JobResult " + r.kind + " #" + std::to_string(r.job_id) + ", " +
               std::to_string(r.ok_prefix) + "/" + std::to_string(r.outcomes.size()) + " ok>";
      });
  pb::class_<PyFsTier>(m, "FsTier", "A filesystem tier of vLLM-compatible block files (io_uring engine).")
      .def(pb::init<const Namespace&, uint64_t, const pb::object&>(), pb::arg("namespace"), pb::arg("row_bytes"),
           pb::arg("config"))
      .def("submit_store", &PyFsTier::SubmitStore, pb::arg("keys"), pb::arg("rows"),
           "Stores one row buffer per key (held until the job is polled); returns the job id.")
      .def("submit_load", &PyFsTier::SubmitLoad, pb::arg("keys"), pb::arg("rows"),
           "Loads each key into a writable row buffer; a corrupt block is never returned.")
      .def("submit_lookup", &PyFsTier::SubmitLookup, pb::arg("keys"), "Checks which keys have a block file.")
      .def("poll", &PyFsTier::Poll, "Jobs finished since the last call; never blocks.")
      .def("wait", &PyFsTier::Wait, pb::arg("timeout_ms") = 1000,
           "Waits (GIL released) until a job finishes or timeout_ms passes, then polls.")
      .def("wait_idle", &PyFsTier::WaitIdle, pb::arg("timeout_ms") = 30000,
           "Waits (GIL released) until no job runs; KvtierError(timed_out) after timeout_ms.")
      .def("close", &PyFsTier::Close, "Waits for running jobs, stops the engine, releases buffers.")
      .def("metrics", [](PyFsTier& t) { return MetricsDict(t.Live().Metrics()); })
      .def("prometheus_text", [](PyFsTier& t, const std::string& name) { return t.Live().PrometheusText(name); },
           pb::arg("tier_name") = "fs0")
      .def("block_path", [](PyFsTier& t, pb::bytes key) { return t.Live().BlockPath(KeyFromBytes(key)); })
      .def_property_readonly("backend", [](PyFsTier& t) { return std::string(t.Live().backend_name()); })
      .def_property_readonly("o_direct", [](PyFsTier& t) { return t.Live().o_direct(); })
      .def_property_readonly("xattrs_supported", [](PyFsTier& t) { return t.Live().xattrs_supported(); })
      .def("__enter__", [](PyFsTier& t) -> PyFsTier& { return t; }, pb::return_value_policy::reference)
      .def("__exit__", [](PyFsTier& t, pb::args) { t.Close(); });
}

}  // namespace

void BindEngineTier(pb::module_& m);

void BindTiers(pb::module_& m) {
  BindFsTier(m);
  BindEngineTier(m);
}

// Exposed for py_engine_tier.cc.
FsTierOpenOptions EngineOpenOptions(const Namespace& ns, uint64_t row_bytes, const pb::object& config) {
  return OpenOptions(ns, row_bytes, config);
}
pb::dict FsMetricsDict(const FsTierMetrics& m) { return MetricsDict(m); }

}  // namespace kvtier::py
