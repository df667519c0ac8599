// The per-block state machines of the fs tier: store (FORMAT.md L54-L61),
// load (L64-L69) and lookup (L70). Each issues one IoRequest at a time to
// the scheduler and ends with a KeyResult.
#pragma once

#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include <atomic>
#include <cstdlib>
#include <cstdint>
#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "format/block_trailer.h"
#include "format/layout_names.h"
#include "fs/shard_dirs.h"
#include "fs/volume_kind.h"
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
//    opened as above (off the hot path: only when the directory is missing;
//    shard_dir_maker.h).
//  * on network and FUSE volumes (TierShared::hold_shard_dirs), stores (and
//    loads and lookups that find one cached) name their file relative to an
//    open shard directory (shard_dirs.h), itself opened as above: statx,
//    open, rename and unlink act on that one component, in the directory the
//    checked open found, so a symlink swapped in for the shard directory
//    later is never followed. Elsewhere (and for a load or lookup without a
//    cached directory) paths are root-relative; rename and unlink, which have
//    no RESOLVE_* flags, then act in a symlink's target if one was swapped in
//    after the checked open, on names (<h>.bin, <h>.bin_<n>.tmp) the
//    attacker must already be able to create there.
inline constexpr uint64_t kResolveInTree = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS;

class TierEvents;  // fs/tier_events.h
class BlockCodec;  // fs/block_codec.h

// Rows the tier owns, that loads read into and then copy to the caller's
// row once the block is whole and verified (the fs tier's bounce_loads). A
// read abandoned at its deadline (scheduler.h) may still be answered by the
// server later; with a bounce row that late data lands in memory the tier
// keeps until the kernel lets go, never in a row the caller has reused.
// Rows are page-aligned (O_DIRECT) and recycled: at most `keep_max` idle.
class BouncePool {
 public:
  BouncePool(uint64_t row_bytes, size_t keep_max) : row_bytes_(row_bytes), keep_max_(keep_max) {}
  ~BouncePool();
  BouncePool(const BouncePool&) = delete;
  BouncePool& operator=(const BouncePool&) = delete;
  uint8_t* Acquire();
  void Release(uint8_t* row);

 private:
  const uint64_t row_bytes_;
  const size_t keep_max_;
  std::mutex mu_;
  std::vector<uint8_t*> idle_;
};

// One row as the pieces whose concatenation it is, in order (SGLang keeps a
// page's K and V at different addresses). The usual row is one piece and
// allocates nothing; several pieces carry their own list. Empty pieces are
// dropped. The bytes are not owned (a store's are only read).
class RowPieces {
 public:
  RowPieces() = default;
  explicit RowPieces(std::span<uint8_t> one) : one_(one), bytes_(one.size()) {}
  explicit RowPieces(std::span<const uint8_t> one)
      : RowPieces(std::span<uint8_t>(const_cast<uint8_t*>(one.data()), one.size())) {}
  template <class Piece>
  explicit RowPieces(const std::vector<Piece>& pieces) {
    for (const auto& p : pieces) {
      if (p.empty()) continue;
      many_.emplace_back(const_cast<uint8_t*>(p.data()), p.size());
      bytes_ += p.size();
    }
    if (many_.size() == 1) one_ = many_[0], many_.clear();
  }

