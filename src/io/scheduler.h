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
//
// Thread safety: none; the engine thread owns it. Tests drive it directly.
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
};

class IoScheduler {
 public:
  explicit IoScheduler(SchedulerLimits limits) : limits_(limits) {}

  void Enqueue(std::unique_ptr<BlockOp> op, IoClass cls);
  // Appends the requests to issue now (starting queued ops within budget).
  // `now_ns` (CLOCK_MONOTONIC) times the read-priority linger.
  void Emit(std::vector<IoRequest>* out, uint64_t now_ns);
  // Feeds a completion back; unknown tags are ignored.
  void Complete(const IoCompletion& completion);
  // Moves finished ops out.
  void TakeFinished(std::vector<std::unique_ptr<BlockOp>>* out);

  bool idle() const { return running_.empty() && read_queue_.empty() && write_queue_.empty(); }
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
  };
  bool StartOne(IoClass slot, std::vector<IoRequest>* out);
  int ReadReserve() const { return std::max(1, limits_.reads_in_flight_max / 4); }
  bool StoreMayStart() const;
  void NoteReads(uint64_t now_ns);
  void Advance(uint64_t tag, Running* run, std::vector<IoRequest>* out);

  SchedulerLimits limits_;
  std::deque<std::unique_ptr<BlockOp>> read_queue_, write_queue_;
  std::unordered_map<uint64_t, Running> running_;  // by tag of the request in flight
  std::vector<IoRequest> reissue_;                 // requests produced by Complete()
  std::vector<std::unique_ptr<BlockOp>> finished_;
  int reads_running_ = 0, writes_running_ = 0;  // by slot
  int stores_running_ = 0;     // write-class ops, in any slot
  int loads_running_ = 0, loads_queued_ = 0;  // read-class ops that ReadsData()
  bool reading_ = false;           // loads active now or within the linger
  uint64_t last_read_ns_ = 0;      // when loads were last seen active
  uint64_t next_tag_ = 1;
};

}  // namespace kvtier::internal
