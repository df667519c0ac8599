// Argument binding and conversion without value reprs (py_args.h).
#include "py_args.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstring>
#include <limits>
#include <memory>
#include <string>

namespace kvtier::py {
namespace {

enum class IntError { kNone, kType, kRange };

// `obj` as an int64: Python ints and objects with __index__ (numpy integer
// scalars); not bool, float or anything that only converts with loss.
IntError AsInt64(const pb::handle& obj, int64_t* out) {
  PyObject* p = obj.ptr();
  if (PyBool_Check(p) || PyFloat_Check(p) || !PyIndex_Check(p)) return IntError::kType;
  pb::object index = pb::reinterpret_steal<pb::object>(PyNumber_Index(p));
  if (!index) {
    PyErr_Clear();
    return IntError::kType;
  }
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow != 0) return IntError::kRange;
  if (v == -1 && PyErr_Occurred() != nullptr) {
    PyErr_Clear();
    return IntError::kType;
  }
  *out = v;
  return IntError::kNone;
}

[[noreturn]] void ThrowIntError(std::string_view name, IntError e, const pb::handle& obj) {
  ThrowStatus(InvalidArgument(std::string(name) + (e == IntError::kRange ? ": out of the 64-bit integer range"
                                                                         : ": expected an integer, got " + TypeName(obj))));
}

bool IsTorchTensor(const pb::handle& obj) {
  return !PyObject_CheckBuffer(obj.ptr()) && pb::hasattr(obj, "numpy") && pb::hasattr(obj, "data_ptr");
}

// The element type of a 1-D integer buffer, from its struct-module format.
struct IntFormat {
  bool ok = false;
  bool is_signed = false;
  bool swap = false;  // stored in the other byte order
};

IntFormat ParseIntFormat(const char* format, Py_ssize_t itemsize) {
  std::string_view f = format == nullptr ? "B" : format;
  IntFormat out;
  if (!f.empty() && std::string_view("@=<>!").find(f[0]) != std::string_view::npos) {
    const bool big = f[0] == '>' || f[0] == '!';
    out.swap = (f[0] == '<' || big) && big != (std::endian::native == std::endian::big);
    f.remove_prefix(1);
  }
  const bool sized = itemsize == 1 || itemsize == 2 || itemsize == 4 || itemsize == 8;
  out.ok = f.size() == 1 && std::string_view("bBhHiIlLqQnN").find(f[0]) != std::string_view::npos && sized;
  out.is_signed = out.ok && std::islower(static_cast<unsigned char>(f[0])) != 0;
  return out;
}

// One element; false when an unsigned 64-bit value does not fit an int64.
bool ReadInt(const char* p, Py_ssize_t size, IntFormat f, int64_t* out) {
  uint8_t b[8] = {};
  std::memcpy(b, p, static_cast<size_t>(size));
  if (f.swap) std::reverse(b, b + size);
  uint64_t u = 0;
  std::memcpy(&u, b, 8);  // little-endian hosts: the low `size` bytes hold the value
  if (std::endian::native == std::endian::big) u >>= 8 * (8 - size);
  const int bits = static_cast<int>(8 * size);
  if (f.is_signed && bits < 64 && (u >> (bits - 1)) != 0) u |= ~uint64_t{0} << bits;  // sign-extend
  if (!f.is_signed && bits == 64 && u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
  *out = static_cast<int64_t>(u);
  return true;
}

// numpy arrays, array.array, memoryviews: read through the buffer protocol,
// so numpy is never imported here (pybind11's lazy numpy import, guarded by a
// static, deadlocked two threads whose first calls raced).
std::vector<int64_t> SlotsFromBuffer(std::string_view name, const pb::handle& obj) {
  Py_buffer view;
  if (PyObject_GetBuffer(obj.ptr(), &view, PyBUF_RECORDS_RO) != 0) {
    PyErr_Clear();
    ThrowStatus(InvalidArgument(std::string(name) + ": expected a 1-D array of integers, got " + TypeName(obj)));
  }
  const std::unique_ptr<Py_buffer, void (*)(Py_buffer*)> release(&view, PyBuffer_Release);
  if (view.ndim != 1) {
    ThrowStatus(InvalidArgument(std::string(name) + ": expected a 1-D array, got " + std::to_string(view.ndim) + "-D"));
  }
  std::vector<int64_t> out(static_cast<size_t>(view.shape[0]));
  if (out.empty()) return out;  // np.array([]) is float64, and holds no slot to coerce
  const IntFormat f = ParseIntFormat(view.format, view.itemsize);
  if (!f.ok) {
    ThrowStatus(InvalidArgument(std::string(name) + ": expected an integer array, got element format '" +
                                std::string(view.format == nullptr ? "B" : view.format) + "'"));
  }
  for (size_t i = 0; i < out.size(); ++i) {
    const char* p = static_cast<const char*>(view.buf) + static_cast<Py_ssize_t>(i) * view.strides[0];
    if (!ReadInt(p, view.itemsize, f, &out[i])) {
      ThrowStatus(InvalidArgument(std::string(name) + "[" + std::to_string(i) + "]: out of the 64-bit integer range"));
    }
  }
  return out;
}

std::vector<int64_t> SlotsFromSequence(std::string_view name, const pb::handle& obj) {
  PyObject* p = obj.ptr();
  if (PyUnicode_Check(p) || PyBytes_Check(p) || PyByteArray_Check(p) || !PySequence_Check(p)) {
    ThrowStatus(InvalidArgument(std::string(name) + ": expected a 1-D sequence of integers (list, tuple, numpy array), got " +
                                TypeName(obj)));
  }
  const auto seq = pb::reinterpret_borrow<pb::sequence>(obj);
  std::vector<int64_t> out(seq.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const pb::object item = seq[i];
    const IntError e = AsInt64(item, &out[i]);
    if (e != IntError::kNone) ThrowIntError(std::string(name) + "[" + std::to_string(i) + "]", e, item);
  }
  return out;
}

}  // namespace

std::string TypeName(const pb::handle& obj) { return Py_TYPE(obj.ptr())->tp_name; }

std::vector<pb::object> BindArgs(std::string_view fn, std::initializer_list<const char*> names, size_t n_required,
                                 const pb::args& args, const pb::kwargs& kwargs) {
  const std::vector<std::string_view> list(names.begin(), names.end());
  const std::string f(fn);
  if (args.size() > list.size()) {
    throw pb::type_error(f + "() takes at most " + std::to_string(list.size()) + " arguments (" +
                         std::to_string(args.size()) + " given)");
  }
  std::vector<pb::object> out(list.size());
  for (size_t i = 0; i < args.size(); ++i) out[i] = pb::reinterpret_borrow<pb::object>(args[i]);
  for (const auto& [key, value] : kwargs) {
    const std::string k = pb::str(key);
    const auto it = std::find(list.begin(), list.end(), k);
    if (it == list.end()) throw pb::type_error(f + "() got an unexpected keyword argument '" + k + "'");
    pb::object& slot = out[static_cast<size_t>(it - list.begin())];
    if (slot) throw pb::type_error(f + "() got multiple values for argument '" + k + "'");
    slot = pb::reinterpret_borrow<pb::object>(value);
  }
  for (size_t i = 0; i < n_required; ++i) {
    if (!out[i]) throw pb::type_error(f + "() missing required argument '" + std::string(list[i]) + "'");
  }
  return out;
}

int64_t IntArg(std::string_view name, const pb::handle& obj) {
  int64_t v = 0;
  const IntError e = AsInt64(obj, &v);
  if (e != IntError::kNone) ThrowIntError(name, e, obj);
  return v;
}

uint64_t PositiveIntArg(std::string_view name, const pb::handle& obj) {
  const int64_t n = IntArg(name, obj);
  if (n <= 0) ThrowStatus(InvalidArgument(std::string(name) + ": must be positive, got " + std::to_string(n)));
  return static_cast<uint64_t>(n);
}

std::vector<int64_t> SlotsArg(std::string_view name, const pb::handle& obj) {
  // A CPU torch tensor through its zero-copy numpy view (torch refuses a CUDA one).
  const pb::object target = IsTorchTensor(obj) ? obj.attr("numpy")() : pb::reinterpret_borrow<pb::object>(obj);
  PyObject* p = target.ptr();
  if (PyObject_CheckBuffer(p) && !PyBytes_Check(p) && !PyByteArray_Check(p)) return SlotsFromBuffer(name, target);
  return SlotsFromSequence(name, target);
}

std::vector<OffloadKey> KeysArg(std::string_view name, const pb::handle& obj) {
  PyObject* p = obj.ptr();
  pb::object it;
  if (!PyBytes_Check(p) && !PyUnicode_Check(p) && !PyByteArray_Check(p)) {
    it = pb::reinterpret_steal<pb::object>(PyObject_GetIter(p));
    if (!it) PyErr_Clear();
  }
  if (!it) {
    ThrowStatus(InvalidArgument(std::string(name) + ": expected an iterable of offload keys (bytes), got " + TypeName(obj)));
  }
  std::vector<OffloadKey> out;
  for (pb::handle k : pb::reinterpret_borrow<pb::iterator>(it)) out.push_back(KeyFromObject(k));
  return out;
}

BlockHash BlockHashArg(const std::string& name, const pb::handle& obj) {
  char* data = nullptr;
  Py_ssize_t len = 0;
  if (!PyBytes_Check(obj.ptr()) || PyBytes_AsStringAndSize(obj.ptr(), &data, &len) != 0) {
    PyErr_Clear();
    ThrowStatus(InvalidArgument(name + ": expected a block hash (bytes), got " + TypeName(obj)));
  }
  Result<BlockHash> hash = BlockHash::FromBytes({reinterpret_cast<const uint8_t*>(data), static_cast<size_t>(len)});
  if (!hash.ok()) ThrowStatus(InvalidArgument(name + ": " + hash.status().message()));
  return *hash;
}

std::vector<std::vector<BlockHash>> BlockHashListsArg(std::string_view name, const pb::handle& obj) {
  const auto is_list = [](const pb::handle& o) { return PyList_Check(o.ptr()) || PyTuple_Check(o.ptr()); };
  if (!is_list(obj)) {
    ThrowStatus(InvalidArgument(std::string(name) + ": expected a list of lists of block hashes (bytes), got " + TypeName(obj)));
  }
  const pb::sequence lists = pb::reinterpret_borrow<pb::sequence>(obj);
  std::vector<std::vector<BlockHash>> out(lists.size());
  for (size_t i = 0; i < lists.size(); ++i) {
    const std::string list = std::string(name) + "[" + std::to_string(i) + "]";
    const pb::object hashes = lists[i];
    if (!is_list(hashes)) ThrowStatus(InvalidArgument(list + ": expected a list of block hashes (bytes), got " + TypeName(hashes)));
    const pb::sequence seq = pb::reinterpret_borrow<pb::sequence>(hashes);
    out[i].reserve(seq.size());
    for (size_t j = 0; j < seq.size(); ++j) out[i].push_back(BlockHashArg(list + "[" + std::to_string(j) + "]", seq[j]));
  }
  return out;
}

pb::sequence SequenceArg(std::string_view name, const pb::handle& obj) {
  PyObject* p = obj.ptr();
  if (!PySequence_Check(p) || PyObject_CheckBuffer(p) || PyUnicode_Check(p)) {
    ThrowStatus(InvalidArgument(std::string(name) + ": expected a list of row buffers, got " + TypeName(obj)));
  }
  return pb::reinterpret_borrow<pb::sequence>(obj);
}

std::string StrArg(std::string_view name, const pb::handle& obj) {
  if (!PyUnicode_Check(obj.ptr())) ThrowStatus(InvalidArgument(std::string(name) + ": expected a str, got " + TypeName(obj)));
  Py_ssize_t n = 0;
  const char* text = PyUnicode_AsUTF8AndSize(obj.ptr(), &n);
  if (text == nullptr) {
    PyErr_Clear();
    ThrowStatus(InvalidArgument(std::string(name) + ": a string that is not Unicode text"));
  }
  return std::string(text, static_cast<size_t>(n));
}

std::vector<std::string> StrsArg(std::string_view name, const pb::handle& obj) {
  pb::sequence items = SequenceArg(name, obj);
  std::vector<std::string> out;
  out.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) out.push_back(StrArg(std::string(name) + "[" + std::to_string(i) + "]", items[i]));
  return out;
}