  uint64_t size() const { return bytes_; }
  size_t count() const { return many_.empty() ? 1 : many_.size(); }
  std::span<uint8_t> piece(size_t i) const { return many_.empty() ? one_ : many_[i]; }
  // The rest of the piece that holds row byte `done` (< size()): where a
  // transfer resumes.
  std::span<uint8_t> From(uint64_t done) const {
    if (many_.empty()) return one_.subspan(done);
    for (std::span<uint8_t> p : many_) {
      if (done < p.size()) return p.subspan(done);
      done -= p.size();
    }
    return {};
  }
  // The pieces from row byte `done` on as iovecs, the first one trimmed:
  // at most kIovecsMax of them and 1 GiB in all (the rest follows in the
  // next request, as after a short transfer).
  static constexpr size_t kIovecsMax = 1024;  // IOV_MAX
  void IovecsFrom(uint64_t done, std::vector<iovec>* out) const;
  // O_DIRECT needs every piece page-aligned in address and length.
  bool DirectAligned() const;
  // Copies `src` (size() bytes) into the pieces.
  void ScatterFrom(const uint8_t* src) const;
  // Copies the pieces (size() bytes) to `dst`.
  void GatherTo(uint8_t* dst) const;
  // These pieces followed by `tail`: a block file's row and its trailer (L131).
  RowPieces With(std::span<uint8_t> tail) const {
    std::vector<std::span<uint8_t>> all;
    for (size_t i = 0; i < count(); ++i) all.push_back(piece(i));
    all.push_back(tail);
    return RowPieces(all);
  }

 private:
  std::span<uint8_t> one_;
  std::vector<std::span<uint8_t>> many_;  // empty for one piece
  uint64_t bytes_ = 0;
};

// A block's trailer page (L131): page-aligned, as O_DIRECT needs every piece
// of a transfer to be, and owned by the op, which the scheduler frees only
// once the kernel has returned its last request.
struct FreeBytes {
  void operator()(uint8_t* p) const { std::free(p); }
};
using TrailerPage = std::unique_ptr<uint8_t, FreeBytes>;
inline TrailerPage NewTrailerPage() {
  return TrailerPage(static_cast<uint8_t*>(std::aligned_alloc(4096, format::kTrailerBytes)));
}

// Engine-wide settings and probes the ops share.
struct TierShared {
  TierShared();
  ~TierShared();
  UniqueFd root;         // root_dir: every op's paths are relative to it
  // KV events of this root's stores and removals (fs/tier_events.h); null: off.
  std::shared_ptr<TierEvents> events;
  std::string root_dir;  // as given, for messages
  uint64_t row_bytes = 0;
  bool o_direct = false;
  Durability durability = Durability::kNone;
  uint32_t io_timeout_ms = 0;
  // How blocks are checked or sealed (fs/block_codec.h): none
  // (checksum_blocks off, L102), the CRC32C in the xattr (L60) or in a
  // trailer (L131), or sealed (L160-L173). Chosen once at the open, called
  // on the I/O thread only (a sealed one holds this tier's cipher).
  std::unique_ptr<BlockCodec> codec;
  std::atomic<uint64_t> auth_failures{0};  // L169: blocks refused for their seal
  // L199: stores whose block-hash attribute could not be set (the block is
  // stored; its removals name its key alone).
  std::atomic<uint64_t> block_hash_records_lost{0};
  // L201: removals read a file's block-hash record first (KV events on, in
  // a namespace whose files may hold several blocks).
  bool reads_block_hashes = false;
  // The size of a block file this tier writes (the max_bytes accounting, L136).
  uint64_t file_bytes() const;
  std::atomic<uint64_t> tmp_counter{0};
  uint64_t tmp_base = 0;  // random; temp names are <dest>_<(base + n) mod 2^63>.tmp
  std::atomic<uint64_t> checksum_ns{0};  // time spent computing CRC32C (both directions)
  // bounce_loads: where loads read (nullptr: straight into the caller's row).
  std::unique_ptr<BouncePool> bounce;
  // Staging rows: with O_DIRECT on, a row whose pieces are not page-aligned
  // (SGLang's host pool sits 64 bytes past a page) is copied into one of
  // these and written with O_DIRECT, or read into one (bounce when on) and
  // copied out, instead of going through the page cache (far more CPU per
  // byte than one memcpy). Held by the op until the kernel lets go of it,
  // as bounce rows are. nullptr when O_DIRECT is off or the row size is not
  // a multiple of the page (those rows stay buffered).
  std::unique_ptr<BouncePool> stage;
  std::atomic<uint64_t> staged_ios{0};  // rows moved with O_DIRECT through a staging or bounce row
  // Whether the atime refresh after a load may run as a plain syscall on the
  // I/O thread (futimens has no io_uring opcode): only where metadata
  // calls never wait for a network (LocalFilesystem). Elsewhere loads skip
  // it, and relatime's daily update is gc's notion of use.
  bool touch_atime = true;
  // Whether ops name their files in held shard directories (FORMAT.md
  // L145): where each path component may be a round trip (network, FUSE).
  // On a local filesystem the kernel's dentry cache makes the walk cheap and
  // holding would cost an open per store (nearly every store meets a shard
  // directory of its own): names are root-relative paths there.
  bool hold_shard_dirs = true;
  // root_dir lies on a local disk filesystem (VolumeKind::local).
  bool local_root = false;
  ShardDirs shard_dirs;
};

