// The fs tier's engine: one thread that moves submitted jobs into the
// scheduler, hands its requests to the backend, feeds completions back and
// reports finished jobs. Callers only touch the inbox and the finished list.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "fs/backpressure.h"
#include "format/layout_names.h"
#include "fs/fs_tier_internal.h"
#include "fs/tier_metrics.h"

namespace kvtier::internal {
namespace {

struct Job {
  uint64_t id = 0;
  JobKind kind = JobKind::kLoad;
  std::vector<KeyResult> results;
  size_t remaining = 0;
};

struct Submission {
  std::unique_ptr<Job> job;
  std::vector<std::unique_ptr<FsBlockOp>> ops;
  IoClass cls = IoClass::kRead;
};

class FsTierImpl final : public FsTier {
 public:
  FsTierImpl(const FsTierOpenOptions& o, Namespace ns, std::unique_ptr<TierShared> shared,
             std::unique_ptr<IoBackend> backend, std::unique_ptr<Lease> lease)
      : options_(o), ns_(std::move(ns)), shared_(std::move(shared)), backend_(std::move(backend)),
        lease_(std::move(lease)),
        scheduler_(Limits(o)), detector_(o.tier.backpressure) {
    engine_ = std::thread([this] { Run(); });
  }
  ~FsTierImpl() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    backend_->Wake();
    engine_.join();
  }

  Result<uint64_t> SubmitStore(std::span<const OffloadKey> keys,
                               std::span<const std::span<const uint8_t>> rows) override {
    KVTIER_RETURN_IF_ERROR(CheckRows(keys.size(), rows, options_.row_bytes));
    const uint64_t bytes = keys.size() * options_.row_bytes;
    if (detector_.pressured()) return Drop(keys.size(), "store latency above the high water mark");
    if (metrics_.store_queue_bytes.fetch_add(bytes) + bytes > options_.tier.store_queue_bytes_max) {
      metrics_.store_queue_bytes -= bytes;
      return Drop(keys.size(), "store queue full");
    }
    Submission sub = NewSubmission(JobKind::kStore, keys.size(), IoClass::kWrite);
    for (size_t i = 0; i < keys.size(); ++i) sub.ops.push_back(MakeStoreOp(shared_.get(), Parts(keys[i]), rows[i]));
    return Enqueue(std::move(sub));
  }

  Result<uint64_t> SubmitLoad(std::span<const OffloadKey> keys, std::span<const std::span<uint8_t>> rows) override {
    KVTIER_RETURN_IF_ERROR(CheckRows(keys.size(), rows, options_.row_bytes));
    Submission sub = NewSubmission(JobKind::kLoad, keys.size(), IoClass::kRead);
    for (size_t i = 0; i < keys.size(); ++i) {
      sub.ops.push_back(MakeLoadOp(shared_.get(), ns_.BlockRelPath(keys[i]), rows[i]));
    }
    return Enqueue(std::move(sub));
  }

  Result<uint64_t> SubmitLookup(std::span<const OffloadKey> keys) override {
    Submission sub = NewSubmission(JobKind::kLookup, keys.size(), IoClass::kRead);
    for (const OffloadKey& key : keys) sub.ops.push_back(MakeLookupOp(shared_.get(), ns_.BlockRelPath(key)));
    return Enqueue(std::move(sub));
  }

  size_t PollFinished(std::vector<JobResult>* out) override {
    std::lock_guard lock(mu_);
    size_t n = finished_.size();
    for (auto& r : finished_) out->push_back(std::move(r));
    finished_.clear();
    return n;
  }

