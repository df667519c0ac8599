// Builders and exact parsers of the layout's names (layout_names.h).
#include "format/layout_names.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "hash/digest.h"
#include "util/hex.h"
#include "util/utf8.h"

namespace kvtier::format {
namespace {

bool IsDecimalNoSign(std::string_view s, size_t digits_max) {
  if (s.empty() || s.size() > digits_max) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// Strips `prefix` and `suffix` from `name`; nullopt unless both are there.
std::optional<std::string_view> Between(std::string_view name, std::string_view prefix, std::string_view suffix) {
  if (name.size() < prefix.size() + suffix.size() || !name.starts_with(prefix) || !name.ends_with(suffix)) {
    return std::nullopt;
  }
  return name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
}

}  // namespace

bool IsLowerHex(std::string_view s, size_t len) {
  if (s.size() != len) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool IsTmpDecimal(std::string_view s) {
  if (!IsDecimalNoSign(s, 19) || (s.size() > 1 && s[0] == '0')) return false;
  return s.size() < 19 || s <= "9223372036854775807";  // below 2^63
}

bool IsUtf8Name(std::string_view s) { return internal::IsValidUtf8(s); }

std::string SafeModelName(std::string_view model) {
  std::string out(model);
  std::replace(out.begin(), out.end(), '/', '_');
  return out;
}

std::string SglangPageName(std::string_view key) {
  if (IsLowerHex(key, kBlockHexCharsLong)) return std::string(key);
  uint8_t sha[32];
  internal::Sha256({reinterpret_cast<const uint8_t*>(key.data()), key.size()}, sha);
  return internal::HexEncode(sha);
}

std::string NamespaceDigestOf(std::string_view canonical_text) {
  uint8_t sha[32];
  internal::Sha256({reinterpret_cast<const uint8_t*>(canonical_text.data()), canonical_text.size()}, sha);
  return internal::HexEncode(sha).substr(0, kDigestHexChars);
}

std::optional<std::string_view> NamespaceDigest(std::string_view name) {
  // A non-empty safe model name (L3: no '/'), '_', then the digest.
  if (name.size() < kDigestHexChars + 2 || name[name.size() - kDigestHexChars - 1] != '_') return std::nullopt;
  const std::string_view digest = name.substr(name.size() - kDigestHexChars);
  if (!IsLowerHex(digest, kDigestHexChars) || !IsUtf8Name(name)) return std::nullopt;
  return digest;
}

std::optional<BlockDir> ParseBlockDirName(std::string_view name) {
  const size_t r = name.rfind("_r");
  if (r == std::string_view::npos) return std::nullopt;
  const std::string_view rank = name.substr(r + 2);
  // L5: decimal without padding.
  if (!IsDecimalNoSign(rank, 9) || (rank.size() > 1 && rank[0] == '0')) return std::nullopt;
  const std::string_view ns = name.substr(0, r);
  if (!NamespaceDigest(ns)) return std::nullopt;
  return BlockDir{ns, std::stoll(std::string(rank))};
}

std::string BlockDirName(std::string_view ns, int64_t rank) { return std::string(ns) + "_r" + std::to_string(rank); }

bool IsShard1Name(std::string_view name) { return IsLowerHex(name, 3); }

std::optional<Shard2> ParseShard2Name(std::string_view name) {
  if (name.size() < 5 || name.substr(2, 2) != "_g" || !IsLowerHex(name.substr(0, 2), 2)) return std::nullopt;
  const std::string_view group = name.substr(4);
  // L6: decimal without padding.
  if (!IsDecimalNoSign(group, 9) || (group.size() > 1 && group[0] == '0')) return std::nullopt;
  return Shard2{name.substr(0, 2), std::stoll(std::string(group))};
}

std::optional<std::string_view> BlockFileHex(std::string_view name) {
  auto hex = Between(name, "", ".bin");
  if (!hex || !(IsLowerHex(*hex, kBlockHexCharsLong) || IsLowerHex(*hex, kBlockHexCharsShort))) return std::nullopt;
  return hex;
}

namespace {

// h[from:to] as Python slices it (vLLM's file_mapper.py): clamped to the
// string, so the hex of a 1- or 2-byte hash (keys accept 1..32 bytes, L8:
// "the path formula works for any hash length") gets vLLM's own path.
std::string_view HexSlice(std::string_view hex, size_t from, size_t to) {
  from = std::min(from, hex.size());
  return hex.substr(from, std::min(to, hex.size()) - from);
}

}  // namespace

bool BlockInShard(std::string_view hex, std::string_view shard1, std::string_view shard2_hh) {
  return HexSlice(hex, 0, 3) == shard1 && HexSlice(hex, 3, 5) == shard2_hh;
}

std::string Shard1Name(std::string_view hex) { return std::string(HexSlice(hex, 0, 3)); }

std::string Shard2Name(std::string_view hex, int64_t group) {
  return std::string(HexSlice(hex, 3, 5)) + "_g" + std::to_string(group);
}

std::string BlockFileName(std::string_view hex) { return std::string(hex) + ".bin"; }

std::string BlockRelPath(std::string_view hex, int64_t group) {
  return Shard1Name(hex) + "/" + Shard2Name(hex, group) + "/" + BlockFileName(hex);
}

std::optional<std::string_view> BlockTmpHex(std::string_view name) {
  const size_t at = name.find(".bin_");
  if (at == std::string_view::npos) return std::nullopt;
  auto decimal = Between(name.substr(at), ".bin_", ".tmp");
  if (!decimal || !IsTmpDecimal(*decimal)) return std::nullopt;
  return BlockFileHex(name.substr(0, at + 4));
}

std::string BlockTmpName(std::string_view block_name, uint64_t suffix) {
  return std::string(block_name) + "_" + std::to_string(suffix) + ".tmp";
}

bool IsConfigTmpName(std::string_view name) {
  auto decimal = Between(name, "config.json_", ".tmp");
  return decimal && IsTmpDecimal(*decimal);
}

bool IsProbeName(std::string_view name) {
  for (std::string_view prefix : {".o_direct_probe_", ".xattr_probe_"}) {
    auto decimal = Between(name, prefix, ".tmp");
    if (decimal && IsTmpDecimal(*decimal)) return true;
  }
  return false;
}

std::string ConfigTmpName(uint64_t suffix) { return "config.json_" + std::to_string(suffix) + ".tmp"; }

std::string ODirectProbeName(uint64_t suffix) { return ".o_direct_probe_" + std::to_string(suffix) + ".tmp"; }

std::string XattrProbeName(uint64_t suffix) { return ".xattr_probe_" + std::to_string(suffix) + ".tmp"; }

bool IsLeaseName(std::string_view name) {
  auto stem = Between(name, "", ".lease");
  if (!stem || !IsUtf8Name(name)) return false;
  const size_t n_at = stem->rfind('-');
  if (n_at == std::string_view::npos || !IsDecimalNoSign(stem->substr(n_at + 1), 19)) return false;
  const std::string_view host_pid = stem->substr(0, n_at);
  const size_t pid_at = host_pid.rfind('-');
  return pid_at != std::string_view::npos && pid_at > 0 && IsDecimalNoSign(host_pid.substr(pid_at + 1), 10);
}

std::string LeaseTmpName(std::string_view lease_name) { return std::string(lease_name) + ".tmp"; }

bool IsLeaseTmpName(std::string_view name) {
  auto lease = Between(name, "", ".tmp");
  return lease && IsLeaseName(*lease);
}

std::string CollectorToken(std::string_view host, int64_t pid, uint64_t random) {
  std::string out;
  for (const char c : host) out += std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ? c : '_';
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(random));
  return out + "-" + std::to_string(pid) + "-" + hex;
}

std::string CollectorLeaseTmpName(std::string_view token) {
  return std::string(kCollectorLeaseName) + "." + std::string(token) + ".tmp";
}

std::string CollectorLeaseAsideName(std::string_view token) {
  return std::string(kCollectorLeaseName) + "." + std::string(token) + ".old";
}

std::string DoctorScratchName(std::string_view token) { return "doctor." + std::string(token); }

std::string CollectorLeaseJunkName(std::string_view token, uint64_t n) {
  return std::string(kCollectorLeaseName) + "." + std::string(token) + "." + std::to_string(n) + ".bad";
}

std::string LeaseName(std::string_view host, int64_t pid, uint64_t n) {
  return std::string(host) + "-" + std::to_string(pid) + "-" + std::to_string(n) + ".lease";
}

}  // namespace kvtier::format
