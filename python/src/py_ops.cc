// kvtier.du / fsck / gc and config_check for Python: the operators' tools and
// the config validator as functions returning Python objects (the GIL is
// released while a tree is walked).
#include <pybind11/stl.h>

#include <cmath>
#include <cstdint>

#include "kvtier/collector.h"
#include "kvtier/config.h"
#include "kvtier/ops.h"
#include "py_common.h"

namespace kvtier::py {
namespace {

// Names on the volume may be any bytes: they reach Python as os.fsdecode
// makes them (undecodable bytes as surrogates), so os.fsencode gives back
// the exact bytes and a stray byte never raises UnicodeDecodeError.
pb::str FsStr(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "surrogateescape");
  if (o == nullptr) throw pb::error_already_set();
  return pb::reinterpret_steal<pb::str>(o);
}

template <class T>
auto Fs(std::string T::*member) {
  return [member](const T& t) { return FsStr(t.*member); };
}

// Integer arguments arrive as Python ints of any size. Negative ones are
// refused naming the argument (pybind11's own TypeError would print the
// whole call); durations of 2^64 and more mean "never", as 2^63 and more do
// in the library; a size that large is refused.
uint64_t NonNegativeArg(const pb::handle& value, const char* name, bool huge_is_never) {
  if (!PyLong_Check(value.ptr())) ThrowStatus(InvalidArgument(std::string(name) + ": expected an int"));
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
  if (overflow < 0 || (overflow == 0 && v < 0)) ThrowStatus(InvalidArgument(std::string(name) + ": must not be negative"));
  if (overflow == 0) return static_cast<uint64_t>(v);
  const unsigned long long u = PyLong_AsUnsignedLongLong(value.ptr());
  if (u == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    if (huge_is_never) return UINT64_MAX;
    ThrowStatus(InvalidArgument(std::string(name) + ": out of range (at most 2**64 - 1)"));
  }
  return u;
}

std::optional<uint64_t> OptionalArg(const pb::handle& value, const char* name, bool huge_is_never) {
  if (value.is_none()) return std::nullopt;
  return NonNegativeArg(value, name, huge_is_never);
}

// jobs: 1..kScanJobsMax, checked by the library; a value no int holds is out of it too.
int JobsArg(const pb::handle& value) {
  if (!PyLong_Check(value.ptr())) ThrowStatus(InvalidArgument("jobs: expected an int"));
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
  if (overflow != 0 || v < INT32_MIN || v > INT32_MAX) {
    ThrowStatus(InvalidArgument("jobs: must be 1.." + std::to_string(kScanJobsMax) + ", got " +
                                std::string(pb::str(value))));
  }
  return static_cast<int>(v);
}

// io_timeout_s: seconds > 0, or None for no deadline.
uint64_t IoTimeoutArg(const std::optional<double>& seconds) {
  if (!seconds) return 0;
  if (!(*seconds > 0) || !std::isfinite(*seconds)) {
    ThrowStatus(InvalidArgument("io_timeout_s: expected seconds > 0 (None: wait forever), got " + std::to_string(*seconds)));
  }
  return static_cast<uint64_t>(std::ceil(std::min(*seconds, 1e9) * 1000));
}

struct CommonArgs {
  std::string root;
  pb::object jobs;
  bool force;
  pb::object tmp_grace_s;
  std::optional<double> io_timeout_s;
};

template <class Options>
void SetScan(Options& o, const CommonArgs& a) {
  o.root = a.root;
  o.jobs = JobsArg(a.jobs);
  o.force = a.force;
  o.tmp_grace_s = NonNegativeArg(a.tmp_grace_s, "tmp_grace_s", /*huge_is_never=*/true);
  o.io_timeout_ms = IoTimeoutArg(a.io_timeout_s);
}

template <class Report, class Options>
Report RunTool(Result<Report> (*tool)(const Options&), const Options& o) {
  return Unwrap(WithoutGil([&] { return tool(o); }));
}

DuReport PyDu(const std::string& root, pb::object jobs, bool force, pb::object tmp_grace_s,
              std::optional<double> io_timeout_s) {
  ScanOptions o;
  SetScan(o, {root, jobs, force, tmp_grace_s, io_timeout_s});
  return RunTool(&Du, o);
}

FsckReport PyFsck(const std::string& root, bool repair, bool verify_data, pb::object row_bytes, pb::object jobs,
                  bool force, pb::object tmp_grace_s, std::optional<double> io_timeout_s,
                  const std::vector<std::string>& seal_key_files, bool seal_key_group_read) {
  FsckOptions o;
  o.seal_key_files = seal_key_files;
  o.seal_key_group_read = seal_key_group_read;
  SetScan(o, {root, jobs, force, tmp_grace_s, io_timeout_s});
  o.repair = repair;
  o.verify_data = verify_data;
  o.row_bytes = NonNegativeArg(row_bytes, "row_bytes", /*huge_is_never=*/false);
  return RunTool(&Fsck, o);
}

// seconds > 0 as milliseconds, naming the argument otherwise.
uint64_t PositiveMsArg(double seconds, const char* name) {
  if (!(seconds > 0) || !std::isfinite(seconds) || seconds > 1e9) {
    ThrowStatus(InvalidArgument(std::string(name) + ": expected seconds > 0, got " + std::to_string(seconds)));
  }
  return static_cast<uint64_t>(std::ceil(seconds * 1000));
}

// A capacity bound makes it one of the volume's collectors (CollectOnce,
// FORMAT.md L124), as `kvtier gc --max-bytes` is.
GcReport PyGc(const std::string& root, pb::object older_than_s, pb::object max_bytes, pb::object low_water_bytes,
              const std::vector<std::string>& keep, bool dry_run, pb::object lease_ttl_s, pb::object jobs,
              bool force, pb::object tmp_grace_s, std::optional<double> io_timeout_s, double collector_ttl_s,
              bool ignore_lease) {
  CollectOnceOptions o;
  o.collector_ttl_ms = PositiveMsArg(collector_ttl_s, "collector_ttl_s");
  o.ignore_lease = ignore_lease;
  SetScan(o, {root, jobs, force, tmp_grace_s, io_timeout_s});
  o.older_than_s = OptionalArg(older_than_s, "older_than_s", /*huge_is_never=*/true);
  o.max_bytes = OptionalArg(max_bytes, "max_bytes", /*huge_is_never=*/false);
  o.low_water_bytes = OptionalArg(low_water_bytes, "low_water_bytes", /*huge_is_never=*/false);
  o.keep = keep;
  o.dry_run = dry_run;
  o.lease_ttl_s = NonNegativeArg(lease_ttl_s, "lease_ttl_s", /*huge_is_never=*/true);
  return RunTool(&CollectOnce, o);
}

// min_free / min_free_target: an int is bytes, a str "12.5%" a share of the
// file system's size.
std::optional<FreeSpace> FreeSpaceArg(const pb::handle& value, const char* name) {
  if (value.is_none()) return std::nullopt;
  FreeSpace out;
  if (!pb::isinstance<pb::str>(value)) {
    out.bytes = NonNegativeArg(value, name, /*huge_is_never=*/false);
    return out;
  }
  const std::string text = value.cast<std::string>();
  char* end = nullptr;
  out.percent = text.size() > 1 && text.back() == '%' ? std::strtod(text.c_str(), &end) : -1;
  if (end != text.c_str() + text.size() - 1 || !(out.percent >= 0 && out.percent <= 100)) {
    ThrowStatus(InvalidArgument(std::string(name) + ": expected bytes (an int) or a percentage \"0%\"..\"100%\", got \"" +
                                text + "\""));
  }
  return out;
}

// kvtier.Collector: the watch collector on threads of its own; its log goes
// to kvtier's log (kvtier.set_log_sink).
class PyCollector {
 public:
  explicit PyCollector(CollectorOptions o) { c_ = Unwrap(WithoutGil([&] { return Collector::Open(std::move(o)); })); }
  // Never raises: how the loop ended is stop()'s to say. At interpreter exit
  // it only asks the loop to stop: a join could wait for ever (a loop thread
  // stuck on a hung mount, or waiting for the GIL to log), and the process
  // exit ends the threads; the collector they use is left to it.
  ~PyCollector() {
    if (!stopped_ && _Py_IsFinalizing()) {
      c_->Stop();
      (void)c_.release();
      return;
    }
    (void)End();
  }
  void Start() { ThrowIfError(c_->Start()); }
  void Stop() { ThrowIfError(End()); }

