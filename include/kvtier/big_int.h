// BigInt: an integer of any size, as a Python int is.
//
// Token ids are int64 in practice, and the hashing fast path takes int64. vLLM
// hashes Python ints, which have no size limit, so byte compatibility for
// every input needs this slow-path type too (pickle LONG1/LONG4, CBOR bignum
// tags). Values are immutable once built.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/export.h"
#include "kvtier/result.h"

namespace kvtier {

class KVTIER_API BigInt {
 public:
  BigInt() = default;  // zero
  explicit BigInt(int64_t value);

  // Parses an optional '-' followed by decimal digits ("-123", "0").
  // kInvalidArgument for anything else (empty, '+', spaces, other chars).
  static Result<BigInt> FromDecimal(std::string_view text);

  bool negative() const { return negative_; }
  bool is_zero() const { return magnitude_.empty(); }
  // |value| as little-endian bytes without leading (high) zero bytes.
  const std::vector<uint8_t>& magnitude_le() const { return magnitude_; }
  // The value when it fits in int64.
  std::optional<int64_t> ToInt64() const;
  std::string ToDecimal() const;

  friend bool operator==(const BigInt& a, const BigInt& b) = default;

 private:
  bool negative_ = false;
  std::vector<uint8_t> magnitude_;
};

}  // namespace kvtier
