// How gc and fsck --repair tell GcOptions / FsckOptions::on_block_removed of
// each block file they remove (kvtier/ops.h RemovedBlock): only files this
// run unlinked (one already gone is another collector's to tell), only
// regular files at a block's name in its place (L6-L8), never a temp, probe,
// lease or config.json file. Without a callback it costs nothing beyond the
// removal itself. With one, in a namespace whose files may hold several
// blocks (FORMAT.md L201), the file's block-hash record is read just before
// its unlink (an open, an fgetxattr, and where there is no attribute an
// fstat and a pread of the last page), so the callback names every block.
//
// Thread safety: Remove may be called from any of the run's threads at once.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/layout.h"
#include "kvtier/ops.h"
#include "ops/ops_internal.h"
#include "ops/scan.h"

namespace kvtier::internal {

class RemovedBlocks {
 public:
  // `callback` (the options' on_block_removed) must outlive this object;
  // the engines of `scan`'s namespaces are read only when it is set.
  RemovedBlocks(const OnBlockRemoved& callback, std::string root, const TreeScan& scan);

  // editor.Remove(f) (dir_fd < 0) or editor.RemoveAt(dir_fd, f), and the
  // callback told when that unlinked a block file. Returns the removal's result.
  int Remove(const TreeEditor& editor, const ScannedFile& f, std::string_view reason, int dir_fd = -1) const;

  // The RemovedBlock for `f` (reason and all), or false when f is no block file.
  bool Describe(const ScannedFile& f, std::string_view reason, RemovedBlock* out) const;

 private:
  struct NsInfo {
    std::string engine;  // inference_engine, as RemovedBlock::engine
    bool several = true;  // its files may hold several blocks (or its config does not say)
    std::optional<NamespaceSpec> spec;  // what its config says of its files (HashesPerFile), when it parses
  };
  // What the file holds where its block-hash record goes ("" when it cannot be read).
  std::string ReadRecord(const TreeEditor& editor, const ScannedFile& f, int dir_fd) const;
  const NsInfo* InfoOf(const ScannedFile& f) const;
  static std::vector<BlockHash> BlocksOf(const RemovedBlock& block, const NsInfo& ns, const std::string& record);

  const OnBlockRemoved& callback_;
  std::string root_;
  std::map<std::string, NsInfo, std::less<>> namespaces_;  // namespace dir -> what its config says
};

}  // namespace kvtier::internal
