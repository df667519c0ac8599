// The volume's collector lease (FORMAT.md L120-L123): of all the
// `kvtier gc --watch` processes on one volume (one per node of a DaemonSet),
// only the one holding <root>/.kvtier/gc.lease removes anything; the others
// watch it and take it over when its holder stops refreshing it.
//
// No clock is compared across machines: a lease is stale when an observer has
// seen it unchanged (same inode, mtime and body) for ttl_ms of its own
// monotonic clock, and a holder may remove only within validity_ms (a
// fraction of the TTL) of its own last successful check. Creation is a
// link(2), which fails on an existing name; a takeover first renames the
// stale file aside under a name of the taker's own and checks that what it
// moved is the very file it judged stale (else puts it back), so two takers
// cannot both win, and a new holder settles (waits out any earlier holder's
// validity) before its first removal. The argument, NFS included, is in
// FORMAT.md L122.
//
// What sits at gc.lease need not be a lease (FORMAT.md L153): a symlink, a
// FIFO, a directory or a file it cannot read is judged by its lstat alone,
// never opened (a FIFO's open can block) nor followed, and moved aside like
// a stale lease once unchanged for the TTL. What stops it from collecting is
// kept in problem() for the caller to log.
//
// The lease belongs to the directory its root path named at Open (device
// and inode). Once the path names another directory or none (the root was
// moved or removed and made anew), the lease is given up at the next tick,
// root_replaced() says so and MayCollect() answers false; a collector also
// asks RootStill() before each removal, so none follows the change. A new CollectorLease then competes for the
// lease of the directory the path names now.
//
// Thread-safety: Tick and Release from one thread (the watch's lease thread);
// MayCollect, state, problem and the counters from any.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "kvtier/result.h"
#include "util/dir_fd.h"

namespace kvtier::internal {

class CollectorLease {
 public:
  enum class State { kObserving, kSettling, kHolding };

  // Creates <root>/.kvtier (no symlink followed below root) and a token; takes
  // nothing yet. ttl_ms > 0. Errors: ErrnoToStatus naming the directory.
  static Result<std::unique_ptr<CollectorLease>> Open(const std::string& root, uint64_t ttl_ms);

  // One step of the protocol; call it every refresh_ms(). A holder checks that
  // the lease is still its own and refreshes its mtime; an observer watches it
  // and takes it when absent or stale.
  State Tick();
  // Tick at a given steady-clock time (ns): the tests step time by hand.
  State TickAt(int64_t now_ns);
  // A holder gives the lease up (removed only if still its own), so an
  // observer takes it at its next tick.
  void Release();

  // Holding, the last successful check is within validity_ms, and the last
  // tick found the root path naming the directory whose lease it is.
  bool MayCollect() const;
  bool MayCollectAt(int64_t now_ns) const;
  State state() const { return state_.load(); }
  uint64_t acquisitions() const { return acquisitions_.load(); }
  // Times an observer saw the lease change under its eyes (refreshed,
  // replaced, or removed by its holder): another collector is alive. Never
  // counts the first sighting, nor a stale lease this one took over.
  uint64_t changes_seen() const { return changes_seen_.load(); }
  uint64_t refresh_ms() const { return refresh_ms_; }
  // Why this collector cannot take or keep the lease now ("" when nothing
  // stops it but another collector's live lease), naming the lease path:
  // a non-lease at gc.lease, one that could not be moved aside, a lease
  // that could not be created. problem_seq() grows with each new statement.
  std::string problem() const;
  uint64_t problem_seq() const { return problem_seq_.load(); }
  // The last problem stated still keeps this collector from the lease (a
  // non-lease it could not move, a lease it could not create or look at).
  bool blocked() const { return blocked_.load(); }
  // The root path no longer names the directory of this lease (moved,
  // removed): the lease was given up and this object collects no more.
  bool root_replaced() const { return root_replaced_.load(); }
  // Lease thread only. The live-or-not lease of another collector that this
  // observer watches (a regular file at gc.lease, not its own), as its owner
  // record says (FORMAT.md L121, L195): "collector <token> (pid <pid>) since
  // <UTC time>"; "" while it holds the lease, finds none, or a non-lease.
  std::string OtherHolder() const;
  // Whether the root path names the directory of this lease now: one stat,
  // announced to the io watch of the calling thread (io/io_watch.h).
  bool RootStill() const;
  const std::string& lease_path() const { return lease_path_; }
  // L122's R for a TTL: ttl_ms / 15, clamped to 20 ms..2 s.
  static uint64_t RefreshMsFor(uint64_t ttl_ms);
  const std::string& token() const { return token_; }
  // Tests: runs between judging a lease stale and renaming it aside, where
  // another collector's takeover may fall.
  void SetBeforeTakeoverForTest(std::function<void()> fn) { before_takeover_ = std::move(fn); }

 private:
  CollectorLease(UniqueFd dir, std::string display, std::string token, uint64_t ttl_ms);
  bool SameAsSeen(const struct stat& st, const std::string& body) const;
  void Discard(const std::string& aside, mode_t mode, int64_t now_ns);
  void PutBack(const std::string& aside, mode_t mode);
  void Problem(int64_t now_ns, std::string what, bool blocking);
  void TickHolder(int64_t now_ns);
  void TickObserver(int64_t now_ns);
  bool TryCreate(int64_t now_ns);
  void TryTakeover(int64_t now_ns);
  void Lose(const char* why);

  UniqueFd dir_;         // <root>/.kvtier
  std::string display_;  // its path, for messages
  std::string lease_path_;  // display_ + "/gc.lease"
  std::string root_;        // the root path, as given
  uint64_t root_dev_ = 0, root_ino_ = 0;  // the directory it named at Open
  std::atomic<bool> root_replaced_{false};
  mutable std::mutex problem_mu_;
  std::string problem_;  // guarded by problem_mu_
  int64_t problem_ns_ = 0;  // when problem_ was last stated (steady clock)
  std::atomic<uint64_t> problem_seq_{0};
  std::atomic<bool> blocked_{false};
  uint64_t junk_n_ = 0;  // directories moved to CollectorLeaseJunkName
  std::string token_, body_;
  uint64_t ttl_ms_, refresh_ms_, validity_ms_;
  std::atomic<State> state_{State::kObserving};
  std::atomic<int64_t> valid_until_ns_{0};  // steady clock
  std::atomic<uint64_t> acquisitions_{0}, changes_seen_{0};
  int64_t acquired_ns_ = 0, last_ok_ns_ = 0;
  // What the observer saw last, and since when (steady clock).
  std::string seen_;
  uint64_t seen_ino_ = 0;
  uint32_t seen_mode_ = 0;
  int64_t seen_mtime_ns_ = 0, seen_since_ns_ = 0;
  std::function<void()> before_takeover_;
};

}  // namespace kvtier::internal
