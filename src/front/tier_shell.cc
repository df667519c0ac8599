// TierShell (include/kvtier/tier_shell.h).
//
// Two locks. mu guards the tier pointer, the admission state, the claims and
// the results not yet taken; the Signal has its own, because the tier calls
// on_job_finished from inside a Submit, which the shell runs under mu.
// Completions are collected lazily: the callback only raises a flag (and
// wakes waiters), and the next call that needs results polls the tier, so a
// front end that asks thousands of times a step pays for one poll.
//
// The tier is touched under mu, or (WaitIdle, and Close's drain) by a
// caller counted in `users`; Close destroys it only when no user is left
// and every job has finished, so no thread can be using it then.
#include "kvtier/tier_shell.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <unordered_set>
#include <utility>

#include "events/volume_events.h"
#include "format/root_list.h"
#include "front/memory_claims.h"
#include "ops/clear_blocks.h"

namespace kvtier {
namespace {

// A clear's removals as BlockRemoved events (nothing when events are off).
internal::BlockRemovedFn RemovalEvents(std::shared_ptr<internal::VolumeEvents> events, const Namespace& ns) {
  if (!events) return {};
  return [events, kind = internal::EventHashKindOf(ns.spec().inference_engine)](std::string_view hex, uint32_t group) {
    const Result<BlockHash> hash = BlockHash::FromHex(hex);  // a name the layout parser accepted
    if (!hash.ok()) return;
    const OffloadKey key{*hash, group};
    events->Removed(kind, std::span(&key, 1));
  };
}

using Clock = std::chrono::steady_clock;

// Raised by the tier's on_job_finished (any thread) and when results are
// filed for other waiters; waits go past a generation, so none is lost.
class Signal {
 public:
  void Raise() {
    ready_.store(true, std::memory_order_release);
    Bump();
  }
  void Bump() {
    {
      std::lock_guard lock(mu_);
      ++generation_;
    }
    cv_.notify_all();
  }
  // True (once) when a job finished since the last call.
  bool Take() { return ready_.exchange(false, std::memory_order_acq_rel); }
  bool ready() const { return ready_.load(std::memory_order_acquire); }
  uint64_t generation() {
    std::lock_guard lock(mu_);
    return generation_;
  }
  void WaitPast(uint64_t seen, Clock::duration timeout) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return generation_ != seen; });
  }

 private:
  std::atomic<bool> ready_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;
};

template <class Row>
std::vector<MemoryRange> RangesOf(std::span<const Row> rows) {
  std::vector<MemoryRange> out;
  for (size_t i = 0; i < rows.size(); ++i) {
    for (const auto& piece : rows[i]) {
      if (piece.empty()) continue;
      const auto begin = reinterpret_cast<uintptr_t>(piece.data());
      out.push_back({begin, begin + piece.size(), i});
    }
  }
  return out;
}

Clock::duration Ms(uint32_t ms) { return std::chrono::milliseconds(ms); }

}  // namespace

std::vector<MemoryRange> RowRanges(std::span<const std::span<uint8_t>> rows) {
  std::vector<MemoryRange> out;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto begin = reinterpret_cast<uintptr_t>(rows[i].data());
    if (!rows[i].empty()) out.push_back({begin, begin + rows[i].size(), i});
  }
  return out;
}
std::vector<MemoryRange> RowRanges(std::span<const std::vector<std::span<uint8_t>>> rows) { return RangesOf(rows); }
std::vector<MemoryRange> RowRanges(std::span<const std::vector<std::span<const uint8_t>>> rows) {
  return RangesOf(rows);
}

