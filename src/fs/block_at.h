// Where the read-class ops (a load, a lookup) name a block: in its shard
// directory's fd when a store left a fresh one cached (shard_dirs.h,
// FORMAT.md L145-L147; network and FUSE volumes only), one component to
// look up instead of the walk from root_dir; otherwise by its root-relative
// path. And which answers mean that no block is there.
#pragma once

#include <cerrno>
#include <cstdint>
#include <string>

#include "fs/block_codec.h"
#include "fs/block_ops.h"
#include "fs/shard_dirs.h"

namespace kvtier::internal {

// Open and statx results that mean "no block at this path": nothing there
// (ENOENT), a symlink on the way (ELOOP; EXDEV would be an escape from
// root_dir), a file where a shard directory belongs (ENOTDIR), or a socket
// (ENXIO). None is the key's fault, and a store may fill the path later.
inline bool NotABlock(int64_t res) {
  return res == -ENOENT || res == -ELOOP || res == -EXDEV || res == -ENOTDIR || res == -ENXIO;
}

// Where a block's requests name it: in its cached shard directory if fresh
// now, else by its root-relative path `rel` (the pointer stays valid while
// `rel` does).
struct BlockAt {
  ShardDirs::Ref dir;
  int fd = -1;
  const char* name = nullptr;
};
// The root-relative place of `rel`, after dropping `held` (a held shard
// directory whose handle went stale) from the cache.
inline BlockAt ForgetBlockAt(TierShared* shared, const std::string& rel, const BlockAt& held) {
  shared->shard_dirs.Drop(rel.substr(0, rel.rfind('/')), held.dir.get());
  return {nullptr, shared->root.get(), rel.c_str()};
}
inline BlockAt FindBlockAt(TierShared* shared, const std::string& rel) {
  BlockAt at{nullptr, shared->root.get(), rel.c_str()};
  const size_t slash = rel.rfind('/');
  if (!shared->hold_shard_dirs || slash == std::string::npos) return at;
  if (ShardDirs::Ref dir = shared->shard_dirs.Find(rel.substr(0, slash), MonotonicNowNs())) {
    at = {dir, dir->fd.get(), rel.c_str() + slash + 1};
  }
  return at;
}

// L171: moves `rel` (in key *key_index's namespace) to the next key's
// namespace the codec names, if any (a sealed tier's read keys).
inline bool NextNamespace(const TierShared& shared, size_t* key_index, std::string* rel) {
  const std::string* next = shared.codec->NamespaceAfter(*key_index);
  if (next == nullptr) return false;
  ++*key_index;
  *rel = *next + rel->substr(rel->find('/'));
  return true;
}

}  // namespace kvtier::internal
