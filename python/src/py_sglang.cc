// kvtier._kvtier.SglangTier: kvtier's SGLang HiCache L3 store
// (include/kvtier/sglang.h) for kvtier.sglang, and sglang_extra_config, the
// sorting of SGLang's extra_config by the library's SglangConfigKeyKind.
// Pages arrive as raw (address, bytes) pieces (SGLang's host pool hands out
// pointers, not buffer objects), converted with the GIL held; every I/O call
// then runs with the GIL released, since SGLang's prefetch, prefetch I/O and
// backup threads call at once.
//
// The addresses are taken as given (this module is kvtier.sglang's, not
// public): kvtier.sglang moves a zero-copy page only when every piece lies
// inside the host pool's buffers, and a generic page is a tensor's own
// memory.
//
// Arguments that cannot be converted raise KvtierError, as everywhere in the
// binding: kvtier.sglang is the one layer that keeps SGLang's threads from
// exceptions (it counts and logs its failures once per kind), and the store
// counts and logs its own I/O failures.
#include <pybind11/stl.h>

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

constexpr const char* kLogger = "kvtier.sglang";

[[noreturn]] void RefuseSpec(const std::string& key, const std::string& rule) {
  ThrowStatus(InvalidArgument("spec key '" + key + "': " + rule));
}