// Crc32c(row), its time added to *spent_ns (TierShared::checksum_ns):
// integrity costs one pass over the row, and operators (and the benchmark)
// see how much of the tier's CPU that is.
// Over several pieces the CRC is chained (Crc32cExtend), so it equals the
// CRC of their concatenation (L60).
uint32_t TimedCrc32c(std::atomic<uint64_t>* spent_ns, const RowPieces& row);
// The counters the ops keep in `shared` (staged rows, CRC time, seal failures).
void AddSharedCounters(const TierShared& shared, FsTierMetrics* m);

class FsBlockOp : public BlockOp {
 public:
  KeyResult result;
  uint64_t start_ns = 0;
  uint64_t bytes = 0;   // bytes moved when kOk
  void* owner = nullptr;  // the job
  size_t index = 0;       // key index in the job
  // The op unlinked its block's file (a corrupt block, an eviction): what a
  // BlockRemoved event announces (fs/tier_events.h).
  bool unlinked = false;
  // A store whose rename landed before its result was final: the block is
  // visible even if what followed failed (a durable store's directory sync,
  // failed or abandoned), so it is announced as stored (fs/tier_events.h).
  bool renamed = false;
  // A store abandoned at its deadline whose rename the kernel completed
  // afterwards: the block's path relative to root_dir, for the BlockStored
  // its failed result (handed out before) could not carry. Set when that
  // late answer comes; empty otherwise.
  std::string published_late;
  // The file's block-hash record (FORMAT.md L198), for the events, which
  // parse it against the key (TierEvents): a removal with
  // TierShared::reads_block_hashes, what the file held where the record goes,
  // read before the unlink; a store, the record it wrote, once it is in the
  // file. Empty: none (the file is named by its key).
  std::string block_hashes;
};

// The block path pieces of a key, relative to root_dir: "<ns>_r<rank>", then
// "<hhh>" and "<hh>_g<g>" below it, and the file name.
struct BlockPathParts {
  std::string block_dir, shard1, shard2, file;
};

struct LoadedBlock;  // fs/staged_crc.h

// `crc`: the row's CRC32C computed by its copy (staged_crc.h), written
// instead of one computed here. `block_hashes`: the file's block-hash record
// (FORMAT.md L198), or "" for a file named by its key alone.
std::unique_ptr<FsBlockOp> MakeStoreOp(TierShared* shared, BlockPathParts path, RowPieces row,
                                       std::optional<uint32_t> crc = std::nullopt, std::string block_hashes = {});
// `rel_path`: the block's path relative to root_dir (Namespace::BlockRelPath).
// `unchecked`: no CRC check; the CRC the block carries and the file's
// identity go there (staged_crc.h).
std::unique_ptr<FsBlockOp> MakeLoadOp(TierShared* shared, std::string rel_path, RowPieces row,
                                      LoadedBlock* unchecked = nullptr);
// Removes the block at `rel_path` if it is still the file `read` describes
// (L69); the key's outcome is kCorrupt (staged_crc.h, SubmitRemoveCorrupt).
std::unique_ptr<FsBlockOp> MakeRemoveCorruptOp(TierShared* shared, std::string rel_path, const LoadedBlock& read);
std::unique_ptr<FsBlockOp> MakeLookupOp(TierShared* shared, std::string rel_path);

// Request builders the ops share: each sets the fields of one syscall on a
// cleared IoRequest (the op sets deadline_ns).