struct TierShell::Rep {
  std::string name;
  std::shared_ptr<Signal> signal = std::make_shared<Signal>();
  mutable std::mutex mu;
  std::condition_variable changed;  // users fell, or Close finished
  std::unique_ptr<FsTier> tier;     // null once closed
  std::atomic<bool> closing{false};  // set under mu; read without it by closing()
  bool closed = false;
  int users = 0;                           // Use scopes and waits inside the tier
  uint64_t outstanding = 0;                // jobs submitted, not yet polled from the tier
  std::vector<JobResult> finished;         // polled from the tier, not yet taken
  std::atomic<size_t> n_finished{0};       // finished.size(), for Poll's lock-free "nothing new"
  std::unordered_set<uint64_t> abandoned;  // WaitFor gave up: dropped when they finish
  internal::MemoryClaims claims;
  FsTierMetrics last_metrics;  // Metrics() after Close
  std::vector<TierKeyEvent> last_key_events;  // TakeKeyEvents() after Close
  std::string backend, checksum_place;
  bool o_direct = false, xattrs_supported = false;
  std::optional<Namespace> ns;  // where the tier's files are (its key's namespace when sealed)
  std::vector<std::string> roots;  // the tier's roots (ClearNamespace walks each)
  uint32_t io_timeout_ms = 0;      // ClearNamespace's deadline per file-system call (0: none)
  // ClearNamespace's BlockRemoved events, on the tier's publisher (null: off).
  std::shared_ptr<internal::VolumeEvents> events;

  // Moves finished jobs from the tier into `finished` (all of them with
  // `force`, else only when one was signalled). Under mu.
  void CollectLocked(bool force) {
    if (!tier || !(signal->Take() || force)) return;
    std::vector<JobResult> polled;
    tier->PollFinished(&polled);
    for (JobResult& r : polled) {
      --outstanding;
      if (abandoned.erase(r.job_id) != 0) {
        claims.Release(r.job_id);
        continue;
      }
      finished.push_back(std::move(r));
    }
    n_finished = finished.size();
  }
  // Takes job `job` from `finished`, its claim ended. Under mu.
  std::optional<JobResult> TakeLocked(uint64_t job) {
    auto it = std::find_if(finished.begin(), finished.end(), [&](const JobResult& r) { return r.job_id == job; });
    if (it == finished.end()) return std::nullopt;
    JobResult r = std::move(*it);
    finished.erase(it);
    n_finished = finished.size();
    claims.Release(job);
    return r;
  }
  void Leave() {
    {
      std::lock_guard lock(mu);
      --users;
    }
    changed.notify_all();
  }
  Status Conflict(const RowNamer& row_name, const internal::MemoryClaims::Refusal& r) const {
    const std::string row = row_name ? row_name(r.row) : "rows[" + std::to_string(r.row) + "]";
    return InvalidArgument(name + ": " + row + ": " + std::string(r.why));
  }
};

