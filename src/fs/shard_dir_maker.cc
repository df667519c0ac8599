// A store's shard directories, made and opened (see shard_dir_maker.h).
#include "fs/shard_dir_maker.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace kvtier::internal {
namespace {

// What another instance's mkdir, gc's removal or a network client's stale
// view of the tree look like from a request by path.
bool PathRace(int64_t res) { return res == -ENOENT || res == -ESTALE || res == -ENODATA; }

bool Refused(int64_t res) { return res == -ELOOP || res == -EXDEV || res == -ENOTDIR; }

}  // namespace

ShardDirMaker::ShardDirMaker(TierShared* shared, const BlockPathParts& path)
    : shared_(shared), block_dir_(path.block_dir), name1_(path.shard1), name2_(path.shard2) {
  shard1_ = block_dir_ + "/" + name1_;
  shard2_ = shard1_ + "/" + name2_;
}

// A shard directory not held: open it, or where its <hhh> is unknown and
// unknown ones lately were missing (a fresh tree), make <hhh> first, in
// the block directory's fd, without a lookup of it before (shard_dirs.h).
bool ShardDirMaker::Begin() {
  if (!shared_->hold_shard_dirs) return false;
  dir_ = shared_->shard_dirs.Find(shard2_, MonotonicNowNs());
  if (dir_ != nullptr) return false;
  probed_ = !shared_->shard_dirs.ParentKnown(shard1_);
  if (!probed_ || !shared_->shard_dirs.MakeParentFirst()) return Go(kOpenShard);
  (void)RoundLeft();  // the first round: always granted, starts the clock
  ++rounds_;
  searching_ = true;
  level_ = 1;
  return Go(kMkdirParent);
}

// Forgets the shard directory's fd (for every op) and opens it again by its path.
bool ShardDirMaker::Reopen() {
  if (dir_ == nullptr || !RoundLeft()) return false;
  ++rounds_;
  shared_->shard_dirs.Drop(shard2_, dir_.get());
  return Go(kOpenShard);
}

bool ShardDirMaker::Remake(int64_t res) { return Again(res); }

void ShardDirMaker::Fill(IoRequest* req) const {
  const int root = shared_->root.get();
  switch (state_) {
    case kOpenShard:  // in its parent's fd right after making it there (AfterMkdir)
      if (parent_.valid()) return OpenInTree(req, parent_.get(), name2_.c_str(), O_PATH | O_DIRECTORY);
      return OpenInTree(req, root, shard2_.c_str(), O_PATH | O_DIRECTORY);
    case kMkdirParent:
      return OpenInTree(req, root, level_ == 1 ? block_dir_.c_str() : shard1_.c_str(), O_PATH | O_DIRECTORY);
    case kMkdir:
      req->op = IoOp::kMkdir;
      req->dirfd = level_ > 0 ? parent_.get() : root;
      req->path = MkdirName();
      req->mode = 0777;
      return;
    case kIdle: return;
  }
}

void ShardDirMaker::OnCompletion(int64_t res) {
  switch (state_) {
    case kOpenShard: return AfterOpenShard(res);
    case kMkdirParent: return AfterMkdirParent(res);
    case kMkdir: return AfterMkdir(res);
    case kIdle: return;
  }
}

void ShardDirMaker::AfterLate(int64_t res) {
  // O_PATH fds: closing one flushes nothing and never waits (the I/O thread does it).
  if ((state_ == kOpenShard || state_ == kMkdirParent) && res >= 0) ::close(static_cast<int>(res));
  parent_ = UniqueFd();
  state_ = kIdle;
}

void ShardDirMaker::Fail(int64_t res, std::string what) {
  error_ = res;
  error_what_ = std::move(what);
  state_ = kIdle;
}

// Level 0 makes the block directory in root_dir; levels 1 and 2 make a
// shard directory in the fd of its parent (kMkdirParent), so mkdirat never
// walks a path that a symlink could have been swapped into.
const char* ShardDirMaker::MkdirName() const {
  return level_ == 0 ? block_dir_.c_str() : level_ == 1 ? name1_.c_str() : name2_.c_str();
}
const std::string& ShardDirMaker::MkdirPath() const {
  return level_ == 0 ? block_dir_ : level_ == 1 ? shard1_ : shard2_;
}

bool ShardDirMaker::RoundLeft() {
  const uint64_t now = MonotonicNowNs();
  if (rounds_ == 0) first_ns_ = now;
  return ShardDirs::MkdirRoundLeft(rounds_, first_ns_, now);
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
bool ShardDirMaker::Again(int64_t res) {
  if (!PathRace(res) || !RoundLeft()) return false;
  searching_ = rounds_++ == 0;
  level_ = searching_ ? 2 : 0;
  return Go(searching_ ? kMkdirParent : kMkdir);
}

// <hhh> exists now: `existed` says whether it did before this op.
void ShardDirMaker::NoteParent(bool existed) {
  if (shared_->hold_shard_dirs) shared_->shard_dirs.SawParent(shard1_, existed, probed_);
  probed_ = false;
}

void ShardDirMaker::AfterOpenShard(int64_t res) {
  parent_ = UniqueFd();
  if (res >= 0) {
    NoteParent(true);
    dir_ = shared_->shard_dirs.Put(shard2_, static_cast<int>(res), MonotonicNowNs());
    state_ = kIdle;
    return;
  }
  // Shard directories on demand. On a shared volume another instance may be
  // creating (or gc removing) the same directory at this moment, which can
  // surface as ENOENT or ESTALE (or ENODATA: GlusterFS while the other
  // client's directory is not yet complete): create and try again.
  if (Again(res)) return;
  if (Refused(res)) return Fail(res, "open " + Shown(shard2_) + ": a symlink or a non-directory on the path (refused)");
  Fail(res, "open " + Shown(shard2_));
}

void ShardDirMaker::AfterMkdirParent(int64_t res) {
  // Up only while searching (before this round's first mkdirat): after it,
  // a missing parent is a race with gc and costs a round, so the op ends.
  if (res == -ENOENT && searching_ && level_ > 0) {  // the parent is missing too: one level up
    --level_;
    if (level_ == 0) state_ = kMkdir;  // the block directory itself, in root_dir
    return;
  }
  if (Again(res)) return;
  if (res < 0) return Fail(res, "open " + Shown(level_ == 1 ? block_dir_ : shard1_));
  if (level_ == 2) NoteParent(true);
  parent_ = UniqueFd(static_cast<int>(res));
  state_ = kMkdir;
}

void ShardDirMaker::AfterMkdir(int64_t res) {
  searching_ = false;
  // The shard directory just made (or found made) is opened in its
  // parent's fd, one name, rather than by its path from root_dir.
  const bool keep = shared_->hold_shard_dirs && level_ == 2 && (res >= 0 || res == -EEXIST);
  if (!keep) parent_ = UniqueFd();
  if (Again(res)) return;
  if (res < 0 && res != -EEXIST) return Fail(res, "mkdir " + Shown(MkdirPath()));
  if (res >= 0) made_ |= 1u << level_, shared_->shard_dirs.ForgetEntrySynced(MkdirPath());
  if (level_ == 1) NoteParent(res == -EEXIST);
  if (++level_ < 3) return void(state_ = kMkdirParent);
  // All made: open the deepest where it is held; elsewhere the op names root-relative paths.
  state_ = shared_->hold_shard_dirs ? kOpenShard : kIdle;
}

}  // namespace kvtier::internal
