// The per-block state machines of the fs tier: store (FORMAT.md L54-L61),
// load (L64-L69) and lookup (L70). Each issues one IoRequest at a time to
// the scheduler and ends with a KeyResult.
#pragma once

#include <linux/openat2.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "io/scheduler.h"
#include "kvtier/fs_tier.h"
#include "util/dir_fd.h"

namespace kvtier::internal {

// How the ops resolve block paths on a volume that others may write. Every
// path is relative to TierShared::root (an fd of root_dir, opened once), and:
//  * every open (a load's block, a store's temp file, a directory to fsync or
//    to create a shard directory in) is an openat2 with these flags, so no
//    symlink anywhere below root_dir (a planted block, a symlinked <hhh>) can
//    send a read or a write elsewhere. The kernel checks them during the path
//    walk it does anyway: no extra request on the hot path (io_uring: one
//    OPENAT2 SQE instead of one OPENAT).
//  * data opens add O_NONBLOCK (a FIFO's open returns at once) and the load
//    checks S_ISREG on its fd before reading; lookups and a store's existence
//    check use statx with AT_SYMLINK_NOFOLLOW and count only a regular file.
//  * a shard directory is created with mkdirat in its parent's fd, itself
//    opened as above (off the hot path: only when the directory is missing).
//  * rename and unlink, which have no RESOLVE_* flags, take root-relative
//    paths. A symlink swapped in after the checked open makes them act in
//    the link's target, on names (<h>.bin, <h>.bin_<n>.tmp) the attacker
//    must already be able to create there. Holding a shard directory fd per
//    store would close that, at one more request per store: not worth it.
inline constexpr uint64_t kResolveInTree = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS;

// Engine-wide settings and probes the ops share.
struct TierShared {
  UniqueFd root;         // root_dir: every op's paths are relative to it
  std::string root_dir;  // as given, for messages
  uint64_t row_bytes = 0;
  bool o_direct = false;
  Durability durability = Durability::kNone;
  uint32_t io_timeout_ms = 0;
  // checksum_blocks (L102): stores write the CRC32C xattr and loads verify it.
  // Off: neither computes a CRC or touches the xattr, as vLLM with it false.
  bool checksum = true;
  std::atomic<uint64_t> tmp_counter{0};
  uint64_t tmp_base = 0;  // random; temp names are <dest>_<(base + n) mod 2^63>.tmp
  std::atomic<uint64_t> checksum_ns{0};  // time spent computing CRC32C (both directions)
};

// Crc32c(row), its time added to shared->checksum_ns: integrity costs one
// pass over the row, and operators (and the benchmark) see how much of the
// tier's CPU that is.
uint32_t TimedCrc32c(TierShared* shared, std::span<const uint8_t> row);

class FsBlockOp : public BlockOp {
 public:
  KeyResult result;
  uint64_t start_ns = 0;
  uint64_t bytes = 0;   // bytes moved when kOk
  void* owner = nullptr;  // the job
  size_t index = 0;       // key index in the job
};

// The block path pieces of a key, relative to root_dir: "<ns>_r<rank>", then
// "<hhh>" and "<hh>_g<g>" below it, and the file name.
struct BlockPathParts {
  std::string block_dir, shard1, shard2, file;
};

std::unique_ptr<FsBlockOp> MakeStoreOp(TierShared* shared, BlockPathParts path,
                                       std::span<const uint8_t> row);
// `rel_path`: the block's path relative to root_dir (Namespace::BlockRelPath).
std::unique_ptr<FsBlockOp> MakeLoadOp(TierShared* shared, std::string rel_path, std::span<uint8_t> row);
std::unique_ptr<FsBlockOp> MakeLookupOp(TierShared* shared, std::string rel_path);

// True when statx found something that is not a regular file (a directory,
// FIFO, socket, device or symlink): never a block, whatever its name.
inline bool NotRegular(const struct statx& stx) { return !S_ISREG(stx.stx_mode); }

// True when O_DIRECT may be used for this buffer (page-aligned address and length).
bool DirectIoAligned(const void* buf, uint64_t len);

}  // namespace kvtier::internal
