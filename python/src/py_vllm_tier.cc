// kvtier.VllmTier for Python: the engine-contract tier behind
// kvtier.vllm.KvtierFsTier (include/kvtier/vllm_tier.h). It holds one export
// of the engine's row region from construction to shutdown(), and nothing
// else; shutdown() stops all I/O into the region before releasing it, so the
// engine can unmap it afterwards.
//
// Threads: the C++ tier lives as long as this object, so a call
// racing shutdown() never meets a freed tier: it completes, or raises
// KvtierError(unavailable). Every call into the tier releases the GIL first,
// since the tier's mutex may be held by a thread that waits for the GIL (a
// Python log sink called while kvtier logs).
#include <optional>

#include <pybind11/stl.h>

#include "kvtier/vllm_tier.h"
#include "py_args.h"
#include "py_common.h"
#include "py_config.h"

namespace kvtier::py {
namespace {

class PyVllmTier {
 public:
  PyVllmTier(const Namespace& ns, const pb::object& rows, uint64_t row_bytes, const pb::object& config)
      : rows_(rows, true) {
    VllmTierOptions o{.fs = TierOpenOptions(ns, row_bytes, config), .rows = {rows_.data(), rows_.size()}};
    tier_ = Unwrap(WithoutGil([&] { return VllmTier::Open(std::move(o)); }));
  }
  ~PyVllmTier() { Shutdown(); }

  // VllmTier(namespace, rows, row_bytes, config), bound by hand (py_args.h).
  static std::unique_ptr<PyVllmTier> Create(const pb::args& args, const pb::kwargs& kwargs) {
    const std::vector<pb::object> a = BindArgs("VllmTier", {"namespace", "rows", "row_bytes", "config"}, 4, args, kwargs);
    const Namespace& ns = InstanceArg<Namespace>("namespace", "kvtier.Namespace", a[0]);
    return std::make_unique<PyVllmTier>(ns, a[1], PositiveIntArg("row_bytes", a[2]), a[3]);
  }

  int Lookup(const pb::object& key, const std::string& request_id) {
    const OffloadKey k = KeyFromObject(key);
    return static_cast<int>(WithoutGil([&] { return tier_->Lookup(k, request_id); }));
  }

  // submit_store / submit_load(job_id, keys, slots).
  void Submit(const pb::args& args, const pb::kwargs& kwargs, bool load) {
    const char* fn = load ? "submit_load" : "submit_store";
    const std::vector<pb::object> a = BindArgs(fn, {"job_id", "keys", "slots"}, 3, args, kwargs);
    const int64_t job_id = IntArg("job_id", a[0]);
    const std::vector<OffloadKey> keys = KeysArg("keys", a[1]);
    const std::vector<int64_t> slots = SlotsArg("slots", a[2]);
    ThrowIfError(WithoutGil([&] {
      return load ? tier_->SubmitLoad(job_id, keys, slots) : tier_->SubmitStore(job_id, keys, slots);
    }));
  }

  // [(job_id, is_load, success, ok_key_indices, bytes, transfer_time_s), ...];
  // after shutdown too, until every result was taken: a job that
  // finished is never lost because shutdown came before the poll.
  pb::list Poll() {
    std::vector<EngineJobResult> done;
    WithoutGil([&] { return tier_->PollFinished(&done); });
    pb::list out;
    for (const EngineJobResult& r : done) {
      out.append(pb::make_tuple(r.job_id, r.is_load, r.success, pb::cast(r.ok_keys), r.bytes, r.transfer_time_s));
    }
    return out;
  }

  void Shutdown() {
    WithoutGil([&] { tier_->Shutdown(); });  // every caller returns once no I/O can touch the rows
    rows_.Release();  // with the GIL: a second caller finds it released already
  }

  VllmTier& tier() { return *tier_; }

 private:
  HeldBuffer rows_;
  std::unique_ptr<VllmTier> tier_;  // never null: it outlives shutdown(), which only stops it
};

pb::dict StatsDict(const VllmTierStats& s) {
  pb::dict d;
  d["lookups_pending"] = s.lookups_pending;
  d["lookup_cache_keys"] = s.lookup_cache_keys;
  d["jobs_in_flight"] = s.jobs_in_flight;
  return d;
}

}  // namespace

void BindVllmTier(pb::module_& m) {
  pb::class_<PyVllmTier> cls(m, "VllmTier",
                               "An fs tier driven by an engine's per-step secondary-tier contract over one row region.\n\n"
                               "VllmTier(namespace, rows, row_bytes, config)");
  cls.def(pb::init(&PyVllmTier::Create))
      .def("lookup", &PyVllmTier::Lookup, pb::arg("key"), pb::arg("request_id"),
           "0 miss, 1 hit, 2 retry (checked in the next flush_lookups batch); never blocks.")
      .def("flush_lookups", [](PyVllmTier& t) { ThrowIfError(WithoutGil([&] { return t.tier().FlushLookups(); })); })
      .def("finish_request", [](PyVllmTier& t, const std::string& request_id) {
             WithoutGil([&] { t.tier().FinishRequest(request_id); });
           }, pb::arg("request_id"))
      .def("submit_store", [](PyVllmTier& t, const pb::args& a, const pb::kwargs& k) { t.Submit(a, k, false); },
           "submit_store(job_id, keys, slots): stores the rows at `slots` (1-D integers) under `keys`.")
      .def("submit_load", [](PyVllmTier& t, const pb::args& a, const pb::kwargs& k) { t.Submit(a, k, true); },
           "submit_load(job_id, keys, slots): loads `keys` into the rows at `slots` (1-D integers, each once).")
      .def("poll_finished", &PyVllmTier::Poll,
           "[(job_id, is_load, success, ok_key_indices, bytes, seconds)] for jobs finished since the last call.")
      .def("has_pending_work", [](PyVllmTier& t) { return WithoutGil([&] { return t.tier().HasPendingWork(); }); })
      .def("drain", [](PyVllmTier& t, std::optional<uint32_t> timeout_ms) {
             ThrowIfError(WithoutGil([&] { return t.tier().Drain(timeout_ms.value_or(kWaitForever)); }));
           }, pb::arg("timeout_ms") = pb::none(),
           "Waits (GIL released) until every job has a result; KvtierError(timed_out) after timeout_ms "
           "(0 only checks; None: no limit).")
      .def("shutdown", &PyVllmTier::Shutdown,
           "Stops admitting jobs, drains, stops all I/O into the rows and releases their buffer.")
      .def("stats", [](PyVllmTier& t) { return StatsDict(WithoutGil([&] { return t.tier().Stats(); })); })
      .def("take_key_events", [](PyVllmTier& t) {
             pb::list out;
             for (const TierKeyEvent& e : WithoutGil([&] { return t.tier().TakeKeyEvents(); })) {
               out.append(pb::make_tuple(KeyToBytes(e.key), e.removed));
             }
             return out;
           }, "With enable_kv_events: [(key, removed)] for each block file the tier stored or removed "
              "since the last call, in the order the files changed.");
  BindTierCommon(cls, +[](PyVllmTier& t) -> VllmTier& { return t.tier(); });
}

}  // namespace kvtier::py
