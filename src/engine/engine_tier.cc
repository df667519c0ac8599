// EngineTier (include/kvtier/engine_tier.h): the verdict cache, the job table
// that maps the fs tier's job ids to the engine's, the slots in use, and
// result assembly.
//
// Completions are collected lazily: the fs tier's on_job_finished callback
// only raises a flag (and wakes a Drain), and the next call that needs results
// polls, so a scheduler that calls Lookup() thousands of times a step pays for
// one poll.
//
// Shutdown moves phase_ kOpen -> kClosing (nothing more is admitted, so a
// submitter cannot keep it draining) -> kClosed (the fs tier destroyed). fs_
// is touched only under mu_ and Drain waits on the completion signal rather
// than inside the fs tier, so no thread can be using the fs tier when
// Shutdown destroys it.
#include "kvtier/engine_tier.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace kvtier {
namespace {

using Clock = std::chrono::steady_clock;

// The cache's key: block hash bytes followed by the group index (the bytes
// of vLLM's OffloadKey).
std::string KeyId(const OffloadKey& key) {
  std::string id(reinterpret_cast<const char*>(key.hash.bytes().data()), key.hash.size());
  for (int shift = 24; shift >= 0; shift -= 8) id.push_back(static_cast<char>(key.group_idx >> shift));
  return id;
}

std::vector<std::string> KeyIds(std::span<const OffloadKey> keys) {
  std::vector<std::string> ids;
  ids.reserve(keys.size());
  for (const OffloadKey& key : keys) ids.push_back(KeyId(key));
  return ids;
}

Status ShutDown() { return Status(StatusCode::kUnavailable, "engine tier: shut down"); }

struct KeyState {
  LookupVerdict verdict = LookupVerdict::kRetry;
  // Live requests that asked: a set, since thousands of requests may share
  // one key (a common system prompt) and each asks again every step.
  std::unordered_set<std::string> requests;
};

struct Job {
  int64_t engine_id = 0;
  bool is_load = false;
  std::vector<std::string> key_ids;
  Clock::time_point submitted;
};

// What a job holds until its result is polled: its engine id and its slots.
struct Taken {
  bool is_load = false;
  std::vector<int64_t> slots;
};

// Raised by the fs tier's on_job_finished, from any thread; Drain waits on it.
class Completions {
 public:
  void Signal() {
    pending_.store(true, std::memory_order_release);
    {
      std::lock_guard lock(mu_);
      ++generation_;
    }
    cv_.notify_all();
  }
  // True (once) when a job finished since the last call.
  bool Take() { return pending_.exchange(false, std::memory_order_acq_rel); }
  uint64_t generation() {
    std::lock_guard lock(mu_);
    return generation_;
  }
  // Waits until a job finishes after generation `seen` was read, or `timeout`.
  void WaitPast(uint64_t seen, Clock::duration timeout) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return generation_ != seen; });
  }

 private:
  std::atomic<bool> pending_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;
};

// The slots of jobs whose results were not polled yet: a load writes its
// slots, a store reads them. Two reads landing in one row, or a store reading
// a row that a load overwrites, would put one key's bytes under another key.
class SlotsInUse {
 public:
  // Why job `job_id` may not use `slots`; "" when it may.
  std::string Conflict(int64_t job_id, std::span<const int64_t> slots, bool is_load) const;
  void Take(std::span<const int64_t> slots, bool is_load);
  void Give(std::span<const int64_t> slots, bool is_load);

 private:
  std::unordered_set<int64_t> loading_;
  std::unordered_map<int64_t, uint32_t> storing_;  // slot -> stores that read it
};

std::string SlotsInUse::Conflict(int64_t job_id, std::span<const int64_t> slots, bool is_load) const {
  const std::string job = "engine tier: job " + std::to_string(job_id) + ": slot ";
  std::unordered_set<int64_t> seen;
  for (int64_t slot : slots) {
    if (loading_.contains(slot)) return job + std::to_string(slot) + " is being loaded by a job not yet polled";
    if (!is_load) continue;
    if (storing_.contains(slot)) return job + std::to_string(slot) + " is read by a store not yet polled";
    if (!seen.insert(slot).second) return job + std::to_string(slot) + " appears twice in one load";
  }
  return {};
}

