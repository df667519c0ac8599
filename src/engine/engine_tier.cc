// EngineTier (include/kvtier/engine_tier.h): the verdict cache, the job table
// that maps the fs tier's job ids to the engine's, and result assembly.
//
// Completions are collected lazily: the fs tier's on_job_finished callback
// only raises a flag, and the next call that needs results polls, so a
// scheduler that calls Lookup() thousands of times a step pays for one poll.
#include "kvtier/engine_tier.h"

#include <atomic>
#include <chrono>
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

struct KeyState {
  LookupVerdict verdict = LookupVerdict::kRetry;
  std::vector<std::string> requests;  // live requests that asked (few per key)
};

struct Job {
  int64_t engine_id = 0;
  bool is_load = false;
  std::vector<std::string> key_ids;
  Clock::time_point submitted;
};

bool KeyStored(KeyOutcome o) { return o == KeyOutcome::kOk || o == KeyOutcome::kSkippedExists; }

class EngineTierImpl final : public EngineTier {
 public:
  EngineTierImpl(std::unique_ptr<FsTier> fs, std::span<uint8_t> rows, uint64_t row_bytes,
                 std::shared_ptr<std::atomic<bool>> completed)
      : fs_(std::move(fs)), rows_(rows), row_bytes_(row_bytes), completed_(std::move(completed)) {}
  ~EngineTierImpl() override { Shutdown(); }

  LookupVerdict Lookup(const OffloadKey& key, std::string_view request_id) override {
    std::lock_guard lock(mu_);
    if (!fs_) return LookupVerdict::kMiss;
    CollectLocked();
    std::string id = KeyId(key);
    auto [it, inserted] = keys_.try_emplace(id);
    if (inserted) {
      batch_.push_back(key);
      batch_ids_.push_back(id);
    }
    AddInterestLocked(it->second, id, request_id);
    return it->second.verdict;
  }

  Status FlushLookups() override {
    std::lock_guard lock(mu_);
    if (!fs_) return Status(StatusCode::kUnavailable, "engine tier: shut down");
    if (batch_.empty()) return Status::Ok();
    Result<uint64_t> job = fs_->SubmitLookup(batch_);
    std::vector<std::string> ids = std::exchange(batch_ids_, {});
    batch_.clear();
    if (!job.ok()) {
      ApplyVerdictsLocked(ids, LookupVerdict::kMiss);  // as vLLM: a failed batch is a miss
      return job.status();
    }
    lookups_[*job] = std::move(ids);
    return Status::Ok();
  }

  void FinishRequest(std::string_view request_id) override {
    std::lock_guard lock(mu_);
    auto it = request_keys_.find(std::string(request_id));
    if (it == request_keys_.end()) return;
    for (const std::string& id : it->second) DropInterestLocked(id, request_id);
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
    for (EngineJobResult& r : ready_) out->push_back(std::move(r));
    ready_.clear();
    return n;
  }

  bool HasPendingWork() override {
    std::lock_guard lock(mu_);
    CollectLocked();
    return !jobs_.empty() || !lookups_.empty() || !ready_.empty() || !batch_.empty();
  }

  Status Drain(uint32_t timeout_ms) override {
    const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      {
        std::lock_guard lock(mu_);
        if (!fs_) return Status::Ok();
        CollectLocked();
        if (jobs_.empty() && lookups_.empty()) return Status::Ok();
      }
      if (timeout_ms != 0 && Clock::now() >= deadline) {
        return Status(StatusCode::kTimedOut, "engine tier: jobs still running after " +
                                                 std::to_string(timeout_ms) + " ms");
      }
      Status idle = fs_->WaitIdle(100);  // fs_ is reset only by Shutdown, after draining
      idle.IgnoreError();                // re-checked above
    }
  }

  void Shutdown() override {
    Drain(0).IgnoreError();  // every I/O carries a deadline, so this ends
    std::lock_guard lock(mu_);
    fs_.reset();
  }

  EngineTierStats Stats() override {
    std::lock_guard lock(mu_);
    EngineTierStats s;
    for (const auto& [job, ids] : lookups_) s.lookups_pending += ids.size();
    s.lookups_pending += batch_.size();
    s.lookup_cache_keys = keys_.size();
    s.jobs_in_flight = jobs_.size();
    return s;
  }

  FsTier& fs() override { return *fs_; }

 private:
  Status Submit(int64_t job_id, bool is_load, std::span<const OffloadKey> keys,
                std::span<const int64_t> slots);
  Status CheckJob(int64_t job_id, std::span<const OffloadKey> keys, std::span<const int64_t> slots) const;
  void CollectLocked();
  void FinishJobLocked(const JobResult& done);
  void AddInterestLocked(KeyState& state, const std::string& id, std::string_view request_id);
  void DropInterestLocked(const std::string& id, std::string_view request_id);
  void ApplyVerdictsLocked(const std::vector<std::string>& ids, LookupVerdict verdict);
  void SetVerdictLocked(const std::string& id, LookupVerdict verdict);

  std::mutex mu_;
  std::unique_ptr<FsTier> fs_;
  const std::span<uint8_t> rows_;
  const uint64_t row_bytes_;
  std::shared_ptr<std::atomic<bool>> completed_;  // raised by the fs tier's callback
  std::unordered_map<std::string, KeyState> keys_;
  std::unordered_map<std::string, std::vector<std::string>> request_keys_;
  std::vector<OffloadKey> batch_;
  std::vector<std::string> batch_ids_;
  std::unordered_map<uint64_t, std::vector<std::string>> lookups_;  // fs job id -> key ids
  std::unordered_map<uint64_t, Job> jobs_;                          // fs job id -> store/load
  std::unordered_set<int64_t> engine_ids_;                          // engine ids in flight
  std::vector<EngineJobResult> ready_;
};

