// The removal of a block that failed its check outside the tier (a row
// checked on the GPU after its copy, staged_crc.h): the same end as a load's
// CRC mismatch (FORMAT.md L67), the file removed only if its path still names
// the file that was read (L69: same device, inode, size and mtime), so a good
// block another writer renamed over it meanwhile stays. Before the two, the
// file's block-hash record is read where the events need it
// (hash_record_read.h), so the check stays right before the unlink.
#include <cerrno>

#include "fs/block_ops.h"
#include "fs/hash_record_read.h"
#include "fs/staged_crc.h"

namespace kvtier::internal {
namespace {

class RemoveCorruptOp final : public FsBlockOp {
 public:
  RemoveCorruptOp(TierShared* shared, std::string rel_path, const LoadedBlock& read)
      : shared_(shared), rel_(std::move(rel_path)), read_(read), record_(*shared, shared->root.get(), rel_.c_str()) {
    if (!record_.done()) state_ = kRecord;
    result = {KeyOutcome::kCorrupt, ErrnoToStatus(EBADMSG, Path() + ": CRC32C mismatch (checked after the copy)")};
  }

  bool NextRequest(IoRequest* req) override {
    if (state_ == kDone) return false;
    *req = IoRequest{};
    req->deadline_ns = DeadlineNs(*shared_);
    if (state_ == kRecheck) {
      StatxNoFollow(req, shared_->root.get(), rel_.c_str(), &stx_);
    } else if (state_ == kRecord) {
      record_.Fill(req);
      if (record_.closing() || abandoned_) req->deadline_ns = 0;
    } else {
      req->op = IoOp::kUnlink;
      req->dirfd = shared_->root.get();
      req->path = rel_.c_str();
    }
    return true;
  }
  void OnCompletion(int64_t res) override {
    if (state_ == kRecord) {
      record_.OnCompletion(res);
      if (record_.done()) block_hashes = record_.Take(), state_ = abandoned_ ? kDone : kRecheck;
      return;
    }
    if (state_ == kRecheck && res == 0 && !abandoned_ && Same()) {
      state_ = kUnlink;
      return;
    }
    // Gone already, or replaced (L69): nothing to remove. A failed unlink
    // leaves the file to gc; either way this key was corrupt.
    unlinked = state_ == kUnlink && res == 0 && !abandoned_;
    state_ = kDone;
  }
  void OnAbandon() override {
    abandoned_ = true;
    record_.OnAbandon();
  }
  // A statx and an unlink, no block data: it must not hold stores back as a
  // load does (stores_while_loading_max).
  bool ReadsData() const override { return false; }

 private:
  enum State { kRecheck, kRecord, kUnlink, kDone };
  std::string Path() const { return JoinRoot(shared_->root_dir, rel_); }
  bool Same() const {
    LoadedBlock now;
    now.ino = stx_.stx_ino, now.size = stx_.stx_size;
    now.dev_major = stx_.stx_dev_major, now.dev_minor = stx_.stx_dev_minor;
    now.mtime_s = stx_.stx_mtime.tv_sec, now.mtime_ns = stx_.stx_mtime.tv_nsec;
    return S_ISREG(stx_.stx_mode) && now.SameFile(read_);
  }

  TierShared* shared_;
  std::string rel_;
  LoadedBlock read_;
  HashRecordRead record_;
  struct statx stx_{};
  State state_ = kRecheck;
  bool abandoned_ = false;
};

}  // namespace

std::unique_ptr<FsBlockOp> MakeRemoveCorruptOp(TierShared* shared, std::string rel_path, const LoadedBlock& read) {
  return std::make_unique<RemoveCorruptOp>(shared, std::move(rel_path), read);
}

}  // namespace kvtier::internal
