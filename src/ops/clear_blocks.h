// Clearing a namespace's blocks: the walk behind TierShell::ClearNamespace
// (include/kvtier/tier_shell.h), for any front end that offers a "clear".
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/result.h"

namespace kvtier::internal {

// Which block files a clear removes, by the hash hex of their name and the
// group of their shard directory (FORMAT.md L6); empty: every one.
using BlockNameFilter = std::function<bool(std::string_view hex, uint32_t group)>;
// Told of each block file (not temp file) a clear removed, by the same
// names, from the walk's thread; it must own what it uses (an abandoned
// walk outlives its caller) and must not block (KV events: it only queues).
using BlockRemovedFn = std::function<void(std::string_view hex, uint32_t group)>;

// Removes the block files and block temp files (FORMAT.md L7, L8, L55) that
// `filter` accepts below root_dir/block_dir_name, and then the shard
// directories left empty (best effort); nothing else. Returns how many files
// were removed; a missing block directory removes none. Errors: ErrnoToStatus
// naming the path that could not be opened, listed or unlinked.
Result<uint64_t> ClearBlockDir(const std::string& root_dir, const std::string& block_dir_name,
                               const BlockNameFilter& filter = {}, const BlockRemovedFn& on_removed = {});

// ClearBlockDir on each root in turn, each walk on a thread of its own with a
// deadline of io_timeout_ms per file-system call (io/io_watch.h; 0: none):
// a hung mount answers kTimedOut and its walk is abandoned. Errors of a root
// are named "root_dir[i]" where there are several.
Result<uint64_t> ClearBlockDirs(const std::vector<std::string>& roots, const std::string& block_dir_name,
                                uint32_t io_timeout_ms, const BlockNameFilter& filter = {},
                                const BlockRemovedFn& on_removed = {});

}  // namespace kvtier::internal
