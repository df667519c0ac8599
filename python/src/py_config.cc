// Python values -> one fs tier's config (py_config.h). json.dumps alone
// coerced too much (int dict keys, NaN as a JSON extension) and too little
// (pathlib.Path and numpy.int64 raised a bare TypeError), so values are
// checked and converted here first, each error naming its key path as the
// C++ parser's do.
#include "py_config.h"

#include <cmath>
#include <optional>
#include <string>

#include "kvtier/config.h"

namespace kvtier::py {
namespace {

std::string KeyPath(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

[[noreturn]] void Refuse(const std::string& path, const std::string& rule) {
  ThrowStatus(InvalidArgument("config key '" + path + "': " + rule));
}

std::string TypeName(pb::handle value) { return pb::str(pb::type::handle_of(value).attr("__name__")); }

// A str that UTF-8 can carry (no lone surrogates), or a refusal.
pb::object CheckedText(pb::handle value, const std::string& path) {
  Py_ssize_t n = 0;
  if (PyUnicode_AsUTF8AndSize(value.ptr(), &n) == nullptr) {
    PyErr_Clear();
    Refuse(path, "a string that is not Unicode text (lone surrogates); only root_dir may be a raw path");
  }
  return pb::reinterpret_borrow<pb::object>(value);
}

pb::object Number(pb::handle value, const std::string& path) {
  const double x = value.cast<double>();
  if (!std::isfinite(x)) Refuse(path, "expected a finite number, got " + std::string(pb::str(pb::repr(value))));
  return pb::float_(x);
}

// numpy scalars and other registered numbers, or nullopt.
std::optional<pb::object> FromNumbers(pb::handle value, const std::string& path) {
  const pb::module_ numbers = pb::module_::import("numbers");
  if (std::string(Py_TYPE(value.ptr())->tp_name).starts_with("numpy.bool")) {
    return pb::bool_(PyObject_IsTrue(value.ptr()) == 1);
  }
  if (pb::isinstance(value, numbers.attr("Integral"))) {
    return pb::reinterpret_steal<pb::object>(PyNumber_Index(value.ptr()));
  }
  if (pb::isinstance(value, numbers.attr("Real"))) return Number(value, path);
  return std::nullopt;
}

pb::object Plain(pb::handle value, const std::string& path, int depth);

pb::object PlainDict(pb::handle value, const std::string& path, int depth) {
  pb::dict out;
  for (pb::handle key : value.attr("keys")()) {
    if (!PyUnicode_Check(key.ptr())) {  // json.dumps would turn 1 into "1" and None into "null"
      Refuse(path.empty() ? "(top level)" : path, "keys must be strings, got a key of type " + TypeName(key));
    }
    const std::string name = CheckedText(key, path).cast<std::string>();
    out[key] = Plain(value[key], KeyPath(path, name), depth + 1);
  }
  return out;
}

pb::object PlainList(pb::handle value, const std::string& path, int depth) {
  pb::list out;
  size_t i = 0;
  for (pb::handle item : value) out.append(Plain(item, path + "[" + std::to_string(i++) + "]", depth + 1));
  return out;
}

// `value` as plain JSON types (see py_config.h), or a KvtierError naming `path`.
pb::object Plain(pb::handle value, const std::string& path, int depth) {
  if (depth > kOffloadConfigDepthMax) {
    Refuse(path, "nested deeper than " + std::to_string(kOffloadConfigDepthMax) + " levels");
  }
  if (value.is_none() || PyBool_Check(value.ptr()) || PyLong_Check(value.ptr())) {
    return pb::reinterpret_borrow<pb::object>(value);
  }
  if (PyFloat_Check(value.ptr())) return Number(value, path);
  if (PyUnicode_Check(value.ptr())) return CheckedText(value, path);
  if (PyDict_Check(value.ptr()) || pb::isinstance(value, pb::module_::import("collections.abc").attr("Mapping"))) {
    return PlainDict(value, path, depth);
  }
  if (PyList_Check(value.ptr()) || PyTuple_Check(value.ptr())) return PlainList(value, path, depth);
  if (pb::hasattr(value, "__fspath__")) {
    return Plain(pb::module_::import("os").attr("fsdecode")(value), path, depth);
  }
  if (std::optional<pb::object> number = FromNumbers(value, path)) return *number;
  Refuse(path, "expected a JSON value (str, int, float, bool, None, list or dict), got " + TypeName(value));
}

// os.fsencode(root_dir): the bytes vLLM's own tier would open.
std::string RootDirBytes(pb::handle value) {
  try {
    return pb::module_::import("os").attr("fsencode")(value).cast<std::string>();
  } catch (const pb::error_already_set& e) {
    Refuse("root_dir", "not a path: " + std::string(e.what()));
  }
}

bool IsPath(pb::handle value) {
  return PyUnicode_Check(value.ptr()) || PyBytes_Check(value.ptr()) || pb::hasattr(value, "__fspath__");
}

FsTierOptions ParseTierDict(const pb::handle& config) {
  // A new dict (pybind11's dict(obj) would share a dict given as one): root_dir
  // is taken out of it, and the caller's config must stay as it was, e.g. for
  // a second attach with the same config.
  pb::dict keys = pb::module_::import("builtins").attr("dict")(config);
  std::optional<std::string> root_dir;
  if (keys.contains("root_dir") && IsPath(keys["root_dir"])) {
    root_dir = RootDirBytes(keys["root_dir"]);
    keys.attr("pop")("root_dir");
  }
  pb::object tier = PlainDict(keys, "", 1);
  const std::string text = pb::module_::import("json").attr("dumps")(tier).cast<std::string>();
  return Unwrap(root_dir ? ParseFsTierConfig(text, *root_dir) : ParseFsTierConfig(text));
}

}  // namespace

FsTierOptions ParseTierConfig(const pb::object& config) {
  if (PyUnicode_Check(config.ptr())) {
    Py_ssize_t n = 0;
    const char* text = PyUnicode_AsUTF8AndSize(config.ptr(), &n);
    if (text == nullptr) {
      PyErr_Clear();
      ThrowStatus(InvalidArgument("config: the JSON text is not Unicode text (lone surrogates)"));
    }
    return Unwrap(ParseFsTierConfig(std::string_view(text, static_cast<size_t>(n))));
  }
  if (!PyDict_Check(config.ptr()) && !pb::isinstance(config, pb::module_::import("collections.abc").attr("Mapping"))) {
    ThrowStatus(InvalidArgument("config: expected a dict of tier keys or JSON text, got " + TypeName(config)));
  }
  return ParseTierDict(config);
}

FsTierOpenOptions TierOpenOptions(const Namespace& ns, uint64_t row_bytes, const pb::object& config) {
  FsTierOpenOptions o;
  o.tier = ParseTierConfig(config);
  o.ns = ns.spec();
  o.row_bytes = row_bytes;
  return o;
}

}  // namespace kvtier::py