void SlotsInUse::Take(std::span<const int64_t> slots, bool is_load) {
  for (int64_t slot : slots) {
    if (is_load) {
      loading_.insert(slot);
    } else {
      ++storing_[slot];
    }
  }
}

void SlotsInUse::Give(std::span<const int64_t> slots, bool is_load) {
  for (int64_t slot : slots) {
    if (is_load) {
      loading_.erase(slot);
      continue;
    }
    auto it = storing_.find(slot);
    if (it != storing_.end() && --it->second == 0) storing_.erase(it);
  }
}

bool KeyStored(KeyOutcome o) { return o == KeyOutcome::kOk || o == KeyOutcome::kSkippedExists; }

class EngineTierImpl final : public EngineTier {
 public:
  EngineTierImpl(std::unique_ptr<FsTier> fs, std::span<uint8_t> rows, uint64_t row_bytes,
                 std::shared_ptr<Completions> completions)
      : fs_(std::move(fs)),
        rows_(rows),
        row_bytes_(row_bytes),
        backend_(fs_->backend_name()),
        o_direct_(fs_->o_direct()),
        checksum_place_(fs_->checksum_place()),
        completions_(std::move(completions)) {}
  ~EngineTierImpl() override { Shutdown(); }

  LookupVerdict Lookup(const OffloadKey& key, std::string_view request_id) override {
    std::string id = KeyId(key);
    std::lock_guard lock(mu_);
    if (phase_ != Phase::kOpen) return LookupVerdict::kMiss;
    CollectLocked();
    auto [it, inserted] = keys_.try_emplace(id);
    if (inserted) {
      batch_.push_back(key);
      batch_ids_.push_back(id);
    }
    AddInterestLocked(it->second, id, request_id);
    return it->second.verdict;
  }

  Status FlushLookups() override;

  void FinishRequest(std::string_view request_id) override {
    std::lock_guard lock(mu_);
    auto it = request_keys_.find(std::string(request_id));
    if (it == request_keys_.end()) return;
    for (const std::string& id : it->second) DropInterestLocked(id, it->first);
    request_keys_.erase(it);
  }

  Status SubmitStore(int64_t job_id, std::span<const OffloadKey> keys,
                     std::span<const int64_t> slots) override {
    return Submit(job_id, false, keys, slots);
  }
  Status SubmitLoad(int64_t job_id, std::span<const OffloadKey> keys,
                    std::span<const int64_t> slots) override {
    return Submit(job_id, true, keys, slots);
  }

  size_t PollFinished(std::vector<EngineJobResult>* out) override {
    std::lock_guard lock(mu_);
    CollectLocked();
    const size_t n = ready_.size();
    for (EngineJobResult& r : ready_) {
      ReleaseLocked(r.job_id);  // its id and slots are free once the engine has its result
      out->push_back(std::move(r));
    }
    ready_.clear();
    return n;
  }

  bool HasPendingWork() override {
    std::lock_guard lock(mu_);
    CollectLocked();
    return !jobs_.empty() || !lookups_.empty() || !ready_.empty() || !batch_.empty();
  }

  Status Drain(uint32_t timeout_ms) override;
  void Shutdown() override;

  EngineTierStats Stats() override {
    std::lock_guard lock(mu_);
    EngineTierStats s;
    for (const auto& [job, ids] : lookups_) s.lookups_pending += ids.size();
    s.lookups_pending += batch_.size();
    s.lookup_cache_keys = keys_.size();
    s.jobs_in_flight = jobs_.size();
    return s;
  }

  FsTierMetrics Metrics() override {
    std::lock_guard lock(mu_);
    return fs_ ? fs_->Metrics() : last_metrics_;
  }
  Result<std::string> PrometheusText(std::string_view tier_name) override {
    std::lock_guard lock(mu_);
    if (phase_ != Phase::kOpen) return ShutDown();
    return fs_->PrometheusText(tier_name);
  }
  Result<std::string> BlockPath(const OffloadKey& key) override {
    std::lock_guard lock(mu_);
    if (phase_ != Phase::kOpen) return ShutDown();
    return fs_->BlockPath(key);
  }
  std::string_view backend_name() const override { return backend_; }
  bool o_direct() const override { return o_direct_; }
  std::string_view checksum_place() const override { return checksum_place_; }

