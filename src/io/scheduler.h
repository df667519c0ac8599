// IoScheduler: pure policy, no syscalls. It holds block operations (each a
// small state machine that issues one IoRequest at a time) in two queues and
// decides which run:
//
//  * Read class (loads, lookups) and write class (stores) each have their own
//    in-flight budget (vLLM's n_read_threads / n_write_threads).
//  * A slot serves its own class first and takes work from the other queue
//    only when its own queue is empty (vLLM's stealing rule), except that a
//    quarter of the read slots (at least one) never take stores: a load that
//    arrives during a store backlog starts at once, and idle capacity on
//    either side is still used.
//  * Read priority at the disk: while loads (read-class ops that move data;
//    existence lookups do not count) run or wait (and for a short
//    linger after the last one, so a caller's gap between two loads does not
//    reopen the gate), at most `stores_while_loading_max` stores run at once,
//    whatever slots are free. A saturating store stream would otherwise keep
//    every write slot busy and a load would queue in the device behind all
//    of their writes; running stores are never interrupted.
//  * Retryable results (-EINTR, -EAGAIN, and -ESTALE from a path lookup on a
//    network filesystem) re-issue the same request; the op state machines
//    handle short transfers and everything else.
//  * Abandonment (docs/sick-volumes.md): a request still in the kernel abandon_after_ns
//    after it was issued is abandoned, not waited for. The backend has
//    already cancelled it at its deadline, but a wait that only a fatal
//    signal ends (a hung FUSE daemon, a hard NFS mount) ignores cancels. The
//    op's result becomes final at once (BlockOp::OnAbandon, handed out by
//    TakeAbandoned) while the op itself, with its slot and whatever memory
//    the kernel may still write, stays here until the kernel returns the
//    request; then it runs its cleanup (closing an fd, removing a temp file,
//    issuing no new rename) and ends in TakeFinished. Stuck requests are thus
//    bounded by the slots. While any is stuck, a queued op that has waited
//    abandon_after_ns is failed the same way, so nothing queues forever
//    behind slots the kernel holds.
//
// Thread safety: none; the fs tier's I/O thread owns it. Tests drive it directly.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "io/io_request.h"

namespace kvtier::internal {

enum class IoClass { kRead, kWrite };

class BlockOp {
 public:
  virtual ~BlockOp() = default;
  // Fills the next request, or returns false when the op is finished.
  virtual bool NextRequest(IoRequest* req) = 0;
  // The result of the request last returned by NextRequest.
  virtual void OnCompletion(int64_t res) = 0;
  // For read-class ops: whether the op reads block data from the disk (a
  // load), which holds stores back; a metadata-only lookup does not.
  virtual bool ReadsData() const { return true; }
  // The request in flight (or, for an op never started, the queue wait)
  // outlived the tier's I/O deadline: make the result final now (a timeout,
  // unless the op already had its outcome and was only cleaning up), and from
  // here on issue only cleanup requests. OnCompletion still receives the
  // abandoned request's late result.
  virtual void OnAbandon() = 0;
  // False while the request in flight writes memory the op does not own
  // (a read straight into the caller's row): such a request is counted
  // stuck but never abandoned, since its job's result would free the row
  // while the kernel may still write it. The job then waits for the kernel.
  virtual bool MayAbandon() const { return true; }
  // Set by the scheduler when TakeAbandoned handed the op's result out: the
  // op's later arrival in TakeFinished only frees it.
  bool result_taken = false;
};

// The fs tier sets the two budgets and stores_while_loading_max from its
// options of the same meaning (FsTierOptions: n_read_threads,
// n_write_threads, stores_while_loading_max), which hold their one default;
// the zeros here only stand for "set me" (tests set them too).
struct SchedulerLimits {
  int reads_in_flight_max = 0;   // concurrent read-class ops, > 0
  int writes_in_flight_max = 0;  // concurrent write-class ops, > 0
  int retries_max = 64;          // EINTR/EAGAIN re-issues per request before giving up
  int stores_while_loading_max = 0;  // store ops at once while loads are active; 0: no cap
  uint64_t read_linger_ns = 10'000'000;  // loads count as active this long after the last one
  // A request still in flight this long after it was issued is abandoned
  // (see above); 0: never (io_timeout_ms 0).
  uint64_t abandon_after_ns = 0;
};

class IoScheduler {
 public:
  explicit IoScheduler(SchedulerLimits limits) : limits_(limits) {}

