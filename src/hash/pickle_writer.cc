// Pickle protocol 5 emission, opcode for opcode as CPython's _pickle.c.
#include "hash/pickle_writer.h"

namespace kvtier::internal {
namespace {

constexpr uint8_t kProto = 0x80, kFrame = 0x95, kStop = 0x2e, kMemoize = 0x94;
constexpr uint8_t kShortBinBytes = 0x43, kBinBytes = 0x42, kBinBytes8 = 0x8e;
constexpr uint8_t kShortBinUnicode = 0x8c, kBinUnicode = 0x58, kBinUnicode8 = 0x8d;
constexpr uint8_t kBinInt1 = 0x4b, kBinInt2 = 0x4d, kBinInt = 0x4a, kLong1 = 0x8a, kLong4 = 0x8b;
constexpr uint8_t kNone = 0x4e, kEmptyTuple = 0x29, kMark = 0x28, kTuple = 0x74;
constexpr uint8_t kTuple1 = 0x85, kBinGet = 0x68, kLongBinGet = 0x6a;
constexpr size_t kFrameHeaderBytes = 9, kFrameSizeMin = 4, kFrameSizeTarget = 64 * 1024;

// CPython caches the empty string and every one-character Latin-1 string, so
// equal such strings are the same object and hit the pickle memo.
bool IsSingletonStr(std::string_view s) {
  if (s.empty()) return true;
  if (s.size() == 1) return static_cast<uint8_t>(s[0]) < 0x80;
  if (s.size() == 2) {
    auto lead = static_cast<uint8_t>(s[0]);
    return lead == 0xc2 || lead == 0xc3;  // U+0080..U+00FF
  }
  return false;
}

}  // namespace

void PickleWriter::Begin() {
  out_->Clear();
  framing_ = false;
  frame_start_ = -1;
  memo_size_ = 0;
  singleton_memo_.clear();
  const uint8_t header[2] = {kProto, 5};
  Write(header, 2);
  framing_ = true;
}

void PickleWriter::StartFrameIfNeeded() {
  if (!framing_ || frame_start_ >= 0) return;
  frame_start_ = static_cast<ptrdiff_t>(out_->size());
  std::memset(out_->Reserve(kFrameHeaderBytes), 0, kFrameHeaderBytes);
  out_->Advance(kFrameHeaderBytes);
}

void PickleWriter::CommitFrame() {
  if (!framing_ || frame_start_ < 0) return;
  size_t start = static_cast<size_t>(frame_start_);
  size_t frame_len = out_->size() - start - kFrameHeaderBytes;
  if (frame_len >= kFrameSizeMin) {
    (*out_)[start] = kFrame;
    PutLe(out_->data() + start + 1, frame_len, 8);
  } else {
    out_->Erase(start, kFrameHeaderBytes);
  }
  frame_start_ = -1;
}

void PickleWriter::Boundary() {
  if (!framing_ || frame_start_ < 0) return;
  size_t frame_len = out_->size() - static_cast<size_t>(frame_start_) - kFrameHeaderBytes;
  if (frame_len >= kFrameSizeTarget) CommitFrame();
}

void PickleWriter::Write(const void* data, size_t n) {
  StartFrameIfNeeded();
  out_->Append(data, n);
}

void PickleWriter::WriteWithPayload(const uint8_t* header, size_t header_len, const void* data,
                                    size_t n) {
  if (n < kFrameSizeTarget) {
    Write(header, header_len);
    Write(data, n);
    return;
  }
  // Large payloads are written outside any frame, as _Pickler_write_bytes does.
  CommitFrame();
  framing_ = false;
  Write(header, header_len);
  Write(data, n);
  framing_ = true;
}

void PickleWriter::Memoize() {
  WriteOp(kMemoize);
  ++memo_size_;
}

bool PickleWriter::WriteGetIfMemoized(std::string_view singleton) {
  for (const auto& [text, index] : singleton_memo_) {
    if (text != singleton) continue;
    uint8_t op[5];
    if (index < 256) {
      op[0] = kBinGet;
      op[1] = static_cast<uint8_t>(index);
      Write(op, 2);
    } else {
      op[0] = kLongBinGet;
      PutLe(op + 1, index, 4);
      Write(op, 5);
    }
    return true;
  }
  return false;
}

// The opcodes of a length-prefixed payload, by the width of its length.
struct SizedOps {
  uint8_t op1, op4, op8;
};
constexpr SizedOps kBytesOps{kShortBinBytes, kBinBytes, kBinBytes8};
constexpr SizedOps kStrOps{kShortBinUnicode, kBinUnicode, kBinUnicode8};

void PickleWriter::WriteSized(const SizedOps& ops, const void* data, size_t n) {
  uint8_t header[9];
  size_t header_len;
  if (n <= 0xff) {
    header[0] = ops.op1;
    header[1] = static_cast<uint8_t>(n);
    header_len = 2;
  } else if (n <= 0xffffffffu) {
    header[0] = ops.op4;
    PutLe(header + 1, n, 4);
    header_len = 5;
  } else {
    header[0] = ops.op8;
    PutLe(header + 1, n, 8);
    header_len = 9;
  }
  WriteWithPayload(header, header_len, data, n);
}

void PickleWriter::Bytes(std::span<const uint8_t> data) {
  Boundary();
  WriteSized(kBytesOps, data.data(), data.size());
  Memoize();
}

void PickleWriter::Str(std::string_view utf8) {
  Boundary();
  bool singleton = IsSingletonStr(utf8);
  if (singleton && WriteGetIfMemoized(utf8)) return;
  WriteSized(kStrOps, utf8.data(), utf8.size());
  if (singleton) singleton_memo_.emplace_back(std::string(utf8), memo_size_);
  Memoize();
}

void PickleWriter::Int(int64_t value) {
  Boundary();
  uint8_t op[5];
  if (value >= 0 && value <= 0xff) {
    op[0] = kBinInt1;
    op[1] = static_cast<uint8_t>(value);
    Write(op, 2);
  } else if (value >= 0 && value <= 0xffff) {
    op[0] = kBinInt2;
    PutLe(op + 1, static_cast<uint64_t>(value), 2);
    Write(op, 3);
  } else if (value >= INT32_MIN && value <= INT32_MAX) {
    op[0] = kBinInt;
    PutLe(op + 1, static_cast<uint64_t>(value), 4);
    Write(op, 5);
  } else {
    BigInt big(value);
    WriteLong(big.negative(), big.magnitude_le());
  }
}

void PickleWriter::Int(const BigInt& value) {
  if (auto small = value.ToInt64(); small && *small >= INT32_MIN && *small <= INT32_MAX) {
    Int(*small);
    return;
  }
  Boundary();
  WriteLong(value.negative(), value.magnitude_le());
}

// LONG1/LONG4: little-endian two's complement, nbits/8 + 1 bytes, minus one
// byte when a negative value's top byte is pure sign extension.
void PickleWriter::WriteLong(bool negative, std::span<const uint8_t> magnitude_le) {
  if (magnitude_le.empty()) return Int(int64_t{0});  // zero never takes this path
  size_t nbits = magnitude_le.size() * 8;
  for (uint8_t top = magnitude_le.back(); (top & 0x80) == 0; top <<= 1) --nbits;
  size_t nbytes = nbits / 8 + 1;
  std::vector<uint8_t> twos(nbytes, 0);
  std::copy(magnitude_le.begin(), magnitude_le.end(), twos.begin());
  if (negative) {
    unsigned carry = 1;
    for (uint8_t& b : twos) {
      unsigned v = static_cast<uint8_t>(~b) + carry;
      b = static_cast<uint8_t>(v);
      carry = v >> 8;
    }
    if (nbytes > 1 && twos[nbytes - 1] == 0xff && (twos[nbytes - 2] & 0x80) != 0) --nbytes;
  }
  uint8_t header[5];
  size_t header_len;
  if (nbytes < 256) {
    header[0] = kLong1;
    header[1] = static_cast<uint8_t>(nbytes);
    header_len = 2;
  } else {
    header[0] = kLong4;
    PutLe(header + 1, nbytes, 4);
    header_len = 5;
  }
  // Unlike str and bytes, CPython's save_long keeps even a huge payload
  // inside the current frame.
  Write(header, header_len);
  Write(twos.data(), nbytes);
}

void PickleWriter::None() {
  Boundary();
  WriteOp(kNone);
}

void PickleWriter::TupleBegin(size_t n) {
  Boundary();
  if (n == 0) {
    WriteOp(kEmptyTuple);
  } else if (n > 3) {
    WriteOp(kMark);
  }
}

void PickleWriter::TupleEnd(size_t n) {
  if (n == 0) return;  // the empty tuple is a singleton: no memo entry
  WriteOp(n <= 3 ? static_cast<uint8_t>(kTuple1 + n - 1) : kTuple);
  Memoize();
}

void PickleWriter::Finish() {
  WriteOp(kStop);
  CommitFrame();
}

}  // namespace kvtier::internal
