// kvtier.du / fsck / gc and config_check for Python: the operators' tools and
// the config validator as functions returning Python objects (the GIL is
// released while a tree is walked).
#include <pybind11/stl.h>

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

template <class Options>
void SetScan(Options& o, const std::string& root, int jobs, bool force, uint64_t tmp_grace_s) {
  o.root = root;
  o.jobs = jobs;
  o.force = force;
  o.tmp_grace_s = tmp_grace_s;
}

template <class Report, class Options>
Report RunTool(Result<Report> (*tool)(const Options&), const Options& o) {
  return Unwrap(WithoutGil([&] { return tool(o); }));
}

DuReport PyDu(const std::string& root, int jobs, bool force, uint64_t tmp_grace_s) {
  ScanOptions o;
  SetScan(o, root, jobs, force, tmp_grace_s);
  return RunTool(&Du, o);
}

FsckReport PyFsck(const std::string& root, bool repair, bool verify_data, uint64_t row_bytes, int jobs,
                  bool force, uint64_t tmp_grace_s) {
  FsckOptions o;
  SetScan(o, root, jobs, force, tmp_grace_s);
  o.repair = repair;
  o.verify_data = verify_data;
  o.row_bytes = row_bytes;
  return RunTool(&Fsck, o);
}

GcReport PyGc(const std::string& root, std::optional<uint64_t> older_than_s, std::optional<uint64_t> max_bytes,
              std::optional<uint64_t> low_water_bytes, const std::vector<std::string>& keep, bool dry_run,
              uint64_t lease_ttl_s, int jobs, bool force, uint64_t tmp_grace_s) {
  GcOptions o;
  SetScan(o, root, jobs, force, tmp_grace_s);
  o.older_than_s = older_than_s;
  o.max_bytes = max_bytes;
  o.low_water_bytes = low_water_bytes;
  o.keep = keep;
  o.dry_run = dry_run;
  o.lease_ttl_s = lease_ttl_s;
  return RunTool(&Gc, o);
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
      .def_readonly("tokens_per_hash", &NamespaceUsage::tokens_per_hash)
      .def_readonly("blocks_per_file", &NamespaceUsage::blocks_per_file)
      .def_readonly("tp_size", &NamespaceUsage::tp_size).def_readonly("groups", &NamespaceUsage::groups)
      .def_property_readonly("dtype", Fs(&NamespaceUsage::dtype)).def_readonly("ranks", &NamespaceUsage::ranks)
      .def_readonly("blocks", &NamespaceUsage::blocks).def_readonly("bytes", &NamespaceUsage::bytes)
      .def_readonly("tmp_files", &NamespaceUsage::tmp_files)
      .def_readonly("newest_activity", &NamespaceUsage::newest_activity)
      .def_readonly("oldest_activity", &NamespaceUsage::oldest_activity)
      .def_readonly("live_leases", &NamespaceUsage::live_leases)
      .def_readonly("leases_known", &NamespaceUsage::leases_known);
  pb::class_<DuReport>(m, "DuReport", "kvtier du: usage per namespace.")
      .def_readonly("namespaces", &DuReport::namespaces).def_readonly("total_bytes", &DuReport::total_bytes)
      .def_readonly("total_blocks", &DuReport::total_blocks).def_readonly("files_scanned", &DuReport::files_scanned)
      .def_readonly("unreadable", &DuReport::unreadable).def_property_readonly("exit_code", &DuReport::ExitCode);
  pb::class_<Finding>(m, "Finding", "One fsck finding, citing the FORMAT.md rule it breaks.")
      .def_property_readonly("kind", [](const Finding& f) { return std::string(FindingKindName(f.kind)); })
      .def_property_readonly("path", Fs(&Finding::path)).def_readonly("rule", &Finding::rule)
      .def_property_readonly("action", [](const Finding& f) { return std::string(RepairActionName(f.action)); })
      .def_property_readonly("detail", Fs(&Finding::detail));
  pb::class_<FsckReport>(m, "FsckReport", "kvtier fsck: findings and counts.")
      .def_readonly("findings", &FsckReport::findings).def_readonly("files_scanned", &FsckReport::files_scanned)
      .def_readonly("blocks_checked", &FsckReport::blocks_checked)
      .def_readonly("blocks_verified", &FsckReport::blocks_verified)
      .def_readonly("verified_without_noatime", &FsckReport::verified_without_noatime)
      .def_property_readonly("exit_code", &FsckReport::ExitCode);
  pb::class_<Reclaimed>(m, "Reclaimed", "One path gc removed (or would remove, dry run).")
      .def_property_readonly("path", Fs(&Reclaimed::path)).def_readonly("bytes", &Reclaimed::bytes)
      .def_readonly("reason", &Reclaimed::reason);
  pb::class_<GcReport>(m, "GcReport", "kvtier gc: what was reclaimed.")
      .def_readonly("dry_run", &GcReport::dry_run).def_readonly("reclaimed", &GcReport::reclaimed)
      .def_readonly("bytes_reclaimed", &GcReport::bytes_reclaimed)
      .def_readonly("files_scanned", &GcReport::files_scanned)
      .def_readonly("unreadable", &GcReport::unreadable).def_readonly("kept", &GcReport::kept)
      .def_property_readonly("exit_code", &GcReport::ExitCode);
}

}  // namespace

void BindOps(pb::module_& m) {
  BindReports(m);
  m.def("du", &PyDu, pb::arg("root"), pb::kw_only(), pb::arg("jobs") = 4, pb::arg("force") = false,
        pb::arg("tmp_grace_s") = 3600, "Usage per namespace (kvtier du); never follows symlinks.");
  m.def("fsck", &PyFsck, pb::arg("root"), pb::kw_only(), pb::arg("repair") = false,
        pb::arg("verify_data") = false, pb::arg("row_bytes") = 0, pb::arg("jobs") = 4, pb::arg("force") = false,
        pb::arg("tmp_grace_s") = 3600, "Findings citing FORMAT.md rules (kvtier fsck); repairs only with repair=True.");
  m.def("gc", &PyGc, pb::arg("root"), pb::kw_only(), pb::arg("older_than_s") = pb::none(),
        pb::arg("max_bytes") = pb::none(), pb::arg("low_water_bytes") = pb::none(),
        pb::arg("keep") = std::vector<std::string>{}, pb::arg("dry_run") = false, pb::arg("lease_ttl_s") = 60,
        pb::arg("jobs") = 4, pb::arg("force") = false, pb::arg("tmp_grace_s") = 3600,
        "Reclaims idle namespaces, capacity, stale temp and corrupt files (kvtier gc).");
  m.def("config_check", &ConfigCheck, pb::arg("config_json"), pb::kw_only(), pb::arg("gpu_block_size") = 16,
        "Validates kv_connector_extra_config JSON; returns the effective config as JSON.");
}

}  // namespace kvtier::py
