// kvtier.FsTier and kvtier.VllmTier for Python: thin wrappers over the C++
// classes that hold the callers' buffer exports while their jobs run (so a
// buffer cannot be freed under the I/O) and release the GIL before every call
// into the tier.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvtier/config.h"
#include "kvtier/fs_tier.h"
#include "kvtier/tier_shell.h"
#include "kvtier/vllm_tier.h"
#include "py_args.h"
#include "py_common.h"
#include "py_config.h"

namespace kvtier::py {
namespace {

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

using HeldRows = std::vector<HeldBuffer>;

// kvtier.FsTier: jobs over caller buffers; see include/kvtier/fs_tier.h.
// The shell (include/kvtier/tier_shell.h) owns admission, close and the
// buffers' claims; this class holds the buffers' exports until their job is
// polled. held_mu_ is taken only with the GIL released (the tier may log to a
// Python sink, which takes the GIL, from a thread that holds a kvtier lock),
// and after the shell's lock when both are held (never the shell's under it).
class PyFsTier {
 public:
  PyFsTier(const Namespace& ns, uint64_t row_bytes, const pb::object& config) : row_bytes_(row_bytes) {
    const FsTierOpenOptions o = TierOpenOptions(ns, row_bytes, config);  // with the GIL: reads `config`
    shell_ = Unwrap(WithoutGil([&] { return TierShell::Open(o, "fs tier"); }));
  }
  ~PyFsTier() { Close(); }

  uint64_t Submit(const pb::args& args, const pb::kwargs& kwargs, bool load);
  uint64_t SubmitLookup(const pb::args& args, const pb::kwargs& kwargs) {
    const std::vector<pb::object> a = BindArgs("submit_lookup", {"keys"}, 1, args, kwargs);
    const std::vector<OffloadKey> keys = KeysArg("keys", a[0]);
    return Unwrap(WithoutGil([&] { return shell_->Submit([&](FsTier& t) { return t.SubmitLookup(keys); }); }));
  }
  std::vector<PyJobResult> Poll();
  // Blocks (without the GIL) until a job finishes or timeout_ms passes; returns Poll().
  std::vector<PyJobResult> Wait(uint32_t timeout_ms) {
    std::vector<PyJobResult> out = Poll();
    if (!out.empty()) return out;
    WithoutGil([&] { shell_->WaitForAny(timeout_ms); });
    return Poll();
  }
  void WaitIdle(uint32_t timeout_ms) {
    ThrowIfError(WithoutGil([&] { return shell_->closing() ? shell_->Closed() : shell_->WaitIdle(timeout_ms); }));
  }
  void Close() {
    std::unordered_map<uint64_t, HeldRows> held;  // released below, with the GIL
    WithoutGil([&] {
      shell_->Close();
      std::lock_guard lock(held_mu_);
      held = std::exchange(held_, {});
    });
  }

  TierShell& shell() { return *shell_; }

