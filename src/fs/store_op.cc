// The store state machine: [the shard directory, made where missing and
// opened where held (shard_dir_maker.h)] ->
// statx(dest) -> open(tmp, O_EXCL) -> write (resumed when short) ->
// [fdatasync] -> [fsetxattr(crc), where the codec sets the attribute] ->
// [fsetxattr(block hashes), for a file of several blocks without a page] ->
// close -> rename -> [fsync dir]. What goes with the row is the tier's
// codec's (block_codec.h): a page after it (a CRC trailer, L131; a seal,
// L168) goes in the same vectored request, no request more than a row
// alone; a sealed row is written from the staging row it was encrypted
// into. A file of several blocks records their hashes (FORMAT.md L199):
// in the page's zero bytes, else in an attribute of its own. Any failure after the temp file exists
// closes it and unlinks it, so no temp file outlives a failed store.
// Where walks are round trips (network, FUSE: TierShared::hold_shard_dirs),
// statx, open, rename and unlink name one component in the shard directory's
// fd, cached across stores (shard_dirs.h, FORMAT.md L145-L147); elsewhere
// they name root-relative paths. Either way the shard directory is opened
// from the root fd as kResolveInTree (block_ops.h) says: a symlinked shard
// directory fails the store; so does anything but a regular file at the
// destination (fsck --repair removes it), which is neither skipped as
// present nor replaced. A cached directory that has gone
// (gc removed it: creating in it fails ENOENT; a stale network handle:
// ESTALE) is opened again by its path, made if missing (ShardDirMaker), and
// the store goes on; so is a missing one on a path named from root_dir.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <iterator>

#include "format/block_hashes.h"
#include "fs/block_codec.h"
#include "fs/block_ops.h"
#include "fs/shard_dir_maker.h"
#include "format/layout_names.h"

namespace kvtier::internal {
namespace {

class StoreOp final : public FsBlockOp {
 public:
  StoreOp(TierShared* shared, BlockPathParts path, RowPieces row, std::optional<uint32_t> crc, std::string hashes)
      : shared_(shared), row_(std::move(row)), given_crc_(crc), hash_record_(std::move(hashes)), dirs_(shared, path),
        dest_(dirs_.shard2() + "/" + path.file), file_(std::move(path.file)) {
    // An unaligned row is staged (block_ops.h) and still written O_DIRECT. A
    // codec that fills a staging row (sealed) has the file's row written from
    // there (page-aligned).
    const bool fills = shared_->codec->fills_stage();
    staged_ = !fills && Stageable(*shared_, row_);
    direct_ = shared_->o_direct && (fills ? row_.size() % 4096 == 0 : staged_ || row_.DirectAligned());
    NewTempName();
  }
  // An abandoned op is freed only once the kernel has returned its request
  // (scheduler.h), so the staging row outlives any late write from it.
  ~StoreOp() override {
    if (stage_ != nullptr) shared_->stage->Release(stage_);
  }

  bool NextRequest(IoRequest* req) override {
    if (state_ == kDone) return false;
    if (!begun_) {  // the cached shard directory, if one is fresh now; else it is opened or made
      begun_ = true;
      if (dirs_.Begin()) Go(kShardDir);
    }
    *req = IoRequest{};
    // A close has no deadline: an expired one would never run and leak the fd.
    const bool close = state_ == kClose || state_ == kCloseDir;
    req->deadline_ns = cleanup_ || close ? 0 : DeadlineNs(*shared_);
    req->dirfd = shared_->root.get();  // every path below is relative to root_dir
    FillRequest(req);
    return true;
  }

