// The block-hash record of a file holding several blocks (FORMAT.md
// L197-L202): the hashes of every block in a chunk file, in order, so that a
// removal made anywhere later (the tier's eviction, a corrupt removal, gc,
// fsck --repair, another instance) can announce all of them as KV events
// (docs/kv-events.md), not just the key in the file's name. It sits in the
// trailer page's zero bytes where the block has a trailer (L131, L163), else
// in the attribute kBlockHashesXattr. It is trusted for events only: it is
// written by whoever can write the volume, so it never decides what a load
// returns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvtier/hashing.h"
#include "kvtier/layout.h"

namespace kvtier::format {

// L199: the attribute, where a block has no trailer page.
inline constexpr const char* kBlockHashesXattr = "user.kvtier.block_hashes";
// L198: at most this many bytes of hashes (n x h): 64 SHA-256 hashes, 128
// XXH3-128 ones. It keeps the record within one ext4 xattr block beside the
// CRC attribute, and within the trailer pages' zero bytes (L132, L164).
inline constexpr size_t kBlockHashesBytesMax = 2048;
// L198: the largest record (what a reader asks for).
inline constexpr size_t kBlockHashRecordBytesMax = 8 + 4 + kBlockHashesBytesMax + 4;

// L198: the record of `hashes` (2 or more, all of one length, at most
// kBlockHashesBytesMax bytes in all; the caller checked).
std::string EncodeBlockHashRecord(std::span<const BlockHash> hashes);

// L200: the hashes a record at the start of `bytes` names, when it is whole
// (magic, length, CRC), of hashes of key.size() bytes, at least 2 of them,
// and its last is `key` (the file's name). nullopt otherwise: the file is
// named by its key alone.
std::optional<std::vector<BlockHash>> ParseBlockHashRecord(std::span<const uint8_t> bytes, const BlockHash& key);

// L197: how many blocks a file of group `group` holds: its tokens
// (tokens_per_block x blocks_per_file; a group the spec does not list:
// tokens_per_hash) over tokens_per_hash, at least 1; 1 in an SGLang
// namespace (a file is one page, named by its page key).
size_t HashesPerFile(const NamespaceSpec& spec, uint32_t group);
// Whether a file of `spec` may hold several blocks (some group's
// HashesPerFile > 1): only then does anything write or read a record.
bool MayHoldSeveralBlocks(const NamespaceSpec& spec);

// L197: why a store's hash list for `key` is refused ("" when it is fine):
// `hashes` must be `expected` hashes (0: any number) of key.size() bytes
// each, the last one `key`, at most kBlockHashesBytesMax bytes in all.
std::string BlockHashListProblem(std::span<const BlockHash> hashes, const BlockHash& key, size_t expected);

}  // namespace kvtier::format