void EngineTierImpl::AddInterestLocked(KeyState& state, const std::string& id, std::string_view request_id) {
  for (const std::string& r : state.requests) {
    if (r == request_id) return;
  }
  state.requests.emplace_back(request_id);
  request_keys_[std::string(request_id)].push_back(id);
}

void EngineTierImpl::DropInterestLocked(const std::string& id, std::string_view request_id) {
  auto it = keys_.find(id);
  if (it == keys_.end()) return;
  std::erase(it->second.requests, request_id);
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

Status EngineTierImpl::CheckJob(int64_t job_id, std::span<const OffloadKey> keys,
                                std::span<const int64_t> slots) const {
  if (keys.size() != slots.size()) {
    return InvalidArgument("engine tier: job " + std::to_string(job_id) + " has " +
                           std::to_string(keys.size()) + " keys but " + std::to_string(slots.size()) + " slots");
  }
  const uint64_t n_rows = rows_.size() / row_bytes_;
  for (int64_t slot : slots) {
    if (slot < 0 || static_cast<uint64_t>(slot) >= n_rows) {
      return InvalidArgument("engine tier: job " + std::to_string(job_id) + ": slot " + std::to_string(slot) +
                             " is outside the " + std::to_string(n_rows) + " rows");
    }
  }
  if (engine_ids_.contains(job_id)) {
    return InvalidArgument("engine tier: job id " + std::to_string(job_id) + " is already in flight");
  }
  return Status::Ok();
}

Status EngineTierImpl::Submit(int64_t job_id, bool is_load, std::span<const OffloadKey> keys,
                              std::span<const int64_t> slots) {
  std::lock_guard lock(mu_);
  if (!fs_) return Status(StatusCode::kUnavailable, "engine tier: shut down");
  KVTIER_RETURN_IF_ERROR(CheckJob(job_id, keys, slots));
  Job job{job_id, is_load, {}, Clock::now()};
  job.key_ids.reserve(keys.size());
  for (const OffloadKey& key : keys) job.key_ids.push_back(KeyId(key));
  std::vector<std::span<uint8_t>> rows;
  rows.reserve(slots.size());
  for (int64_t slot : slots) rows.push_back(rows_.subspan(static_cast<uint64_t>(slot) * row_bytes_, row_bytes_));
  const std::vector<std::span<const uint8_t>> src(rows.begin(), rows.end());
  Result<uint64_t> fs_job = is_load ? fs_->SubmitLoad(keys, rows) : fs_->SubmitStore(keys, src);
  if (!fs_job.ok()) {  // refused as a whole: the engine still gets its one result
    EngineJobResult failed;
    failed.job_id = job_id;
    failed.is_load = is_load;
    ready_.push_back(std::move(failed));
    return Status::Ok();
  }
  engine_ids_.insert(job_id);
  jobs_.emplace(*fs_job, std::move(job));
  return Status::Ok();
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
  engine_ids_.erase(job.engine_id);
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
  if (!fs_ || !completed_->exchange(false, std::memory_order_acq_rel)) return;
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
  auto completed = std::make_shared<std::atomic<bool>>(false);
  options.fs.registered_memory = {options.rows};
  options.fs.on_job_finished = [completed] { completed->store(true, std::memory_order_release); };
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<FsTier> fs, FsTier::Open(options.fs));
  return std::unique_ptr<EngineTier>(
      new EngineTierImpl(std::move(fs), options.rows, row_bytes, std::move(completed)));
}

}  // namespace kvtier