std::span<uint8_t> PieceArg(const std::string& name, const pb::handle& obj) {
  if (!PyTuple_Check(obj.ptr()) && !PyList_Check(obj.ptr())) {
    ThrowStatus(InvalidArgument(name + ": expected an (address, nbytes) pair, got " + TypeName(obj)));
  }
  pb::sequence pair = pb::reinterpret_borrow<pb::sequence>(obj);
  if (pair.size() != 2) ThrowStatus(InvalidArgument(name + ": expected an (address, nbytes) pair"));
  const int64_t addr = IntArg(name + " address", pair[0]);
  const int64_t len = IntArg(name + " nbytes", pair[1]);
  if (addr <= 0 || len < 0) ThrowStatus(InvalidArgument(name + ": a null address or a negative size"));
  return {reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(addr)), static_cast<size_t>(len)};
}

std::vector<std::vector<std::span<uint8_t>>> PagesOfPiecesArg(std::string_view name, const pb::handle& obj) {
  pb::sequence pages = SequenceArg(name, obj);
  std::vector<std::vector<std::span<uint8_t>>> out(pages.size());
  for (size_t i = 0; i < pages.size(); ++i) {
    const std::string page = std::string(name) + "[" + std::to_string(i) + "]";
    pb::sequence pieces = SequenceArg(page, pages[i]);
    out[i].reserve(pieces.size());
    for (size_t j = 0; j < pieces.size(); ++j) out[i].push_back(PieceArg(page + "[" + std::to_string(j) + "]", pieces[j]));
  }
  return out;
}

}  // namespace kvtier::py
