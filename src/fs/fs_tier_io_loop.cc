// The fs tier's I/O loop: one thread that moves submitted jobs into the
// scheduler, hands its requests to the backend, feeds completions back and
// reports finished jobs. Callers only touch the inbox and the finished list.
//
// A sick volume (docs/sick-volumes.md; constants in sick_volume_policy.h): a
// request the kernel still holds past its deadline + kAbandonGraceMs (time
// for the backend's cancel to land) is abandoned: its key fails with
// kTimedOut at once, while the request is stuck: its op, slot and the memory
// the kernel may write stay in the scheduler until the kernel returns it.
// RootHealth turns the root down after repeated misses (work then fails at
// once, one probe at a time checks the root) and up when a probe answers.
// Closing waits for everything but stuck requests, so it returns within
// io_timeout_ms plus the grace and a poll (docs/config.md); what the kernel
// still holds then is left to the process exit, never freed under it. All
// of it runs on the injected Clock (io/clock.h): tests need no sleep.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "fs/backpressure.h"
#include "fs/block_codec.h"
#include "fs/fs_tier_internal.h"
#include "fs/io_job.h"
#include "fs/root_health.h"
#include "fs/sick_volume_policy.h"
#include "fs/staged_crc.h"
#include "fs/tier_events.h"
#include "fs/tier_metrics.h"
#include "fs/tier_space.h"
#include "util/keep_forever.h"
#include "util/log.h"

namespace kvtier::internal {
namespace {

using io_loop::Job;
using io_loop::Submission;

// Probe tags: above the scheduler's (from 1 up), below the few backends reserve.
constexpr uint64_t kProbeTagBase = uint64_t{1} << 62;

class FsTierImpl final : public FsTier, public StagedCrcTier {
 public:
  FsTierImpl(const FsTierOpenOptions& o, Namespace ns, std::unique_ptr<TierShared> shared,
             std::unique_ptr<IoBackend> backend, std::unique_ptr<Lease> lease, const Clock& clock)
      : options_(o), clock_(clock), ns_(std::move(ns)), shared_(std::move(shared)), backend_(std::move(backend)),
        lease_(std::move(lease)),
        scheduler_limits_(SchedulerLimitsFor(o)), scheduler_(scheduler_limits_), detector_(o.tier.backpressure), health_(kMissesToDown, kProbeIntervalNs),
        space_(TierSpace::Start(o.tier, shared_->local_root, shared_->root.get(), ns_.block_dir_name(), shared_->file_bytes())) {
    io_thread_ = std::thread([this] { Run(); });
  }
  ~FsTierImpl() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    backend_->Wake();
    {
      std::unique_lock lock(mu_);
      idle_cv_.wait(lock, [&] { return loop_done_; });
    }
    if (!leak_backend_) {
      io_thread_.join();
      return;
    }
    // The kernel still holds requests of the backend's ring or threads:
    // leave it (its threads, fds and ring) to the process exit. The I/O
    // thread is not joined either: a thread that set up an io_uring waits,
    // as it exits, for the ring's kernel workers, which are the ones stuck.
    KeepForever(std::move(backend_));
    shared_->codec.reset();  // the loop has ended, no late completion is reaped: wipe a seal's keys now (L173)
    KeepForever(std::move(shared_));  // the root fd: requests still queued in the kernel resolve paths from it
    io_thread_.detach();
  }

  Result<uint64_t> SubmitStore(std::span<const OffloadKey> keys, std::span<const std::span<const uint8_t>> rows,
                               std::span<const std::vector<BlockHash>> block_hashes) override {
    return StoreRows(keys, rows, {}, block_hashes);
  }
  Result<uint64_t> SubmitLoad(std::span<const OffloadKey> keys,
                              std::span<const std::span<uint8_t>> rows) override { return LoadRows(keys, rows); }
  Result<uint64_t> SubmitStorePieces(std::span<const OffloadKey> keys,
                                     std::span<const std::vector<std::span<const uint8_t>>> rows,
                                     std::span<const std::vector<BlockHash>> block_hashes) override {
    return StoreRows(keys, rows, {}, block_hashes);
  }
  Result<uint64_t> SubmitLoadPieces(std::span<const OffloadKey> keys,
                                    std::span<const std::vector<std::span<uint8_t>>> rows) override { return LoadRows(keys, rows); }

