// VllmTier (include/kvtier/vllm_tier.h): the verdict cache, the job table
// that maps the fs tier's job ids to the engine's, and result assembly, over
// a TierShell (include/kvtier/tier_shell.h) that owns the admission, the
// close, the rows in use and the collection of completions; the slots
// become rows through a RowRegion (front/row_region.h).
#include "kvtier/vllm_tier.h"

#include <chrono>
#include <exception>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "front/row_region.h"
#include "kvtier/tier_shell.h"

namespace kvtier {
namespace {

using Clock = std::chrono::steady_clock;

// The cache's key: the bytes of vLLM's OffloadKey (OffloadKey::Bytes).
std::string KeyId(const OffloadKey& key) {
  const std::vector<uint8_t> bytes = key.Bytes();
  return {bytes.begin(), bytes.end()};
}

std::vector<std::string> KeyIds(std::span<const OffloadKey> keys) {
  std::vector<std::string> ids;
  ids.reserve(keys.size());
  for (const OffloadKey& key : keys) ids.push_back(KeyId(key));
  return ids;
}

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

class VllmTierImpl final : public VllmTier {
 public:
  VllmTierImpl(std::unique_ptr<TierShell> shell, internal::RowRegion region)
      : shell_(std::move(shell)), region_(region) {}
  ~VllmTierImpl() override { Shutdown(); }