  void OnCompletion(int64_t res) override {
    if (abandoned_) return AfterLate(res);
    switch (state_) {
      case kShardDir: return AfterShardDir(res);
      case kStatDest: return AfterStat(res);
      case kOpen: return AfterOpen(res);
      case kWrite: return AfterWrite(res);
      case kSync: return res < 0 ? Fail(res, "fdatasync") : Go(AfterData());
      case kXattr: return AfterXattr(res);
      case kHashXattr: return AfterHashXattr(res);
      case kClose: return AfterClose(res);
      case kRename: return AfterRename(res);
      case kOpenDir:
        return res < 0 ? Finish(res, "open " + Shown(SyncDirPath())) : (fd_ = static_cast<int>(res), Go(kSyncDir));
      case kSyncDir: return (sync_dir_res_ = res, Go(kCloseDir));
      case kCloseDir:
        if (sync_dir_res_ < 0) return Finish(sync_dir_res_, "fsync " + Shown(SyncDirPath()));
        if (sync_dir_level_ > 0) shared_->shard_dirs.NoteEntrySynced(SyncedEntry());
        while (++sync_dir_level_ <= 3 && !ParentToSync()) {}
        return sync_dir_level_ <= 3 ? Go(kOpenDir) : Finish(0, "");
      case kUnlinkTmp: return Go(kDone);
      case kDone: return;
    }
  }

  // From here on the store can only fail: whatever the kernel finishes
  // late, the temp file is closed and removed, and no rename is issued (a
  // rename already in the kernel may still land: AfterLate).
  void OnAbandon() override {
    if (!final_) result = AbandonedResult(StateSyscall(), Shown(AbandonedPath()), shared_->io_timeout_ms);
    final_ = abandoned_ = cleanup_ = true;
  }

 private:
  enum State { kShardDir, kStatDest, kOpen, kWrite, kSync, kXattr, kHashXattr, kClose, kRename,
               kOpenDir, kSyncDir, kCloseDir, kUnlinkTmp, kDone };

  std::string Shown(const std::string& rel) const { return JoinRoot(shared_->root_dir, rel); }
  const char* StateSyscall() const {
    static constexpr const char* kNames[] = {"",      "statx", "open",  "write", "fdatasync", "fsetxattr", "fsetxattr",
                                             "close", "rename", "open", "fsync", "close",     "unlink", "store"};
    static_assert(std::size(kNames) == kDone + 1);
    return state_ == kShardDir ? dirs_.Syscall() : kNames[state_];
  }

  // The path the request in flight names, for the abandonment's message.
  std::string AbandonedPath() const {
    if (state_ == kStatDest || state_ == kRename) return dest_;
    if (state_ == kShardDir) return dirs_.InFlightPath();
    if (state_ == kOpenDir || state_ == kSyncDir || state_ == kCloseDir) return SyncDirPath();
    return tmp_;
  }

  // The late answer of the request in flight when the op was abandoned:
  // note what it created or released, then clean up. A rename that lands
  // late publishes a block that was whole and checksummed before it was
  // issued; a late write never reaches a rename.
  void AfterLate(int64_t res) {
    switch (state_) {
      case kOpen: if (res >= 0) fd_ = static_cast<int>(res), tmp_created_ = true; break;
      case kOpenDir: if (res >= 0) fd_ = static_cast<int>(res); break;
      case kShardDir: dirs_.AfterLate(res); break;
      case kClose:
      case kCloseDir: fd_ = -1; break;
      case kRename: if (res == 0) tmp_created_ = false, published_late = dest_; break;
      case kUnlinkTmp: tmp_created_ = false; break;
      default: break;
    }
    Go(fd_ >= 0 ? kClose : tmp_created_ ? kUnlinkTmp : kDone);
  }

