// Root lists, placement and the root marker (root_list.h, FORMAT.md L99-L100).
#include "format/root_list.h"

#include <nlohmann/json.hpp>

#include <set>

#include "format/layout_names.h"
#include "util/json_text.h"

namespace kvtier::format {
namespace {

// The code points Python's str.isspace() accepts (what str.strip() removes).
bool IsPyWhitespace(uint32_t cp) {
  if ((cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0) return true;
  if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029) return true;
  return cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

// The code point of the UTF-8 sequence s[at, at+len); nullopt when it is not one.
std::optional<uint32_t> DecodeAt(std::string_view s, size_t at, size_t len) {
  const auto b = [&](size_t i) { return static_cast<uint8_t>(s[at + i]); };
  if (len == 1) return b(0) < 0x80 ? std::optional<uint32_t>(b(0)) : std::nullopt;
  const uint8_t lead_bits = len == 2 ? 0x1f : len == 3 ? 0x0f : 0x07;
  uint32_t cp = b(0) & lead_bits;
  for (size_t i = 1; i < len; ++i) {
    if ((b(i) & 0xc0) != 0x80) return std::nullopt;
    cp = cp << 6 | (b(i) & 0x3f);
  }
  const uint32_t shortest = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;  // no overlong forms
  return cp >= shortest ? std::optional<uint32_t>(cp) : std::nullopt;
}

size_t SequenceLength(uint8_t lead) { return lead < 0x80 ? 1 : lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2; }

// str.strip(): whitespace code points off both ends (bytes that are not
// UTF-8 are never whitespace, as they could not be in a Python str).
std::string_view PyStrip(std::string_view s) {
  while (!s.empty()) {
    const size_t len = SequenceLength(static_cast<uint8_t>(s[0]));
    const auto cp = len <= s.size() ? DecodeAt(s, 0, len) : std::nullopt;
    if (!cp || !IsPyWhitespace(*cp)) break;
    s.remove_prefix(len);
  }
  while (!s.empty()) {
    size_t start = s.size() - 1;
    while (start > 0 && s.size() - start < 4 && (static_cast<uint8_t>(s[start]) & 0xc0) == 0x80) --start;
    const size_t len = s.size() - start;
    const auto cp = SequenceLength(static_cast<uint8_t>(s[start])) == len ? DecodeAt(s, start, len) : std::nullopt;
    if (!cp || !IsPyWhitespace(*cp)) break;
    s.remove_suffix(len);
  }
  return s;
}

Status ListError(const std::string& why) { return InvalidArgument("root_dir: " + why); }

}  // namespace

std::string PyNormPath(std::string_view path) {
  if (path.empty()) return ".";
  // POSIX keeps exactly two leading slashes; one, or three and more, become one.
  size_t slashes = path.starts_with('/') ? 1 : 0;
  if (path.starts_with("//") && !path.starts_with("///")) slashes = 2;
  std::vector<std::string_view> parts;
  for (size_t at = 0; at <= path.size();) {
    size_t end = path.find('/', at);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view part = path.substr(at, end - at);
    at = end + 1;
    if (part.empty() || part == ".") continue;
    if (part != ".." || (slashes == 0 && parts.empty()) || (!parts.empty() && parts.back() == "..")) {
      parts.push_back(part);
    } else if (!parts.empty()) {
      parts.pop_back();
    }
  }
  std::string out(slashes, '/');
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += '/';
    out += parts[i];
  }
  return out.empty() ? "." : out;
}

// L99 (vLLM PR #53133: FileSystemTierManager and ShardedFileMapper).
Result<std::vector<std::string>> SplitRootDirs(std::string_view root_dir, bool sharded) {
  if (!sharded) {
    if (root_dir.find(',') != std::string_view::npos) {
      return ListError("several roots (a ',' in root_dir) require path_sharding \"by_block_hash\"");
    }
    return std::vector<std::string>{std::string(root_dir)};
  }
  std::vector<std::string> roots;
  std::set<std::string> normal;
  for (size_t at = 0; at <= root_dir.size();) {
    size_t end = root_dir.find(',', at);
    if (end == std::string_view::npos) end = root_dir.size();
    const std::string_view root = PyStrip(root_dir.substr(at, end - at));
    at = end + 1;
    if (root.empty()) return ListError("root " + std::to_string(roots.size()) + " of the list is empty");
    if (!normal.insert(PyNormPath(root)).second) {
      return ListError("\"" + std::string(root) + "\" (root " + std::to_string(roots.size()) +
                       ") is the same directory as an earlier root; the roots must be distinct");
    }
    roots.emplace_back(root);
    if (roots.size() > kRootsMax) return ListError("more than " + std::to_string(kRootsMax) + " roots");
  }
  return roots;
}

// L99: the remainder of the big-endian number, one byte at a time (r < n <=
// kRootsMax, so r * 256 + 255 fits easily).
size_t RootIndexOf(std::span<const uint8_t> block_hash, size_t n_roots) {
  uint64_t r = 0;
  for (uint8_t b : block_hash) r = (r * 256 + b) % n_roots;
  return static_cast<size_t>(r);
}

std::string RootMarkerTmpName(uint64_t suffix) {
  return std::string(kRootMarkerName) + "_" + std::to_string(suffix) + ".tmp";
}

bool IsRootMarkerTmpName(std::string_view name) {
  const std::string prefix = std::string(kRootMarkerName) + "_";
  if (!name.starts_with(prefix) || !name.ends_with(".tmp")) return false;
  return IsTmpDecimal(name.substr(prefix.size(), name.size() - prefix.size() - 4));
}

std::string RootMarkerBody(RootSlot slot) {
  return "{\"path_sharding\": \"by_block_hash\", \"root_count\": " + std::to_string(slot.count) +
         ", \"root_index\": " + std::to_string(slot.index) + "}\n";
}

std::optional<RootSlot> ParseRootMarker(std::string_view body) {
  if (body.size() > kRootMarkerBytesMax || !internal::CheckJsonDepth(body, 2, "root marker").ok()) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  const auto index = j.find("root_index"), count = j.find("root_count");
  if (index == j.end() || count == j.end() || !index->is_number_unsigned() || !count->is_number_unsigned()) {
    return std::nullopt;
  }
  const uint64_t i = index->get<uint64_t>(), n = count->get<uint64_t>();
  if (n == 0 || n > kRootsMax || i >= n) return std::nullopt;
  return RootSlot{static_cast<size_t>(i), static_cast<size_t>(n)};
}

}  // namespace kvtier::format