  // staged_crc.h (its wrappers check the counts).
  Result<uint64_t> StoreWithCrcs(std::span<const OffloadKey> keys, std::span<const std::span<const uint8_t>> rows,
                                 std::span<const uint32_t> crcs,
                                 std::span<const std::vector<BlockHash>> block_hashes) override {
    return StoreRows(keys, rows, crcs, block_hashes);
  }
  Result<uint64_t> LoadUnchecked(std::span<const OffloadKey> keys, std::span<const std::span<uint8_t>> rows,
                                 std::span<LoadedBlock> out) override { return LoadRows(keys, rows, out); }
  Result<uint64_t> RemoveCorrupt(std::span<const OffloadKey> keys, std::span<const LoadedBlock> read) override {
    return LoadJob(keys, [&](size_t i) { return MakeRemoveCorruptOp(shared_.get(), ns_.BlockRelPath(keys[i]), read[i]); }, true);
  }

  // Rows are spans (one piece) or lists of pieces (RowPieces).
  template <class Row>
  Result<uint64_t> StoreRows(std::span<const OffloadKey> keys, std::span<const Row> rows, std::span<const uint32_t> crcs,
                             std::span<const std::vector<BlockHash>> block_hashes) {
    KVTIER_RETURN_IF_ERROR(CheckRows(keys.size(), rows, options_.row_bytes));
    KVTIER_ASSIGN_OR_RETURN(std::vector<std::string> records, BlockHashRecords(ns_, keys, block_hashes));
    const uint64_t bytes = keys.size() * options_.row_bytes;
    if (!health_.up()) return Drop(keys.size(), root_down_why_.c_str());
    if (detector_.pressured()) return Drop(keys.size(), "store latency above the high water mark");
    if (metrics_.store_queue_bytes.fetch_add(bytes) + bytes > options_.tier.store_queue_bytes_max) {
      metrics_.store_queue_bytes -= bytes;
      return Drop(keys.size(), "store queue full");
    }
    // max_bytes: room is reserved; this job's own ops unlink the LRU blocks evicted for it.
    std::vector<CapacityKey> capacity_keys = space_->Keys(keys);
    std::vector<std::string> evict;
    if (Status s = space_->AdmitStore(capacity_keys, &evict); !s.ok()) {
      metrics_.store_queue_bytes -= bytes;
      return Drop(keys.size(), s.message().c_str());
    }
    Submission sub = NewSubmission(JobKind::kStore, keys.size(), IoClass::kWrite);
    for (size_t i = 0; i < keys.size(); ++i) {
      const std::optional<uint32_t> crc = crcs.empty() ? std::nullopt : std::optional(crcs[i]);
      std::string record = records.empty() ? std::string() : std::move(records[i]);
      sub.ops.push_back(MakeStoreOp(shared_.get(), BlockParts(ns_, keys[i]), RowPieces(rows[i]), crc, std::move(record)));
    }
    for (const std::string& path : evict) sub.ops.push_back(MakeEvictOp(shared_.get(), path));
    sub.job->remaining = sub.ops.size();
    sub.job->capacity_keys = std::move(capacity_keys);
    if (shared_->events) sub.job->event_keys = shared_->events->ForJob(keys, evict);
    return Enqueue(std::move(sub));
  }

