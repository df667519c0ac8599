// kvtier.FsTier and kvtier.EngineTier for Python: thin wrappers over the C++
// classes that hold the callers' buffer exports while their jobs run (so a
// buffer cannot be freed under the I/O) and release the GIL before every call
// into the tier.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvtier/config.h"
#include "kvtier/engine_tier.h"
#include "kvtier/fs_tier.h"
#include "py_args.h"
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

// Row buffers of jobs not yet polled, by address: a load writes its rows, a
// store reads them. Two loads into one buffer would check one key's CRC over
// the other key's bytes and delete a valid block as corrupt; a load into a
// buffer that a store reads would write the loaded bytes under the store's
// key. So an overlapping claim is refused. Every row is row_bytes (L) long (FsTier refuses others), so
// the claims that overlap [b, b + L) are those starting in (b - L, b + L).
class RowClaims {
 public:
  explicit RowClaims(uint64_t row_bytes) : len_(row_bytes) {}
  // Why a job may not use `rows`; "" when it may.
  std::string Conflict(std::span<const std::span<uint8_t>> rows, bool load) const;
  void Take(uint64_t job, std::span<const std::span<uint8_t>> rows, bool load);
  void Release(uint64_t job);

 private:
  using Starts = std::multiset<uintptr_t>;
  bool Overlaps(const Starts& starts, uintptr_t b) const {
    auto it = starts.lower_bound(b >= len_ ? b - len_ + 1 : 0);
    return it != starts.end() && *it < b + len_;
  }
  struct Claim {
    bool load = false;
    std::vector<uintptr_t> starts;
  };

  const uint64_t len_;
  Starts loading_, storing_;
  std::unordered_map<uint64_t, Claim> jobs_;
};

uintptr_t Start(std::span<uint8_t> row) { return reinterpret_cast<uintptr_t>(row.data()); }

std::string RowClaims::Conflict(std::span<const std::span<uint8_t>> rows, bool load) const {
  std::vector<uintptr_t> starts;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].size() != len_) return {};  // FsTier refuses the job, naming the length
    const std::string row = "rows[" + std::to_string(i) + "]";
    if (Overlaps(loading_, Start(rows[i]))) return row + ": a load not yet polled writes this buffer";
    if (load && Overlaps(storing_, Start(rows[i]))) return row + ": a store not yet polled reads this buffer";
    starts.push_back(Start(rows[i]));
  }
  std::sort(starts.begin(), starts.end());
  for (size_t i = 1; load && i < starts.size(); ++i) {
    if (starts[i] - starts[i - 1] < len_) return "rows: one load names a buffer (or overlapping views of it) twice";
  }
  return {};
}

void RowClaims::Take(uint64_t job, std::span<const std::span<uint8_t>> rows, bool load) {
  Claim& claim = jobs_[job];
  claim.load = load;
  for (std::span<uint8_t> row : rows) {
    claim.starts.push_back(Start(row));
    (load ? loading_ : storing_).insert(Start(row));
  }
}

void RowClaims::Release(uint64_t job) {
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return;
  Starts& starts = it->second.load ? loading_ : storing_;
  for (uintptr_t s : it->second.starts) starts.erase(starts.find(s));
  jobs_.erase(it);
}

Status Closed() { return Status(StatusCode::kUnavailable, "fs tier: closed"); }

using HeldRows = std::vector<HeldBuffer>;

// Wakes wait(): on each finished job, and once at close().
class WakeState {
 public:
  void Notify(bool closing) {
    {
      std::lock_guard lock(mu_);
      ++finished_;
      closing_ = closing_ || closing;
    }
    cv_.notify_all();
  }
  uint64_t finished() {
    std::lock_guard lock(mu_);
    return finished_;
  }
  void WaitPast(uint64_t seen, uint32_t timeout_ms) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return finished_ != seen || closing_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t finished_ = 0;
  bool closing_ = false;
};

// kvtier.FsTier: jobs over caller buffers; see include/kvtier/fs_tier.h.
//
// Threads: mu_ guards the tier pointer, the held buffers
// and the claims; it is taken only with the GIL released (the tier may log to
// a Python sink, which takes the GIL, from a thread that holds a kvtier lock).
// close() stops admissions first, then waits for the jobs and for wait_idle
// callers, and only then destroys the tier: a call racing it completes or
// raises KvtierError(unavailable). Results that close() collects are still
// returned by poll() afterwards.
class PyFsTier {
 public:
  PyFsTier(const Namespace& ns, uint64_t row_bytes, const pb::object& config) : claims_(row_bytes) {
    FsTierOpenOptions o = OpenOptions(ns, row_bytes, config);
    o.on_job_finished = [state = state_] { state->Notify(false); };
    tier_ = Unwrap(WithoutGil([&] { return FsTier::Open(o); }));
    backend_ = tier_->backend_name();
    o_direct_ = tier_->o_direct();
    xattrs_supported_ = tier_->xattrs_supported();
    checksum_place_ = tier_->checksum_place();
  }
  ~PyFsTier() { Close(); }