  // The syscall of state_ (any state but kDone).
  void FillRequest(IoRequest* req) {
    const int root = shared_->root.get();
    const int dir = held() != nullptr ? held()->fd.get() : root;  // where DestName() and TmpName() are
    switch (state_) {
      case kShardDir: return dirs_.Fill(req);
      case kStatDest: return StatxNoFollow(req, dir, DestName(), &stx_);
      case kOpen:
        return OpenInTree(req, dir, TmpName(), O_CREAT | O_EXCL | O_WRONLY | O_TRUNC | (direct_ ? O_DIRECT : 0),
                          0644);
      case kWrite: return RowPart(req, IoOp::kWrite, fd_, File(), written_, &iov_, encoding_.page != nullptr);
      case kSync: return OnFd(req, IoOp::kFdatasync, fd_);
      case kXattr: return CrcXattr(req, IoOp::kFsetxattr, fd_, encoding_.xattr_value, sizeof encoding_.xattr_value);
      case kHashXattr:
        OnFd(req, IoOp::kFsetxattr, fd_);
        req->name = format::kBlockHashesXattr;
        req->buf = hash_record_.data();
        req->len = static_cast<uint32_t>(hash_record_.size());
        return;
      case kRename:
        req->op = IoOp::kRename;
        req->dirfd = dir;
        req->path = TmpName();
        req->path2 = DestName();
        return;
      case kOpenDir: return OpenInTree(req, root, SyncDirPath(), O_RDONLY | O_DIRECTORY);
      case kSyncDir: return OnFd(req, IoOp::kFsync, fd_);
      case kClose:
      case kCloseDir: return OnFd(req, IoOp::kClose, fd_);
      case kUnlinkTmp: req->op = IoOp::kUnlink; req->dirfd = dir; req->path = TmpName(); return;
      case kDone: return;
    }
  }
  void Go(State next) { state_ = next; }
  // The shard directory the requests name file_ and TmpName() in, or nullptr.
  const ShardDirs::Ref& held() const { return dirs_.held(); }
  // The destination's and the temp file's names: in the held shard
  // directory, else root-relative paths (dest_ and tmp_ are root-relative).
  const char* DestName() const { return held() != nullptr ? file_.c_str() : dest_.c_str(); }
  const char* TmpName() const { return tmp_.c_str() + (held() != nullptr ? dirs_.shard2().size() + 1 : 0); }
  void NewTempName() {
    const uint64_t n = (shared_->tmp_base + shared_->tmp_counter.fetch_add(1)) & ((uint64_t{1} << 63) - 1);
    tmp_ = format::BlockTmpName(dest_, n);  // FORMAT.md L55
  }
  // Durability full fsyncs the file's directory (level 0), then at level L
  // the parent of SyncedEntry(), where this store made that directory or
  // this process has not seen its entry synced (ShardDirs::EntrySynced):
  // whoever else made it may never sync it.
  const std::string& SyncedEntry() const {
    return sync_dir_level_ == 1 ? dirs_.shard2() : sync_dir_level_ == 2 ? dirs_.shard1() : dirs_.block_dir();
  }
  bool ParentToSync() const {  // the directory of level 3 - L was made by this store, or its entry is not known synced
    return dirs_.made(3 - sync_dir_level_) || !shared_->shard_dirs.EntrySynced(SyncedEntry());
  }
  const char* SyncDirPath() const {
    switch (sync_dir_level_) {
      case 0: return dirs_.shard2().c_str();
      case 1: return dirs_.shard1().c_str();
      case 2: return dirs_.block_dir().c_str();
      default: return ".";  // root_dir, in case this store created the block directory itself
    }
  }

  // The shard directory is there (and held, where the tier holds them):
  // the store goes on where it was, or ends with why it is not.
  void AfterShardDir(int64_t res) {
    dirs_.OnCompletion(res);
    if (dirs_.busy()) return;
    if (dirs_.failed()) return Finish(dirs_.error(), dirs_.error_what());
    Go(statted_ ? kOpen : kStatDest);
  }

