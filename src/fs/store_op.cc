// The store state machine: [open shard dir [-> mkdirs -> open it again],
// or in a fresh tree mkdirs first -> open it] ->
// statx(dest) -> open(tmp, O_EXCL) -> write (resumed when short) ->
// [fdatasync] -> [fsetxattr(crc), with checksum_blocks in the xattr] ->
// close -> rename -> [fsync dir]. With the checksum in a trailer (L131) the
// write carries the row and its trailer page as one vectored request: no
// request more than a row alone. Any failure after the temp file exists
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
// ESTALE) is opened again by its path, made if missing, and the store goes on.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "fs/block_ops.h"
#include "format/layout_names.h"
#include "util/crc32c.h"

namespace kvtier::internal {
namespace {

class StoreOp final : public FsBlockOp {
 public:
  StoreOp(TierShared* shared, BlockPathParts path, RowPieces row, std::optional<uint32_t> crc)
      : shared_(shared), row_(std::move(row)), given_crc_(crc) {
    shard1_ = path.block_dir + "/" + path.shard1;
    shard2_ = shard1_ + "/" + path.shard2;
    dest_ = shard2_ + "/" + path.file;
    file_ = std::move(path.file);
    block_dir_ = std::move(path.block_dir);
    name1_ = std::move(path.shard1);
    name2_ = std::move(path.shard2);
    // An unaligned row is staged (block_ops.h) and still written O_DIRECT.
    // A sealed row is encrypted into a staging row (page-aligned) and written from there.
    staged_ = !shared_->seal && Stageable(*shared_, row_);
    direct_ = shared_->o_direct && (shared_->seal ? row_.size() % 4096 == 0 : staged_ || row_.DirectAligned());
    NewTempName();
  }
  // An abandoned op is freed only once the kernel has returned its request
  // (scheduler.h), so the staging row outlives any late write from it.
  ~StoreOp() override {
    if (stage_ != nullptr) shared_->stage->Release(stage_);
  }

