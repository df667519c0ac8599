// kvtier._kvtier.SglangStore: kvtier's SGLang HiCache L3 store
// (include/kvtier/sglang.h) for kvtier.sglang. Pages arrive as raw
// (address, bytes) pieces (SGLang's host pool hands out pointers, not buffer
// objects), converted with the GIL held; every I/O call then runs with the
// GIL released, since SGLang's prefetch, prefetch I/O and backup threads call
// at once.
//
// The addresses are taken as given (this module is kvtier.sglang's, not
// public): kvtier.sglang moves a zero-copy page only when every piece lies
// inside the host pool's buffers, and a generic page is a tensor's own
// memory.
//
// The I/O methods never raise: SGLang's threads die on any exception, so an
// argument that cannot be converted is every key's false (0 for
// exists_prefix), logged once per method through logging.getLogger
// ("kvtier.sglang"). The store itself counts and logs its own failures.
#include <pybind11/stl.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/fs_tier.h"
#include "kvtier/sglang.h"
#include "py_args.h"
#include "py_common.h"
#include "py_config.h"

namespace kvtier::py {

namespace {

[[noreturn]] void RefuseSpec(const std::string& key, const std::string& rule) {
  ThrowStatus(InvalidArgument("spec key '" + key + "': " + rule));
}

std::string SpecText(const std::string& key, pb::handle value) {
  if (!PyUnicode_Check(value.ptr())) RefuseSpec(key, "expected a str, got " + TypeName(value));
  Py_ssize_t n = 0;
  const char* text = PyUnicode_AsUTF8AndSize(value.ptr(), &n);
  if (text == nullptr) {
    PyErr_Clear();
    RefuseSpec(key, "a string that is not Unicode text");
  }
  return std::string(text, static_cast<size_t>(n));
}

// One field of the spec dict into `spec`; false for an unknown key.
bool SetSpecField(SglangPageSpec& spec, const std::string& key, pb::handle v) {
  const std::string name = "spec key '" + key + "'";
  if (key == "model_name") spec.model_name = SpecText(key, v);
  else if (key == "model_path") spec.model_path = v.is_none() ? std::nullopt : std::optional(SpecText(key, v));
  else if (key == "model_revision") spec.model_revision = v.is_none() ? std::nullopt : std::optional(SpecText(key, v));
  else if (key == "mem_layout") spec.mem_layout = SpecText(key, v);
  else if (key == "dtype") spec.dtype = SpecText(key, v);
  else if (key == "page_size") spec.page_size = IntArg(name, v);
  else if (key == "k_bytes_per_token") spec.k_bytes_per_token = IntArg(name, v);
  else if (key == "v_bytes_per_token") spec.v_bytes_per_token = IntArg(name, v);
  else if (key == "layer_num") spec.layer_num = IntArg(name, v);
  else if (key == "tp_size") spec.tp_size = IntArg(name, v);
  else if (key == "tp_rank") spec.tp_rank = IntArg(name, v);
  else if (key == "pp_size") spec.pp_size = IntArg(name, v);
  else if (key == "pp_rank") spec.pp_rank = IntArg(name, v);
  else if (key == "cp_size") spec.cp_size = IntArg(name, v);
  else if (key == "cp_rank") spec.cp_rank = IntArg(name, v);
  else if (key == "is_mla") {
    if (!PyBool_Check(v.ptr())) RefuseSpec(key, "expected a bool, got " + TypeName(v));
    spec.is_mla = v.ptr() == Py_True;
  } else {
    return false;
  }
  return true;
}

SglangPageSpec SpecFromDict(const pb::handle& obj) {
  if (!PyDict_Check(obj.ptr())) ThrowStatus(InvalidArgument("spec: expected a dict, got " + TypeName(obj)));
  SglangPageSpec spec;
  for (auto [k, v] : pb::reinterpret_borrow<pb::dict>(obj)) {
    if (!PyUnicode_Check(k.ptr())) ThrowStatus(InvalidArgument("spec: keys must be str, got " + TypeName(k)));
    const std::string key = k.cast<std::string>();
    if (!SetSpecField(spec, key, v)) RefuseSpec(key, "unknown (see include/kvtier/sglang.h, SglangPageSpec)");
  }
  return spec;
}

// (address, bytes) -> a span; both non-negative integers, the address non-null.
std::span<uint8_t> Piece(const std::string& name, pb::handle item) {
  if (!PyTuple_Check(item.ptr()) && !PyList_Check(item.ptr())) {
    ThrowStatus(InvalidArgument(name + ": expected an (address, nbytes) pair, got " + TypeName(item)));
  }
  pb::sequence pair = pb::reinterpret_borrow<pb::sequence>(item);
  if (pair.size() != 2) ThrowStatus(InvalidArgument(name + ": expected an (address, nbytes) pair"));
  const int64_t addr = IntArg(name + " address", pair[0]);
  const int64_t len = IntArg(name + " nbytes", pair[1]);
  if (addr <= 0 || len < 0) ThrowStatus(InvalidArgument(name + ": a null address or a negative size"));
  return {reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(addr)), static_cast<size_t>(len)};
}

std::vector<SglangPagePieces> PagesArg(const pb::handle& obj) {
  pb::sequence pages = SequenceArg("pieces", obj);
  std::vector<SglangPagePieces> out;
  out.reserve(pages.size());
  for (size_t i = 0; i < pages.size(); ++i) {
    const std::string name = "pieces[" + std::to_string(i) + "]";
    pb::sequence page = SequenceArg(name, pages[i]);
    SglangPagePieces pieces;
    pieces.reserve(page.size());
    for (size_t j = 0; j < page.size(); ++j) pieces.push_back(Piece(name + "[" + std::to_string(j) + "]", page[j]));
    out.push_back(std::move(pieces));
  }
  return out;
}

std::vector<std::string> KeyStrings(const pb::handle& obj) {
  pb::sequence keys = SequenceArg("keys", obj);
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    pb::handle k = keys[i];
    if (!PyUnicode_Check(k.ptr())) {
      ThrowStatus(InvalidArgument("keys[" + std::to_string(i) + "]: expected a str, got " + TypeName(k)));
    }
    out.push_back(SpecText("keys[" + std::to_string(i) + "]", k));
  }
  return out;
}

