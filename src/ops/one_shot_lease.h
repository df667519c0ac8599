// The collector lease as a one-shot gc holds it (CollectOnce, FORMAT.md
// L124): a cron gc on several nodes, or one beside a watch, must not trim
// the same bound twice.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "kvtier/ops.h"

namespace kvtier::internal {

class CollectorLease;

// Whether `root` may hold the volume's .kvtier (FORMAT.md L120): empty, or
// holding .kvtier, a namespace or a block directory, or `force`.
// The errno's status when it cannot be listed.
Result<bool> RootLooksLikeOne(const std::string& root, bool force);
bool LooksLikeRootDir(const std::string& root, bool force);

// It watches the lease from before the walk and takes it when absent or
// stale, so that the walk overlaps the wait; capacity removals wait until it
// holds the lease, and are skipped when a live collector holds it. Temp
// files, orphaned namespaces and short blocks are removed either way (each
// is one unlink of a file still the inode judged: two collectors remove it
// once).
class OneShotLease : public std::enable_shared_from_this<OneShotLease> {
 public:
  // Starts a thread that opens and ticks the lease of the first root of
  // `o.root` (not created under a directory that does not look like a root:
  // Gc refuses it). Nothing here waits on the volume: on a hung mount the
  // thread is left behind and Gate answers at its deadline.
  static std::shared_ptr<OneShotLease> Start(const GcOptions& o, uint64_t ttl_ms);
  // Waits until the lease is held (""), or says why not: a live collector
  // holds it, it could not be taken within the TTL and a settle, or the
  // lease directory cannot be made. The first answer is every later one.
  std::string Gate();
  // Held once, and no longer (a takeover, or Finish): remove nothing more.
  bool Lost() const;
  // Whether Gate's answer was a failure to take the lease (it could not be
  // made or read, or not within its deadline), not another collector's
  // holding it: the bound went unenforced and nobody else enforces it.
  bool Failed();
  // Stops ticking and gives the lease up (if held), waiting at most 2 s.
  void Finish();

 private:
  OneShotLease() = default;
  void Tick(const std::string& first_root, bool force, uint64_t ttl_ms);

  std::shared_ptr<CollectorLease> lease_;  // set before phase_ becomes kTicking
  std::string where_, open_error_;         // set before phase_ leaves kStarting
  enum Phase { kStarting, kFailed, kTicking };
  std::atomic<int> phase_{kStarting};
  std::atomic<bool> gated_{false}, done_{false};
  int64_t deadline_ns_ = 0;
  std::mutex mu_;  // guards answer_, answered_, exited_
  std::condition_variable exited_cv_;
  bool answered_ = false, exited_ = false, other_collector_ = false;
  std::string answer_;
};

}  // namespace kvtier::internal
