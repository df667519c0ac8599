// Hex helpers shared by hashing, layout and the CLI.
#include "util/hex.h"

namespace kvtier::internal {

void HexEncodeTo(std::span<const uint8_t> bytes, std::string* out) {
  static constexpr char kDigits[] = "0123456789abcdef";
  size_t at = out->size();
  out->resize(at + 2 * bytes.size());
  for (uint8_t b : bytes) {
    (*out)[at++] = kDigits[b >> 4];
    (*out)[at++] = kDigits[b & 0xf];
  }
}

std::string HexEncode(std::span<const uint8_t> bytes) {
  std::string out;
  HexEncodeTo(bytes, &out);
  return out;
}

static int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<std::vector<uint8_t>> HexDecode(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = HexValue(hex[2 * i]);
    int lo = HexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return out;
}

}  // namespace kvtier::internal
