// TierSpace: what one fs tier root knows about its space. It owns
//  * the max_bytes index (capacity_index.h) when the tier has a budget:
//    store batches reserve room through it and evict LRU blocks, loads pin
//    their blocks, hits refresh recency;
//  * when startup_scan asks for it (StartupScanWanted), the startup scan of
//    the tier's <ns>_r<rank> directory (namespace_scan.h) on a thread of its
//    own, so Open never waits for a big directory. Until it finishes, the
//    index lists only what the scan has reached plus what the tier stored or
//    found since Open: usage can exceed max_bytes by the part not yet
//    scanned, and the first store after the scan evicts the excess.
//    kvtier_fs_namespace_scan_complete says which. The scan costs calls per
//    block already there, for every instance that opens the directory, so
//    by default only max_bytes runs it;
//  * the volume's used and free bytes, fstatvfs of root_dir every
//    kSampleIntervalMs on another thread (a hung mount stalls only that
//    thread; the gauges then keep their last sample).
// Without max_bytes the namespace gauges are the scan's totals (0 without a
// scan) plus the blocks this tier stored since Open (approximate: a block
// stored while the scan runs may be counted twice; blocks removed by gc or
// other writers are not subtracted until the tier reopens). Without a scan,
// an index (max_bytes with startup_scan "off") lists what this tier stored,
// loaded or found since Open.
//
// The I/O loop calls the hooks below from its submitters and its thread; they
// take the index's lock only when there is an index. Closing waits for the
// two threads briefly (kCloseWaitMs), then leaves them to finish on their own
// (they own what they touch), so a hung mount never holds the close.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "fs/block_ops.h"
#include "fs/capacity_index.h"
#include "kvtier/fs_tier.h"

namespace kvtier::internal {

inline constexpr uint64_t kSampleIntervalMs = 5000;
inline constexpr uint64_t kCloseWaitMs = 200;

// Whether the tier's open starts the walk of its block directory:
// startup_scan "on", or "auto" with max_bytes on a `local_root` (a local
// disk, where the walk is cheap and the directory usually this host's own).
// On a network or FUSE root every instance's walk would cost ~20 round
// trips per block on a metadata server they all share, so "auto" does not
// walk there: max_bytes learns the blocks from the tier's own traffic
// (FORMAT.md L140) and the volume's bound is `kvtier gc --watch`'s.
bool StartupScanWanted(const FsTierOptions& tier, bool local_root);

// kInvalidArgument when a budget leaves a root less than one block
// (`roots`: how many roots share max_bytes, path_sharding).
Status CheckCapacityOptions(const FsTierOptions& tier, uint64_t row_bytes, size_t roots);

class TierSpace {
 public:
  // Starts the scan and the sampler over a duplicate of `root_fd`.
  static std::unique_ptr<TierSpace> Start(const FsTierOptions& tier, bool local_root, int root_fd,
                                          std::string block_dir, uint64_t row_bytes);
  ~TierSpace();
  TierSpace(const TierSpace&) = delete;
  TierSpace& operator=(const TierSpace&) = delete;

  bool bounded() const { return index_ != nullptr; }
  // The keys' index identities when bounded (empty otherwise: no hook needs them).
  std::vector<CapacityKey> Keys(std::span<const OffloadKey> keys) const;
  // A store batch's admission (OK when unbounded); on success the root-
  // relative paths of the blocks to unlink are appended to `evict`.
  Status AdmitStore(std::span<const CapacityKey> keys, std::vector<std::string>* evict);
  void PinLoads(std::span<const CapacityKey> keys);
  // A key's op ended (`key`: nullptr when unbounded).
  void OnKeyDone(JobKind kind, const CapacityKey* key, KeyOutcome outcome);
  void Fill(FsTierMetrics* m) const;

  struct State;  // shared with the threads (tier_space.cc)

 private:
  TierSpace() = default;

  std::shared_ptr<State> state_;
  std::shared_ptr<CapacityIndex> index_;
  std::string block_dir_;
  uint64_t row_bytes_ = 0;
  std::atomic<uint64_t> stored_bytes_{0}, stored_blocks_{0};  // unbounded: since Open
};

// An unlink of an evicted block, `rel_path` relative to root_dir; a file
// already gone counts as done. Its result is not a key's (the I/O loop skips it).
std::unique_ptr<FsBlockOp> MakeEvictOp(TierShared* shared, std::string rel_path);

}  // namespace kvtier::internal
