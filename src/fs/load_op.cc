// The load state machine: open -> statx(fd) (size check) -> fgetxattr(crc)
// -> read (resumed when short) -> close -> CRC check. ENOENT is a miss
// (files vanish under gc and other instances). A short file is corrupt and
// unlinked, as vLLM does (L65); a longer one is never returned but left in
// place (L66: it may be a valid row of another page size); a CRC mismatch is
// never returned, the file is removed and the key fails with EBADMSG, as
// vLLM's (L67). Files without the xattr (written by vLLM) are accepted on
// size (L68). A file one trailer page longer than a row (L131) is read whole,
// row and trailer in one vectored request, and its row is returned only when
// the trailer's record is whole and (checksum_blocks) the row's CRC32C
// matches it (L134); such a file never costs an fgetxattr. With
// checksum_blocks off there is no fgetxattr and no CRC (L102), but a trailer
// is still read and its record checked: only a valid one says that the file's
// extra page is not part of a longer row (L66).
// An unchecked load (staged_crc.h) hands the CRC back instead: its caller
// checks the row after copying it to the GPU. Which sizes a file may have,
// what is read besides the row and how it is checked are the tier's codec's
// (block_codec.h: the rules above for unsealed tiers, a seal's for sealed
// ones, L169); this op carries the requests, the reopens and the cleanup.
// It names the block in its shard directory's fd when a store left a fresh
// one cached (block_at.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <cerrno>
#include <iterator>

#include "fs/block_at.h"
#include "fs/block_codec.h"
#include "fs/block_ops.h"
#include "fs/hash_record_read.h"
#include "fs/staged_crc.h"
#include "format/layout_names.h"

namespace kvtier::internal {
namespace {

constexpr int64_t kAtimeRefreshS = 3600;
constexpr int kReopensMax = 3;

int64_t RealNowS() { return static_cast<int64_t>(::time(nullptr)); }

class LoadOp final : public FsBlockOp {
 public:
  LoadOp(TierShared* shared, std::string rel_path, RowPieces row, LoadedBlock* unchecked)
      : shared_(shared), rel_(std::move(rel_path)), row_(std::move(row)), unchecked_(unchecked),
        record_(*shared, -1, nullptr) {
    // A bounce row is page-aligned whatever the caller's pieces are; without
    // bounce rows an unaligned row reads into a staging row (block_ops.h).
    pool_ = shared_->bounce != nullptr       ? shared_->bounce.get()
            : Stageable(*shared_, row_) ? shared_->stage.get()
                                        : nullptr;
    direct_ = shared_->o_direct && (pool_ != nullptr || row_.DirectAligned());
  }
  ~LoadOp() override {
    if (bounce_ != nullptr) pool_->Release(bounce_);
  }

  bool NextRequest(IoRequest* req) override {
    if (state_ == kDone) return false;
    *req = IoRequest{};
    // Cleanup (close; a corrupt file's block-hash record, recheck and unlink) has no deadline.
    const bool cleanup = state_ == kClose || state_ == kRecheck || state_ == kRecord || state_ == kUnlink;
    req->deadline_ns = cleanup ? 0 : DeadlineNs(*shared_);
    if (at_.name == nullptr) at_ = FindBlockAt(shared_, rel_);  // decided once, by the first request
    const int root = at_.fd;  // the shard directory's fd or root_dir's (names below are at_.name)
    switch (state_) {
      case kOpen:
        OpenInTree(req, root, at_.name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | (direct_ ? O_DIRECT : 0));
        break;
      case kStat: OnFd(req, IoOp::kStatx, fd_); req->buf = &stx_; break;
      case kXattr: CrcXattr(req, IoOp::kFgetxattr, fd_, crc_be_, sizeof crc_be_); break;
      case kRead:
        row_read_ = row_read_ || pool_ == nullptr;  // file bytes land in the caller's row
        RowPart(req, IoOp::kRead, fd_, File(), read_, &iov_, trailer_ != nullptr);
        break;
      case kTouch: OnFd(req, IoOp::kTouchAtime, fd_); break;
      case kClose: OnFd(req, IoOp::kClose, fd_); break;
      case kRecheck: StatxNoFollow(req, root, at_.name, &again_); break;
      case kRevalidate:
        StatxNoFollow(req, root, at_.name, &again_);
        req->flags |= AT_STATX_FORCE_SYNC;
        break;
      case kRecord: record_.Fill(req); break;
      case kUnlink: req->op = IoOp::kUnlink; req->dirfd = root; req->path = at_.name; break;
      case kDone: break;
    }
    return true;
  }

