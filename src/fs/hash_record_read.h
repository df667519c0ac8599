// A removal's read of the block-hash record of the file it is about to
// unlink (FORMAT.md L201), so that its BlockRemoved names every block the
// file holds (fs/tier_events.h): open (in the tree, O_NONBLOCK) ->
// fgetxattr(kBlockHashesXattr) -> [statx(fd) -> pread(the last page), when
// there is no attribute] -> close. It runs before the removal's identity
// check (L69), so that check stays right before the unlink. Nothing it meets fails the removal: a
// file without a record, or one that cannot be read, leaves the record
// empty (the file is then named by its key). Only where
// TierShared::reads_block_hashes; otherwise done() from the start and free.
//
// The op that holds it issues its requests (Fill while !done()), setting
// their deadline itself except for the close (closing()). An op abandoned
// meanwhile calls OnAbandon and still hands it the late completion: the
// reader then only closes what it opened.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>

#include "format/block_hashes.h"
#include "fs/block_ops.h"

namespace kvtier::internal {

class HashRecordRead {
 public:
  // `dirfd` and `name` (not owned; valid while the reader runs) say where the file is.
  HashRecordRead(const TierShared& shared, int dirfd, const char* name)
      : dirfd_(dirfd), name_(name), state_(shared.reads_block_hashes ? kOpen : kDone) {}
  HashRecordRead(const HashRecordRead&) = delete;
  HashRecordRead& operator=(const HashRecordRead&) = delete;

  bool done() const { return state_ == kDone; }
  // The request in flight (or next) is the close, which takes no deadline.
  bool closing() const { return state_ == kClose; }
  void Fill(IoRequest* req);
  void OnCompletion(int64_t res);
  // The holder was abandoned: whatever answers late, only the close is
  // left, and no record is kept.
  void OnAbandon() { abandoned_ = true; }
  // What was read where a record goes ("" for none), once done().
  std::string Take() { return abandoned_ ? std::string() : std::move(record_); }
  // Re-arms the reader for another file (or the same one again).
  void Restart(const TierShared& shared, int dirfd, const char* name);

 private:
  enum State { kOpen, kXattr, kStat, kRead, kClose, kDone };
  void AfterOpen(int64_t res);
  void AfterXattr(int64_t res);
  void AfterStat(int64_t res);

  int dirfd_;
  const char* name_;
  State state_;
  int fd_ = -1;
  bool abandoned_ = false;
  struct statx stx_{};
  std::string record_;
  // Where the attribute or the last page is read: a page (L198's largest
  // record fits well within it), allocated only by a reader that runs, so
  // that ops of tiers that read no records carry none.
  static constexpr uint32_t kBufBytes = 4096;
  std::unique_ptr<uint8_t[]> buf_;
};

}  // namespace kvtier::internal