// CLOCK_MONOTONIC deadline of a request issued now (0: none).
inline uint64_t DeadlineNs(const TierShared& shared) {
  return shared.io_timeout_ms == 0 ? 0 : MonotonicNowNs() + uint64_t{shared.io_timeout_ms} * 1000000u;
}
// statx of `path` below `dirfd`, a symlink counted as itself (never a block).
inline void StatxNoFollow(IoRequest* req, int dirfd, const char* path, struct statx* out) {
  req->op = IoOp::kStatx;
  req->dirfd = dirfd;
  req->path = path;
  req->flags = AT_SYMLINK_NOFOLLOW;
  req->buf = out;
}
// An open that stays below `dirfd` and follows no symlink (kResolveInTree).
inline void OpenInTree(IoRequest* req, int dirfd, const char* path, int flags, uint32_t mode = 0) {
  req->op = IoOp::kOpen;
  req->dirfd = dirfd;
  req->path = path;
  req->flags = flags;
  req->mode = mode;
  req->resolve = kResolveInTree;
}
// A syscall on an open fd alone (statx, fdatasync, fsync, close, touch).
inline void OnFd(IoRequest* req, IoOp op, int fd) {
  req->op = op;
  req->fd = fd;
}
// fsetxattr / fgetxattr of the CRC32C attribute (FORMAT.md L60, L67).
inline void CrcXattr(IoRequest* req, IoOp op, int fd, uint8_t* value, uint32_t len) {
  OnFd(req, op, fd);
  req->name = format::kCrcXattr;
  req->buf = value;
  req->len = len;
}
// The rest of a row from row byte `done` on, at file offset `done` (at most
// 1 GiB per request; a short transfer is resumed). `op` is kRead or kWrite.
// One or two pieces (a flat row; SGLang's [K, V]) go one piece per request,
// which keeps io_uring's fixed-buffer READ/WRITE for registered memory; more
// (SGLang's per-layer pieces) go as one vectored request over `iov`, which
// must stay untouched until the request completes.
// `one_request`: any number of pieces as one vectored request (a row and its
// trailer, L131: one round trip, as a row alone).
inline void RowPart(IoRequest* req, IoOp op, int fd, const RowPieces& row, uint64_t done, std::vector<iovec>* iov,
                    bool one_request = false) {
  OnFd(req, op, fd);
  req->offset = done;
  if (row.count() > (one_request ? 1u : 2u)) {
    row.IovecsFrom(done, iov);
    req->op = op == IoOp::kRead ? IoOp::kReadv : IoOp::kWritev;
    req->buf = iov->data();
    req->len = static_cast<uint32_t>(iov->size());
    return;
  }
  const std::span<uint8_t> rest = row.From(done);
  req->buf = rest.data();
  req->len = static_cast<uint32_t>(std::min<uint64_t>(rest.size(), 1u << 30));
}

// True when statx found something that is not a regular file (a directory,
// FIFO, socket, device or symlink): never a block, whatever its name.
inline bool NotRegular(const struct statx& stx) { return !S_ISREG(stx.stx_mode); }

// The result of an op abandoned at its deadline (scheduler.h): kError,
// kTimedOut, naming the syscall and path that did not answer.
KeyResult AbandonedResult(const char* syscall, const std::string& path, uint32_t io_timeout_ms);

// Clears O_DIRECT on `fd` (F_SETFL never waits: the I/O thread calls it)
// so that a transfer cut short at an unaligned offset resumes buffered.
// True when it is off now; false only if fcntl failed (the fd keeps O_DIRECT).
[[nodiscard]] bool DropDirect(int fd);

// True when O_DIRECT may be used for this buffer (page-aligned address and length).
bool DirectIoAligned(const void* buf, uint64_t len);

// True when `row`, not itself fit for O_DIRECT, may go through a staging row
// with O_DIRECT (TierShared::stage): O_DIRECT is on and the row fits one.
bool Stageable(const TierShared& shared, const RowPieces& row);

}  // namespace kvtier::internal