TierShell::TierShell(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
TierShell::~TierShell() { Close(); }

Result<std::unique_ptr<TierShell>> TierShell::Open(FsTierOpenOptions options, std::string name, Opener open) {
  auto rep = std::make_unique<Rep>();
  rep->name = std::move(name);
  rep->roots = {options.tier.root_dir};
  if (options.tier.path_sharding == PathSharding::kByBlockHash) {
    KVTIER_ASSIGN_OR_RETURN(rep->roots, format::SplitRootDirs(options.tier.root_dir, true));
  }
  rep->io_timeout_ms = options.tier.io_timeout_ms;
  options.on_job_finished = [signal = rep->signal, own = std::move(options.on_job_finished)] {
    signal->Raise();
    if (own) own();
  };
  KVTIER_ASSIGN_OR_RETURN(rep->tier, open ? open(options) : FsTier::Open(options));
  KVTIER_ASSIGN_OR_RETURN(rep->events, internal::VolumeEvents::Open(options.tier.kv_events_config, options.tier.root_dir));
  rep->backend = rep->tier->backend_name();
  rep->checksum_place = rep->tier->checksum_place();
  rep->o_direct = rep->tier->o_direct();
  rep->xattrs_supported = rep->tier->xattrs_supported();
  rep->ns = rep->tier->ns();
  return std::unique_ptr<TierShell>(new TierShell(std::move(rep)));
}

TierShell::Use::Use(TierShell& shell) : shell_(&shell) {
  std::lock_guard lock(shell.rep_->mu);
  if (shell.rep_->closing) {
    shell_ = nullptr;
    return;
  }
  ++shell.rep_->users;
}
TierShell::Use::~Use() {
  if (shell_ != nullptr) shell_->rep_->Leave();
}

bool TierShell::closing() const { return rep_->closing.load(); }

Status TierShell::Closed() const { return Status(StatusCode::kUnavailable, rep_->name + ": closed"); }

Result<uint64_t> TierShell::Submit(MemoryUse use, std::span<const MemoryRange> memory, const SubmitFn& submit,
                                   const RowNamer& row_name, std::vector<size_t>* refused) {
  std::lock_guard lock(rep_->mu);
  if (rep_->closing) return Closed();
  std::vector<internal::MemoryClaims::Refusal> conflicts = rep_->claims.Conflicts(memory, use);
  if (!conflicts.empty() && refused == nullptr) return rep_->Conflict(row_name, conflicts.front());
  if (refused != nullptr) {
    refused->clear();
    for (const auto& c : conflicts) refused->push_back(c.row);
  }
  Result<uint64_t> job = submit(*rep_->tier);
  if (!job.ok()) return job;
  rep_->claims.Take(*job, memory, use, conflicts);
  ++rep_->outstanding;
  return job;
}

Result<JobResult> TierShell::SubmitAndWait(MemoryUse use, std::span<const MemoryRange> memory,
                                           const SubmitFn& submit, std::vector<size_t>* refused) {
  KVTIER_ASSIGN_OR_RETURN(const uint64_t job, Submit(use, memory, submit, {}, refused));
  return WaitFor(job, kWaitForever);
}

size_t TierShell::Poll(std::vector<JobResult>* out) {
  if (!rep_->signal->ready() && rep_->n_finished.load() == 0) return 0;  // the common case, lock-free
  std::lock_guard lock(rep_->mu);
  rep_->CollectLocked(false);
  const size_t n = rep_->finished.size();
  for (JobResult& r : rep_->finished) out->push_back(std::move(r));
  rep_->finished.clear();
  rep_->n_finished = 0;
  return n;
}

void TierShell::Release(uint64_t job) {
  std::lock_guard lock(rep_->mu);
  rep_->claims.Release(job);
}

Result<JobResult> TierShell::WaitFor(uint64_t job, uint32_t timeout_ms) {
  constexpr Clock::duration kSlice = std::chrono::milliseconds(100);  // bounds a wait on a lost wake-up
  const Clock::time_point deadline = Clock::now() + Ms(timeout_ms == kWaitForever ? 0 : timeout_ms);
  for (;;) {
    const uint64_t seen = rep_->signal->generation();  // before looking: no lost wake-up
    {
      std::lock_guard lock(rep_->mu);
      const size_t before = rep_->finished.size();
      rep_->CollectLocked(false);
      if (std::optional<JobResult> r = rep_->TakeLocked(job)) {
        if (rep_->finished.size() > before) rep_->signal->Bump();  // filed for other waiters
        return std::move(*r);
      }
      if (rep_->finished.size() > before) rep_->signal->Bump();
      if (!rep_->tier && rep_->closed) return NotFound(rep_->name + ": job " + std::to_string(job) + " not found");
      if (timeout_ms != kWaitForever && Clock::now() >= deadline) {
        rep_->abandoned.insert(job);
        return Status(StatusCode::kTimedOut, rep_->name + ": job " + std::to_string(job) + " still running after " +
                                                 std::to_string(timeout_ms) + " ms");
      }
    }
    const Clock::duration left = timeout_ms == kWaitForever ? kSlice : std::min(kSlice, Clock::duration(deadline - Clock::now()));
    rep_->signal->WaitPast(seen, left);
  }
}

void TierShell::WaitForAny(uint32_t timeout_ms) {
  const uint64_t seen = rep_->signal->generation();
  {
    std::lock_guard lock(rep_->mu);
    if (rep_->closing || rep_->outstanding == 0 || !rep_->finished.empty()) return;
  }
  if (rep_->signal->ready()) return;
  rep_->signal->WaitPast(seen, Ms(timeout_ms));
}

Status TierShell::WaitIdle(uint32_t timeout_ms) {
  {
    std::unique_lock lock(rep_->mu);
    if (rep_->closing) {  // Close drains: idle once it has finished
      const auto done = [&] { return rep_->closed; };
      if (timeout_ms == kWaitForever) {
        rep_->changed.wait(lock, done);
        return Status::Ok();
      }
      if (rep_->changed.wait_for(lock, Ms(timeout_ms), done)) return Status::Ok();
      return Status(StatusCode::kTimedOut, rep_->name + ": closing after " + std::to_string(timeout_ms) + " ms");
    }
    ++rep_->users;
  }
  Status s = rep_->tier->WaitIdle(timeout_ms == kWaitForever ? 1000 : timeout_ms);
  while (timeout_ms == kWaitForever && s.code() == StatusCode::kTimedOut) s = rep_->tier->WaitIdle(1000);
  if (s.ok()) {  // every job is pollable, though its on_job_finished may not have run yet
    std::lock_guard lock(rep_->mu);
    rep_->CollectLocked(true);
  }
  rep_->Leave();
  return s;
}

void TierShell::Close() {
  std::unique_lock lock(rep_->mu);
  if (rep_->closing) {
    rep_->changed.wait(lock, [&] { return rep_->closed; });
    return;
  }
  rep_->closing = true;
  rep_->signal->Bump();  // WaitForAny returns
  rep_->changed.wait(lock, [&] { return rep_->users == 0; });
  FsTier* tier = rep_->tier.get();  // only Close moves it, and this is the one Close
  lock.unlock();
  while (!tier->WaitIdle(1000).ok()) {  // nothing is admitted and every I/O has a deadline: this ends
  }
  lock.lock();
  rep_->CollectLocked(true);  // kept for Poll and WaitFor
  rep_->last_metrics = tier->Metrics();
  rep_->last_key_events = tier->TakeKeyEvents();
  std::unique_ptr<FsTier> owned = std::move(rep_->tier);
  lock.unlock();
  owned.reset();  // outside mu: Poll and Metrics answer meanwhile
  lock.lock();
  rep_->closed = true;
  lock.unlock();
  rep_->changed.notify_all();
  rep_->signal->Bump();  // WaitFor callers whose job was not collected: kNotFound
}

Result<uint64_t> TierShell::ClearNamespace(const BlockFilter& filter) {
  Use use(*this);  // the roots and names are the shell's: they outlive the call, and the walk copies them
  if (!use) return Closed();
  return internal::ClearBlockDirs(rep_->roots, rep_->ns->block_dir_name(), rep_->io_timeout_ms, filter,
                                  RemovalEvents(rep_->events, *rep_->ns));
}

Result<std::string> TierShell::PrometheusText(std::string_view tier_name) const {
  std::lock_guard lock(rep_->mu);
  if (rep_->closing) return Closed();
  return rep_->tier->PrometheusText(tier_name);
}

Result<std::string> TierShell::BlockPath(const OffloadKey& key) const {
  std::lock_guard lock(rep_->mu);
  if (rep_->closing) return Closed();
  return rep_->tier->BlockPath(key);
}

FsTierMetrics TierShell::Metrics() const {
  std::lock_guard lock(rep_->mu);
  return rep_->tier ? rep_->tier->Metrics() : rep_->last_metrics;
}

std::vector<TierKeyEvent> TierShell::TakeKeyEvents() {
  std::lock_guard lock(rep_->mu);
  return rep_->tier ? rep_->tier->TakeKeyEvents() : std::exchange(rep_->last_key_events, {});
}

std::string_view TierShell::backend_name() const { return rep_->backend; }
bool TierShell::o_direct() const { return rep_->o_direct; }
bool TierShell::xattrs_supported() const { return rep_->xattrs_supported; }
std::string_view TierShell::checksum_place() const { return rep_->checksum_place; }
const Namespace& TierShell::ns() const { return *rep_->ns; }
const std::vector<std::string>& TierShell::roots() const { return rep_->roots; }

FsTier* TierShell::tier_for_tests() {
  std::lock_guard lock(rep_->mu);
  return rep_->tier.get();
}

}  // namespace kvtier
