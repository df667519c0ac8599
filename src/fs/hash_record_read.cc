// HashRecordRead (fs/hash_record_read.h).
#include "fs/hash_record_read.h"

#include <fcntl.h>

#include "format/block_trailer.h"

namespace kvtier::internal {

static_assert(format::kBlockHashRecordBytesMax <= format::kTrailerBytes);

void HashRecordRead::Restart(const TierShared& shared, int dirfd, const char* name) {
  dirfd_ = dirfd, name_ = name;
  state_ = shared.reads_block_hashes ? kOpen : kDone;
  abandoned_ = false;
  record_.clear();
}

void HashRecordRead::Fill(IoRequest* req) {
  switch (state_) {
    case kOpen:
      if (!buf_) buf_ = std::make_unique<uint8_t[]>(kBufBytes);
      return OpenInTree(req, dirfd_, name_, O_RDONLY | O_NONBLOCK | O_NOFOLLOW);
    case kXattr:
      OnFd(req, IoOp::kFgetxattr, fd_);
      req->name = format::kBlockHashesXattr;
      req->buf = buf_.get();
      req->len = static_cast<uint32_t>(format::kBlockHashRecordBytesMax);
      return;
    case kStat: OnFd(req, IoOp::kStatx, fd_); req->buf = &stx_; return;
    case kRead:
      OnFd(req, IoOp::kRead, fd_);
      req->buf = buf_.get();
      req->len = kBufBytes;
      req->offset = stx_.stx_size - kBufBytes;
      return;
    case kClose: return OnFd(req, IoOp::kClose, fd_);
    case kDone: return;
  }
}

void HashRecordRead::OnCompletion(int64_t res) {
  switch (state_) {
    case kOpen: return AfterOpen(res);
    case kXattr: return AfterXattr(res);
    case kStat: return AfterStat(res);
    case kRead:
      // L201: a page-long read; the record, if any, is at its start.
      if (res == kBufBytes) record_.assign(reinterpret_cast<const char*>(buf_.get()), kBufBytes);
      state_ = kClose;
      return;
    case kClose: fd_ = -1, state_ = kDone; return;
    case kDone: return;
  }
}

void HashRecordRead::AfterOpen(int64_t res) {
  if (res < 0) return void(state_ = kDone);  // gone, or not a regular file: the removal decides
  fd_ = static_cast<int>(res);
  state_ = abandoned_ ? kClose : kXattr;
}

void HashRecordRead::AfterXattr(int64_t res) {
  if (res > 0 && !abandoned_) {
    record_.assign(reinterpret_cast<const char*>(buf_.get()), static_cast<size_t>(res));
    return void(state_ = kClose);
  }
  state_ = abandoned_ ? kClose : kStat;  // no attribute (or none possible here): the trailer page, if any
}

void HashRecordRead::AfterStat(int64_t res) {
  const bool page = res == 0 && !abandoned_ && S_ISREG(stx_.stx_mode) && stx_.stx_size > kBufBytes;
  // As a load does (load_op.cc): O_NONBLOCK only kept a FIFO's open from
  // blocking; on a regular file io_uring would fail the read with EAGAIN
  // where the filesystem has no non-blocking reads (FUSE). F_SETFL never waits.
  if (page) fcntl(fd_, F_SETFL, 0);
  state_ = page ? kRead : kClose;
}

}  // namespace kvtier::internal
