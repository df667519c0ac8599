// IoScheduler (see header).
#include "io/scheduler.h"

#include <cerrno>

namespace kvtier::internal {

void IoScheduler::Enqueue(std::unique_ptr<BlockOp> op, IoClass cls) {
  if (cls == IoClass::kRead && op->ReadsData()) ++loads_queued_;
  (cls == IoClass::kRead ? read_queue_ : write_queue_).push_back(std::move(op));
}

// Asks the op for its next request; a finished op frees its slot.
void IoScheduler::Advance(uint64_t old_tag, Running* run, std::vector<IoRequest>* out) {
  IoRequest req;
  if (!run->op->NextRequest(&req)) {
    (run->slot == IoClass::kRead ? reads_running_ : writes_running_)--;
    if (run->cls == IoClass::kWrite) --stores_running_;
    if (run->load) --loads_running_;
    finished_.push_back(std::move(run->op));
    running_.erase(old_tag);
    return;
  }
  req.tag = next_tag_++;
  Running moved{std::move(run->op), run->slot, run->cls, run->load, req, 0};
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
  std::unique_ptr<BlockOp> op = std::move(queue.front());
  queue.pop_front();
  (slot == IoClass::kRead ? reads_running_ : writes_running_)++;
  const bool load = cls == IoClass::kRead && op->ReadsData();
  if (cls == IoClass::kWrite) ++stores_running_;
  if (load) {
    ++loads_running_;
    --loads_queued_;
  }
  const uint64_t placeholder = next_tag_++;
  Running& run = running_.emplace(placeholder, Running{std::move(op), slot, cls, load, {}, 0}).first->second;
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
  out->insert(out->end(), reissue_.begin(), reissue_.end());
  reissue_.clear();
  NoteReads(now_ns);
  // Read slots first: a load waiting behind a store backlog starts here.
  while (reads_running_ < limits_.reads_in_flight_max && StartOne(IoClass::kRead, out)) {
  }
  while (writes_running_ < limits_.writes_in_flight_max && StartOne(IoClass::kWrite, out)) {
  }
}

void IoScheduler::Complete(const IoCompletion& c) {
  auto it = running_.find(c.tag);
  if (it == running_.end()) return;
  Running& run = it->second;
  // ESTALE on a path lookup: a network filesystem's cached handle for some
  // directory on the path went stale (another client replaced it); a fresh
  // lookup succeeds, as the kernel's own single retry shows. An fd's ESTALE
  // is final and goes to the op.
  const bool stale_path = c.res == -ESTALE && run.pending.path != nullptr;
  if ((c.res == -EINTR || c.res == -EAGAIN || stale_path) && run.retries < limits_.retries_max) {
    ++run.retries;
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

}  // namespace kvtier::internal
