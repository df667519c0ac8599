// IoScheduler (see header).
#include "io/scheduler.h"

#include <cerrno>
#include <cstring>

namespace kvtier::internal {

void IoScheduler::Enqueue(std::unique_ptr<BlockOp> op, IoClass cls, uint64_t now_ns) {
  if (cls == IoClass::kRead && op->ReadsData()) ++loads_queued_;
  (cls == IoClass::kRead ? read_queue_ : write_queue_).push_back({std::move(op), now_ns});
}

// Asks the op for its next request; a finished op frees its slot.
void IoScheduler::Advance(uint64_t old_tag, Running* run, std::vector<IoRequest>* out) {
  IoRequest req;
  if (!run->op->NextRequest(&req)) {
    (run->slot == IoClass::kRead ? reads_running_ : writes_running_)--;
    if (run->cls == IoClass::kWrite) --stores_running_;
    if (run->load) --loads_running_;
    if (run->abandoned) --abandoned_running_;
    finished_.push_back(std::move(run->op));
    running_.erase(old_tag);
    return;
  }
  req.tag = next_tag_++;
  Running moved{std::move(run->op), run->slot, run->cls, run->load, req, 0, 0, run->abandoned, false, false};
  running_.erase(old_tag);
  running_.emplace(req.tag, std::move(moved));
  out->push_back(req);
}

bool IoScheduler::StartOne(IoClass slot, std::vector<IoRequest>* out) {
  auto& own = slot == IoClass::kRead ? read_queue_ : write_queue_;
  auto& other = slot == IoClass::kRead ? write_queue_ : read_queue_;
  // Steal only when our own queue is empty; read slots keep a reserve that
  // never takes stores, so a load arriving during a store backlog starts at
  // once instead of queueing behind stores in the kernel.
  const bool may_steal = slot == IoClass::kWrite || reads_running_ < limits_.reads_in_flight_max - ReadReserve();
  // Under read priority a store waits even for a free slot of its own.
  const bool own_ok = !own.empty() && (slot == IoClass::kRead || StoreMayStart());
  const bool other_ok = may_steal && !other.empty() && (slot == IoClass::kWrite || StoreMayStart());
  if (!own_ok && !other_ok) return false;
  auto& queue = own_ok ? own : other;
  const IoClass cls = &queue == &read_queue_ ? IoClass::kRead : IoClass::kWrite;
  std::unique_ptr<BlockOp> op = std::move(queue.front().op);
  queue.pop_front();
  (slot == IoClass::kRead ? reads_running_ : writes_running_)++;
  const bool load = cls == IoClass::kRead && op->ReadsData();
  if (cls == IoClass::kWrite) ++stores_running_;
  if (load) {
    ++loads_running_;
    --loads_queued_;
  }
  const uint64_t placeholder = next_tag_++;
  Running& run = running_.emplace(placeholder, Running{std::move(op), slot, cls, load, {}}).first->second;
  Advance(placeholder, &run, out);
  return true;
}

bool IoScheduler::StoreMayStart() const {
  return !reading_ || limits_.stores_while_loading_max <= 0 || stores_running_ < limits_.stores_while_loading_max;
}

// Loads count as active while any runs or waits, and for read_linger_ns
// after: a caller that submits its next load a moment after the last one
// finished must not find every write slot refilled with stores.
void IoScheduler::NoteReads(uint64_t now_ns) {
  if (loads_running_ > 0 || loads_queued_ > 0) {
    reading_ = true;
    last_read_ns_ = now_ns;
  } else if (reading_ && now_ns >= last_read_ns_ + limits_.read_linger_ns) {
    reading_ = false;
  }
}

void IoScheduler::Emit(std::vector<IoRequest>* out, uint64_t now_ns) {
  const size_t first = out->size();
  out->insert(out->end(), reissue_.begin(), reissue_.end());
  reissue_.clear();
  NoteReads(now_ns);
  // Read slots first: a load waiting behind a store backlog starts here.
  while (reads_running_ < limits_.reads_in_flight_max && StartOne(IoClass::kRead, out)) {
  }
  while (writes_running_ < limits_.writes_in_flight_max && StartOne(IoClass::kWrite, out)) {
  }
  // Abandonment counts from here: the backend gets these requests now.
  for (size_t i = first; i < out->size(); ++i) running_.at((*out)[i].tag).issued_ns = now_ns;
}

void IoScheduler::Complete(const IoCompletion& c) {
  auto it = running_.find(c.tag);
  if (it == running_.end()) return;
  Running& run = it->second;
  if (run.stuck) {
    run.stuck = false;
    --stuck_;
  }
  // ESTALE on a path lookup: a network filesystem's cached handle for some
  // directory on the path went stale (another client replaced it); a fresh
  // lookup succeeds, as the kernel's own single retry shows. An fd's ESTALE
  // is final and goes to the op, and so is one of a single name in a
  // directory fd (a held shard directory, FORMAT.md L146): there the stale
  // handle is the fd's own, which no new lookup refreshes; the op reopens it.
  const bool stale_path = c.res == -ESTALE && run.pending.path != nullptr &&
                          std::strchr(run.pending.path, '/') != nullptr;
  const bool retryable = c.res == -EINTR || c.res == -EAGAIN || stale_path;
  if (retryable && !run.late && run.retries < limits_.retries_max) {
    ++run.retries;
    run.issued_ns = 0;  // not the kernel's until emitted again
    reissue_.push_back(run.pending);
    return;
  }
  run.op->OnCompletion(c.res);
  Advance(c.tag, &run, &reissue_);
}

void IoScheduler::TakeFinished(std::vector<std::unique_ptr<BlockOp>>* out) {
  for (auto& op : finished_) out->push_back(std::move(op));
  finished_.clear();
}

void IoScheduler::Abandon(Running* run) {
  run->abandoned = run->late = true;
  ++abandoned_running_;
  run->op->OnAbandon();
  run->op->result_taken = true;
  abandoned_.push_back(run->op.get());
}

size_t IoScheduler::Expire(uint64_t now_ns) {
  if (limits_.abandon_after_ns == 0) return 0;
  size_t newly = 0;
  for (auto& [tag, run] : running_) {
    // issued_ns 0: produced by a completion, not handed to the backend yet.
    if (run.stuck || run.issued_ns == 0 || now_ns < run.issued_ns + limits_.abandon_after_ns) continue;
    run.stuck = true;
    ++stuck_;
    ++newly;
    if (!run.abandoned && run.op->MayAbandon()) Abandon(&run);
  }
  // Slots held by the kernel may never come back: nothing waits behind
  // them longer than a request may take.
  if (stuck_ > 0) {
    newly += ExpireQueue(&read_queue_, IoClass::kRead, now_ns);
    newly += ExpireQueue(&write_queue_, IoClass::kWrite, now_ns);
  }
  return newly;
}

size_t IoScheduler::ExpireQueue(std::deque<Queued>* queue, IoClass cls, uint64_t now_ns) {
  size_t expired = 0;
  for (auto it = queue->begin(); it != queue->end();) {
    if (now_ns < it->since_ns + limits_.abandon_after_ns) {
      ++it;
      continue;
    }
    if (cls == IoClass::kRead && it->op->ReadsData()) --loads_queued_;
    it->op->OnAbandon();  // never started: nothing to clean up
    finished_.push_back(std::move(it->op));
    it = queue->erase(it);
    ++expired;
  }
  return expired;
}

void IoScheduler::TakeAbandoned(std::vector<BlockOp*>* out) {
  out->insert(out->end(), abandoned_.begin(), abandoned_.end());
  abandoned_.clear();
}

void IoScheduler::TakeQueued(std::vector<std::unique_ptr<BlockOp>>* out) {
  for (auto* queue : {&read_queue_, &write_queue_}) {
    for (Queued& q : *queue) out->push_back(std::move(q.op));
    queue->clear();
  }
  loads_queued_ = 0;
}

void IoScheduler::TakeAll(std::vector<std::unique_ptr<BlockOp>>* out) {
  TakeQueued(out);
  TakeFinished(out);
  for (auto& [tag, run] : running_) out->push_back(std::move(run.op));
  running_.clear();
  reissue_.clear();
  abandoned_.clear();
  reads_running_ = writes_running_ = stores_running_ = loads_running_ = 0;
  abandoned_running_ = stuck_ = 0;
}

}  // namespace kvtier::internal