  Status WaitIdle(uint32_t timeout_ms) override {
    std::unique_lock lock(mu_);
    bool idle = idle_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return open_jobs_ == 0; });
    return idle ? Status::Ok() : Status(StatusCode::kTimedOut, "fs tier: jobs still running");
  }

  FsTierMetrics Metrics() const override {
    FsTierMetrics m = metrics_.Snapshot();
    m.fixed_buffer_ios = backend_->fixed_buffer_ios();
    m.checksum_ns = shared_->checksum_ns.load(std::memory_order_relaxed);
    return m;
  }
  std::string PrometheusText(std::string_view tier_name) const override {
    return FormatPrometheus(Metrics(), tier_name);
  }
  const Namespace& ns() const override { return ns_; }
  std::string_view backend_name() const override { return backend_->name(); }
  bool o_direct() const override { return shared_->o_direct; }
  bool xattrs_supported() const override { return shared_->checksum; }
  std::string BlockPath(const OffloadKey& key) const override {
    return JoinRoot(options_.tier.root_dir, ns_.BlockRelPath(key));
  }

 private:
  static SchedulerLimits Limits(const FsTierOpenOptions& o) {
    SchedulerLimits limits;
    limits.reads_in_flight_max = o.tier.n_read_threads;
    limits.writes_in_flight_max = o.tier.n_write_threads;
    limits.stores_while_loading_max = o.tier.stores_while_loading_max;
    return limits;
  }

  BlockPathParts Parts(const OffloadKey& key) const {
    const std::string hex = key.hash.Hex();
    return {ns_.block_dir_name(), format::Shard1Name(hex), format::Shard2Name(hex, key.group_idx),
            format::BlockFileName(hex)};
  }

  Submission NewSubmission(JobKind kind, size_t n, IoClass cls) {
    Submission sub;
    sub.job = std::make_unique<Job>();
    sub.job->id = next_job_id_.fetch_add(1);
    sub.job->kind = kind;
    sub.job->results.resize(n);
    sub.job->remaining = n;
    sub.cls = cls;
    return sub;
  }

  uint64_t Enqueue(Submission sub) {
    const uint64_t id = sub.job->id;
    const uint64_t now = MonotonicNowNs();
    for (size_t i = 0; i < sub.ops.size(); ++i) {
      sub.ops[i]->owner = sub.job.get();
      sub.ops[i]->index = i;
      sub.ops[i]->start_ns = now;
    }
    const bool empty = sub.ops.empty();
    {
      std::lock_guard lock(mu_);
      ++open_jobs_;
      if (empty) Finish(std::move(sub.job));
      else inbox_.push_back(std::move(sub));
    }
    if (empty) NotifyFinished();
    // One wake-up per sleep: while the engine works, it drains the inbox
    // anyway, and a write per job cost several context switches per row.
    if (sleeping_.exchange(false)) backend_->Wake();
    return id;
  }

  // Backpressure: the store is refused whole and reported like any job.
  uint64_t Drop(size_t n, const char* why) {
    Submission sub = NewSubmission(JobKind::kStore, n, IoClass::kWrite);
    for (KeyResult& r : sub.job->results) r = {KeyOutcome::kDropped, Status(StatusCode::kRejected, why)};
    metrics_.rows_dropped += n;
    const uint64_t id = sub.job->id;
    {
      std::lock_guard lock(mu_);
      ++open_jobs_;
      Finish(std::move(sub.job));
    }
    NotifyFinished();
    return id;
  }

  void NotifyFinished() const {
    if (options_.on_job_finished) options_.on_job_finished();
  }

  // Called with mu_ held.
  void Finish(std::unique_ptr<Job> job) {
    finished_.push_back(JobResult{job->id, job->kind, std::move(job->results)});
    if (--open_jobs_ == 0) idle_cv_.notify_all();
  }

  void Account(std::unique_ptr<FsBlockOp> op) {
    auto* job = static_cast<Job*>(op->owner);
    const uint64_t latency_ns = MonotonicNowNs() - op->start_ns;
    metrics_.Record(job->kind, op->result.outcome, op->bytes, latency_ns);
    if (job->kind == JobKind::kStore && op->result.outcome == KeyOutcome::kOk) {
      detector_.Add(op->bytes, latency_ns);
      metrics_.SetBackpressure(detector_.pressured(), detector_.ema());
    }
    if (job->kind == JobKind::kStore) metrics_.store_queue_bytes -= options_.row_bytes;
    job->results[op->index] = std::move(op->result);
    if (--job->remaining > 0) return;
    std::unique_ptr<Job> done = std::move(jobs_.at(job->id));
    jobs_.erase(job->id);
    {
      std::lock_guard lock(mu_);
      Finish(std::move(done));
    }
    NotifyFinished();
  }

  // Moves the inbox into the scheduler; false when it is time to stop.
  bool DrainInbox() {
    std::deque<Submission> inbox;
    {
      std::lock_guard lock(mu_);
      if (stop_ && inbox_.empty() && scheduler_.idle()) return false;
      inbox.swap(inbox_);
    }
    for (Submission& sub : inbox) {
      for (auto& op : sub.ops) scheduler_.Enqueue(std::move(op), sub.cls);
      jobs_.emplace(sub.job->id, std::move(sub.job));
    }
    return true;
  }

  // Announces that the engine is about to block in Reap and returns how
  // long it may: 0 when work arrived meanwhile. A submitter that sees the
  // flag wakes it; one that comes before the inbox check is seen by it.
  int SleepTimeoutMs(bool idle) {
    sleeping_.store(true);
    std::lock_guard lock(mu_);
    if (!inbox_.empty()) return 0;
    return idle ? -1 : 100;
  }

  void Run() {
    std::vector<IoRequest> requests;
    std::vector<IoCompletion> completions(256);
    std::vector<std::unique_ptr<BlockOp>> finished;
    while (DrainInbox()) {
      requests.clear();
      scheduler_.Emit(&requests, MonotonicNowNs());
      // A backend completes every request it was given, failures included
      // (as -errno), so nothing is failed here: doing so could report a
      // request as done while the kernel still works on its buffer.
      if (!requests.empty()) backend_->Submit(requests).IgnoreError();
      metrics_.SetQueues(scheduler_.queued(IoClass::kRead), scheduler_.queued(IoClass::kWrite), scheduler_.in_flight());
      const size_t n = backend_->Reap(completions, SleepTimeoutMs(requests.empty() && scheduler_.in_flight() == 0));
      sleeping_.store(false);
      for (size_t i = 0; i < n; ++i) scheduler_.Complete(completions[i]);
      finished.clear();
      scheduler_.TakeFinished(&finished);
      for (auto& op : finished) Account(std::unique_ptr<FsBlockOp>(static_cast<FsBlockOp*>(op.release())));
    }
  }

  const FsTierOpenOptions options_;
  const Namespace ns_;
  std::unique_ptr<TierShared> shared_;
  std::unique_ptr<IoBackend> backend_;
  std::unique_ptr<Lease> lease_;  // heartbeat for gc (L74)
  IoScheduler scheduler_;                                   // engine thread only
  std::unordered_map<uint64_t, std::unique_ptr<Job>> jobs_;  // engine thread only
  StoreLatencyDetector detector_;  // Add() on the engine thread; pressured() anywhere
  TierMetricsCounters metrics_;
  std::atomic<uint64_t> next_job_id_{1};
  std::atomic<bool> sleeping_{false};  // the engine is in (or about to enter) a blocking Reap
  std::mutex mu_;
  std::condition_variable idle_cv_;
  std::deque<Submission> inbox_;
  std::vector<JobResult> finished_;
  size_t open_jobs_ = 0;
  bool stop_ = false;
  std::thread engine_;
};

}  // namespace

std::unique_ptr<FsTier> MakeFsTierImpl(const FsTierOpenOptions& options, Namespace ns,
                                       std::unique_ptr<TierShared> shared, std::unique_ptr<IoBackend> backend,
                                       std::unique_ptr<Lease> lease) {
  return std::make_unique<FsTierImpl>(options, std::move(ns), std::move(shared), std::move(backend),
                                      std::move(lease));
}

}  // namespace kvtier::internal

namespace kvtier {

std::string_view KeyOutcomeName(KeyOutcome outcome) {
  switch (outcome) {
    case KeyOutcome::kOk: return "ok";
    case KeyOutcome::kSkippedExists: return "skipped_exists";
    case KeyOutcome::kMiss: return "miss";
    case KeyOutcome::kCorrupt: return "corrupt";
    case KeyOutcome::kDropped: return "dropped";
    case KeyOutcome::kError: return "error";
  }
  return "unknown";
}

size_t JobResult::OkPrefix() const {
  size_t n = 0;
  while (n < keys.size() && keys[n].outcome == KeyOutcome::kOk) ++n;
  return n;
}

}  // namespace kvtier