  bool NextRequest(IoRequest* req) override {
    if (state_ == kDone) return false;
    if (!begun_ && shared_->hold_shard_dirs) {  // the cached shard directory, if one is fresh now
      begun_ = true;
      dir_ = shared_->shard_dirs.Find(shard2_, MonotonicNowNs());
      if (dir_ == nullptr) BeginUnheld();
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
      case kStatDest: return AfterStat(res);
      case kOpenShard: return AfterOpenShard(res);
      case kOpen: return AfterOpen(res);
      case kMkdirParent: return AfterMkdirParent(res);
      case kMkdir: return AfterMkdir(res);
      case kWrite: return AfterWrite(res);
      case kSync: return res < 0 ? Fail(res, "fdatasync") : Go(AfterData());
      case kXattr: return AfterXattr(res);
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
  // late, the temp file is closed and removed, never renamed into place.
  void OnAbandon() override {
    if (!final_) result = AbandonedResult(StateSyscall(), Shown(AbandonedPath()), shared_->io_timeout_ms);
    final_ = abandoned_ = cleanup_ = true;
  }

 private:
  enum State { kStatDest, kOpenShard, kOpen, kMkdirParent, kMkdir, kWrite, kSync, kXattr, kClose, kRename,
               kOpenDir, kSyncDir, kCloseDir, kUnlinkTmp, kDone };

  std::string Shown(const std::string& rel) const { return JoinRoot(shared_->root_dir, rel); }
  const char* StateSyscall() const {
    static constexpr const char* kNames[] = {"statx", "open",  "open",   "open",  "mkdir",
                                             "write", "fdatasync", "fsetxattr", "close", "rename",
                                             "open",  "fsync", "close",  "unlink", "store"};
    return kNames[state_];
  }

  // The path the request in flight names, for the abandonment's message.
  std::string AbandonedPath() const {
    if (state_ == kStatDest || state_ == kRename) return dest_;
    if (state_ == kOpenShard) return shard2_;
    if (state_ == kOpenDir || state_ == kSyncDir || state_ == kCloseDir) return SyncDirPath();
    if (state_ == kMkdirParent || state_ == kMkdir) return MkdirShown();
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
      case kMkdirParent:
      case kOpenShard: if (res >= 0) ::close(static_cast<int>(res)); break;  // O_PATH: no flush, never waits
      case kClose:
      case kCloseDir: fd_ = -1; break;
      case kRename: if (res == 0) tmp_created_ = false; break;
      case kUnlinkTmp: tmp_created_ = false; break;
      default: break;
    }
    if (dir_fd_ >= 0) {
      ::close(dir_fd_);  // O_PATH, as above
      dir_fd_ = -1;
    }
    Go(fd_ >= 0 ? kClose : tmp_created_ ? kUnlinkTmp : kDone);
  }

  // The syscall of state_ (any state but kDone).
  void FillRequest(IoRequest* req) {
    const int root = shared_->root.get();
    const int dir = dir_ != nullptr ? dir_->fd.get() : root;  // where DestName() and TmpName() are
    switch (state_) {
      case kStatDest: return StatxNoFollow(req, dir, DestName(), &stx_);
      case kOpenShard:  // in its parent's fd right after making it there (AfterMkdir)
        if (dir_fd_ >= 0) return OpenInTree(req, dir_fd_, name2_.c_str(), O_PATH | O_DIRECTORY);
        return OpenInTree(req, root, shard2_.c_str(), O_PATH | O_DIRECTORY);
      case kOpen:
        return OpenInTree(req, dir, TmpName(), O_CREAT | O_EXCL | O_WRONLY | O_TRUNC | (direct_ ? O_DIRECT : 0),
                          0644);
      case kMkdirParent:
        return OpenInTree(req, root, mkdir_level_ == 1 ? block_dir_.c_str() : shard1_.c_str(), O_PATH | O_DIRECTORY);
      case kMkdir:
        req->op = IoOp::kMkdir;
        if (mkdir_level_ > 0) req->dirfd = dir_fd_;
        req->path = MkdirName();
        req->mode = 0777;
        return;
      case kWrite: return RowPart(req, IoOp::kWrite, fd_, File(), written_, &iov_, trailer_ != nullptr);
      case kSync: return OnFd(req, IoOp::kFdatasync, fd_);
      case kXattr: return CrcXattr(req, IoOp::kFsetxattr, fd_, crc_be_, sizeof crc_be_);
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
  void CloseDirFd() {
    ::close(dir_fd_);  // an O_PATH fd: closing it flushes nothing and never waits
    dir_fd_ = -1;
  }
  // The destination's and the temp file's names: in the held shard
  // directory, else root-relative paths (dest_ and tmp_ are root-relative).
  const char* DestName() const { return dir_ != nullptr ? file_.c_str() : dest_.c_str(); }
  const char* TmpName() const { return tmp_.c_str() + (dir_ != nullptr ? shard2_.size() + 1 : 0); }
  void NewTempName() {
    const uint64_t n = (shared_->tmp_base + shared_->tmp_counter.fetch_add(1)) & ((uint64_t{1} << 63) - 1);
    tmp_ = format::BlockTmpName(dest_, n);  // FORMAT.md L55
  }
  // Durability full fsyncs the file's directory (level 0), then at level L
  // the parent of SyncedEntry(), where this store made that directory or
  // this process has not seen its entry synced (ShardDirs::EntrySynced):
  // whoever else made it may never sync it.
  const std::string& SyncedEntry() const {
    return sync_dir_level_ == 1 ? shard2_ : sync_dir_level_ == 2 ? shard1_ : block_dir_;
  }
  bool ParentToSync() const {
    const bool made = (made_ >> (3 - sync_dir_level_) & 1) != 0;  // mkdir level 3 - L made it
    return made || !shared_->shard_dirs.EntrySynced(SyncedEntry());
  }
  const char* SyncDirPath() const {
    switch (sync_dir_level_) {
      case 0: return shard2_.c_str();
      case 1: return shard1_.c_str();
      case 2: return block_dir_.c_str();
      default: return ".";  // root_dir, in case this store created the block directory itself
    }
  }
  // Level 0 makes the block directory in root_dir; levels 1 and 2 make a
  // shard directory in the fd of its parent (kMkdirParent), so mkdirat never
  // walks a path that a symlink could have been swapped into.
  const char* MkdirName() const {
    return mkdir_level_ == 0 ? block_dir_.c_str() : mkdir_level_ == 1 ? name1_.c_str() : name2_.c_str();
  }
  const std::string& MkdirShown() const {
    return mkdir_level_ == 0 ? block_dir_ : mkdir_level_ == 1 ? shard1_ : shard2_;
  }

  void AfterStat(int64_t res) {
    if (res == -ESTALE && Reresolve()) return;  // the cached directory's handle went stale
    if (res == 0 && NotRegular(stx_)) {
      return Finish(-EEXIST, Shown(dest_) + " is not a regular file: not replaced (fsck --repair removes it)");
    }
    // L54: another writer has it; in a sealed namespace only a file of a
    // sealed block's size counts (L170): any other was planted, and is replaced.
    const bool planted = res == 0 && shared_->seal && stx_.stx_size != row_.size() + format::kSealTrailerBytes;
    if (res == 0 && !planted) return Finish(0, "", KeyOutcome::kSkippedExists);
    if (res != -ENOENT && !planted) return Finish(res, "statx " + Shown(dest_));
    // The checksum (and the staging copy) are made here, on the I/O
    // thread, and only for rows that will be written: submitting stays cheap
    // for the caller.
    if (shared_->seal) return SealRow();
    if (staged_) Stage();
    statted_ = true;
    if (shared_->checksum) {
      const uint32_t crc = given_crc_ ? *given_crc_ : TimedCrc32c(shared_, Data());
      for (int i = 0; i < 4; ++i) crc_be_[i] = static_cast<uint8_t>(crc >> (24 - 8 * i));  // big-endian
      if (shared_->trailer()) AddTrailer(crc);
    }
    Go(kOpen);
  }
  // L131: the file is the row, then its trailer page, written in the same
  // transfer, so the temp file is never renamed without it (L57).
  void AddTrailer(uint32_t crc) {
    trailer_ = NewTrailerPage();
    format::EncodeTrailer(row_.size(), crc, trailer_.get());
    file_pieces_ = Data().With(std::span<uint8_t>(trailer_.get(), format::kTrailerBytes));
  }
  // L163, L168: the ciphertext goes to a staging row (the caller's row is
  // never changed), the seal trailer after it, both in one transfer.
  void SealRow() {
    statted_ = true;
    stage_ = shared_->stage->Acquire();
    stage_row_ = RowPieces(std::span<uint8_t>(stage_, row_.size()));
    trailer_ = NewTrailerPage();
    std::vector<SealPiece> pieces(row_.count());
    for (size_t i = 0, at = 0; i < row_.count(); at += row_.piece(i).size(), ++i) {
      pieces[i] = {row_.piece(i).data(), stage_ + at, row_.piece(i).size()};
    }
    if (Status s = shared_->seal->Seal(dest_, pieces, row_.size(), trailer_.get()); !s.ok()) {
      final_ = true;
      result = {KeyOutcome::kError, std::move(s)};
      return Go(kDone);
    }
    file_pieces_ = stage_row_.With(std::span<uint8_t>(trailer_.get(), format::kSealTrailerBytes));
    Go(kOpen);
  }
  // What goes into the file: the row, or the row and its trailer.
  const RowPieces& File() const { return trailer_ != nullptr ? file_pieces_ : Data(); }
  // After the data (and its fdatasync): the xattr, where the CRC goes there.
  State AfterData() const { return shared_->checksum && !shared_->trailer() ? kXattr : kClose; }
  // The bytes written: the caller's pieces, or the staging row holding a copy.
  const RowPieces& Data() const { return stage_ != nullptr ? stage_row_ : row_; }
  void Stage() {
    stage_ = shared_->stage->Acquire();
    stage_row_ = RowPieces(std::span<uint8_t>(stage_, row_.size()));
    row_.GatherTo(stage_);
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
    // demand, as AfterOpenShard makes them.
    if ((res == -ENOENT || res == -ESTALE || res == -ENODATA) && (dir_ != nullptr ? Reresolve() : MkdirAgain(res))) {
      return;
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
  // Forgets the shard directory's fd (for every op) and opens it again by
  // its path; each time costs a round of MkdirRoundLeft's budget.
  bool Reresolve() {
    if (dir_ == nullptr || !MkdirRoundLeft()) return false;
    ++mkdir_rounds_;
    shared_->shard_dirs.Drop(shard2_, dir_.get());
    Go(kOpenShard);
    return true;
  }
  // A shard directory not held: open it, or where its <hhh> is unknown and
  // unknown ones lately were missing (a fresh tree), make <hhh> first, in
  // the block directory's fd, without a lookup of it before (shard_dirs.h).
  void BeginUnheld() {
    probed_ = !shared_->shard_dirs.ParentKnown(shard1_);
    if (!probed_ || !shared_->shard_dirs.MakeParentFirst()) return Go(kOpenShard);
    (void)MkdirRoundLeft();  // the first round: always granted, starts the clock
    ++mkdir_rounds_;
    mkdir_searching_ = true;
    mkdir_level_ = 1;
    Go(kMkdirParent);
  }
  // <hhh> exists now: `existed` says whether it did before this store.
  void NoteParent(bool existed) {
    if (shared_->hold_shard_dirs) shared_->shard_dirs.SawParent(shard1_, existed, probed_);
    probed_ = false;
  }
  void AfterOpenShard(int64_t res) {
    if (dir_fd_ >= 0) CloseDirFd();
    if (res >= 0) {
      NoteParent(true);
      dir_ = shared_->shard_dirs.Put(shard2_, static_cast<int>(res), MonotonicNowNs());
      return Go(statted_ ? kOpen : kStatDest);
    }
    // Shard directories on demand. On a shared volume another instance may be
    // creating (or gc removing) the same directory at this moment, which can
    // surface as ENOENT or ESTALE (or ENODATA: GlusterFS while the other
    // client's directory is not yet complete): create and try again.
    if (MkdirAgain(res)) return;
    if (res == -ELOOP || res == -EXDEV || res == -ENOTDIR) {
      return Finish(res, "open " + Shown(shard2_) + ": a symlink or a non-directory on the path (refused)");
    }
    Finish(res, "open " + Shown(shard2_));
  }
  // The first round of directory creation goes deepest first: open the
  // parent of the missing shard directory (mostly there already: 4096
  // first-level shards fill early), and only where that is missing too step
  // up a level. Each mkdirat that finds its directory present takes the
  // parent's lock for nothing. A parent that vanished or went stale
  // meanwhile starts a new round from the top, a few times.
  // Only the first round searches: a later one follows a lost race on a
  // shared volume, where walking every level from root_dir again (each
  // mkdirat a fresh lookup) is what lets a network client's cached view of
  // the directories catch up (GlusterFS failed stores without it).
  bool MkdirAgain(int64_t res) {
    if ((res != -ENOENT && res != -ESTALE && res != -ENODATA) || !MkdirRoundLeft()) return false;
    mkdir_searching_ = mkdir_rounds_++ == 0;
    mkdir_level_ = mkdir_searching_ ? 2 : 0;
    Go(mkdir_searching_ ? kMkdirParent : kMkdir);
    return true;
  }
  bool MkdirRoundLeft() {
    const uint64_t now = MonotonicNowNs();
    if (mkdir_rounds_ == 0) mkdir_first_ns_ = now;
    return ShardDirs::MkdirRoundLeft(mkdir_rounds_, mkdir_first_ns_, now);
  }
  void AfterMkdirParent(int64_t res) {
    // Up only while searching (before this round's first mkdirat): after it,
    // a missing parent is a race with gc and costs a round, so the op ends.
    if (res == -ENOENT && mkdir_searching_ && mkdir_level_ > 0) {  // the parent is missing too: one level up
      --mkdir_level_;
      if (mkdir_level_ == 0) Go(kMkdir);  // the block directory itself, in root_dir
      return;
    }
    if (MkdirAgain(res)) return;
    if (res < 0) return Finish(res, "open " + Shown(mkdir_level_ == 1 ? block_dir_ : shard1_));
    if (mkdir_level_ == 2) NoteParent(true);
    dir_fd_ = static_cast<int>(res);
    Go(kMkdir);
  }
  void AfterMkdir(int64_t res) {
    mkdir_searching_ = false;
    // The shard directory just made (or found made) is opened in its
    // parent's fd, one name, rather than by its path from root_dir.
    const bool keep = shared_->hold_shard_dirs && mkdir_level_ == 2 && (res >= 0 || res == -EEXIST);
    if (dir_fd_ >= 0 && !keep) CloseDirFd();
    if (MkdirAgain(res)) return;
    if (res < 0 && res != -EEXIST) return Finish(res, "mkdir " + Shown(MkdirShown()));
    if (res >= 0) made_ |= 1u << mkdir_level_, shared_->shard_dirs.ForgetEntrySynced(MkdirShown());
    if (mkdir_level_ == 1) NoteParent(res == -EEXIST);
    if (++mkdir_level_ == 3) return Go(shared_->hold_shard_dirs ? kOpenShard : kOpen);
    Go(kMkdirParent);
  }
  void AfterWrite(int64_t res) {
    // O_DIRECT refused this transfer (an offset or length it cannot take):
    // the rest goes buffered, as a file that refuses it at open does.
    if (res == -EINVAL && direct_ && !(direct_ = DropDirect(fd_))) return;
    if (res < 0) return Fail(res, "write " + Shown(tmp_));
    if (res == 0) return Fail(-EIO, "write " + Shown(tmp_) + " made no progress");
    written_ += static_cast<uint64_t>(res);
    if (written_ < File().size()) {  // a short write: resume with the rest
      if (direct_ && written_ % 4096 != 0) direct_ = DropDirect(fd_);  // O_DIRECT would refuse the offset
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
  uint8_t* stage_ = nullptr;  // from shared_->stage, held until the op is freed
  RowPieces stage_row_;       // stage_ as one piece
  TrailerPage trailer_;       // the trailer page (L131), when the CRC goes there
  RowPieces file_pieces_;     // the row's pieces and the trailer page
  std::vector<iovec> iov_;  // a vectored write's pieces (RowPart)
  std::string block_dir_, shard1_, shard2_, dest_, tmp_;  // relative to root_dir
  std::string name1_, name2_, file_;                       // the shard directories' and the block's own names
  ShardDirs::Ref dir_;  // the shard directory (shard2_) the requests name file_ and TmpName() in
  uint8_t crc_be_[4];
  struct statx stx_{};
  State state_ = kStatDest;
  int fd_ = -1;
  int dir_fd_ = -1;  // the parent of the shard directory being created (then opened: kOpenShard)
  uint64_t written_ = 0;
  int mkdir_level_ = 0, mkdir_rounds_ = 0, name_retries_ = 0, sync_dir_level_ = 0;
  int64_t sync_dir_res_ = 0;
  uint64_t mkdir_first_ns_ = 0;  // when this store first found a shard directory missing
  bool staged_ = false;  // written through a staging row (Stageable)
  unsigned made_ = 0;  // bit L: the mkdir of level L (MkdirName) created its directory
  bool direct_ = false, tmp_created_ = false, cleanup_ = false;
  bool final_ = false;      // `result` is the outcome
  bool abandoned_ = false;  // OnAbandon ran: only cleanup is left
  bool mkdir_searching_ = false;  // this round has made no directory yet (AfterMkdirParent)
  bool begun_ = false;    // the first NextRequest looked for a cached shard directory
  bool statted_ = false;  // the destination was found absent (the checksum is made)
  bool probed_ = false;   // began without knowing whether shard1_ exists (ShardDirs::SawParent)
};

}  // namespace

std::unique_ptr<FsBlockOp> MakeStoreOp(TierShared* shared, BlockPathParts path, RowPieces row, std::optional<uint32_t> crc) {
  return std::make_unique<StoreOp>(shared, std::move(path), std::move(row), crc);
}

}  // namespace kvtier::internal
