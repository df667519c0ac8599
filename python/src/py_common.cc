// kvtier.KvtierError, key conversion and buffer exports (py_common.h).
#include "py_common.h"

#include <string>
#include <utility>

namespace kvtier::py {
namespace {

PyObject* g_error_type = nullptr;  // kvtier.KvtierError, owned by the module

}  // namespace

void RegisterError(pb::module_& m) {
  g_error_type = PyErr_NewExceptionWithDoc(
      "kvtier.KvtierError",
      "An error from kvtier. Attributes: code (kvtier's status name, e.g. 'invalid_argument', "
      "'not_found', 'corruption', 'io_error', 'no_space', 'permission_denied', 'timed_out', "
      "'unavailable'), errno (the OS error number, 0 when none) and message.",
      PyExc_Exception, nullptr);
  if (g_error_type == nullptr) throw pb::error_already_set();
  m.add_object("KvtierError", pb::handle(g_error_type));
}

void ThrowStatus(const Status& status) {
  pb::object type = pb::reinterpret_borrow<pb::object>(g_error_type);
  pb::object exc = type(status.ToString());
  exc.attr("code") = pb::str(std::string(StatusCodeName(status.code())));
  exc.attr("errno") = status.sys_errno();
  exc.attr("message") = status.message();
  PyErr_SetObject(g_error_type, exc.ptr());
  throw pb::error_already_set();
}

OffloadKey KeyFromBytes(std::string_view bytes) {
  if (bytes.size() < 5 || bytes.size() > 4 + BlockHash::kMaxBytes) {
    ThrowStatus(InvalidArgument("an offload key is 1-32 bytes of block hash and a 4-byte group index, got " +
                                std::to_string(bytes.size()) + " bytes"));
  }
  const size_t n = bytes.size() - 4;
  OffloadKey key;
  key.hash = Unwrap(BlockHash::FromBytes({reinterpret_cast<const uint8_t*>(bytes.data()), n}));
  for (size_t i = n; i < bytes.size(); ++i) key.group_idx = (key.group_idx << 8) | static_cast<uint8_t>(bytes[i]);
  return key;
}

pb::bytes KeyToBytes(const OffloadKey& key) {
  std::vector<uint8_t> b = key.Bytes();
  return pb::bytes(reinterpret_cast<const char*>(b.data()), b.size());
}

OffloadKey KeyFromObject(pb::handle key) {
  char* data = nullptr;
  Py_ssize_t len = 0;
  if (!PyBytes_Check(key.ptr()) || PyBytes_AsStringAndSize(key.ptr(), &data, &len) != 0) {
    PyErr_Clear();
    ThrowStatus(InvalidArgument("offload keys must be bytes (block hash + 4-byte group index)"));
  }
  return KeyFromBytes({data, static_cast<size_t>(len)});
}

std::vector<OffloadKey> KeysFromList(const pb::iterable& keys) {
  std::vector<OffloadKey> out;
  for (pb::handle k : keys) out.push_back(KeyFromObject(k));
  return out;
}

HeldBuffer::HeldBuffer(const pb::handle& obj, bool writable) {
  pb::handle target = obj;
  if (!PyObject_CheckBuffer(obj.ptr()) && pb::hasattr(obj, "numpy") && pb::hasattr(obj, "data_ptr")) {
    // A torch tensor: its numpy view shares the storage (CPU tensors only;
    // torch raises a clear error for a CUDA tensor).
    owner_ = pb::hasattr(obj, "detach") ? obj.attr("detach")().attr("numpy")() : obj.attr("numpy")();
    target = owner_;
  }
  const int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(target.ptr(), &view_, flags) != 0) {
    PyErr_Clear();
    ThrowStatus(InvalidArgument(std::string("expected a C-contiguous ") + (writable ? "writable " : "") +
                                "buffer (memoryview, bytearray, numpy array or CPU torch tensor), got " +
                                std::string(pb::str(obj.get_type().attr("__name__")))));
  }
  held_ = true;
}

HeldBuffer::HeldBuffer(HeldBuffer&& other) noexcept
    : view_(other.view_), held_(std::exchange(other.held_, false)), owner_(std::move(other.owner_)) {}

HeldBuffer& HeldBuffer::operator=(HeldBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    view_ = other.view_;
    held_ = std::exchange(other.held_, false);
    owner_ = std::move(other.owner_);
  }
  return *this;
}

void HeldBuffer::Release() {
  if (held_) PyBuffer_Release(&view_);
  held_ = false;
  owner_ = pb::object();
}

}  // namespace kvtier::py