std::vector<std::string_view> Views(const std::vector<std::string>& keys) {
  return {keys.begin(), keys.end()};
}

// A failure to convert one call's arguments, logged the first time per method.
void NoteBadCall(std::atomic<bool>& logged, const char* method, const pb::error_already_set& e) {
  if (!logged.exchange(true)) {
    pb::module_::import("logging").attr("getLogger")("kvtier.sglang").attr("warning")(
        std::string("kvtier.sglang: SglangStore.") + method + " refused its arguments (" + e.what() +
        "); every key answered false, logged only once");
  }
}

class PySglangStore {
 public:
  PySglangStore(const pb::object& fs_config, const pb::object& spec, const pb::object& registered_memory) {
    SglangStoreOptions o;
    o.tier = ParseTierConfig(fs_config);
    o.spec = SpecFromDict(spec);
    if (!registered_memory.is_none()) {
      pb::sequence regions = SequenceArg("registered_memory", registered_memory);
      for (size_t i = 0; i < regions.size(); ++i) {
        o.registered_memory.push_back(Piece("registered_memory[" + std::to_string(i) + "]", regions[i]));
      }
    }
    store_ = Unwrap(WithoutGil([&] { return SglangStore::Open(o); }));
    store_queue_bytes_max_ = o.tier.store_queue_bytes_max;
  }

  size_t ExistsPrefix(const pb::object& keys_obj) {
    std::vector<std::string> keys;
    try {
      keys = KeyStrings(keys_obj);
    } catch (const pb::error_already_set& e) {
      NoteBadCall(bad_exists_, "exists_prefix", e);
      return 0;
    }
    pb::gil_scoped_release release;
    const std::vector<std::string_view> views = Views(keys);
    return store_->ExistsPrefix(views);
  }

  std::vector<bool> Load(const pb::object& keys_obj, const pb::object& pieces_obj) {
    std::vector<std::string> keys;
    std::vector<SglangPagePieces> pages;
    if (!Convert(keys_obj, pieces_obj, keys, pages, bad_load_, "load")) return AllFalse(keys_obj);
    pb::gil_scoped_release release;
    const std::vector<std::string_view> views = Views(keys);
    return store_->Load(views, pages);
  }