  template <class Row>
  Result<uint64_t> LoadRows(std::span<const OffloadKey> keys, std::span<const Row> rows,
                            std::span<LoadedBlock> unchecked = {}) {
    KVTIER_RETURN_IF_ERROR(CheckRows(keys.size(), rows, options_.row_bytes));
    return LoadJob(keys, [&](size_t i) {
      LoadedBlock* out = unchecked.empty() ? nullptr : &unchecked[i];
      return MakeLoadOp(shared_.get(), ns_.BlockRelPath(keys[i]), RowPieces(rows[i]), out);
    });
  }
  // A load job of make_op(i) per key: loads, or removals of corrupt blocks.
  template <class MakeOp>
  Result<uint64_t> LoadJob(std::span<const OffloadKey> keys, MakeOp make_op, bool removal = false) {
    if (!health_.up()) return FailNow(JobKind::kLoad, keys.size());
    Submission sub = NewSubmission(JobKind::kLoad, keys.size(), IoClass::kRead);
    sub.job->removal = removal;
    sub.job->capacity_keys = space_->Keys(keys);
    space_->PinLoads(sub.job->capacity_keys);  // not evicted while read
    if (shared_->events) sub.job->event_keys = shared_->events->ForJob(keys);
    for (size_t i = 0; i < keys.size(); ++i) sub.ops.push_back(make_op(i));
    return Enqueue(std::move(sub));
  }

