#include "events/event_hash.h"

#include <cstdlib>
#include <string>
#include <vector>

namespace kvtier::internal {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // uppercase is not what the layout writes (L6)
}

// Lowercase hex of 1 to 32 bytes (a key's size range, BlockHash), decoded;
// nullopt otherwise.
std::optional<std::vector<uint8_t>> DecodeLayoutHex(std::string_view hex) {
  if (hex.empty() || hex.size() > 64 || hex.size() % 2 != 0) return std::nullopt;
  std::vector<uint8_t> bytes(hex.size() / 2);
  for (size_t i = 0; i < bytes.size(); ++i) {
    const int hi = HexDigit(hex[2 * i]), lo = HexDigit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    bytes[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return bytes;
}

std::string LowerHex(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

}  // namespace

EventHashKind EventHashKindOf(std::string_view inference_engine) {
  return inference_engine == "sglang" ? EventHashKind::kSglangPage : EventHashKind::kVllmBlock;
}

BlockHashEncoding ResolveHashEncoding(KvEventHashEncoding encoding) {
  if (encoding == KvEventHashEncoding::kInt) return BlockHashEncoding::kInt64;
  if (encoding == KvEventHashEncoding::kBytes) return BlockHashEncoding::kBytes;
  const char* env = std::getenv("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES");
  const std::string_view v = env == nullptr ? "" : env;
  return v == "0" || v == "false" || v == "False" ? BlockHashEncoding::kBytes : BlockHashEncoding::kInt64;
}

WireHash EventHashOfBytes(EventHashKind kind, std::span<const uint8_t> hash, BlockHashEncoding encoding) {
  if (kind == EventHashKind::kSglangPage) return WireHash::PageKey(LowerHex(hash));
  return WireHash::FromBlockHash(hash, encoding);
}

std::optional<WireHash> EventHashOfName(EventHashKind kind, std::string_view stem, BlockHashEncoding encoding) {
  const std::optional<std::vector<uint8_t>> bytes = DecodeLayoutHex(stem);
  if (!bytes || (kind == EventHashKind::kSglangPage && bytes->size() != 32)) return std::nullopt;
  return EventHashOfBytes(kind, *bytes, encoding);
}

std::optional<uint32_t> EventGroupOfDirName(std::string_view dir_name) {
  if (dir_name.size() < 5 || HexDigit(dir_name[0]) < 0 || HexDigit(dir_name[1]) < 0 ||
      dir_name.substr(2, 2) != "_g") {
    return std::nullopt;
  }
  const std::string_view digits = dir_name.substr(4);
  if (digits.size() > 10 || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
  uint64_t group = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    group = group * 10 + static_cast<uint64_t>(c - '0');
  }
  if (group > UINT32_MAX) return std::nullopt;
  return static_cast<uint32_t>(group);
}

std::optional<OffloadKey> OffloadKeyOfName(std::string_view stem, std::string_view group_dir) {
  const std::optional<std::vector<uint8_t>> bytes = DecodeLayoutHex(stem);
  const std::optional<uint32_t> group = EventGroupOfDirName(group_dir);
  if (!bytes || !group) return std::nullopt;
  Result<BlockHash> hash = BlockHash::FromBytes(*bytes);
  if (!hash.ok()) return std::nullopt;
  return OffloadKey{*hash, *group};
}

}  // namespace kvtier::internal
