// Canonical CBOR emission.
#include "hash/cbor_writer.h"

#include <algorithm>
#include <vector>

namespace kvtier::internal {

void CborWriter::Head(uint8_t major, uint64_t argument) {
  uint8_t* p = out_->Reserve(9);
  uint8_t type = static_cast<uint8_t>(major << 5);
  size_t n;
  if (argument < 24) {
    p[0] = static_cast<uint8_t>(type | argument);
    n = 1;
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

void CborWriter::Bytes(std::span<const uint8_t> data) {
  Head(2, data.size());
  out_->Append(data.data(), data.size());
}

void CborWriter::Text(std::string_view utf8) {
  Head(3, utf8.size());
  out_->Append(utf8.data(), utf8.size());
}

void CborWriter::Int(int64_t value) {
  if (value >= 0) {
    Head(0, static_cast<uint64_t>(value));
  } else {
    Head(1, ~static_cast<uint64_t>(value));  // -1 - value, without overflow
  }
}

void CborWriter::Int(const BigInt& value) {
  std::vector<uint8_t> mag = value.magnitude_le();
  if (value.negative()) {  // CBOR encodes -1 - n, i.e. |n| - 1
    for (uint8_t& b : mag) {
      if (b-- != 0) break;
    }
    while (!mag.empty() && mag.back() == 0) mag.pop_back();
  }
  if (mag.size() <= 8) {
    uint64_t arg = 0;
    for (size_t i = mag.size(); i-- > 0;) arg = arg << 8 | mag[i];
    Head(value.negative() ? 1 : 0, arg);
    return;
  }
  out_->Put(value.negative() ? 0xc3 : 0xc2);  // tag 3 / tag 2: bignum
  std::reverse(mag.begin(), mag.end());       // big-endian payload
  Bytes(mag);
}

}  // namespace kvtier::internal