  Result<uint64_t> SubmitLookup(std::span<const OffloadKey> keys) override {
    if (!health_.up()) return FailNow(JobKind::kLookup, keys.size());
    Submission sub = NewSubmission(JobKind::kLookup, keys.size(), IoClass::kRead);
    sub.job->capacity_keys = space_->Keys(keys);
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

  std::vector<TierKeyEvent> TakeKeyEvents() override {
    return shared_->events ? shared_->events->TakeKeyEvents() : std::vector<TierKeyEvent>();
  }
  FsTierMetrics Metrics() const override {
    FsTierMetrics m = metrics_.Snapshot();
    m.root_up = health_.up() ? 1 : 0;
    m.roots_down = 1 - m.root_up;
    m.deadline_misses = health_.misses_total();
    m.fixed_buffer_ios = backend_->fixed_buffer_ios();
    AddSharedCounters(*shared_, &m);
    space_->Fill(&m);
    return m;
  }
  std::string PrometheusText(std::string_view tier_name) const override {
    return FormatPrometheus(Metrics(), tier_name);
  }
  const Namespace& ns() const override { return ns_; }
  std::string_view backend_name() const override { return backend_->name(); }
  bool o_direct() const override { return shared_->o_direct; }
  bool xattrs_supported() const override { return shared_->codec->writes_xattr(); }
  std::string_view checksum_place() const override { return shared_->codec->name(); }
  std::string BlockPath(const OffloadKey& key) const override {
    return JoinRoot(options_.tier.root_dir, ns_.BlockRelPath(key));
  }

 private:
  Submission NewSubmission(JobKind kind, size_t n, IoClass cls) {
    return io_loop::NewSubmission(next_job_id_.fetch_add(1), kind, n, cls);
  }

  uint64_t Enqueue(Submission sub) {
    const uint64_t id = sub.job->id;
    const uint64_t now = clock_.NowNs();
    sub.enqueued_ns = now;
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
    // One wake-up per sleep: while the loop works, it drains the inbox
    // anyway, and a write per job cost several context switches per row.
    if (sleeping_.exchange(false)) backend_->Wake();
    return id;
  }

  // Backpressure: the store is refused whole and reported like any job.
  uint64_t Drop(size_t n, const char* why) {
    Submission sub = NewSubmission(JobKind::kStore, n, IoClass::kWrite);
    for (KeyResult& r : sub.job->results) r = {KeyOutcome::kDropped, Status(StatusCode::kRejected, why)};
    metrics_.rows_dropped += n;
    return FinishNow(std::move(sub));
  }

  // The root is down: a lookup misses, a load fails, at once.
  uint64_t FailNow(JobKind kind, size_t n) {
    Submission sub = NewSubmission(kind, n, IoClass::kRead);
    for (KeyResult& r : sub.job->results) r = DownResult(kind);
    for (size_t i = 0; i < n; ++i) metrics_.Record(kind, DownResult(kind).outcome, 0, 0);
    return FinishNow(std::move(sub));
  }
  KeyResult DownResult(JobKind kind) const { return io_loop::DownResult(kind, root_down_why_); }

  uint64_t FinishNow(Submission sub) {
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

  // A finished op: its result goes to its job, unless the scheduler handed
  // it out already when the op was abandoned (then it is only freed here,
  // and a block its late answer published is announced now).
  void Account(std::unique_ptr<FsBlockOp> op) {
    if (!op->result_taken) return Report(op.get());
    if (shared_->events && !op->published_late.empty()) {
      shared_->events->OnPublishedLate(op->published_late, op->block_hashes);
    }
  }

  void Report(FsBlockOp* op) {
    auto* job = static_cast<Job*>(op->owner);
    if (job->event_keys) shared_->events->OnOp(*job->event_keys, job->kind, op->index, *op);
    if (op->index < job->results.size()) ReportKey(job, op);  // past the keys: max_bytes evictions
    if (--job->remaining > 0) return;
    std::unique_ptr<Job> done = std::move(jobs_.at(job->id));
    jobs_.erase(job->id);
    {
      std::lock_guard lock(mu_);
      Finish(std::move(done));
    }
    NotifyFinished();
  }

  void ReportKey(Job* job, FsBlockOp* op) {
    const uint64_t latency_ns = clock_.NowNs() - op->start_ns;
    if (job->removal) metrics_.RecordRemoval(op->result.outcome);
    if (!job->removal) metrics_.Record(job->kind, op->result.outcome, op->bytes, latency_ns);
    if (job->kind == JobKind::kStore && op->result.outcome == KeyOutcome::kOk) {
      detector_.Add(op->bytes, latency_ns);
      metrics_.SetBackpressure(detector_.pressured(), detector_.ema());
    }
    if (job->kind == JobKind::kStore) metrics_.store_queue_bytes -= options_.row_bytes;
    const CapacityKey* key = job->capacity_keys.empty() ? nullptr : &job->capacity_keys[op->index];
    space_->OnKeyDone(job->kind, key, op->result.outcome);
    job->results[op->index] = std::move(op->result);
  }

  // Moves the inbox into the scheduler; false when it is time to stop.
  bool DrainInbox() {
    std::deque<Submission> inbox;
    {
      std::lock_guard lock(mu_);
      if (stop_ && inbox_.empty() && Stopped()) return false;
      inbox.swap(inbox_);
    }
    for (Submission& sub : inbox) {
      for (auto& op : sub.ops) scheduler_.Enqueue(std::move(op), sub.cls, sub.enqueued_ns);
      jobs_.emplace(sub.job->id, std::move(sub.job));
    }
    return true;
  }

  // Stopping: every job has its result, and what is left in flight (if
  // anything) is stuck in the kernel.
  // A probe is waited for until it counts as stuck (then the kernel keeps it).
  bool Stopped() const {
    const uint64_t abandon_ns = scheduler_limits_.abandon_after_ns;
    const bool probe_settled = !health_.probe_in_flight() ||
                               (abandon_ns > 0 && clock_.NowNs() >= probe_sent_ns_ + abandon_ns);
    return probe_settled && (scheduler_.idle() || (scheduler_.only_stuck() && jobs_.empty()));
  }

  // Announces that the loop is about to block in Reap and returns how
  // long it may: 0 when work arrived meanwhile. A submitter that sees the
  // flag wakes it; one that comes before the inbox check is seen by it.
  int SleepTimeoutMs(bool idle) {
    sleeping_.store(true);
    std::lock_guard lock(mu_);
    if (!inbox_.empty()) return 0;
    return idle && health_.up() ? -1 : kLoopPollMs;
  }

  void Run() {
    std::vector<IoRequest> requests;
    std::vector<IoCompletion> completions(256);
    while (DrainInbox()) {
      requests.clear();
      if (!health_.up()) FailQueued();
      scheduler_.Emit(&requests, clock_.NowNs());
      MaybeProbe(&requests);
      // A backend completes every request it was given, failures included
      // (as -errno), so nothing is failed here: doing so could report a
      // request as done while the kernel still works on its buffer.
      if (!requests.empty()) backend_->Submit(requests).IgnoreError();
      metrics_.SetQueues(scheduler_.queued(IoClass::kRead), scheduler_.queued(IoClass::kWrite), scheduler_.in_flight());
      metrics_.SetStuck(scheduler_.stuck() + (health_.probe_in_flight() ? 1 : 0));
      const bool idle = requests.empty() && scheduler_.in_flight() == 0 && !health_.probe_in_flight();
      const size_t n = backend_->Reap(completions, SleepTimeoutMs(idle));
      sleeping_.store(false);
      for (size_t i = 0; i < n; ++i) OnCompletion(completions[i]);
      ExpireAndCollect();
      if (shared_->events) shared_->events->Flush();  // this pass's events, in one go
    }
    LeaveStuck();
    std::lock_guard lock(mu_);
    loop_done_ = true;  // nothing of this object is touched after this
    idle_cv_.notify_all();
  }

  void OnCompletion(const IoCompletion& c) {
    if (c.tag >= kProbeTagBase) return OnProbe(c.res);
    // Cancelled at its deadline: a miss (a stuck request's was counted when
    // it was found stuck). Anything else is the filesystem answering.
    const bool timed_out = c.res == -ETIMEDOUT || c.res == -ECANCELED;
    if (!timed_out) {
      health_.Answered();
    } else if (!scheduler_.is_stuck(c.tag)) {
      NoteMisses(1);
    }
    scheduler_.Complete(c);
  }

  // Abandons what outlived its deadline, reports those results, then the
  // finished ops'.
  void ExpireAndCollect() {
    const size_t missed = scheduler_.Expire(clock_.NowNs());
    std::vector<BlockOp*> abandoned;
    scheduler_.TakeAbandoned(&abandoned);
    for (BlockOp* op : abandoned) Report(static_cast<FsBlockOp*>(op));
    if (missed > 0) NoteMisses(missed);
    std::vector<std::unique_ptr<BlockOp>> finished;
    scheduler_.TakeFinished(&finished);
    for (auto& op : finished) Account(std::unique_ptr<FsBlockOp>(static_cast<FsBlockOp*>(op.release())));
  }

  void NoteMisses(size_t n) {
    if (!health_.Missed(n, clock_.NowNs())) return;
    LogWarning("fs tier: root_dir " + options_.tier.root_dir + " is down: " + std::to_string(kMissesToDown) +
               " requests in a row got no answer within io_timeout_ms (" + std::to_string(options_.tier.io_timeout_ms) +
               " ms); until a probe answers, lookups miss, loads fail and stores are dropped");
    FailQueued();
  }

  // The root is down: queued work ends now, as new work would.
  void FailQueued() {
    std::vector<std::unique_ptr<BlockOp>> queued;
    scheduler_.TakeQueued(&queued);
    for (auto& base : queued) {
      std::unique_ptr<FsBlockOp> op(static_cast<FsBlockOp*>(base.release()));
      op->result = DownResult(static_cast<Job*>(op->owner)->kind);
      Account(std::move(op));
    }
  }

  void MaybeProbe(std::vector<IoRequest>* requests) {
    const uint64_t now = clock_.NowNs();
    if (!health_.ProbeDue(now)) return;
    IoRequest probe;
    // A forced statx of root_dir itself: FUSE and NFS ask the server rather
    // than answer from their attribute cache.
    StatxNoFollow(&probe, shared_->root.get(), ".", probe_stx_.get());
    probe.flags |= AT_STATX_FORCE_SYNC;
    probe.tag = kProbeTagBase + probe_seq_++;
    probe.deadline_ns = DeadlineNs(*shared_);
    probe_sent_ns_ = now;
    requests->push_back(probe);
  }

  void OnProbe(int64_t res) {
    const bool answered = res == 0;
    if (!health_.ProbeDone(answered, clock_.NowNs())) return;
    const double down_s = static_cast<double>(clock_.NowNs() - health_.down_since_ns()) * 1e-9;
    LogWarning("fs tier: root_dir " + options_.tier.root_dir + " answers again after " +
               std::to_string(static_cast<int>(down_s)) + " s down; resuming");
  }

  // After the loop: requests the kernel still holds keep their memory (the
  // ops, and the backend that owns the ring or the threads) for good.
  void LeaveStuck() {
    if (scheduler_.idle() && !health_.probe_in_flight()) return;
    std::vector<std::unique_ptr<BlockOp>> held;
    scheduler_.TakeAll(&held);
    LogWarning("fs tier: closing with " + std::to_string(held.size()) + " request(s) on root_dir " +
               options_.tier.root_dir + " still held by the kernel; their memory is left to the process exit");
    for (auto& op : held) KeepForever(std::move(op));
    if (health_.probe_in_flight()) KeepForever(std::move(probe_stx_));
    leak_backend_ = true;
  }

  const FsTierOpenOptions options_;
  const Clock& clock_;  // the policy's time (io/clock.h)
  const Namespace ns_;
  std::unique_ptr<TierShared> shared_;
  std::unique_ptr<IoBackend> backend_;
  std::unique_ptr<Lease> lease_;  // heartbeat for gc (L74)
  const SchedulerLimits scheduler_limits_;
  IoScheduler scheduler_;                                   // I/O thread only
  std::unordered_map<uint64_t, std::unique_ptr<Job>> jobs_;  // I/O thread only
  StoreLatencyDetector detector_;  // Add() on the I/O thread; pressured() anywhere
  RootHealth health_;              // changed on the I/O thread; up() anywhere
  std::unique_ptr<TierSpace> space_;  // max_bytes and the space gauges
  const std::string root_down_why_ = "root_dir " + options_.tier.root_dir + " is down (no answer within io_timeout_ms)";
  // The probe's answer (I/O thread); on the heap, so that a probe still
  // in the kernel when the tier closes can keep it.
  std::unique_ptr<struct statx> probe_stx_ = std::make_unique<struct statx>();
  uint64_t probe_seq_ = 0;
  uint64_t probe_sent_ns_ = 0;
  bool leak_backend_ = false;      // set by the I/O thread before it exits
  TierMetricsCounters metrics_;
  std::atomic<uint64_t> next_job_id_{1};
  std::atomic<bool> sleeping_{false};  // the loop is in (or about to enter) a blocking Reap
  std::mutex mu_;
  std::condition_variable idle_cv_;
  std::deque<Submission> inbox_;
  std::vector<JobResult> finished_;
  size_t open_jobs_ = 0;
  bool stop_ = false;
  bool loop_done_ = false;   // Run() has returned its last use of the object
  std::thread io_thread_;
};

}  // namespace

std::unique_ptr<FsTier> MakeFsTierImpl(const FsTierOpenOptions& options, Namespace ns,
                                       std::unique_ptr<TierShared> shared, std::unique_ptr<IoBackend> backend,
                                       std::unique_ptr<Lease> lease, const Clock& clock) {
  return std::make_unique<FsTierImpl>(options, std::move(ns), std::move(shared), std::move(backend),
                                      std::move(lease), clock);
}

}  // namespace kvtier::internal
