// Shared glue of the kvtier Python module: kvtier.KvtierError from a Status,
// OffloadKey <-> bytes (vLLM's OffloadKey: block hash || group index as a
// 4-byte big-endian integer), and zero-copy access to caller buffers.
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>

#include <string>
#include <string_view>
#include <vector>

#include "kvtier/fs_tier_metrics.h"
#include "kvtier/hashing.h"
#include "kvtier/result.h"
#include "kvtier/status.h"

namespace kvtier::py {

namespace pb = pybind11;

// Creates kvtier.KvtierError (an Exception with .code, .errno and .message).
void RegisterError(pb::module_& m);
// Raises kvtier.KvtierError carrying `status` (code name, errno, message).
[[noreturn]] void ThrowStatus(const Status& status);
inline void ThrowIfError(const Status& status) {
  if (!status.ok()) ThrowStatus(status);
}
template <class T>
T Unwrap(Result<T> result) {
  if (!result.ok()) ThrowStatus(result.status());
  return std::move(result).value();
}

// Runs `fn` (which must not touch Python objects) with the GIL released and
// returns its result (a Status or Result<T>, checked by the caller with the GIL).
template <class Fn>
auto WithoutGil(Fn&& fn) {
  pb::gil_scoped_release release;
  return fn();
}

// An fs tier's metrics() dict, every field of kFsTierMetricFields by name
// (py_metrics.cc).
pb::dict FsMetricsDict(const FsTierMetrics& m);

// vLLM's OffloadKey bytes: 1..32 bytes of block hash, then the group index.
OffloadKey KeyFromBytes(std::string_view bytes);
pb::bytes KeyToBytes(const OffloadKey& key);
// A bytes object as a key; kvtier.KvtierError(invalid_argument) for anything else.
OffloadKey KeyFromObject(pb::handle key);
std::vector<OffloadKey> KeysFromList(const pb::iterable& keys);

// A held buffer export (PEP 3118) of a C-contiguous byte buffer: memoryview,
// bytearray, numpy array, or a CPU torch tensor (through its zero-copy numpy
// view). Release() (or destruction) needs the GIL.
class HeldBuffer {
 public:
  HeldBuffer() = default;
  HeldBuffer(const pb::handle& obj, bool writable);
  HeldBuffer(HeldBuffer&& other) noexcept;
  HeldBuffer& operator=(HeldBuffer&& other) noexcept;
  HeldBuffer(const HeldBuffer&) = delete;
  HeldBuffer& operator=(const HeldBuffer&) = delete;
  ~HeldBuffer() { Release(); }

  void Release();
  uint8_t* data() const { return static_cast<uint8_t*>(view_.buf); }
  size_t size() const { return held_ ? static_cast<size_t>(view_.len) : 0; }

 private:
  Py_buffer view_{};
  bool held_ = false;
  pb::object owner_;  // the numpy view of a torch tensor, kept alive with the export
};

// Binds what every tier front end answers alike (the TierShell's facilities,
// include/kvtier/tier_shell.h): metrics(), prometheus_text(), block_path()
// and the backend, o_direct and checksum_place properties. tier(self) is the
// object that answers them (a TierShell or an VllmTier); each call runs
// without the GIL.
template <class Py, class Tier>
void BindTierCommon(pb::class_<Py>& cls, Tier& (*tier)(Py&)) {
  cls.def("metrics", [tier](Py& t) { return FsMetricsDict(WithoutGil([&] { return tier(t).Metrics(); })); })
      .def("prometheus_text", [tier](Py& t, const std::string& name) {
        return Unwrap(WithoutGil([&] { return tier(t).PrometheusText(name); }));
      }, pb::arg("tier_name") = "fs0")
      .def("block_path", [tier](Py& t, const pb::object& key) {
        const OffloadKey k = KeyFromObject(key);
        return Unwrap(WithoutGil([&] { return tier(t).BlockPath(k); }));
      }, pb::arg("key"))
      .def_property_readonly("backend", [tier](Py& t) { return std::string(tier(t).backend_name()); })
      .def_property_readonly("o_direct", [tier](Py& t) { return tier(t).o_direct(); })
      .def_property_readonly("checksum_place", [tier](Py& t) { return std::string(tier(t).checksum_place()); });
}

}  // namespace kvtier::py