  void OnCompletion(int64_t res) override {
    if (abandoned_) return AfterLate(res);
    switch (state_) {
      case kOpen: return AfterOpen(res);
      case kStat: return AfterStat(res);
      case kXattr: return AfterXattr(res);
      case kRead: return AfterRead(res);
      case kTouch: state_ = kClose; return;  // best effort: a failed atime update changes nothing
      case kClose: return AfterClose();
      case kRecheck:
        // L69: remove the file only if the path still names the file we read;
        // another writer may have renamed a fresh block over it meanwhile.
        state_ = res == 0 && again_.stx_ino == stx_.stx_ino && again_.stx_dev_major == stx_.stx_dev_major &&
                         again_.stx_dev_minor == stx_.stx_dev_minor
                     ? kUnlink
                     : kDone;
        return;
      case kRecord:  // the file's block-hash record, for its BlockRemoved (hash_record_read.h)
        record_.OnCompletion(res);
        if (record_.done()) block_hashes = record_.Take(), state_ = kRecheck;
        return;
      case kUnlink: unlinked = res == 0, state_ = kDone; return;
      case kRevalidate: state_ = kOpen; return;  // whatever it found, the open decides
      case kDone: return;
    }
  }

  // A read straight into the caller's row (no bounce or staging row) is
  // waited for: abandoning it would hand the row back while the kernel may
  // write it.
  bool MayAbandon() const override { return state_ != kRead || pool_ != nullptr; }

  void OnAbandon() override {
    if (!final_) result = AbandonedResult(StateSyscall(), Path(), shared_->io_timeout_ms);
    final_ = abandoned_ = true;
    record_.OnAbandon();
    WipeUnlessServed();
  }

 private:
  enum State { kOpen, kStat, kXattr, kRead, kTouch, kClose, kRecord, kRecheck, kUnlink, kRevalidate, kDone };

  std::string Path() const { return JoinRoot(shared_->root_dir, rel_); }
  const char* StateSyscall() const {
    static constexpr const char* kNames[] = {"open",  "statx", "fgetxattr", "read",  "futimens", "close",
                                             "open",  "statx", "unlink",    "statx", "load"};
    static_assert(std::size(kNames) == kDone + 1);
    return kNames[state_];
  }

  // Where the row's bytes are read: the caller's pieces, or one bounce or
  // staging row (block_ops.h) taken when the first read is issued.
  const RowPieces& Target() {
    if (pool_ == nullptr) return row_;
    if (bounce_ == nullptr) {
      bounce_ = pool_->Acquire();
      bounce_row_ = RowPieces(std::span<uint8_t>(bounce_, row_.size()));
    }
    return bounce_row_;
  }

  // The late answer of the request in flight when the op was abandoned:
  // keep an fd it opened only to close it; nothing else is acted on.
  void AfterLate(int64_t res) {
    if (state_ == kRecord) {  // the reader closes what it opened; nothing is removed
      record_.OnCompletion(res);
      if (record_.done()) state_ = kDone;
      return;
    }
    if (state_ == kOpen && res >= 0) fd_ = static_cast<int>(res);
    if (state_ == kClose) fd_ = -1;
    state_ = fd_ >= 0 ? kClose : kDone;
  }