  std::vector<bool> Store(const pb::object& keys_obj, const pb::object& pieces_obj) {
    std::vector<std::string> keys;
    std::vector<SglangPagePieces> pages;
    if (!Convert(keys_obj, pieces_obj, keys, pages, bad_store_, "store")) return AllFalse(keys_obj);
    std::vector<SglangConstPagePieces> in;
    in.reserve(pages.size());
    for (const SglangPagePieces& p : pages) in.emplace_back(p.begin(), p.end());
    pb::gil_scoped_release release;
    const std::vector<std::string_view> views = Views(keys);
    return store_->Store(views, in);
  }

  uint64_t Clear() { return Unwrap(WithoutGil([&] { return store_->Clear(); })); }
  pb::dict Metrics() { return FsMetricsDict(WithoutGil([&] { return store_->Metrics(); })); }
  void Close() { WithoutGil([&] { store_->Close(); }); }
  const SglangNamespace& ns() const { return store_->ns(); }
  const Namespace& stored() const { return store_->stored_namespace(); }  // sealed: the key's (L162)
  std::string PagePath(const std::string& key) const { return store_->PagePath(key); }
  uint64_t store_queue_bytes_max() const { return store_queue_bytes_max_; }

 private:
  static bool Convert(const pb::object& keys_obj, const pb::object& pieces_obj, std::vector<std::string>& keys,
                      std::vector<SglangPagePieces>& pages, std::atomic<bool>& logged, const char* method) {
    try {
      keys = KeyStrings(keys_obj);
      pages = PagesArg(pieces_obj);
      return true;
    } catch (const pb::error_already_set& e) {
      NoteBadCall(logged, method, e);
      return false;
    }
  }
  // One false per key when the keys can be counted, else an empty list.
  static std::vector<bool> AllFalse(const pb::object& keys_obj) {
    const Py_ssize_t n = PyObject_Length(keys_obj.ptr());
    if (n < 0) PyErr_Clear();
    return std::vector<bool>(n > 0 ? static_cast<size_t>(n) : 0, false);
  }

  std::unique_ptr<SglangStore> store_;
  uint64_t store_queue_bytes_max_ = 0;  // a store call over this is dropped whole (kvtier.sglang splits)
  std::atomic<bool> bad_exists_{false}, bad_load_{false}, bad_store_{false};
};

}  // namespace

void BindSglang(pb::module_& m) {
  pb::class_<PySglangStore>(m, "SglangStore", "kvtier's SGLang HiCache L3 store (include/kvtier/sglang.h)")
      .def(pb::init<const pb::object&, const pb::object&, const pb::object&>(), pb::arg("fs_config"),
           pb::arg("spec"), pb::arg("registered_memory") = pb::none())
      .def("exists_prefix", &PySglangStore::ExistsPrefix, pb::arg("keys"))
      .def("load", &PySglangStore::Load, pb::arg("keys"), pb::arg("pieces"))
      .def("store", &PySglangStore::Store, pb::arg("keys"), pb::arg("pieces"))
      .def("clear", &PySglangStore::Clear)
      .def("metrics", &PySglangStore::Metrics)
      .def("close", &PySglangStore::Close)
      .def("page_path", &PySglangStore::PagePath, pb::arg("key"))
      .def_property_readonly("namespace_dir", [](const PySglangStore& s) { return s.stored().dir_name(); })
      .def_property_readonly("block_dir", [](const PySglangStore& s) { return s.stored().block_dir_name(); })
      .def_property_readonly("page_bytes", [](const PySglangStore& s) { return s.ns().page_bytes(); })
      .def_property_readonly("digest", [](const PySglangStore& s) { return s.ns().digest(); })
      .def_property_readonly("rank", [](const PySglangStore& s) { return s.ns().rank(); })
      .def_property_readonly("store_queue_bytes_max", &PySglangStore::store_queue_bytes_max)
      .def_property_readonly("config_json", [](const PySglangStore& s) { return s.ns().config_json(); });
}

}  // namespace kvtier::py
