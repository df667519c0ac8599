// CborWriter: canonical CBOR (RFC 8949 core deterministic encoding, as
// cbor2.dumps(obj, canonical=True)) for the value types vLLM hashes.
// Tuples are arrays; integers take the shortest head; integers beyond 64 bits
// are bignums (tag 2 / tag 3 over a big-endian byte string); None is 0xf6.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "hash/byte_sink.h"
#include "kvtier/big_int.h"

namespace kvtier::internal {

class CborWriter {
 public:
  explicit CborWriter(ByteSink* out) : out_(out) {}

  void Begin() { out_->Clear(); }
  void ArrayHeader(size_t n) { Head(4, n); }
  void Bytes(std::span<const uint8_t> data);
  void Text(std::string_view utf8);
  void Int(int64_t value);
  void Int(const BigInt& value);
  void Null() { out_->Put(0xf6); }

 private:
  void Head(uint8_t major, uint64_t argument);

  ByteSink* out_;
};

}  // namespace kvtier::internal