  // `now_ns` times the op's queue wait (see abandon_after_ns).
  void Enqueue(std::unique_ptr<BlockOp> op, IoClass cls, uint64_t now_ns = 0);
  // Appends the requests to issue now (starting queued ops within budget).
  // `now_ns` (CLOCK_MONOTONIC) times the read-priority linger and the
  // requests' abandonment.
  void Emit(std::vector<IoRequest>* out, uint64_t now_ns);
  // Feeds a completion back; unknown tags are ignored.
  void Complete(const IoCompletion& completion);
  // Moves finished ops out (an op with result_taken only needs freeing).
  void TakeFinished(std::vector<std::unique_ptr<BlockOp>>* out);
  // Abandons what outlived abandon_after_ns at `now_ns` (see above); returns
  // how many requests were newly found stuck plus how many queued ops expired
  // behind them (deadline misses, for the root's health).
  size_t Expire(uint64_t now_ns);
  // Ops whose result Expire made final while the op stays in flight (not
  // owned: valid until the op comes out of TakeFinished).
  void TakeAbandoned(std::vector<BlockOp*>* out);
  // Moves every queued op out, unstarted (a root that is down fails them).
  void TakeQueued(std::vector<std::unique_ptr<BlockOp>>* out);
  // Moves every op out: for a tier that stops while the kernel still holds
  // some of their requests, which must then never be freed.
  void TakeAll(std::vector<std::unique_ptr<BlockOp>>* out);

  bool idle() const { return running_.empty() && read_queue_.empty() && write_queue_.empty(); }
  // Nothing queued or about to be issued, and every op in flight has had
  // its result taken and waits on a stuck request (one the kernel holds):
  // what a closing tier may leave behind.
  bool only_stuck() const {
    return read_queue_.empty() && write_queue_.empty() && reissue_.empty() && abandoned_running_ == running_.size() &&
           stuck_ == running_.size();
  }
  // Whether `tag` is a request found stuck (its late completion is no new miss).
  bool is_stuck(uint64_t tag) const {
    auto it = running_.find(tag);
    return it != running_.end() && it->second.stuck;
  }
  // Requests abandoned and not yet returned by the kernel.
  size_t stuck() const { return stuck_; }
  size_t queued(IoClass cls) const { return cls == IoClass::kRead ? read_queue_.size() : write_queue_.size(); }
  size_t in_flight() const { return running_.size(); }
  // Store ops running, in either class's slots.
  int stores_running() const { return stores_running_; }

 private:
  struct Running {
    std::unique_ptr<BlockOp> op;
    IoClass slot;        // whose budget it uses
    IoClass cls;         // the queue it came from (kWrite: a store)
    bool load;           // a read-class op that ReadsData()
    IoRequest pending;   // the request in flight
    int retries = 0;
    uint64_t issued_ns = 0;  // when `pending` was emitted
    bool abandoned = false;  // result handed out; only cleanup is left
    bool late = false;       // `pending` was in flight when the op was abandoned: never retried
    bool stuck = false;      // `pending` outlived abandon_after_ns
  };
  struct Queued {
    std::unique_ptr<BlockOp> op;
    uint64_t since_ns;
  };
  bool StartOne(IoClass slot, std::vector<IoRequest>* out);
  int ReadReserve() const { return std::max(1, limits_.reads_in_flight_max / 4); }
  bool StoreMayStart() const;
  void NoteReads(uint64_t now_ns);
  void Advance(uint64_t tag, Running* run, std::vector<IoRequest>* out);
  void Abandon(Running* run);
  size_t ExpireQueue(std::deque<Queued>* queue, IoClass cls, uint64_t now_ns);
  void Unqueue(IoClass cls, BlockOp* op);

  SchedulerLimits limits_;
  std::deque<Queued> read_queue_, write_queue_;
  std::unordered_map<uint64_t, Running> running_;  // by tag of the request in flight
  std::vector<IoRequest> reissue_;                 // requests produced by Complete()
  std::vector<std::unique_ptr<BlockOp>> finished_;
  std::vector<BlockOp*> abandoned_;  // results made final, not yet taken
  size_t abandoned_running_ = 0;     // running ops with abandoned set
  size_t stuck_ = 0;                 // running ops with stuck set
  int reads_running_ = 0, writes_running_ = 0;  // by slot
  int stores_running_ = 0;     // write-class ops, in any slot
  int loads_running_ = 0, loads_queued_ = 0;  // read-class ops that ReadsData()
  bool reading_ = false;           // loads active now or within the linger
  uint64_t last_read_ns_ = 0;      // when loads were last seen active
  uint64_t next_tag_ = 1;
};

}  // namespace kvtier::internal