  FsTier& fs() override { return *fs_; }

 private:
  enum class Phase : uint8_t { kOpen, kClosing, kClosed };

  Status Submit(int64_t job_id, bool is_load, std::span<const OffloadKey> keys,
                std::span<const int64_t> slots);
  Status CheckJob(int64_t job_id, bool is_load, std::span<const OffloadKey> keys,
                  std::span<const int64_t> slots) const;
  bool IdleOrClosed();
  bool BeginShutdown();
  void CollectLocked();
  void FinishJobLocked(const JobResult& done);
  void ReleaseLocked(int64_t job_id);
  void AddInterestLocked(KeyState& state, const std::string& id, std::string_view request_id);
  void DropInterestLocked(const std::string& id, const std::string& request_id);
  void ApplyVerdictsLocked(const std::vector<std::string>& ids, LookupVerdict verdict);
  void SetVerdictLocked(const std::string& id, LookupVerdict verdict);

  std::mutex mu_;
  std::condition_variable closed_;  // phase_ reached kClosed
  Phase phase_ = Phase::kOpen;
  std::unique_ptr<FsTier> fs_;  // null once Shutdown destroyed it
  FsTierMetrics last_metrics_;  // Metrics() after Shutdown
  const std::span<uint8_t> rows_;
  const uint64_t row_bytes_;
  const std::string backend_;
  const bool o_direct_;
  const std::string checksum_place_;
  const std::shared_ptr<Completions> completions_;
  std::unordered_map<std::string, KeyState> keys_;
  std::unordered_map<std::string, std::vector<std::string>> request_keys_;
  std::vector<OffloadKey> batch_;
  std::vector<std::string> batch_ids_;
  std::unordered_map<uint64_t, std::vector<std::string>> lookups_;  // fs job id -> key ids
  std::unordered_map<uint64_t, Job> jobs_;                          // fs job id -> store/load
  std::unordered_map<int64_t, Taken> taken_;                        // engine id -> until polled
  SlotsInUse slots_;
  std::vector<EngineJobResult> ready_;
};

Status EngineTierImpl::FlushLookups() {
  std::lock_guard lock(mu_);
  if (phase_ != Phase::kOpen) return ShutDown();
  if (batch_.empty()) return Status::Ok();
  // Out of the batch before anything can fail: a failed batch is never
  // retried by every later flush while its keys and the others wait.
  const std::vector<OffloadKey> keys = std::exchange(batch_, {});
  std::vector<std::string> ids = std::exchange(batch_ids_, {});
  Result<uint64_t> job = Internal("engine tier: lookup not submitted");
  try {
    job = fs_->SubmitLookup(keys);
  } catch (const std::exception& e) {  // a defect below: still a miss, not a stuck key
    job = Internal(std::string("engine tier: lookup failed: ") + e.what());
  }
  if (!job.ok()) {
    ApplyVerdictsLocked(ids, LookupVerdict::kMiss);  // as vLLM: a failed batch is a miss
    return job.status();
  }
  lookups_[*job] = std::move(ids);
  return Status::Ok();
}

Status EngineTierImpl::Drain(uint32_t timeout_ms) {
  // Woken by each completion; the slice only bounds a wait that would
  // otherwise rely on a wake-up alone.
  constexpr Clock::duration kSlice = std::chrono::milliseconds(100);
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const uint64_t seen = completions_->generation();  // before checking: no lost wake-up
    if (IdleOrClosed()) return Status::Ok();
    const Clock::time_point now = Clock::now();
    if (timeout_ms != 0 && now >= deadline) {
      return Status(StatusCode::kTimedOut,
                    "engine tier: jobs still running after " + std::to_string(timeout_ms) + " ms");
    }
    completions_->WaitPast(seen, timeout_ms == 0 ? kSlice : std::min(kSlice, Clock::duration(deadline - now)));
  }
}

