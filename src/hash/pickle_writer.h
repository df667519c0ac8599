// PickleWriter: emits the bytes CPython's C pickler (protocol 5) produces for
// the value types vLLM hashes: bytes, str, int, None and tuples of them.
//
// Framing: after PROTO, opcodes go into FRAME-prefixed frames. Before each
// object is saved, a frame already holding >= 64 KiB is closed; a frame of
// fewer than 4 bytes loses its header. Payloads of >= 64 KiB bypass framing.
// Memo: bytes, str and non-empty tuples are memoized (MEMOIZE). The pickler
// emits BINGET when the *same object* is saved twice; among vLLM's inputs that
// happens only for CPython's cached singleton strings (empty and one Latin-1
// character), which this writer tracks by content. layout-spec/FORMAT.md
// L38-L40 (stream, opcodes, memo) and L87 (identity).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hash/byte_sink.h"
#include "kvtier/big_int.h"

namespace kvtier::internal {

struct SizedOps;

class PickleWriter {
 public:
  explicit PickleWriter(ByteSink* out) : out_(out) {}

  void Begin();  // clears the sink, writes PROTO 5 and turns framing on
  void Bytes(std::span<const uint8_t> data);
  void Str(std::string_view utf8);
  void Int(int64_t value);
  void Int(const BigInt& value);
  void None();
  // A tuple of n elements: TupleBegin(n), the n elements, TupleEnd(n).
  void TupleBegin(size_t n);
  void TupleEnd(size_t n);
  void Finish();  // STOP, then closes the last frame

 private:
  void Boundary();
  void StartFrameIfNeeded();
  void CommitFrame();
  void Write(const void* data, size_t n);
  void WriteOp(uint8_t op) { Write(&op, 1); }
  void WriteWithPayload(const uint8_t* header, size_t header_len, const void* data, size_t n);
  void WriteSized(const SizedOps& ops, const void* data, size_t n);
  void WriteLong(bool negative, std::span<const uint8_t> magnitude_le);
  void Memoize();
  bool WriteGetIfMemoized(std::string_view singleton);

  ByteSink* out_;
  bool framing_ = false;
  ptrdiff_t frame_start_ = -1;
  uint32_t memo_size_ = 0;
  std::vector<std::pair<std::string, uint32_t>> singleton_memo_;
};

}  // namespace kvtier::internal
