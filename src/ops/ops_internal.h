// Helpers shared by du, fsck and gc.
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/ops.h"
#include "ops/scan.h"

namespace kvtier::internal {

// Leases refreshed within this many seconds are live (FORMAT.md L74; the
// fs tier refreshes its lease every kLeaseRefreshS).
inline constexpr uint64_t kDefaultLeaseTtlS = 60;
inline constexpr uint64_t kLeaseRefreshS = 10;

struct ConfigInfo {
  bool parses = false;          // a JSON object
  bool digest_matches = false;  // its fields hash to the directory's digest (L79)
  std::string model, dtype;
  int64_t tokens_per_hash = -1, blocks_per_file = -1, tp_size = -1, groups = -1;
};

ConfigInfo ParseConfig(const NsScan& ns);
uint64_t LiveLeases(const NsScan& ns, uint64_t ttl_s, int64_t now);
// The size most blocks of the namespace have (0 without blocks).
uint64_t MostCommonSize(const NsScan& ns);

// Removes root/rel if it is still the file that was scanned (same inode):
// another instance may have replaced it since. ENOENT counts as removed.
bool RemoveIfUnchanged(const std::string& root, const ScannedFile& f);

}  // namespace kvtier::internal