  void AfterOpen(int64_t res) {
    if (res == -EINVAL && direct_) {
      direct_ = false;  // O_DIRECT refused here: read buffered
      return;
    }
    if (NotABlock(res)) return NextKeyOrMiss();
    // A network filesystem's handle went stale, or (GlusterFS, ENODATA) the
    // path is in the middle of another client's mkdir or rename: open again.
    if (res == -ESTALE || res == -ENODATA) {
      if (res == -ESTALE && at_.dir != nullptr) at_ = ForgetBlockAt(shared_, rel_, at_);  // the held directory's handle
      if (++reopens_ <= kReopensMax) return;
      return Done(KeyOutcome::kMiss, Status());
    }
    if (res < 0) return Done(KeyOutcome::kError, ErrnoToStatus(static_cast<int>(-res), "open " + Path()));
    fd_ = static_cast<int>(res);
    state_ = kStat;
  }
  void AfterStat(int64_t res) {
    if (Replaced(res)) return;
    if (res < 0) return Close(KeyOutcome::kError, ErrnoToStatus(static_cast<int>(-res), "statx " + Path()));
    if (NotRegular(stx_)) return Close(KeyOutcome::kMiss, Status());  // checked before any read
    // O_NONBLOCK was only there so that a FIFO's open cannot block. On a
    // regular file io_uring takes it as "never wait" where the filesystem has
    // no non-blocking reads (FUSE, for one) and fails the read with EAGAIN
    // instead of handing it to a worker: drop it. F_SETFL never waits, so
    // the I/O thread calls it directly; should it fail, reads still work
    // everywhere else.
    fcntl(fd_, F_SETFL, direct_ ? O_DIRECT : 0);
    LoadPlan plan = shared_->codec->Plan(stx_.stx_size, row_.size(), Path());
    switch (plan.step) {
      case LoadPlan::kRefuse: return Close(KeyOutcome::kCorrupt, std::move(plan.why), plan.unlink);
      case LoadPlan::kXattrThenRead: state_ = kXattr; return;
      case LoadPlan::kReadWithPage: trailer_ = NewTrailerPage(); break;  // one vectored read
      case LoadPlan::kRead: break;
    }
    state_ = kRead;
  }
  // What the read fills: the row's target, then the trailer page if any.
  const RowPieces& File() {
    if (trailer_ == nullptr) return Target();
    if (file_.size() == 0) file_ = Target().With(std::span<uint8_t>(trailer_.get(), format::kTrailerBytes));
    return file_;
  }
  void AfterXattr(int64_t res) {
    if (Replaced(res)) return;
    if (res == 4) {
      xattr_crc_ = uint32_t{crc_be_[0]} << 24 | uint32_t{crc_be_[1]} << 16 | uint32_t{crc_be_[2]} << 8 | crc_be_[3];
    } else if ((res >= 0 && res != 4) || res == -ERANGE) {  // ERANGE: longer than our buffer
      return Close(KeyOutcome::kCorrupt, ErrnoToStatus(EBADMSG, Path() + ": CRC attribute of " +
                                                                    (res < 0 ? "over 8" : std::to_string(res)) + " bytes"),
                   /*unlink=*/true);
    } else if (res != -ENODATA && res != -EOPNOTSUPP && res != -ENOTSUP) {
      return Close(KeyOutcome::kError, ErrnoToStatus(static_cast<int>(-res), "fgetxattr " + Path()));
    }
    state_ = kRead;
  }
  void AfterRead(int64_t res) {
    if (Replaced(res)) return;
    // O_DIRECT refused this transfer: the rest is read buffered (as store_op.cc).
    if (res == -EINVAL && direct_ && DropDirect(fd_)) return void(direct_ = false);
    if (res < 0) return Close(KeyOutcome::kError, ErrnoToStatus(static_cast<int>(-res), "read " + Path()));
    if (res == 0) {  // shrank between statx and read: torn or truncated
      return Close(KeyOutcome::kCorrupt, Corruption(Path() + ": short read"), /*unlink=*/true);
    }
    read_ += static_cast<uint64_t>(res);
    if (read_ < File().size()) {  // short read: resume
      if (direct_ && read_ % 4096 != 0 && DropDirect(fd_)) direct_ = false;  // O_DIRECT would refuse the offset
      return;
    }
    if (direct_ && bounce_ != nullptr && !row_.DirectAligned()) {
      shared_->staged_ios.fetch_add(1, std::memory_order_relaxed);  // O_DIRECT kept for an unaligned row
    }
    Check();
  }
  // The codec's verdict on the file read whole (block_codec.h).
  void Check() {
    const std::string shown = Path();
    LoadedRow in{rel_, shown, key_index_, stx_.stx_size, &Target(), bounce_, &row_, trailer_.get(), xattr_crc_,
                 /*verify=*/unchecked_ == nullptr};
    LoadVerdict v = shared_->codec->Check(in);
    if (v.kind == LoadVerdict::kRefuse) return Close(KeyOutcome::kCorrupt, std::move(v.why), v.unlink);
    if (v.kind == LoadVerdict::kMismatch) {
      // First from a fresh open again: a file replaced under the fd can mix two
      // blocks' attribute and bytes (GlusterFS's open-behind), a good block.
      if (!reread_ && Replaced(-ESTALE)) return void(reread_ = true);
      return Close(KeyOutcome::kCorrupt, ErrnoToStatus(EBADMSG, Path() + ": CRC32C mismatch"), /*unlink=*/true);
    }
    if (unchecked_ != nullptr) HandBack(v);
    // Whole and verified: only now does the caller's row see the bytes.
    if (bounce_ != nullptr && !v.delivered) row_.ScatterFrom(bounce_);
    Served();
  }
  // Unchecked (staged_crc.h): the caller checks the row after its copy
  // against the CRC the block carries, and removes this very file if not.
  void HandBack(const LoadVerdict& v) {
    *unchecked_ = LoadedBlock{v.has_crc,          v.crc, stx_.stx_ino, stx_.stx_size, stx_.stx_dev_major,
                              stx_.stx_dev_minor, stx_.stx_mtime.tv_sec, stx_.stx_mtime.tv_nsec};
  }
  void Served() {
    bytes = row_.size();
    Close(KeyOutcome::kOk, Status());
    // relatime updates atime at most daily, and noatime never: bump it when
    // it is over an hour old so gc's least-recently-used order sees reads.
    if (shared_->touch_atime && RealNowS() - stx_.stx_atime.tv_sec > kAtimeRefreshS) state_ = kTouch;
  }
  // L171: no file in key i's namespace; look in key i + 1's (a read key's).
  void NextKeyOrMiss() {
    if (!NextNamespace(*shared_, &key_index_, &rel_)) return Done(KeyOutcome::kMiss, Status());
    at_ = BlockAt{};  // named again, by the first request in the next namespace
  }
  void AfterClose() {
    fd_ = -1;
    if (reopen_) {  // start over on whatever file the path names now
      reopen_ = false;
      read_ = 0;
      xattr_crc_.reset();
      trailer_.reset();
      file_ = RowPieces();
      // The path may still name the replaced file in the kernel's dentry
      // cache (FUSE keeps an entry for its entry timeout), and opening it
      // again would find the same stale handle. A forced statx of the path
      // gets ESTALE from it, on which the kernel looks the path up afresh
      // (LOOKUP_REVAL); on a local filesystem it is one cheap statx.
      state_ = kRevalidate;
      return;
    }
    if (!unlink_) return void(state_ = kDone);
    // The record first, so that the identity check stays right before the unlink (L69).
    record_.Restart(*shared_, at_.fd, at_.name);
    state_ = record_.done() ? kRecheck : kRecord;
  }