bool EngineTierImpl::IdleOrClosed() {
  std::lock_guard lock(mu_);
  if (!fs_) return true;  // Shutdown drained before destroying it
  CollectLocked();
  return jobs_.empty() && lookups_.empty();
}

void EngineTierImpl::Shutdown() {
  if (!BeginShutdown()) return;
  Drain(0).IgnoreError();  // nothing new is admitted and every I/O carries a deadline: this ends
  std::unique_ptr<FsTier> fs;
  {
    std::lock_guard lock(mu_);
    CollectLocked();  // results that landed since: kept for PollFinished
    last_metrics_ = fs_->Metrics();
    fs = std::move(fs_);
  }
  fs.reset();  // outside mu_: callers meanwhile get their answers, not a wait
  {
    std::lock_guard lock(mu_);
    phase_ = Phase::kClosed;
  }
  closed_.notify_all();
}

// kOpen -> kClosing: admissions stop and the unflushed batch is a miss.
// False for a later caller, once the first one has finished.
bool EngineTierImpl::BeginShutdown() {
  std::unique_lock lock(mu_);
  if (phase_ != Phase::kOpen) {
    closed_.wait(lock, [&] { return phase_ == Phase::kClosed; });
    return false;
  }
  phase_ = Phase::kClosing;
  batch_.clear();
  ApplyVerdictsLocked(std::exchange(batch_ids_, {}), LookupVerdict::kMiss);
  return true;
}

void EngineTierImpl::AddInterestLocked(KeyState& state, const std::string& id, std::string_view request_id) {
  if (!state.requests.emplace(request_id).second) return;  // this request asked before
  request_keys_[std::string(request_id)].push_back(id);
}

void EngineTierImpl::DropInterestLocked(const std::string& id, const std::string& request_id) {
  auto it = keys_.find(id);
  if (it == keys_.end()) return;
  it->second.requests.erase(request_id);
  // A key still being checked stays, so its verdict has a home when it lands.
  if (it->second.requests.empty() && it->second.verdict != LookupVerdict::kRetry) keys_.erase(it);
}

void EngineTierImpl::SetVerdictLocked(const std::string& id, LookupVerdict verdict) {
  auto it = keys_.find(id);
  if (it == keys_.end()) return;
  it->second.verdict = verdict;
  if (it->second.requests.empty()) keys_.erase(it);
}

void EngineTierImpl::ApplyVerdictsLocked(const std::vector<std::string>& ids, LookupVerdict verdict) {
  for (const std::string& id : ids) SetVerdictLocked(id, verdict);
}

Status EngineTierImpl::CheckJob(int64_t job_id, bool is_load, std::span<const OffloadKey> keys,
                                std::span<const int64_t> slots) const {
  const std::string job = "engine tier: job " + std::to_string(job_id);
  if (keys.size() != slots.size()) {
    return InvalidArgument(job + " has " + std::to_string(keys.size()) + " keys but " +
                           std::to_string(slots.size()) + " slots");
  }
  const uint64_t n_rows = rows_.size() / row_bytes_;
  for (int64_t slot : slots) {
    if (slot < 0 || static_cast<uint64_t>(slot) >= n_rows) {
      return InvalidArgument(job + ": slot " + std::to_string(slot) + " is outside the " + std::to_string(n_rows) +
                             " rows");
    }
  }
  if (taken_.contains(job_id)) {
    return InvalidArgument("engine tier: job id " + std::to_string(job_id) + " is in flight or its result not yet polled");
  }
  const std::string conflict = slots_.Conflict(job_id, slots, is_load);
  if (!conflict.empty()) return InvalidArgument(conflict);
  return Status::Ok();
}

