// The block directory walk (namespace_scan.h): directory fds all the way
// down (util/dir_fd.h), so a symlinked shard directory is skipped, not
// followed.
#include "fs/namespace_scan.h"

#include <sys/stat.h>

#include <vector>

#include "format/layout_names.h"
#include "util/dir_fd.h"

namespace kvtier::internal {
namespace {

bool HexToKey(std::string_view hex, int64_t group, CapacityKey* out) {
  Result<BlockHash> hash = BlockHash::FromHex(hex);
  if (!hash.ok() || group < 0 || group > UINT32_MAX) return false;
  *out = CapacityKey::Of(OffloadKey{*hash, static_cast<uint32_t>(group)});
  return true;
}

uint64_t MtimeNs(const struct stat& st) {
  return static_cast<uint64_t>(st.st_mtim.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(st.st_mtim.tv_nsec);
}

// The blocks of one <hhh>/<hh>_g<g> directory (L6-L7: a file belongs there only if its hash says so).
void ScanShard2(int shard1_fd, const std::string& shard1, const std::string& name, ScanTotals* totals,
                const std::function<void(std::span<const ScannedBlock>)>& found) {
  const std::optional<format::Shard2> shard2 = format::ParseShard2Name(name);
  UniqueFd fd;
  std::vector<DirEntry> entries;
  if (!shard2) return;
  int err = OpenDirAt(shard1_fd, name, &fd);
  if (err == 0) err = ListDir(fd.get(), &entries);
  if (err != 0) {
    if (totals->err == 0 && err != ENOENT) totals->err = err;
    return;
  }
  std::vector<ScannedBlock> blocks;
  for (const DirEntry& e : entries) {
    const std::optional<std::string_view> hex = format::BlockFileHex(e.name);
    ScannedBlock block;
    if (!hex || e.stat_errno != 0 || !S_ISREG(e.st.st_mode) || !format::BlockInShard(*hex, shard1, shard2->hh) ||
        !HexToKey(*hex, shard2->group, &block.key)) {
      continue;
    }
    block.bytes = static_cast<uint64_t>(e.st.st_size);
    block.mtime_ns = MtimeNs(e.st);
    totals->bytes += block.bytes;
    ++totals->blocks;
    blocks.push_back(block);
  }
  if (!blocks.empty()) found(blocks);
}

}  // namespace

ScanTotals ScanBlockDir(int root_fd, const std::string& block_dir, const std::function<bool()>& stop,
                        const std::function<void(std::span<const ScannedBlock>)>& found) {
  ScanTotals totals;
  UniqueFd dir_fd;
  std::vector<DirEntry> shard1s;
  totals.err = OpenDirPath(root_fd, block_dir, &dir_fd);
  if (totals.err == 0) totals.err = ListDir(dir_fd.get(), &shard1s);
  if (totals.err != 0) return totals;
  for (const DirEntry& s1 : shard1s) {
    if (stop()) break;
    if (!S_ISDIR(s1.st.st_mode) || !format::IsShard1Name(s1.name)) continue;
    UniqueFd s1_fd;
    std::vector<DirEntry> shard2s;
    int err = OpenDirAt(dir_fd.get(), s1.name, &s1_fd);
    if (err == 0) err = ListDir(s1_fd.get(), &shard2s);
    if (err != 0) {
      if (totals.err == 0 && err != ENOENT) totals.err = err;
      continue;
    }
    for (const DirEntry& s2 : shard2s) {
      if (stop()) break;
      if (S_ISDIR(s2.st.st_mode)) ScanShard2(s1_fd.get(), s1.name, s2.name, &totals, found);
    }
  }
  return totals;
}

}  // namespace kvtier::internal
