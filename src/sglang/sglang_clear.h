// The walk behind SglangStore::Clear (sglang.h).
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/result.h"

namespace kvtier::internal {

// Removes the page files and page temp files (FORMAT.md L7, L8, L55; group
// 0, 64-hex names: L106) below root_dir/block_dir_name, and then the shard
// directories left empty (best effort); nothing else. Returns how many files
// were removed; a missing block directory removes none. Errors: ErrnoToStatus
// naming the path that could not be opened, listed or unlinked.
Result<uint64_t> ClearBlockDir(const std::string& root_dir, const std::string& block_dir_name);

}  // namespace kvtier::internal
