// Making a store's shard directories ("<ns>_r<rank>/<hhh>/<hh>_g<g>",
// FORMAT.md L145-L147) where they are missing and, where the tier holds them
// (network and FUSE volumes: TierShared::hold_shard_dirs), opening the
// deepest one for the store to name its files in (shard_dirs.h).
//
// A sub-machine, not an op of its own: it issues one IoRequest at a time as
// a BlockOp does (io/scheduler.h), but the op that needs the directory
// drives it (store_op.cc): while busy() it hands it its requests' slots and
// their completions, then reads the outcome. The store protocol thus never
// sees a mkdir, and another writer of shard directories can drive the same
// steps.
//
// What it keeps of kResolveInTree's rules (block_ops.h):
//  * every open is an openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
//    from the root fd or from the fd of the parent it just opened;
//  * the block directory is made in root_dir's fd, a shard directory with
//    mkdirat in its parent's fd, itself opened as above: no mkdirat walks a
//    path that a symlink could have been swapped into;
//  * the deepest directory, once made, is opened in its parent's fd (one
//    name), and held (ShardDirs::Put) where the tier holds directories;
//  * a held directory that has gone (gc removed it: ENOENT) or whose handle
//    went stale (ESTALE) is dropped and opened again by its path (Reopen),
//    made again if missing;
//  * ENOENT, ESTALE or ENODATA from a race with another instance's mkdir or
//    gc's removal start another round, within ShardDirs::MkdirRoundLeft;
//  * abandoned at its deadline, a late answer only closes what it opened
//    (AfterLate), and the op's cleanup goes on.
#pragma once

#include <cstdint>
#include <string>

#include "fs/block_ops.h"
#include "fs/shard_dirs.h"
#include "util/dir_fd.h"

namespace kvtier::internal {

class ShardDirMaker {
 public:
  ShardDirMaker(TierShared* shared, const BlockPathParts& path);

  // The directories' paths, relative to root_dir.
  const std::string& block_dir() const { return block_dir_; }
  const std::string& shard1() const { return shard1_; }
  const std::string& shard2() const { return shard2_; }
  // The held shard directory (shard2()) the op names its files in, or
  // nullptr: names are then root-relative paths.
  const ShardDirs::Ref& held() const { return dir_; }

  // The ways in. Each returns true when requests follow (busy()).
  // Begin: the first step of an op where the tier holds directories: the
  // cached one if fresh (no request), else open it, or in a fresh tree make
  // <hhh> first (shard_dirs.h, MakeParentFirst).
  bool Begin();
  // The held directory went away under a request through it (ENOENT, or
  // ESTALE: a stale handle): drop it and open it again by its path. Each
  // time costs a round.
  bool Reopen();
  // A request by root-relative path got `res`: where that says part of the
  // path is missing (ENOENT, ESTALE, ENODATA), make the directories again.
  bool Remake(int64_t res);

  bool busy() const { return state_ != kIdle; }
  // The request of the step now (busy()), on a cleared IoRequest.
  void Fill(IoRequest* req) const;
  void OnCompletion(int64_t res);
  // The op was abandoned while a request of this was in flight: its late
  // answer `res` closes what it opened, and nothing more is issued.
  void AfterLate(int64_t res);

  // Once !busy(): whether it failed, and the errno and message to end the op with.
  bool failed() const { return error_ < 0; }
  int64_t error() const { return error_; }
  const std::string& error_what() const { return error_what_; }
  // Whether this op made the directory of `level` (0: the block directory,
  // 1: <hhh>, 2: <hh>_g<g>): its entry in its parent is new (durability full syncs it).
  bool made(int level) const { return (made_ >> level & 1) != 0; }
  // The syscall and the root-relative path of the request in flight.
  const char* Syscall() const { return state_ == kMkdir ? "mkdir" : "open"; }
  const std::string& InFlightPath() const { return state_ == kOpenShard ? shard2_ : MkdirPath(); }

 private:
  enum State { kIdle, kOpenShard, kMkdirParent, kMkdir };

  bool Go(State next) { state_ = next; return true; }
  void Fail(int64_t res, std::string what);
  std::string Shown(const std::string& rel) const { return JoinRoot(shared_->root_dir, rel); }
  const char* MkdirName() const;
  const std::string& MkdirPath() const;
  bool RoundLeft();
  bool Again(int64_t res);
  void NoteParent(bool existed);
  void AfterOpenShard(int64_t res);
  void AfterMkdirParent(int64_t res);
  void AfterMkdir(int64_t res);

  TierShared* shared_;
  std::string block_dir_, shard1_, shard2_;  // relative to root_dir
  std::string name1_, name2_;                // the shard directories' own names
  ShardDirs::Ref dir_;  // the held shard2_ (hold_shard_dirs)
  UniqueFd parent_;     // O_PATH: the parent of the directory being made (then of shard2_ opened: kOpenShard)
  State state_ = kIdle;
  int level_ = 0;   // the directory being made (as made())
  int rounds_ = 0;  // rounds of creation so far (MkdirRoundLeft)
  uint64_t first_ns_ = 0;  // when this op first found a shard directory missing
  unsigned made_ = 0;      // bit L: made(L)
  bool searching_ = false;  // this round has made no directory yet (AfterMkdirParent)
  bool probed_ = false;     // began without knowing whether shard1_ exists (ShardDirs::SawParent)
  int64_t error_ = 0;
  std::string error_what_;
};

}  // namespace kvtier::internal