  LookupVerdict Lookup(const OffloadKey& key, std::string_view request_id) override {
    std::string id = KeyId(key);
    std::lock_guard lock(mu_);
    if (shell_->closing()) return LookupVerdict::kMiss;
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
      auto it = taken_.find(r.job_id);  // its id and slots are free once the engine has its result
      if (it->second != 0) shell_->Release(it->second);
      taken_.erase(it);
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

  Status Drain(uint32_t timeout_ms) override {
    const Status s = shell_->WaitIdle(timeout_ms);
    if (s.code() != StatusCode::kTimedOut) {  // idle, or closed: every job has its result
      std::lock_guard lock(mu_);
      CollectLocked();
      return s;
    }
    return Status(StatusCode::kTimedOut, "engine tier: jobs still running after " + std::to_string(timeout_ms) + " ms");
  }

  void Shutdown() override {
    shell_->Close();  // every caller returns once no I/O can touch the rows
    std::lock_guard lock(mu_);
    batch_.clear();  // never flushed: a miss
    ApplyVerdictsLocked(std::exchange(batch_ids_, {}), LookupVerdict::kMiss);
    CollectLocked();  // results Close collected: kept for PollFinished
  }

  VllmTierStats Stats() override {
    std::lock_guard lock(mu_);
    VllmTierStats s;
    for (const auto& [job, ids] : lookups_) s.lookups_pending += ids.size();
    s.lookups_pending += batch_.size();
    s.lookup_cache_keys = keys_.size();
    s.jobs_in_flight = jobs_.size();
    return s;
  }

  FsTierMetrics Metrics() override { return shell_->Metrics(); }
  std::vector<TierKeyEvent> TakeKeyEvents() override { return shell_->TakeKeyEvents(); }
  Result<std::string> PrometheusText(std::string_view tier_name) override { return shell_->PrometheusText(tier_name); }
  Result<std::string> BlockPath(const OffloadKey& key) override { return shell_->BlockPath(key); }
  std::string_view backend_name() const override { return shell_->backend_name(); }
  bool o_direct() const override { return shell_->o_direct(); }
  std::string_view checksum_place() const override { return shell_->checksum_place(); }

  Result<FsTier*> fs() override {
    FsTier* tier = shell_->closing() ? nullptr : shell_->tier_for_tests();
    if (tier == nullptr) return shell_->Closed();
    return tier;
  }

 private:
  Status Submit(int64_t job_id, bool is_load, std::span<const OffloadKey> keys,
                std::span<const int64_t> slots);
  Result<std::vector<std::span<uint8_t>>> JobRows(int64_t job_id, std::span<const OffloadKey> keys,
                                                  std::span<const int64_t> slots) const;
  void CollectLocked();
  void FinishJobLocked(const JobResult& done);
  void AddInterestLocked(KeyState& state, const std::string& id, std::string_view request_id);
  void DropInterestLocked(const std::string& id, const std::string& request_id);
  void ApplyVerdictsLocked(const std::vector<std::string>& ids, LookupVerdict verdict);
  void SetVerdictLocked(const std::string& id, LookupVerdict verdict);

  // Lock order: mu_, then the shell's (which never calls back).
  std::mutex mu_;
  const std::unique_ptr<TierShell> shell_;
  const internal::RowRegion region_;
  std::unordered_map<std::string, KeyState> keys_;
  std::unordered_map<std::string, std::vector<std::string>> request_keys_;
  std::vector<OffloadKey> batch_;
  std::vector<std::string> batch_ids_;
  std::unordered_map<uint64_t, std::vector<std::string>> lookups_;  // fs job id -> key ids
  std::unordered_map<uint64_t, Job> jobs_;                          // fs job id -> store/load
  std::unordered_map<int64_t, uint64_t> taken_;  // engine id -> fs job id (0: refused), until polled
  std::vector<EngineJobResult> ready_;
};

Status VllmTierImpl::FlushLookups() {
  std::lock_guard lock(mu_);
  if (shell_->closing()) return shell_->Closed();
  if (batch_.empty()) return Status::Ok();
  // Out of the batch before anything can fail: a failed batch is never
  // retried by every later flush while its keys and the others wait.
  const std::vector<OffloadKey> keys = std::exchange(batch_, {});
  std::vector<std::string> ids = std::exchange(batch_ids_, {});
  Result<uint64_t> job = Internal("engine tier: lookup not submitted");
  try {
    job = shell_->Submit([&](FsTier& t) { return t.SubmitLookup(keys); });
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

void VllmTierImpl::AddInterestLocked(KeyState& state, const std::string& id, std::string_view request_id) {
  if (!state.requests.emplace(request_id).second) return;  // this request asked before
  request_keys_[std::string(request_id)].push_back(id);
}

void VllmTierImpl::DropInterestLocked(const std::string& id, const std::string& request_id) {
  auto it = keys_.find(id);
  if (it == keys_.end()) return;
  it->second.requests.erase(request_id);
  // A key still being checked stays, so its verdict has a home when it lands.
  if (it->second.requests.empty() && it->second.verdict != LookupVerdict::kRetry) keys_.erase(it);
}

void VllmTierImpl::SetVerdictLocked(const std::string& id, LookupVerdict verdict) {
  auto it = keys_.find(id);
  if (it == keys_.end()) return;
  it->second.verdict = verdict;
  if (it->second.requests.empty()) keys_.erase(it);
}

void VllmTierImpl::ApplyVerdictsLocked(const std::vector<std::string>& ids, LookupVerdict verdict) {
  for (const std::string& id : ids) SetVerdictLocked(id, verdict);
}

// The job's rows, after the checks that are the engine's own; the rows in use are the shell's.
Result<std::vector<std::span<uint8_t>>> VllmTierImpl::JobRows(int64_t job_id, std::span<const OffloadKey> keys,
                                                                std::span<const int64_t> slots) const {
  const std::string job = "engine tier: job " + std::to_string(job_id);
  if (keys.size() != slots.size()) {
    return InvalidArgument(job + " has " + std::to_string(keys.size()) + " keys but " +
                           std::to_string(slots.size()) + " slots");
  }
  KVTIER_ASSIGN_OR_RETURN(std::vector<std::span<uint8_t>> rows, region_.Rows(slots, job));
  if (taken_.contains(job_id)) {
    return InvalidArgument("engine tier: job id " + std::to_string(job_id) + " is in flight or its result not yet polled");
  }
  return rows;
}

Status VllmTierImpl::Submit(int64_t job_id, bool is_load, std::span<const OffloadKey> keys,
                              std::span<const int64_t> slots) {
  std::lock_guard lock(mu_);
  if (shell_->closing()) return shell_->Closed();
  KVTIER_ASSIGN_OR_RETURN(const std::vector<std::span<uint8_t>> rows, JobRows(job_id, keys, slots));
  const std::vector<std::span<const uint8_t>> src(rows.begin(), rows.end());
  const Clock::time_point submitted = Clock::now();
  bool reached_fs = false;
  Result<uint64_t> fs_job = shell_->Submit(
      is_load ? MemoryUse::kWrite : MemoryUse::kRead, RowRanges(rows),
      [&](FsTier& t) {
        reached_fs = true;
        return is_load ? t.SubmitLoad(keys, rows) : t.SubmitStore(keys, src);
      },
      [&](size_t i) { return "job " + std::to_string(job_id) + ": slot " + std::to_string(slots[i]); });
  if (!fs_job.ok() && !reached_fs) return fs_job.status();  // closed, or a slot in use: nothing submitted
  taken_.emplace(job_id, fs_job.ok() ? *fs_job : 0);
  if (!fs_job.ok()) {  // refused as a whole by the fs tier: the engine still gets its one result
    EngineJobResult failed;
    failed.job_id = job_id;
    failed.is_load = is_load;
    ready_.push_back(std::move(failed));
    return Status::Ok();
  }
  jobs_.emplace(*fs_job, Job{job_id, is_load, KeyIds(keys), submitted});
  return Status::Ok();
}

void VllmTierImpl::FinishJobLocked(const JobResult& done) {
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
    const bool ok = KeySucceeded(job.is_load ? JobKind::kLoad : JobKind::kStore, o);
    if (ok && job.is_load) r.ok_keys.push_back(static_cast<uint32_t>(i));
    if (o == KeyOutcome::kOk) r.bytes += region_.row_bytes();
    r.success = r.success && ok;
    // A failed load must not be offered again; a stored key now exists.
    if (job.is_load && !ok) SetVerdictLocked(job.key_ids[i], LookupVerdict::kMiss);
    if (!job.is_load && ok) SetVerdictLocked(job.key_ids[i], LookupVerdict::kHit);
  }
  if (r.success) r.ok_keys.clear();
  r.transfer_time_s = std::chrono::duration<double>(Clock::now() - job.submitted).count();
  ready_.push_back(std::move(r));
}

void VllmTierImpl::CollectLocked() {
  std::vector<JobResult> done;
  shell_->Poll(&done);
  for (const JobResult& d : done) FinishJobLocked(d);
}

}  // namespace

Result<std::unique_ptr<VllmTier>> VllmTier::Open(VllmTierOptions options) {
  KVTIER_ASSIGN_OR_RETURN(internal::RowRegion region,
                          internal::RowRegion::Make(options.rows, options.fs.row_bytes, "engine tier"));
  options.fs.registered_memory = {options.rows};
  options.fs.keep_key_events = true;  // TakeKeyEvents: vLLM's take_events drains them
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<TierShell> shell, TierShell::Open(options.fs, "engine tier"));
  return std::unique_ptr<VllmTier>(new VllmTierImpl(std::move(shell), region));
}

}  // namespace kvtier
