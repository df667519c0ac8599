// Several roots of one fs tier (FORMAT.md L99-L101, vLLM PR #53133): how a
// `root_dir` list is split, which root a block lives on, and kvtier's marker
// that records a root's position. Like layout_names.h, the only place that
// spells these rules; the fs tier, the config parser and the operators' tools
// call it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/result.h"

namespace kvtier::format {

// L99: more roots than this are refused (a typo, not a deployment).
inline constexpr size_t kRootsMax = 1024;

// L99: the roots named by `root_dir`. Without sharding it is one root, used
// verbatim (L1), and a ',' in it is an error (vLLM raises ValueError). With
// sharding it is split at ',' and each part stripped of the whitespace
// Python's str.strip() removes; an empty part, or two parts equal after
// posixpath.normpath, is an error. kInvalidArgument names the rule broken.
Result<std::vector<std::string>> SplitRootDirs(std::string_view root_dir, bool sharded);

// L99: Python's posixpath.normpath (lexical: no symlink is resolved).
std::string PyNormPath(std::string_view path);

// L99: int.from_bytes(block_hash, "big") % n_roots; the group index of the
// offload key takes no part. n_roots is 1..kRootsMax.
size_t RootIndexOf(std::span<const uint8_t> block_hash, size_t n_roots);

// L100: <NS>/.kvtier/root_slot.json, the position of this root in its list.
inline constexpr std::string_view kRootMarkerName = "root_slot.json";
std::string RootMarkerTmpName(uint64_t suffix);
bool IsRootMarkerTmpName(std::string_view name);
// L100: the marker's body is at most this long.
inline constexpr size_t kRootMarkerBytesMax = 4096;

struct RootSlot {
  size_t index = 0;  // this root's position in the list, from 0
  size_t count = 0;  // how many roots the list had
  bool operator==(const RootSlot&) const = default;
};
// L100: {"path_sharding": "by_block_hash", "root_count": <n>, "root_index": <i>} and a newline.
std::string RootMarkerBody(RootSlot slot);
// L100: the slot of a marker body; nullopt unless it is a JSON object with
// integer root_index < root_count <= kRootsMax (other keys are ignored).
std::optional<RootSlot> ParseRootMarker(std::string_view body);

}  // namespace kvtier::format
