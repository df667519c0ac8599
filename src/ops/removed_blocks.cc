// RemovedBlocks (ops/removed_blocks.h).
#include "ops/removed_blocks.h"

#include <sys/stat.h>

#include <utility>

#include "format/layout_names.h"

namespace kvtier::internal {

RemovedBlocks::RemovedBlocks(const OnBlockRemoved& callback, std::string root, const TreeScan& scan)
    : callback_(callback), root_(std::move(root)) {
  if (!callback_) return;
  for (const auto& [name, ns] : scan.namespaces) engines_.emplace(name, ParseConfig(ns).engine);
}

int RemovedBlocks::Remove(const TreeEditor& editor, const ScannedFile& f, std::string_view reason, int dir_fd) const {
  bool unlinked = false;
  const int err = dir_fd >= 0 ? editor.RemoveAt(dir_fd, f, &unlinked) : editor.Remove(f, &unlinked);
  RemovedBlock block;
  if (unlinked && callback_ && Describe(f, reason, &block)) callback_(block);
  return err;
}

bool RemovedBlocks::Describe(const ScannedFile& f, std::string_view reason, RemovedBlock* out) const {
  if (!S_ISREG(f.mode)) return false;
  // L8: <NS>_r<rank>/<hhh>/<hh>_g<g>/<h>.bin, each part by its rule.
  const auto [dir2, file] = SplitRel(f.rel);
  const auto [dir1, group_dir] = SplitRel(dir2);
  const auto [block_dir, shard1] = SplitRel(dir1);
  const std::optional<format::BlockDir> bd = format::ParseBlockDirName(block_dir);
  const std::optional<std::string_view> hex = format::BlockFileHex(file);
  if (!bd || !hex || block_dir.find('/') != std::string::npos || !format::IsShard1Name(shard1) ||
      !format::ParseShard2Name(group_dir)) {
    return false;
  }
  const auto engine = engines_.find(bd->ns);
  *out = RemovedBlock{.root = root_,
                      .path = f.rel,
                      .block_dir = block_dir,
                      .group_dir = group_dir,
                      .stem = std::string(*hex),
                      .engine = engine == engines_.end() ? std::string() : engine->second,
                      .bytes = f.bytes,
                      .reason = std::string(reason)};
  return true;
}

}  // namespace kvtier::internal