  uint64_t Submit(const pb::args& args, const pb::kwargs& kwargs, bool load);
  uint64_t SubmitLookup(const pb::args& args, const pb::kwargs& kwargs);
  std::vector<PyJobResult> Poll();
  std::vector<PyJobResult> Wait(uint32_t timeout_ms);
  void WaitIdle(uint32_t timeout_ms);
  void Close();

  // fn(FsTier&) under mu_, without the GIL; kUnavailable once close() began.
  template <class Fn>
  auto WithTier(Fn&& fn) -> Result<decltype(fn(std::declval<FsTier&>()))> {
    return WithoutGil([&]() -> Result<decltype(fn(std::declval<FsTier&>()))> {
      std::lock_guard lock(mu_);
      if (closing_) return Closed();
      return fn(*tier_);
    });
  }
  FsTierMetrics Metrics() {
    return WithoutGil([&] {
      std::lock_guard lock(mu_);
      return tier_ ? tier_->Metrics() : last_metrics_;
    });
  }
  const std::string& backend() const { return backend_; }
  bool o_direct() const { return o_direct_; }
  bool xattrs_supported() const { return xattrs_supported_; }
  const std::string& checksum_place() const { return checksum_place_; }

 private:
  Result<uint64_t> SubmitLocked(std::span<const OffloadKey> keys, std::span<const std::span<uint8_t>> rows,
                                HeldRows* held, bool load);
  Status PollLocked(std::vector<JobResult>* done, std::vector<HeldRows>* released);
  Status WaitIdleUnlocked(uint32_t timeout_ms);
  std::unordered_map<uint64_t, HeldRows> Stop();

  std::mutex mu_;
  std::condition_variable changed_;  // users_ fell, or the tier is closed
  std::unique_ptr<FsTier> tier_;     // null once closed
  bool closing_ = false;             // admissions stopped
  bool closed_ = false;
  int users_ = 0;                    // wait_idle calls using tier_ without mu_
  std::unordered_map<uint64_t, HeldRows> held_;  // job -> its buffers (none for a lookup)
  RowClaims claims_;
  std::vector<JobResult> late_;  // collected by close(), not yet polled
  FsTierMetrics last_metrics_;   // metrics() after close()
  std::string backend_;
  std::string checksum_place_;
  bool o_direct_ = false;
  bool xattrs_supported_ = false;
  std::shared_ptr<WakeState> state_ = std::make_shared<WakeState>();
};

HeldRows HoldRows(const pb::sequence& rows, bool load) {
  HeldRows held;
  for (pb::handle row : rows) held.emplace_back(row, load);
  return held;
}

uint64_t PyFsTier::Submit(const pb::args& args, const pb::kwargs& kwargs, bool load) {
  const std::vector<pb::object> a = BindArgs(load ? "submit_load" : "submit_store", {"keys", "rows"}, 2, args, kwargs);
  const std::vector<OffloadKey> keys = KeysArg("keys", a[0]);
  HeldRows held = HoldRows(SequenceArg("rows", a[1]), load);  // released with the GIL if refused
  std::vector<std::span<uint8_t>> spans;
  for (const HeldBuffer& h : held) spans.emplace_back(h.data(), h.size());
  return Unwrap(WithoutGil([&] { return SubmitLocked(keys, spans, &held, load); }));
}

// Under mu_, so no other thread polls the job before its buffers are recorded.
Result<uint64_t> PyFsTier::SubmitLocked(std::span<const OffloadKey> keys, std::span<const std::span<uint8_t>> rows,
                                        HeldRows* held, bool load) {
  std::lock_guard lock(mu_);
  if (closing_) return Closed();
  const std::string conflict = claims_.Conflict(rows, load);
  if (!conflict.empty()) return InvalidArgument((load ? "submit_load: " : "submit_store: ") + conflict);
  const std::vector<std::span<const uint8_t>> src(rows.begin(), rows.end());
  Result<uint64_t> id = load ? tier_->SubmitLoad(keys, rows) : tier_->SubmitStore(keys, src);
  if (!id.ok()) return id;
  claims_.Take(*id, rows, load);
  held_[*id] = std::move(*held);  // a move: no Python object is touched without the GIL
  return id;
}

uint64_t PyFsTier::SubmitLookup(const pb::args& args, const pb::kwargs& kwargs) {
  const std::vector<pb::object> a = BindArgs("submit_lookup", {"keys"}, 1, args, kwargs);
  const std::vector<OffloadKey> keys = KeysArg("keys", a[0]);
  return Unwrap(WithoutGil([&]() -> Result<uint64_t> {
    std::lock_guard lock(mu_);
    if (closing_) return Closed();
    Result<uint64_t> id = tier_->SubmitLookup(keys);
    if (id.ok()) held_[*id];  // outstanding, with no buffers
    return id;
  }));
}

