// Lowercase hex encoding and decoding of byte strings.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::internal {

std::string HexEncode(std::span<const uint8_t> bytes);
// Appends the hex of `bytes` to `out` (no allocation beyond out's growth).
void HexEncodeTo(std::span<const uint8_t> bytes, std::string* out);
// nullopt unless `hex` has even length and only [0-9a-fA-F].
std::optional<std::vector<uint8_t>> HexDecode(std::string_view hex);

}  // namespace kvtier::internal
