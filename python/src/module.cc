// The kvtier._kvtier extension module: one binding file per area of the
// public C++ API (py_hashing.cc, py_fs_tier.cc, py_vllm_tier.cc, py_ops.cc,
// py_log.cc, py_sglang.cc, py_metrics.cc).
#include "py_common.h"

namespace kvtier::py {
void BindHashing(pb::module_& m);
void BindTiers(pb::module_& m);
void BindOps(pb::module_& m);
void BindLog(pb::module_& m);
void BindSglang(pb::module_& m);
void BindMetrics(pb::module_& m);
}  // namespace kvtier::py

PYBIND11_MODULE(_kvtier, m) {
  m.doc() = "kvtier: a multi-tier KV-cache block store, byte-compatible with vLLM's fs tier";
  kvtier::py::RegisterError(m);
  kvtier::py::BindHashing(m);
  kvtier::py::BindTiers(m);
  kvtier::py::BindOps(m);
  kvtier::py::BindLog(m);
  kvtier::py::BindSglang(m);
  kvtier::py::BindMetrics(m);
}
