// fsck's checks of a sealed namespace's blocks (layout-spec/FORMAT.md
// L182, L183): the structure every tool can check without the key (the
// seal record and the key id in a block's last 80 bytes), and with the key
// the tag, read through the whole block.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/io_watch.h"
#include "kvtier/result.h"

namespace kvtier::internal {

struct SealKeyring;
class SealTagCheckers;

// The keys an operator gave fsck (FsckOptions::seal_key_files), by key id,
// and what fsck's threads check tags with (SealTag).
class SealKeys {
 public:
  // Each file as a tier reads a key (L161, L173); the first that fails
  // fails the call, naming "seal key file PATH", never the content.
  static Result<SealKeys> Load(const std::vector<std::string>& files, bool group_read);
  // The index of the key whose id is `key_id_hex` (32 hex digits), or -1.
  int Find(const std::string& key_id_hex) const;
  const std::shared_ptr<const SealKeyring>& ring() const { return ring_; }
  // The tag checkers made so far (one per thread that checked at once) and
  // the bytes their buffers hold: at most kSealVerifyChunkBytes each.
  size_t checkers() const;
  uint64_t buffer_bytes() const;
  SealTagCheckers& tag_checkers() const { return *checkers_; }

 private:
  std::shared_ptr<const SealKeyring> ring_;
  std::shared_ptr<SealTagCheckers> checkers_;
};

enum class SealVerdict {
  kSound,     // L182: a well-formed record of the namespace's key (L183: and its tag checks)
  kBroken,    // never a sealed block of this namespace: a finding, removed by --repair
  kUnknown,   // a record of a later version (L165): reported, never removed
  kUnjudged,  // could not be read whole (changed or failed meanwhile): judged next time
};

// L182: the open block `fd` of `size` bytes against `key_id_hex`, the key id
// its namespace's config.json names ("": not checked). One pread. *detail
// says why when not kSound.
SealVerdict SealStructure(int fd, uint64_t size, const std::string& key_id_hex, std::string* detail);

// L183: its tag under key `key_index` of `keys` for its root-relative path
// `rel`: the trailer read first, then the row streamed through the cipher in
// chunks of kSealVerifyChunkBytes (each read a call the watch can time), in
// a buffer that is wiped after. A thread reuses one cipher and one buffer
// from block to block, so fsck's threads hold at most a chunk each, whatever
// the row size. *read_bytes counts what was read.
inline constexpr uint64_t kSealVerifyChunkBytes = uint64_t{1} << 20;
SealVerdict SealTag(int fd, uint64_t size, const std::string& rel, const SealKeys& keys, int key_index, IoScope* io,
                    std::string* detail, uint64_t* read_bytes);

}  // namespace kvtier::internal