 private:
  // Stops and waits (without the GIL: the loop may log through a Python sink).
  kvtier::Status End() {
    if (stopped_) return kvtier::Status::Ok();
    stopped_ = true;
    return WithoutGil([&] {
      c_->Stop();
      return c_->Wait();
    });
  }

 public:
  pb::dict StatusDict() const {
    const CollectorStatus s = c_->status();
    pb::dict d;
    d["running"] = s.running, d["holding"] = s.holding, d["passes"] = s.passes;
    d["passes_min_free"] = s.passes_min_free, d["pass_errors"] = s.pass_errors, d["passes_stopped"] = s.passes_stopped;
    d["files_reclaimed"] = s.files_reclaimed, d["bytes_reclaimed"] = s.bytes_reclaimed;
    d["failed_removals"] = s.failed_removals, d["lease_acquisitions"] = s.lease_acquisitions;
    d["last_pass_s"] = s.last_pass_s, d["last_pass_end_unix"] = s.last_pass_end_unix;
    return d;
  }
  std::string MetricsText() const { return c_->MetricsText(); }

 private:
  std::unique_ptr<Collector> c_;
  bool stopped_ = false;
};

PyCollector* NewCollector(const std::string& root, pb::object max_bytes, pb::object low_water_bytes,
                          pb::object older_than_s, const std::vector<std::string>& keep, pb::object min_free,
                          pb::object min_free_target, double interval_s, double check_interval_s,
                          double collector_ttl_s, const std::string& metrics_file, pb::object jobs, bool force,
                          pb::object tmp_grace_s, std::optional<double> io_timeout_s) {
  CollectorOptions o;
  SetScan(o.gc, {root, jobs, force, tmp_grace_s, io_timeout_s});
  o.gc.max_bytes = OptionalArg(max_bytes, "max_bytes", /*huge_is_never=*/false);
  o.gc.low_water_bytes = OptionalArg(low_water_bytes, "low_water_bytes", /*huge_is_never=*/false);
  o.gc.older_than_s = OptionalArg(older_than_s, "older_than_s", /*huge_is_never=*/true);
  o.gc.keep = keep;
  o.min_free = FreeSpaceArg(min_free, "min_free");
  o.min_free_target = FreeSpaceArg(min_free_target, "min_free_target");
  o.interval_ms = PositiveMsArg(interval_s, "interval_s");
  o.check_ms = PositiveMsArg(check_interval_s, "check_interval_s");
  o.collector_ttl_ms = PositiveMsArg(collector_ttl_s, "collector_ttl_s");
  o.metrics_file = metrics_file;
  return new PyCollector(std::move(o));
}

void BindCollector(pb::module_& m, double io_timeout_s) {
  pb::class_<PyCollector>(m, "Collector", "The volume's watch collector (kvtier gc --watch) on threads of its own.")
      .def(pb::init(&NewCollector), pb::arg("root"), pb::kw_only(), pb::arg("max_bytes") = pb::none(),
           pb::arg("low_water_bytes") = pb::none(), pb::arg("older_than_s") = pb::none(),
           pb::arg("keep") = std::vector<std::string>{}, pb::arg("min_free") = pb::none(),
           pb::arg("min_free_target") = pb::none(), pb::arg("interval_s") = 60.0, pb::arg("check_interval_s") = 2.0,
           pb::arg("collector_ttl_s") = static_cast<double>(kDefaultCollectorTtlMs) / 1000,
           pb::arg("metrics_file") = "", pb::arg("jobs") = 4, pb::arg("force") = false, pb::arg("tmp_grace_s") = 3600,
           pb::arg("io_timeout_s") = io_timeout_s)
      .def("start", &PyCollector::Start)
      .def("stop", &PyCollector::Stop)
      .def("status", &PyCollector::StatusDict)
      .def("metrics_text", &PyCollector::MetricsText)
      .def("__enter__", [](PyCollector& c) -> PyCollector& { return c.Start(), c; }, pb::return_value_policy::reference)
      .def("__exit__", [](PyCollector& c, const pb::args&) { c.Stop(); });
}

std::string ConfigCheck(const std::string& text, uint32_t gpu_block_size) {
  return OffloadConfigToJson(Unwrap(ParseOffloadConfig(text, {.gpu_block_size_tokens = gpu_block_size})));
}

void BindReports(pb::module_& m) {
  pb::class_<ScanProblem>(m, "ScanProblem", "A part of the tree that could not be read, or a namespace gc kept.")
      .def_property_readonly("path", Fs(&ScanProblem::path)).def_property_readonly("detail", Fs(&ScanProblem::detail));
  pb::class_<NamespaceUsage>(m, "NamespaceUsage", "Usage of one namespace (kvtier du).")
      .def_property_readonly("dir", Fs(&NamespaceUsage::dir)).def_property_readonly("model", Fs(&NamespaceUsage::model))
      .def_readonly("digest", &NamespaceUsage::digest).def_readonly("has_config", &NamespaceUsage::has_config)
      .def_property_readonly("engine", Fs(&NamespaceUsage::engine))
      .def_readonly("page_size", &NamespaceUsage::page_size)
      .def_property_readonly("mem_layout", Fs(&NamespaceUsage::mem_layout))
      .def_readonly("tokens_per_hash", &NamespaceUsage::tokens_per_hash)
      .def_readonly("blocks_per_file", &NamespaceUsage::blocks_per_file)
      .def_readonly("tp_size", &NamespaceUsage::tp_size).def_readonly("groups", &NamespaceUsage::groups)
      .def_property_readonly("dtype", Fs(&NamespaceUsage::dtype)).def_readonly("ranks", &NamespaceUsage::ranks)
      .def_readonly("blocks", &NamespaceUsage::blocks).def_readonly("bytes", &NamespaceUsage::bytes)
      .def_readonly("tmp_files", &NamespaceUsage::tmp_files)
      .def_readonly("newest_activity", &NamespaceUsage::newest_activity)
      .def_readonly("oldest_activity", &NamespaceUsage::oldest_activity)
      .def_readonly("newest_counted_activity", &NamespaceUsage::newest_counted_activity)
      .def_readonly("far_future_blocks", &NamespaceUsage::far_future_blocks)
      .def_readonly("live_leases", &NamespaceUsage::live_leases).def_readonly("leases_known", &NamespaceUsage::leases_known)
      .def_readonly("sealed", &NamespaceUsage::sealed).def_readonly("seal_key_id", &NamespaceUsage::seal_key_id);
  pb::class_<DuReport>(m, "DuReport", "kvtier du: usage per namespace.")
      .def_readonly("namespaces", &DuReport::namespaces).def_readonly("total_bytes", &DuReport::total_bytes)
      .def_readonly("total_blocks", &DuReport::total_blocks).def_readonly("files_scanned", &DuReport::files_scanned)
      .def_readonly("unreadable", &DuReport::unreadable).def_readonly("unreadable_unlisted", &DuReport::unreadable_unlisted)
      .def_property_readonly("exit_code", &DuReport::ExitCode);
  pb::class_<Finding>(m, "Finding", "One fsck finding, citing the FORMAT.md rule it breaks.")
      .def_property_readonly("kind", [](const Finding& f) { return std::string(FindingKindName(f.kind)); })
      .def_property_readonly("path", Fs(&Finding::path)).def_readonly("rule", &Finding::rule)
      .def_property_readonly("action", [](const Finding& f) { return std::string(RepairActionName(f.action)); })
      .def_property_readonly("detail", Fs(&Finding::detail));
  pb::class_<FsckReport>(m, "FsckReport", "kvtier fsck: findings and counts.")
      .def_readonly("findings", &FsckReport::findings).def_readonly("files_scanned", &FsckReport::files_scanned)
      .def_readonly("blocks_checked", &FsckReport::blocks_checked).def_readonly("blocks_verified", &FsckReport::blocks_verified)
      .def_readonly("verified_without_noatime", &FsckReport::verified_without_noatime)
      .def_readonly("verify_read_bytes", &FsckReport::verify_read_bytes)
      .def_readonly("sealed_checked", &FsckReport::sealed_checked).def_readonly("sealed_verified", &FsckReport::sealed_verified)
      .def_property_readonly("findings_unlisted",
                             [](const FsckReport& r) {
                               std::map<std::string, uint64_t> by_kind;
                               for (const auto& [kind, n] : r.findings_unlisted) {
                                 by_kind[std::string(FindingKindName(kind))] = n;
                               }
                               return by_kind;
                             })
      .def_property_readonly("findings_total", &FsckReport::FindingsTotal)
      .def_property_readonly("exit_code", &FsckReport::ExitCode);
  pb::class_<Reclaimed>(m, "Reclaimed", "One path gc removed (or would remove, dry run).")
      .def_property_readonly("path", Fs(&Reclaimed::path)).def_readonly("bytes", &Reclaimed::bytes)
      .def_readonly("reason", &Reclaimed::reason);
  pb::class_<FailedRemoval>(m, "FailedRemoval", "A file gc selected but could not remove, and why.")
      .def_property_readonly("path", Fs(&FailedRemoval::path)).def_readonly("bytes", &FailedRemoval::bytes)
      .def_readonly("reason", &FailedRemoval::reason).def_readonly("errno", &FailedRemoval::sys_errno)
      .def_property_readonly("detail", Fs(&FailedRemoval::detail));
  pb::class_<GcReport>(m, "GcReport", "kvtier gc: what was reclaimed.")
      .def_readonly("dry_run", &GcReport::dry_run).def_readonly("reclaimed", &GcReport::reclaimed)
      .def_readonly("bytes_reclaimed", &GcReport::bytes_reclaimed)
      .def_readonly("files_scanned", &GcReport::files_scanned)
      .def_readonly("unreadable", &GcReport::unreadable).def_readonly("unreadable_unlisted", &GcReport::unreadable_unlisted)
      .def_readonly("kept", &GcReport::kept)
      .def_readonly("failed", &GcReport::failed)
      .def_readonly("files_reclaimed", &GcReport::files_reclaimed).def_readonly("files_failed", &GcReport::files_failed)
      .def_readonly("dirs_removed", &GcReport::dirs_removed).def_readonly("capacity_cutoff", &GcReport::capacity_cutoff)
      .def_readonly("capacity_tolerance_s", &GcReport::capacity_tolerance_s)
      .def_readonly("far_future_blocks", &GcReport::far_future_blocks)
      .def_readonly("walks", &GcReport::walks).def_readonly("candidates_held", &GcReport::candidates_held)
      .def_readonly("capacity_skipped", &GcReport::capacity_skipped).def_readonly("capacity_lease_failed", &GcReport::capacity_lease_failed)
      .def_property_readonly("exit_code", &GcReport::ExitCode);
}

}  // namespace