  void AfterStat(int64_t res) {
    if (res == -ESTALE && dirs_.Reopen()) return Go(kShardDir);  // the cached directory's handle went stale
    if (res == 0 && NotRegular(stx_)) {
      return Finish(-EEXIST, Shown(dest_) + " is not a regular file: not replaced (fsck --repair removes it)");
    }
    // L54: another writer has it; a file the codec does not count as a block
    // (sealed: of another size, L170) was planted, and is replaced.
    const bool planted = res == 0 && !shared_->codec->IsBlockSize(stx_.stx_size, row_.size());
    if (res == 0 && !planted) return Finish(0, "", KeyOutcome::kSkippedExists);
    if (res != -ENOENT && !planted) return Finish(res, "statx " + Shown(dest_));
    Encode();
  }
  // The encoding (a CRC, the seal, the staging copy) is made here, on the
  // I/O thread, and only for rows that will be written: submitting stays
  // cheap for the caller. A trailer or seal page goes after the row in the
  // same transfer, so the temp file is never renamed without it (L57).
  void Encode() {
    statted_ = true;
    const bool fills = shared_->codec->fills_stage();
    if (fills || staged_) TakeStage(/*copy=*/!fills);
    const StoreRow in{dest_, fills ? &row_ : &Data(), stage_, given_crc_};
    if (Status s = shared_->codec->Encode(in, &encoding_); !s.ok()) {
      final_ = true;
      result = {KeyOutcome::kError, std::move(s)};
      return Go(kDone);
    }
    if (encoding_.page != nullptr) {
      // L199: the page's first bytes are zero (L132, L164); the record goes there.
      std::copy(hash_record_.begin(), hash_record_.end(), encoding_.page.get());
      block_hashes = std::move(hash_record_);  // recorded: what its BlockStored may name
      file_pieces_ = Data().With(std::span<uint8_t>(encoding_.page.get(), shared_->codec->page_bytes()));
    }
    Go(kOpen);
  }
  // What goes into the file: the row, or the row and the codec's page.
  const RowPieces& File() const { return encoding_.page != nullptr ? file_pieces_ : Data(); }
  // After the data (and its fdatasync): the xattr, where the codec sets one;
  // then the hashes' attribute, where a record has no page to go in (L199).
  State AfterData() const { return encoding_.xattr ? kXattr : AfterCrcXattr(); }
  State AfterCrcXattr() const { return !hash_record_.empty() && encoding_.page == nullptr ? kHashXattr : kClose; }
  // The bytes written: the caller's pieces, or the staging row (a copy, or what the codec filled).
  const RowPieces& Data() const { return stage_ != nullptr ? stage_row_ : row_; }
  void TakeStage(bool copy) {
    stage_ = shared_->stage->Acquire();
    stage_row_ = RowPieces(std::span<uint8_t>(stage_, row_.size()));
    if (copy) row_.GatherTo(stage_);
  }

  void AfterOpen(int64_t res) {
    if (res >= 0) {
      fd_ = static_cast<int>(res);
      tmp_created_ = true;
      return Go(kWrite);
    }
    // The shard directory went away under its fd (gc removed it: creating in
    // a deleted directory fails ENOENT; a network handle went stale): open
    // it again by its path (made again if missing) and create there.
    // Without a held directory (a local filesystem): shard directories on
    // demand, made as a held one's are.
    if ((res == -ENOENT || res == -ESTALE || res == -ENODATA) && (held() != nullptr ? dirs_.Reopen() : dirs_.Remake(res))) {
      return Go(kShardDir);
    }
    if (res == -EEXIST && ++name_retries_ < 4) return NewTempName();
    if (res == -EINVAL && direct_) {
      direct_ = false;  // this filesystem refuses O_DIRECT for this file: buffered
      return;
    }
    if (res == -ELOOP || res == -EXDEV || res == -ENOTDIR) {
      return Finish(res, "open " + Shown(tmp_) + ": a symlink or a non-directory on the path (refused)");
    }
    Finish(res, "open " + Shown(tmp_));
  }
  void AfterWrite(int64_t res) {
    // O_DIRECT refused this transfer (an offset or length it cannot take):
    // the rest goes buffered, as a file that refuses it at open does.
    if (res == -EINVAL && direct_ && DropDirect(fd_)) return void(direct_ = false);
    if (res < 0) return Fail(res, "write " + Shown(tmp_));
    if (res == 0) return Fail(-EIO, "write " + Shown(tmp_) + " made no progress");
    written_ += static_cast<uint64_t>(res);
    if (written_ < File().size()) {  // a short write: resume with the rest
      if (direct_ && written_ % 4096 != 0 && DropDirect(fd_)) direct_ = false;  // O_DIRECT would refuse the offset
      return;
    }
    if (direct_ && staged_) shared_->staged_ios.fetch_add(1, std::memory_order_relaxed);
    Go(shared_->durability != Durability::kNone ? kSync : AfterData());
  }
  // As vLLM with checksum_blocks (L102): a block is never published without
  // its CRC, so a failed fsetxattr fails the store (the open's probe has
  // shown that this filesystem takes user xattrs).
  void AfterXattr(int64_t res) {
    if (res < 0) return Fail(res, "fsetxattr " + Shown(tmp_));
    Go(AfterCrcXattr());
  }
  // The hashes serve the KV events only (L200): where the attribute cannot
  // be set (no user xattrs, a full xattr block), the block is stored all
  // the same, and it is named by its key alone, at its store and at its
  // removals.
  void AfterHashXattr(int64_t res) {
    if (res < 0) shared_->block_hash_records_lost.fetch_add(1, std::memory_order_relaxed);
    if (res >= 0) block_hashes = std::move(hash_record_);  // recorded (the kernel is done with the buffer)
    Go(kClose);
  }
  void AfterClose(int64_t res) {
    fd_ = -1;
    if (cleanup_) return Go(tmp_created_ ? kUnlinkTmp : kDone);  // after a failure: the temp file goes
    if (res < 0) return Fail(res, "close " + Shown(tmp_));  // delayed write errors surface here (NFS)
    Go(kRename);
  }
  void AfterRename(int64_t res) {
    if (res < 0) return Fail(res, "rename " + Shown(tmp_));
    tmp_created_ = false;
    renamed = true;  // visible now, whatever a durable store's directory sync does
    if (shared_->durability == Durability::kFull) return Go(kOpenDir);
    Finish(0, "");
  }

