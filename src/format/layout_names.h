// The one home of kvtier's on-disk names (layout-spec/FORMAT.md): every
// function that builds or parses a name of the layout is here and cites its
// rule. Code elsewhere calls these and spells no part of the format itself.
// Several roots of one tier (the root list, placement and the root marker,
// FORMAT.md L99-L101) are in the sibling root_list.h.
//
// Parsers are exact: a name is a layout name only if it matches its rule byte
// for byte, so the operators' tools (which delete layout files and nothing
// else) can never be made to delete a look-alike.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvtier::format {

// L4: the namespace digest is 12 lowercase hex characters.
inline constexpr size_t kDigestHexChars = 12;
// L7: block names are hex(hash) of 64 (sha256 family) or 32 (xxhash family).
inline constexpr size_t kBlockHexCharsLong = 64, kBlockHexCharsShort = 32;
// L60: the CRC32C attribute, 4 raw big-endian bytes.
inline constexpr const char* kCrcXattr = "user.vllm.kv_crc32c";
inline constexpr size_t kCrcXattrBytes = 4;
// L24: the namespace's configuration file.
inline constexpr std::string_view kConfigName = "config.json";
// L73, L74: kvtier's metadata directory and its lease directory.
inline constexpr std::string_view kMetaDirName = ".kvtier";
inline constexpr std::string_view kLeaseDirName = "leases";
inline constexpr std::string_view kQuarantineDirName = "quarantine";
// L74: a lease's mtime is refreshed every kLeaseRefreshS; one refreshed within
// kLeaseTtlS is live.
inline constexpr uint64_t kLeaseRefreshS = 10;
inline constexpr uint64_t kLeaseTtlS = 60;

bool IsLowerHex(std::string_view s, size_t len);
// L55: "<decimal>" of a temp name: no sign, no leading zeros, below 2^63.
bool IsTmpDecimal(std::string_view s);
// The UTF-8 check of L89: names that are not valid UTF-8 are never layout names.
bool IsUtf8Name(std::string_view s);

// L3: the model name with every '/' replaced by '_'.
std::string SafeModelName(std::string_view model);
// L22: digest12 of the canonical text of the fields (L20).
std::string NamespaceDigestOf(std::string_view canonical_text);
// L2, L4: "<safe_model>_<digest12>" -> the digest.
std::optional<std::string_view> NamespaceDigest(std::string_view name);
// L2, L5: "<NS>_r<rank>" -> NS and the rank.
struct BlockDir {
  std::string_view ns;
  int64_t rank = 0;
};
std::optional<BlockDir> ParseBlockDirName(std::string_view name);
std::string BlockDirName(std::string_view ns, int64_t rank);

// L6: "<h[0:3]>" directories and "<h[3:5]>_g<group>" directories.
bool IsShard1Name(std::string_view name);
struct Shard2 {
  std::string_view hh;
  int64_t group = 0;
};
std::optional<Shard2> ParseShard2Name(std::string_view name);

// L7: "<h>.bin" -> h.
std::optional<std::string_view> BlockFileHex(std::string_view name);
// L6: the file named h belongs in "<h[0:3]>/<h[3:5]>_g<g>".
bool BlockInShard(std::string_view hex, std::string_view shard1, std::string_view shard2_hh);
// L8 without the root: "<h[0:3]>/<h[3:5]>_g<g>/<h>.bin" under the block directory.
std::string BlockRelPath(std::string_view hex, int64_t group);

// L55: "<h>.bin_<decimal>.tmp" (the temp name of a block of that shard).
std::optional<std::string_view> BlockTmpHex(std::string_view name);
std::string BlockTmpName(std::string_view block_name, uint64_t suffix);
// L28: "config.json_<decimal>.tmp".
bool IsConfigTmpName(std::string_view name);
std::string ConfigTmpName(uint64_t suffix);
// L63: ".o_direct_probe_<decimal>.tmp"; L102 (vLLM PR #57912): ".xattr_probe_<decimal>.tmp".
bool IsProbeName(std::string_view name);
std::string ODirectProbeName(uint64_t suffix);
std::string XattrProbeName(uint64_t suffix);
// L74: "<host>-<pid>-<n>.lease" and its temp "<lease>.tmp".
bool IsLeaseName(std::string_view name);
bool IsLeaseTmpName(std::string_view name);
std::string LeaseName(std::string_view host, int64_t pid, uint64_t n);
std::string LeaseTmpName(std::string_view lease_name);

// L120: the volume's collector lease (`gc --watch`), <root>/.kvtier/gc.lease
// (the directory is kMetaDirName, at the root itself).
inline constexpr std::string_view kCollectorLeaseName = "gc.lease";
// L121: a collector's token "<host>-<pid>-<16 hex>" (a host name's bytes
// outside [A-Za-z0-9.-] become '_'), and the names it writes beside the
// lease: "gc.lease.<token>.tmp" (its new lease before the link) and
// "gc.lease.<token>.old" (a stale lease renamed aside before it is judged).
std::string CollectorToken(std::string_view host, int64_t pid, uint64_t random);
std::string CollectorLeaseTmpName(std::string_view token);
std::string CollectorLeaseAsideName(std::string_view token);
// L150: `kvtier doctor`'s scratch directory "doctor.<token>" under the
// volume's kMetaDirName (token as L121's).
std::string DoctorScratchName(std::string_view token);

// L153: where a directory found at gc.lease that cannot be removed (it holds
// entries) is moved, out of the way of the token's aside name.
std::string CollectorLeaseJunkName(std::string_view token, uint64_t n);
// L8 split for directory-fd walks: "<h[0:3]>" and "<h[3:5]>_g<g>".
std::string Shard1Name(std::string_view hex);
std::string Shard2Name(std::string_view hex, int64_t group);
std::string BlockFileName(std::string_view hex);

// L106: an SGLang page key's file stem: the key when it is 64 lowercase hex
// characters, else the lowercase hex SHA-256 of its bytes.
std::string SglangPageName(std::string_view key);
// L103: the value of "inference_engine" and "format" in an SGLang namespace.
inline constexpr std::string_view kSglangEngine = "sglang";
inline constexpr std::string_view kSglangFormat = "sglang-page/1";

}  // namespace kvtier::format