  // On a shared network volume (NFS, GlusterFS) another instance's rename can
  // replace the file under an open fd, which then fails with ESTALE or
  // ENOENT (EBADFD: GlusterFS's open-behind). The block is not corrupt: close
  // and open the path again (a few times), then call it a miss.
  bool Replaced(int64_t res) {
    if (res != -ESTALE && res != -ENOENT && res != -EBADFD) return false;
    if (++reopens_ > kReopensMax) {
      Close(KeyOutcome::kMiss, Status());
      return true;
    }
    reopen_ = true;
    state_ = kClose;
    return true;
  }

  void Close(KeyOutcome outcome, Status status, bool unlink = false) {
    result = {outcome, std::move(status)};
    final_ = true;
    unlink_ = unlink;
    state_ = kClose;
    WipeUnlessServed();
  }
  void Done(KeyOutcome outcome, Status status) {
    result = {outcome, std::move(status)};
    final_ = true;
    state_ = kDone;
    WipeUnlessServed();
  }
  // L169: a sealed load that fails after reading into the caller's row (in
  // place: no bounce or staging row) leaves it zeroed, as a failing tag does,
  // so no caller can take the file's unauthenticated bytes for data. Called
  // once the outcome is final: no read into the row is in flight then.
  void WipeUnlessServed() {
    if (!shared_->codec->WipesFailedRows() || !row_read_ || result.outcome == KeyOutcome::kOk) return;
    for (size_t i = 0; i < row_.count(); ++i) std::memset(row_.piece(i).data(), 0, row_.piece(i).size());
  }

  TierShared* shared_;
  std::string rel_;
  BlockAt at_;  // where rel_ is named (held until the op is freed)
  RowPieces row_;
  LoadedBlock* unchecked_;  // an unchecked load's hand-back (staged_crc.h), else nullptr
  BouncePool* pool_ = nullptr;  // where bounce_ comes from (bounce, else stage); nullptr: none
  uint8_t* bounce_ = nullptr;   // from pool_, held until the op is freed
  RowPieces bounce_row_;       // bounce_ as one piece
  TrailerPage trailer_;        // the file's page after the row (L131, L168), when it has one
  RowPieces file_;             // Target() and the trailer page
  std::vector<iovec> iov_;     // a vectored read's pieces (RowPart)
  struct statx stx_{}, again_{};
  uint8_t crc_be_[8] = {};     // the CRC attribute as read (big-endian)
  std::optional<uint32_t> xattr_crc_;  // the CRC attribute the file carries
  State state_ = kOpen;
  int fd_ = -1;
  uint64_t read_ = 0;
  bool direct_ = false, unlink_ = false, reopen_ = false, reread_ = false;
  bool final_ = false;      // `result` is the outcome; what is left is cleanup
  bool row_read_ = false;   // a read was issued into the caller's row itself
  bool abandoned_ = false;  // OnAbandon ran: only closing an fd is left
  int reopens_ = 0;
  HashRecordRead record_;  // a corrupt file's block-hash record, read before its unlink
  size_t key_index_ = 0;  // sealed: the ring's key whose namespace rel_ is in (L171)
};

}  // namespace

std::unique_ptr<FsBlockOp> MakeLoadOp(TierShared* shared, std::string rel_path, RowPieces row, LoadedBlock* unchecked) {
  return std::make_unique<LoadOp>(shared, std::move(rel_path), std::move(row), unchecked);
}

}  // namespace kvtier::internal
