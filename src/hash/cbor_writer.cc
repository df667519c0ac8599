// Canonical CBOR emission.
#include "hash/cbor_writer.h"

#include <algorithm>
#include <vector>

namespace kvtier::internal {

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