  // A failure with the temp file possibly present: close, unlink, report.
  // The close goes through the backend like any request: on a network
  // filesystem close() waits for the server (FUSE flush), and the I/O
  // thread must never wait on a mount.
  void Fail(int64_t res, const std::string& what) {
    Finish(res, what);
    cleanup_ = true;
    if (fd_ >= 0) return Go(kClose);
    if (tmp_created_) Go(kUnlinkTmp);
  }
  void Finish(int64_t res, const std::string& what, KeyOutcome ok = KeyOutcome::kOk) {
    final_ = true;
    if (res < 0) {
      result.outcome = KeyOutcome::kError;
      result.status = ErrnoToStatus(static_cast<int>(-res), what);
    } else {
      result.outcome = ok;
      if (ok == KeyOutcome::kOk) bytes = row_.size();
    }
    Go(kDone);
  }

  TierShared* shared_;
  RowPieces row_;
  std::optional<uint32_t> given_crc_;  // the row's CRC32C from its copy (staged_crc.h)
  std::string hash_record_;  // L198: the block-hash record of a file of several blocks, else ""
  uint8_t* stage_ = nullptr;  // from shared_->stage, held until the op is freed
  RowPieces stage_row_;       // stage_ as one piece
  StoreEncoding encoding_;    // what the codec has the store write besides the row
  RowPieces file_pieces_;     // the row's pieces and the codec's page
  std::vector<iovec> iov_;  // a vectored write's pieces (RowPart)
  ShardDirMaker dirs_;  // the shard directory: its paths, and the one held
  std::string dest_, tmp_;  // relative to root_dir
  std::string file_;        // the block's own name
  struct statx stx_{};
  State state_ = kStatDest;
  int fd_ = -1;
  uint64_t written_ = 0;
  int name_retries_ = 0, sync_dir_level_ = 0;
  int64_t sync_dir_res_ = 0;
  bool staged_ = false;  // written through a staging row (Stageable)
  bool direct_ = false, tmp_created_ = false, cleanup_ = false;
  bool final_ = false;      // `result` is the outcome
  bool abandoned_ = false;  // OnAbandon ran: only cleanup is left
  bool begun_ = false;    // the first NextRequest looked for a cached shard directory
  bool statted_ = false;  // the destination was found absent (the encoding is made)
};

}  // namespace

std::unique_ptr<FsBlockOp> MakeStoreOp(TierShared* shared, BlockPathParts path, RowPieces row, std::optional<uint32_t> crc,
                                       std::string block_hashes) {
  return std::make_unique<StoreOp>(shared, std::move(path), std::move(row), crc, std::move(block_hashes));
}

}  // namespace kvtier::internal
