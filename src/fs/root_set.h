// The start-up checks of a tier over several roots (FORMAT.md L99, L100).
// vLLM places a block on root hash % count and records nothing about the
// list, so a reordered list, a changed count or a missing drive would make
// every lookup go to the wrong root (or fill the filesystem under an
// unmounted mount point). Before anything is created, each root is
// examined: kvtier's marker (<NS>/.kvtier/root_slot.json) must give its
// position and the count, a sample of its block names must lie where the
// formula puts them (this also covers trees that only vLLM wrote), and no
// root may be absent or empty while another root holds the namespace.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "format/root_list.h"
#include "kvtier/layout.h"
#include "kvtier/result.h"

namespace kvtier::internal {

// Block names sampled per root at open.
inline constexpr size_t kRootSampleBlocks = 32;

struct RootState {
  bool exists = false;  // the root directory exists
  bool empty = false;   // ... and has no entry at all
  bool has_ns = false;  // <root>/<NS> exists
  std::optional<format::RootSlot> marker;
  std::vector<std::string> sample;  // hex names of blocks found in <NS>_r<rank>
};

// Reads what the checks need from each root, through directory fds that
// follow no symlink below the root. Errors other than "absent" are returned.
Result<std::vector<RootState>> ExamineRoots(const std::vector<std::string>& roots, const Namespace& ns);

// kInvalidArgument (reordered roots, a changed count) or kNotFound (a missing
// or empty root while others hold the namespace), naming the root and its
// position; Ok for a consistent set, and for a fresh one.
Status CheckRootSet(const std::vector<std::string>& roots, const Namespace& ns, const std::vector<RootState>& states);

// Writes root i's marker (L100) where it has none: through a temp file that
// is fdatasync'd and renamed, as config.json (L28).
Status WriteRootMarker(const std::string& root, const Namespace& ns, format::RootSlot slot, uint64_t suffix);

}  // namespace kvtier::internal