void BindOps(pb::module_& m) {
  BindReports(m);
  const double io_timeout_s = static_cast<double>(kDefaultIoTimeoutMs) / 1000;
  BindCollector(m, io_timeout_s);
  m.def("du", &PyDu, pb::arg("root"), pb::kw_only(), pb::arg("jobs") = 4, pb::arg("force") = false,
        pb::arg("tmp_grace_s") = 3600, pb::arg("io_timeout_s") = io_timeout_s,
        "Usage per namespace (kvtier du); never follows symlinks.");
  m.def("fsck", &PyFsck, pb::arg("root"), pb::kw_only(), pb::arg("repair") = false,
        pb::arg("verify_data") = false, pb::arg("row_bytes") = 0, pb::arg("jobs") = 4, pb::arg("force") = false,
        pb::arg("tmp_grace_s") = 3600, pb::arg("io_timeout_s") = io_timeout_s,
        pb::arg("seal_key_files") = std::vector<std::string>{}, pb::arg("seal_key_group_read") = false,
        "Findings citing FORMAT.md rules (kvtier fsck); repairs only with repair=True; with verify_data, "
        "checks the tags of sealed namespaces whose keys seal_key_files names.");
  m.def("gc", &PyGc, pb::arg("root"), pb::kw_only(), pb::arg("older_than_s") = pb::none(),
        pb::arg("max_bytes") = pb::none(), pb::arg("low_water_bytes") = pb::none(),
        pb::arg("keep") = std::vector<std::string>{}, pb::arg("dry_run") = false, pb::arg("lease_ttl_s") = 60,
        pb::arg("jobs") = 4, pb::arg("force") = false, pb::arg("tmp_grace_s") = 3600,
        pb::arg("io_timeout_s") = io_timeout_s,
        pb::arg("collector_ttl_s") = static_cast<double>(kDefaultCollectorTtlMs) / 1000, pb::arg("ignore_lease") = false,
        "Reclaims idle namespaces, capacity, stale temp and corrupt files (kvtier gc); a capacity bound "
        "takes the volume's collector lease for the run.");
  m.def("config_check", &ConfigCheck, pb::arg("config_json"), pb::kw_only(), pb::arg("gpu_block_size") = 16,
        "Validates kv_connector_extra_config JSON; returns the effective config as JSON.");
}

}  // namespace kvtier::py
