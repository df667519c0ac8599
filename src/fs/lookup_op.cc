// The lookup op: one statx per key (L70), the block named as block_at.h
// says; in a sealed tier only a file of a sealed block's size counts (L170),
// looked for in each key's namespace in turn (L171).
#include <sys/stat.h>

#include "fs/block_at.h"
#include "fs/block_codec.h"
#include "fs/block_ops.h"

namespace kvtier::internal {
namespace {

class LookupOp final : public FsBlockOp {
 public:
  LookupOp(TierShared* shared, std::string rel_path) : shared_(shared), rel_(std::move(rel_path)) {}
  // A statx reads no block data: lookups, which a serving engine issues
  // every step, must not hold stores back as loads do.
  bool ReadsData() const override { return false; }
  bool NextRequest(IoRequest* req) override {
    if (done_) return false;
    *req = IoRequest{};
    at_ = FindBlockAt(shared_, rel_);
    // No-follow: a symlink is no block (its target's file type does not matter).
    StatxNoFollow(req, at_.fd, at_.name, &stx_);
    req->deadline_ns = DeadlineNs(*shared_);
    return true;
  }
  void OnAbandon() override {
    if (!done_) result = AbandonedResult("statx", JoinRoot(shared_->root_dir, rel_), shared_->io_timeout_ms);
    abandoned_ = true;
  }
  void OnCompletion(int64_t res) override {
    done_ = true;
    if (abandoned_) return;  // its result was already taken
    if (res == 0) {
      // L170: in a sealed namespace only a file of a sealed block's size is a block (the codec's rule).
      const bool block = !NotRegular(stx_) && shared_->codec->IsBlockSize(stx_.stx_size, shared_->row_bytes);
      result = {block ? KeyOutcome::kOk : KeyOutcome::kMiss, Status()};
    } else if (NotABlock(res)) {
      if (NextKey()) return;
      result = {KeyOutcome::kMiss, Status()};
    } else {
      result = {KeyOutcome::kError,
                ErrnoToStatus(static_cast<int>(-res), "statx " + JoinRoot(shared_->root_dir, rel_))};
    }
  }

 private:
  // L171: no file in key i's namespace: the next request looks in key i + 1's.
  bool NextKey() {
    if (!NextNamespace(*shared_, &key_index_, &rel_)) return false;
    done_ = false;
    return true;
  }

  TierShared* shared_;
  std::string rel_;
  BlockAt at_;  // where rel_ is named (held until the op is freed)
  struct statx stx_{};
  size_t key_index_ = 0;
  bool done_ = false, abandoned_ = false;
};

}  // namespace

std::unique_ptr<FsBlockOp> MakeLookupOp(TierShared* shared, std::string rel_path) {
  return std::make_unique<LookupOp>(shared, std::move(rel_path));
}

}  // namespace kvtier::internal
