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
  void Bytes(std::span<const uint8_t> data) {
    Head(2, data.size());
    out_->Append(data.data(), data.size());
  }
  void Text(std::string_view utf8) {
    Head(3, utf8.size());
    out_->Append(utf8.data(), utf8.size());
  }
  void Int(int64_t value) {
    // Negative n is major type 1 with argument -1 - n (= ~n, without overflow).
    if (value >= 0) {
      Head(0, static_cast<uint64_t>(value));
    } else {
      Head(1, ~static_cast<uint64_t>(value));
    }
  }
  void Int(const BigInt& value);
  void Null() { out_->Put(0xf6); }

 private:
  // Inline: this runs once per token on the hashing hot path.
  void Head(uint8_t major, uint64_t argument) {
    uint8_t* p = out_->Reserve(9);
    const uint8_t type = static_cast<uint8_t>(major << 5);
    size_t n = 1;
    if (argument < 24) {
      p[0] = static_cast<uint8_t>(type | argument);
    } else if (argument <= 0xff) {
      p[0] = type | 24;
      p[1] = static_cast<uint8_t>(argument);
      n = 2;
    } else if (argument <= 0xffff) {
      p[0] = type | 25;
      PutBe(p + 1, argument, 2);
      n = 3;
    } else if (argument <= 0xffffffffu) {
      p[0] = type | 26;
      PutBe(p + 1, argument, 4);
      n = 5;
    } else {
      p[0] = type | 27;
      PutBe(p + 1, argument, 8);
      n = 9;
    }
    out_->Advance(n);
  }

  ByteSink* out_;
};

}  // namespace kvtier::internal