std::vector<PyJobResult> PyFsTier::Poll() {
  std::vector<JobResult> done;
  std::vector<HeldRows> released;  // destroyed below, with the GIL
  WithoutGil([&] { return PollLocked(&done, &released); }).IgnoreError();
  std::vector<PyJobResult> out;
  for (const JobResult& r : done) out.push_back(ToPy(r));
  return out;
}

// The jobs finished since the last call; after close(), those close() collected.
Status PyFsTier::PollLocked(std::vector<JobResult>* done, std::vector<HeldRows>* released) {
  std::lock_guard lock(mu_);
  *done = std::exchange(late_, {});
  if (!tier_) return Status::Ok();
  tier_->PollFinished(done);
  for (const JobResult& r : *done) {
    auto it = held_.find(r.job_id);  // the job no longer touches its buffers
    if (it == held_.end()) continue;
    released->push_back(std::move(it->second));
    held_.erase(it);
    claims_.Release(r.job_id);
  }
  return Status::Ok();
}

// Blocks (without the GIL) until a job finishes or timeout_ms passes; returns Poll().
std::vector<PyJobResult> PyFsTier::Wait(uint32_t timeout_ms) {
  std::vector<PyJobResult> out = Poll();
  if (!out.empty()) return out;
  WithoutGil([&] {
    const uint64_t seen = state_->finished();  // before looking: no lost wake-up
    {
      std::lock_guard lock(mu_);
      if (closing_ || held_.empty()) return;  // nothing will finish
    }
    state_->WaitPast(seen, timeout_ms);
  });
  return Poll();
}

void PyFsTier::WaitIdle(uint32_t timeout_ms) {
  ThrowIfError(WithoutGil([&] { return WaitIdleUnlocked(timeout_ms); }));
}

// Waits in the tier without mu_ (other calls go on meanwhile); close() waits
// for users_ to reach 0 before destroying the tier.
Status PyFsTier::WaitIdleUnlocked(uint32_t timeout_ms) {
  {
    std::lock_guard lock(mu_);
    if (closing_) return Closed();
    ++users_;
  }
  const Status s = tier_->WaitIdle(timeout_ms);
  {
    std::lock_guard lock(mu_);
    --users_;
  }
  changed_.notify_all();
  return s;
}

void PyFsTier::Close() {
  std::unordered_map<uint64_t, HeldRows> held;  // released below, with the GIL
  WithoutGil([&] { held = Stop(); });
}

// Stops admissions, waits for every job and wait_idle caller, collects the
// results not yet polled, then destroys the tier. A second caller waits for
// the first to finish.
std::unordered_map<uint64_t, HeldRows> PyFsTier::Stop() {
  std::unique_lock lock(mu_);
  if (closing_) {
    changed_.wait(lock, [&] { return closed_; });
    return {};
  }
  closing_ = true;
  state_->Notify(true);
  lock.unlock();
  while (!tier_->WaitIdle(1000).ok()) {  // every I/O has a deadline: this ends
  }
  lock.lock();
  changed_.wait(lock, [&] { return users_ == 0; });
  tier_->PollFinished(&late_);
  last_metrics_ = tier_->Metrics();
  std::unique_ptr<FsTier> tier = std::move(tier_);
  lock.unlock();
  tier.reset();  // outside mu_: poll() and metrics() answer meanwhile
  lock.lock();
  closed_ = true;
  changed_.notify_all();
  return std::exchange(held_, {});
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
  pb::class_<PyFsTier>(m, "FsTier", "A filesystem tier of vLLM-compatible block files (io_uring I/O loop).")
      .def(pb::init<const Namespace&, uint64_t, const pb::object&>(), pb::arg("namespace"), pb::arg("row_bytes"),
           pb::arg("config"))
      .def("submit_store", [](PyFsTier& t, const pb::args& a, const pb::kwargs& k) { return t.Submit(a, k, false); },
           "submit_store(keys, rows): stores one row buffer per key (held until the job is polled); returns the job id.")
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
      .def("metrics", [](PyFsTier& t) { return FsMetricsDict(t.Metrics()); })
      .def("prometheus_text", [](PyFsTier& t, const std::string& name) {
             return Unwrap(t.WithTier([&](FsTier& f) { return f.PrometheusText(name); }));
           }, pb::arg("tier_name") = "fs0")
      .def("block_path", [](PyFsTier& t, const pb::object& key) {
             const OffloadKey k = KeyFromObject(key);
             return Unwrap(t.WithTier([&](FsTier& f) { return f.BlockPath(k); }));
           }, pb::arg("key"))
      .def_property_readonly("backend", &PyFsTier::backend)
      .def_property_readonly("o_direct", &PyFsTier::o_direct)
      .def_property_readonly("xattrs_supported", &PyFsTier::xattrs_supported)
      .def_property_readonly("checksum_place", &PyFsTier::checksum_place)
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

}  // namespace kvtier::py
