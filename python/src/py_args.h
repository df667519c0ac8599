// Arguments of the calls that take row buffers or slot arrays, bound and
// converted here rather than by pybind11:
//
//  * pybind11's TypeError for any mismatch quotes repr() of every argument:
//    for a 128 MiB bytearray, 537M characters, 16 s and 1.7 GB. BindArgs and
//    the converters name the argument and its type, never its value.
//  * array_t<int64_t, forcecast> turns 1.99 into 1, "2" into 2, a scalar
//    into one slot and a 2-D list into a flat one. SlotsArg accepts only
//    1-D integer sequences and arrays.
//
// Wrong types and values are kvtier.KvtierError(invalid_argument) naming the
// argument; a wrong number or name of arguments is a TypeError, as Python's.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "py_common.h"

namespace kvtier::py {

// `args`/`kwargs` of `fn` bound to `names` (positional order, or by name);
// the first `n_required` must be given. Absent optional ones are null.
std::vector<pb::object> BindArgs(std::string_view fn, std::initializer_list<const char*> names, size_t n_required,
                                 const pb::args& args, const pb::kwargs& kwargs);

// A Python int (or an integer such as numpy.int64), not a bool or a float.
int64_t IntArg(std::string_view name, const pb::handle& obj);
// A 1-D sequence of ints, or a 1-D integer buffer (numpy array, array.array)
// or CPU torch tensor; never bytes, floats, strings, scalars or 2-D input.
std::vector<int64_t> SlotsArg(std::string_view name, const pb::handle& obj);
// An iterable of offload keys (bytes), not a bytes object itself.
std::vector<OffloadKey> KeysArg(std::string_view name, const pb::handle& obj);
// A block hash: bytes of 1-32 bytes (an offload key without its group index).
BlockHash BlockHashArg(const std::string& name, const pb::handle& obj);
// A list or tuple of lists (or tuples) of block hashes, named
// "<name>[i][j]" in errors.
std::vector<std::vector<BlockHash>> BlockHashListsArg(std::string_view name, const pb::handle& obj);
// A list or tuple (a sequence that is not itself a buffer or a string).
pb::sequence SequenceArg(std::string_view name, const pb::handle& obj);
// A str, as UTF-8 bytes.
std::string StrArg(std::string_view name, const pb::handle& obj);
// A list or tuple of str, named "<name>[i]" in errors.
std::vector<std::string> StrsArg(std::string_view name, const pb::handle& obj);

// Raw memory given as (address, nbytes) pairs, for front ends whose engine
// hands out pointers rather than buffer objects (SGLang's host pool). The
// address is taken as given: the caller vouches for it. Both are
// non-negative integers, the address non-null.
std::span<uint8_t> PieceArg(const std::string& name, const pb::handle& obj);
// A list of pages, each a list of (address, nbytes) pieces.
std::vector<std::vector<std::span<uint8_t>>> PagesOfPiecesArg(std::string_view name, const pb::handle& obj);

// The type name of `obj`, for messages.
std::string TypeName(const pb::handle& obj);

// An integer above 0 (IntArg's rules).
uint64_t PositiveIntArg(std::string_view name, const pb::handle& obj);
// An instance of the bound class T, whose Python name is `type` ("kvtier.Namespace").
template <class T>
const T& InstanceArg(std::string_view name, const char* type, const pb::handle& obj) {
  if (!pb::isinstance<T>(obj)) {
    ThrowStatus(InvalidArgument(std::string(name) + ": expected a " + type + ", got " + TypeName(obj)));
  }
  return obj.cast<const T&>();
}

}  // namespace kvtier::py
