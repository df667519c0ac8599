// Strict UTF-8 decoding.
#include "util/utf8.h"

namespace kvtier::internal {

int32_t NextCodePoint(std::string_view s, size_t* i) {
  auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b0 = byte(*i);
  const int len = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xe ? 3 : (b0 >> 3) == 0x1e ? 4 : 0;
  if (len == 0 || *i + len > s.size()) return -1;
  int32_t cp = len == 1 ? b0 : b0 & (0x7f >> len);
  for (int k = 1; k < len; ++k) {
    const uint8_t b = byte(*i + k);
    if ((b & 0xc0) != 0x80) return -1;
    cp = cp << 6 | (b & 0x3f);
  }
  static constexpr int32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return -1;
  *i += len;
  return cp;
}

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (NextCodePoint(s, &i) < 0) return false;
  }
  return true;
}

}  // namespace kvtier::internal