Status EngineTierImpl::Submit(int64_t job_id, bool is_load, std::span<const OffloadKey> keys,
                              std::span<const int64_t> slots) {
  std::lock_guard lock(mu_);
  if (phase_ != Phase::kOpen) return ShutDown();
  KVTIER_RETURN_IF_ERROR(CheckJob(job_id, is_load, keys, slots));
  std::vector<std::string> key_ids = KeyIds(keys);
  std::vector<std::span<uint8_t>> rows;
  rows.reserve(slots.size());
  for (int64_t slot : slots) rows.push_back(rows_.subspan(static_cast<uint64_t>(slot) * row_bytes_, row_bytes_));
  const std::vector<std::span<const uint8_t>> src(rows.begin(), rows.end());
  const Clock::time_point submitted = Clock::now();
  Result<uint64_t> fs_job = is_load ? fs_->SubmitLoad(keys, rows) : fs_->SubmitStore(keys, src);
  if (!fs_job.ok()) {  // refused as a whole: the engine still gets its one result
    taken_.emplace(job_id, Taken{is_load, {}});
    EngineJobResult failed;
    failed.job_id = job_id;
    failed.is_load = is_load;
    ready_.push_back(std::move(failed));
    return Status::Ok();
  }
  slots_.Take(slots, is_load);
  taken_.emplace(job_id, Taken{is_load, {slots.begin(), slots.end()}});
  jobs_.emplace(*fs_job, Job{job_id, is_load, std::move(key_ids), submitted});
  return Status::Ok();
}

void EngineTierImpl::ReleaseLocked(int64_t job_id) {
  auto it = taken_.find(job_id);
  if (it == taken_.end()) return;
  slots_.Give(it->second.slots, it->second.is_load);
  taken_.erase(it);
}

void EngineTierImpl::FinishJobLocked(const JobResult& done) {
  auto lookup = lookups_.find(done.job_id);
  if (lookup != lookups_.end()) {
    for (size_t i = 0; i < lookup->second.size(); ++i) {
      const bool hit = i < done.keys.size() && done.keys[i].outcome == KeyOutcome::kOk;
      SetVerdictLocked(lookup->second[i], hit ? LookupVerdict::kHit : LookupVerdict::kMiss);
    }
    lookups_.erase(lookup);
    return;
  }
  auto it = jobs_.find(done.job_id);
  if (it == jobs_.end()) return;
  Job job = std::move(it->second);
  jobs_.erase(it);
  EngineJobResult r;
  r.job_id = job.engine_id;
  r.is_load = job.is_load;
  r.success = true;
  for (size_t i = 0; i < job.key_ids.size(); ++i) {
    const KeyOutcome o = i < done.keys.size() ? done.keys[i].outcome : KeyOutcome::kError;
    const bool ok = job.is_load ? o == KeyOutcome::kOk : KeyStored(o);
    if (ok && job.is_load) r.ok_keys.push_back(static_cast<uint32_t>(i));
    if (o == KeyOutcome::kOk) r.bytes += row_bytes_;
    r.success = r.success && ok;
    // A failed load must not be offered again; a stored key now exists.
    if (job.is_load && !ok) SetVerdictLocked(job.key_ids[i], LookupVerdict::kMiss);
    if (!job.is_load && ok) SetVerdictLocked(job.key_ids[i], LookupVerdict::kHit);
  }
  if (r.success) r.ok_keys.clear();
  r.transfer_time_s = std::chrono::duration<double>(Clock::now() - job.submitted).count();
  ready_.push_back(std::move(r));
}

void EngineTierImpl::CollectLocked() {
  if (!fs_ || !completions_->Take()) return;
  std::vector<JobResult> done;
  fs_->PollFinished(&done);
  for (const JobResult& d : done) FinishJobLocked(d);
}

}  // namespace

Result<std::unique_ptr<EngineTier>> EngineTier::Open(EngineTierOptions options) {
  const uint64_t row_bytes = options.fs.row_bytes;
  if (options.rows.empty() || row_bytes == 0 || options.rows.size() % row_bytes != 0) {
    return InvalidArgument("engine tier: the row region (" + std::to_string(options.rows.size()) +
                           " bytes) must be a non-empty whole number of rows of " +
                           std::to_string(row_bytes) + " bytes");
  }
  auto completions = std::make_shared<Completions>();
  options.fs.registered_memory = {options.rows};
  options.fs.on_job_finished = [completions] { completions->Signal(); };
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<FsTier> fs, FsTier::Open(options.fs));
  return std::unique_ptr<EngineTier>(
      new EngineTierImpl(std::move(fs), options.rows, row_bytes, std::move(completions)));
}

}  // namespace kvtier