 private:
  const uint64_t row_bytes_;
  std::unique_ptr<TierShell> shell_;
  std::mutex held_mu_;
  std::unordered_map<uint64_t, HeldRows> held_;  // job -> its buffers
};

HeldRows HoldRows(const pb::sequence& rows, bool load) {
  HeldRows held;
  for (pb::handle row : rows) held.emplace_back(row, load);
  return held;
}

uint64_t PyFsTier::Submit(const pb::args& args, const pb::kwargs& kwargs, bool load) {
  const char* fn = load ? "submit_load" : "submit_store";
  if (!load && args.size() > 2) {  // block_hashes is keyword-only: a third row list passed by mistake is refused
    throw pb::type_error("submit_store() takes at most 2 positional arguments (" + std::to_string(args.size()) +
                         " given; block_hashes is keyword-only)");
  }
  const std::vector<pb::object> a = load ? BindArgs(fn, {"keys", "rows"}, 2, args, kwargs)
                                         : BindArgs(fn, {"keys", "rows", "block_hashes"}, 2, args, kwargs);
  const std::vector<OffloadKey> keys = KeysArg("keys", a[0]);
  // A store's block hashes (FsTier::SubmitStore): the tier checks them against the keys.
  const std::vector<std::vector<BlockHash>> hashes =
      !load && a[2] && !a[2].is_none() ? BlockHashListsArg("block_hashes", a[2]) : std::vector<std::vector<BlockHash>>{};
  HeldRows held = HoldRows(SequenceArg("rows", a[1]), load);  // released with the GIL if refused
  std::vector<std::span<uint8_t>> rows;
  for (const HeldBuffer& h : held) rows.emplace_back(h.data(), h.size());
  const std::vector<std::span<const uint8_t>> src(rows.begin(), rows.end());
  // Rows not row_bytes long are named by the tier, not as claims.
  const bool sized = std::all_of(rows.begin(), rows.end(), [&](auto r) { return r.size() == row_bytes_; });
  const std::vector<MemoryRange> memory = sized ? RowRanges(rows) : std::vector<MemoryRange>{};
  return Unwrap(WithoutGil([&] {
    return shell_->Submit(
        load ? MemoryUse::kWrite : MemoryUse::kRead, memory,
        [&](FsTier& t) -> Result<uint64_t> {
          Result<uint64_t> id = load ? t.SubmitLoad(keys, rows) : t.SubmitStore(keys, src, hashes);
          if (!id.ok()) return id;
          std::lock_guard lock(held_mu_);  // before the shell lets a poll see the job
          held_[*id] = std::move(held);    // a move: no Python object is touched without the GIL
          return id;
        },
        [&](size_t i) { return std::string(fn) + ": rows[" + std::to_string(i) + "]"; });
  }));
}

std::vector<PyJobResult> PyFsTier::Poll() {
  std::vector<JobResult> done;
  std::vector<HeldRows> released;  // destroyed below, with the GIL
  WithoutGil([&] {
    shell_->Poll(&done);
    // Claims end before held_mu_ is taken: Submit takes held_mu_ inside the
    // shell's lock, so taking the shell's lock (Release) under held_mu_ here
    // would be the opposite order (a deadlock between a submit and a poll).
    for (const JobResult& r : done) shell_->Release(r.job_id);  // the jobs no longer touch their buffers
    std::lock_guard lock(held_mu_);
    for (const JobResult& r : done) {
      auto it = held_.find(r.job_id);
      if (it == held_.end()) continue;
      released.push_back(std::move(it->second));
      held_.erase(it);
    }
  });
  std::vector<PyJobResult> out;
  for (const JobResult& r : done) out.push_back(ToPy(r));
  return out;
}

void BindJobResult(pb::module_& m) {
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
}

void BindFsTier(pb::module_& m) {
  BindJobResult(m);
  pb::class_<PyFsTier> cls(m, "FsTier", "A filesystem tier of vLLM-compatible block files (io_uring I/O loop).");
  cls.def(pb::init<const Namespace&, uint64_t, const pb::object&>(), pb::arg("namespace"), pb::arg("row_bytes"),
           pb::arg("config"))
      .def("submit_store", [](PyFsTier& t, const pb::args& a, const pb::kwargs& k) { return t.Submit(a, k, false); },
           "submit_store(keys, rows, *, block_hashes=None): stores one row buffer per key (held until the job is polled); "
           "returns the job id. block_hashes: one list of block hashes (bytes) per key, the blocks its file holds.")
      .def("submit_load", [](PyFsTier& t, const pb::args& a, const pb::kwargs& k) { return t.Submit(a, k, true); },
           "submit_load(keys, rows): loads each key into its own writable row buffer; a corrupt block is never returned.")
      .def("submit_lookup", &PyFsTier::SubmitLookup, "submit_lookup(keys): checks which keys have a block file.")
      .def("poll", &PyFsTier::Poll, "Jobs finished since the last call (after close(): those it collected); never blocks.")
      .def("wait", &PyFsTier::Wait, pb::arg("timeout_ms") = 1000,
           "Waits (GIL released) until a job finishes or timeout_ms passes, then polls.")
      .def("wait_idle", &PyFsTier::WaitIdle, pb::arg("timeout_ms") = 30000,
           "Waits (GIL released) until no job runs; KvtierError(timed_out) after timeout_ms.")
      .def("close", &PyFsTier::Close,
           "Stops admitting jobs, waits for running ones, stops the I/O thread, releases buffers.")
      .def_property_readonly("xattrs_supported", [](PyFsTier& t) { return t.shell().xattrs_supported(); })
      .def("__enter__", [](PyFsTier& t) -> PyFsTier& { return t; }, pb::return_value_policy::reference)
      .def("__exit__", [](PyFsTier& t, pb::args) { t.Close(); });
  BindTierCommon(cls, +[](PyFsTier& t) -> TierShell& { return t.shell(); });
}

}  // namespace

void BindVllmTier(pb::module_& m);

void BindTiers(pb::module_& m) {
  BindFsTier(m);
  BindVllmTier(m);
}

}  // namespace kvtier::py
