// BigInt: sign and little-endian magnitude, parsed from decimal text.
#include "kvtier/big_int.h"

#include <algorithm>

namespace kvtier {

BigInt::BigInt(int64_t value) : negative_(value < 0) {
  // Negate in unsigned arithmetic so INT64_MIN has a magnitude too.
  uint64_t mag = negative_ ? ~static_cast<uint64_t>(value) + 1 : static_cast<uint64_t>(value);
  while (mag != 0) {
    magnitude_.push_back(static_cast<uint8_t>(mag & 0xff));
    mag >>= 8;
  }
}

// magnitude = magnitude * 10 + digit, little-endian base 256.
static void MulAdd10(std::vector<uint8_t>* mag, uint32_t digit) {
  uint32_t carry = digit;
  for (uint8_t& byte : *mag) {
    uint32_t v = static_cast<uint32_t>(byte) * 10 + carry;
    byte = static_cast<uint8_t>(v & 0xff);
    carry = v >> 8;
  }
  while (carry != 0) {
    mag->push_back(static_cast<uint8_t>(carry & 0xff));
    carry >>= 8;
  }
}

Result<BigInt> BigInt::FromDecimal(std::string_view text) {
  BigInt out;
  std::string_view digits = text;
  if (!digits.empty() && digits.front() == '-') {
    out.negative_ = true;
    digits.remove_prefix(1);
  }
  if (digits.empty()) return InvalidArgument("not an integer: '" + std::string(text) + "'");
  for (char c : digits) {
    if (c < '0' || c > '9') return InvalidArgument("not an integer: '" + std::string(text) + "'");
    MulAdd10(&out.magnitude_, static_cast<uint32_t>(c - '0'));
  }
  if (out.magnitude_.empty()) out.negative_ = false;  // "-0" is zero
  return out;
}

std::optional<int64_t> BigInt::ToInt64() const {
  if (magnitude_.size() > 8) return std::nullopt;
  uint64_t mag = 0;
  for (size_t i = magnitude_.size(); i-- > 0;) mag = mag << 8 | magnitude_[i];
  if (!negative_) {
    if (mag > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(mag);
  }
  if (mag > static_cast<uint64_t>(INT64_MAX) + 1) return std::nullopt;
  return static_cast<int64_t>(~mag + 1);
}

std::string BigInt::ToDecimal() const {
  if (magnitude_.empty()) return "0";
  std::vector<uint8_t> mag = magnitude_;
  std::string digits;
  while (!mag.empty()) {  // repeated division by 10, most significant byte first
    uint32_t rem = 0;
    for (size_t i = mag.size(); i-- > 0;) {
      uint32_t cur = rem << 8 | mag[i];
      mag[i] = static_cast<uint8_t>(cur / 10);
      rem = cur % 10;
    }
    digits.push_back(static_cast<char>('0' + rem));
    while (!mag.empty() && mag.back() == 0) mag.pop_back();
  }
  if (negative_) digits.push_back('-');
  std::reverse(digits.begin(), digits.end());
  return digits;
}

}  // namespace kvtier
