// /proc/self/mountinfo's field encoding, shared by the volume classifier
// (fs/volume_kind.cc) and the test FUSE daemon (which links no library, so
// this stays header-only).
#pragma once

#include <string>
#include <string_view>

namespace kvtier::internal {

// mountinfo writes ' ', '\t', '\n' and '\\' in paths as a backslash and three
// octal digits; anything else is copied as it is.
inline std::string UnescapeMountField(std::string_view field) {
  auto octal = [](char c) { return c >= '0' && c <= '7'; };
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size() && octal(field[i + 1]) && octal(field[i + 2]) &&
        octal(field[i + 3])) {
      out += static_cast<char>((field[i + 1] - '0') * 64 + (field[i + 2] - '0') * 8 + (field[i + 3] - '0'));
      i += 3;
    } else {
      out += field[i];
    }
  }
  return out;
}

}  // namespace kvtier::internal