// One field of the spec dict into `spec`; false for an unknown key.
bool SetSpecField(SglangPageSpec& spec, const std::string& key, pb::handle v) {
  const std::string name = "spec key '" + key + "'";
  if (key == "model_name") spec.model_name = StrArg(name, v);
  else if (key == "model_path") spec.model_path = v.is_none() ? std::nullopt : std::optional(StrArg(name, v));
  else if (key == "model_revision") spec.model_revision = v.is_none() ? std::nullopt : std::optional(StrArg(name, v));
  else if (key == "mem_layout") spec.mem_layout = StrArg(name, v);
  else if (key == "dtype") spec.dtype = StrArg(name, v);
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

[[noreturn]] void RefuseConfig(const std::string& key, const std::string& rule) {
  ThrowStatus(InvalidArgument("config key '" + key + "': " + rule));
}

// A namespace key's value (model_path, model_revision): a non-empty str, or None (absent).
void AddNamespaceKey(pb::dict& spec, const std::string& key, pb::handle value) {
  if (value.is_none()) return;
  if (!PyUnicode_Check(value.ptr()) || PyUnicode_GetLength(value.ptr()) == 0) {
    RefuseConfig(key, "expected a non-empty string, got " + std::string(pb::repr(value)));
  }
  spec[pb::str(key)] = value;
}

// SGLang's extra_config -> (the fs tier's keys, the namespace keys), each key
// where SglangConfigKeyKind puts it; an unknown key is one warning naming it.
pb::tuple SplitExtraConfig(const pb::object& extra) {
  pb::dict fs, spec;
  if (!extra.is_none() && !PyDict_Check(extra.ptr())) {
    RefuseConfig("extra_config", "expected a dict (SGLang's parsed JSON), got " + TypeName(extra));
  }
  const pb::dict keys = extra.is_none() ? pb::dict() : pb::reinterpret_borrow<pb::dict>(extra);
  for (auto [k, v] : keys) {
    if (!PyUnicode_Check(k.ptr())) {
      RefuseConfig("extra_config", "keys must be strings, got a key of type " + TypeName(k));
    }
    const std::string key = k.cast<std::string>();
    switch (SglangConfigKeyKind(key)) {
      case SglangConfigKey::kFsTier: fs[k] = v; break;
      case SglangConfigKey::kNamespace: AddNamespaceKey(spec, key, v); break;
      case SglangConfigKey::kSglang: break;
      case SglangConfigKey::kUnknown:
        pb::module_::import("logging").attr("getLogger")(kLogger).attr("warning")(
            "kvtier.sglang: extra_config key '" + key + "' is unknown to kvtier and ignored");
        break;
    }
  }
  if (!fs.contains("root_dir")) RefuseConfig("root_dir", "required: the directory (or mount) pages are stored under");
  return pb::make_tuple(fs, spec);
}

std::vector<std::string_view> Views(const std::vector<std::string>& keys) {
  return {keys.begin(), keys.end()};
}

class PySglangTier {
 public:
  PySglangTier(const pb::object& fs_config, const pb::object& spec, const pb::object& registered_memory) {
    SglangTierOptions o;
    o.tier = ParseTierConfig(fs_config);
    o.spec = SpecFromDict(spec);
    if (!registered_memory.is_none()) {
      pb::sequence regions = SequenceArg("registered_memory", registered_memory);
      for (size_t i = 0; i < regions.size(); ++i) {
        o.registered_memory.push_back(PieceArg("registered_memory[" + std::to_string(i) + "]", regions[i]));
      }
    }
    store_ = Unwrap(WithoutGil([&] { return SglangTier::Open(o); }));
  }

  size_t ExistsPrefix(const pb::object& keys_obj) {
    const std::vector<std::string> keys = StrsArg("keys", keys_obj);
    pb::gil_scoped_release release;
    const std::vector<std::string_view> views = Views(keys);
    return store_->ExistsPrefix(views);
  }

  std::vector<bool> Load(const pb::object& keys_obj, const pb::object& pieces_obj) {
    const std::vector<std::string> keys = StrsArg("keys", keys_obj);
    const std::vector<SglangPagePieces> pages = PagesOfPiecesArg("pieces", pieces_obj);
    pb::gil_scoped_release release;
    const std::vector<std::string_view> views = Views(keys);
    return store_->Load(views, pages);
  }

  std::vector<bool> Store(const pb::object& keys_obj, const pb::object& pieces_obj) {
    const std::vector<std::string> keys = StrsArg("keys", keys_obj);
    const std::vector<SglangPagePieces> pages = PagesOfPiecesArg("pieces", pieces_obj);
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

 private:
  std::unique_ptr<SglangTier> store_;
};

}  // namespace

void BindSglang(pb::module_& m) {
  pb::class_<PySglangTier>(m, "SglangTier", "kvtier's SGLang HiCache L3 store (include/kvtier/sglang.h)")
      .def(pb::init<const pb::object&, const pb::object&, const pb::object&>(), pb::arg("fs_config"),
           pb::arg("spec"), pb::arg("registered_memory") = pb::none())
      .def("exists_prefix", &PySglangTier::ExistsPrefix, pb::arg("keys"))
      .def("load", &PySglangTier::Load, pb::arg("keys"), pb::arg("pieces"))
      .def("store", &PySglangTier::Store, pb::arg("keys"), pb::arg("pieces"))
      .def("clear", &PySglangTier::Clear)
      .def("metrics", &PySglangTier::Metrics)
      .def("close", &PySglangTier::Close)
      .def("page_path", &PySglangTier::PagePath, pb::arg("key"))
      .def_property_readonly("namespace_dir", [](const PySglangTier& s) { return s.stored().dir_name(); })
      .def_property_readonly("block_dir", [](const PySglangTier& s) { return s.stored().block_dir_name(); })
      .def_property_readonly("page_bytes", [](const PySglangTier& s) { return s.ns().page_bytes(); })
      .def_property_readonly("digest", [](const PySglangTier& s) { return s.ns().digest(); })
      .def_property_readonly("rank", [](const PySglangTier& s) { return s.ns().rank(); })
      .def_property_readonly("config_json", [](const PySglangTier& s) { return s.ns().config_json(); });
  m.def("sglang_extra_config", &SplitExtraConfig, pb::arg("extra_config"),
        "SGLang's extra_config -> (fs tier keys, namespace keys), sorted by the library (include/kvtier/sglang.h)");
}

}  // namespace kvtier::py
