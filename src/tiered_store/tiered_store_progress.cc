// The progress thread: collects finished copies and fs jobs and applies them
// (vLLM's TieringOffloadingManager, vllm/v1/kv_offload/tiering/manager.py): a
// finished GPU->CPU copy makes its rows ready and writes them through to every
// secondary tier; a finished promotion makes its row ready (and is never
// written back); lookup results become the request's verdicts.
#include "tiered_store/tiered_store_impl.h"

namespace kvtier::internal {

void TieredStoreImpl::Wake() {
  {
    std::lock_guard lock(wake_mu_);
    wake_pending_ = true;
  }
  wake_cv_.notify_one();
}

void TieredStoreImpl::ProgressLoop() {
  std::vector<FinishedCopy> copies;
  std::vector<std::vector<JobResult>> fs_results(router_.size());
  while (true) {
    {
      std::unique_lock lock(wake_mu_);
      wake_cv_.wait(lock, [&] { return wake_pending_ || stop_; });
      if (stop_) return;
      wake_pending_ = false;
    }
    // Poll outside mu_: the stager and the tiers have their own locks, and a
    // submitter holds mu_ until its record exists (see the header).
    copies.clear();
    stager_->PollFinished(&copies);
    for (size_t t = 0; t < router_.size(); ++t) {
      fs_results[t].clear();
      router_.Poll(t, &fs_results[t]);
    }
    std::lock_guard lock(mu_);
    ApplyCompletions(copies, fs_results);
    changed_cv_.notify_all();
  }
}

void TieredStoreImpl::ApplyCompletions(std::vector<FinishedCopy>& copies,
                                       std::vector<std::vector<JobResult>>& fs_results) {
  for (FinishedCopy& done : copies) {
    std::optional<CopyRecord> record = jobs_.TakeCopy(done.ticket);
    if (!record) continue;
    cpu_stats_.clock(record->direction).Stop();
    OnCopyFinished(*record, done.status, &done);
  }
  for (size_t t = 0; t < router_.size(); ++t) {
    for (JobResult& result : fs_results[t]) {
      std::optional<FsJobRecord> record = router_.Take(t, result.job_id);
      if (record) OnFsJobFinished(t, *record, result);
    }
  }
}

void TieredStoreImpl::OnCopyFinished(CopyRecord& record, const Status& status, FinishedCopy* done) {
  if (status.ok() && record.checksums) cpu_stats_.crc_staged_bytes += record.bytes;
  if (record.direction == CopyDirection::kDeviceToHost) {
    if (status.ok()) {
      OnStoreCopied(record, record.checksums && done != nullptr ? std::move(done->row_crcs) : std::vector<uint32_t>{});
    } else {
      cpu_->CompleteWrite(record.keys, /*success=*/false);
      for (size_t k : record.index) jobs_.Complete(record.job_id, k, ChunkResult{ChunkOutcome::kError, status});
    }
  } else {
    OnLoadCopied(record, status, done);
  }
  MaybeFinishJob(record.job_id);
}

// `crcs`: each row's CRC32C from its copy (empty: not computed).
void TieredStoreImpl::OnStoreCopied(CopyRecord& record, std::vector<uint32_t> crcs) {
  cpu_->CompleteWrite(record.keys, /*success=*/true);
  for (uint32_t row : record.rows) row_checks_[row] = RowCheck{};  // the GPU's bytes, checked by nothing later
  cpu_stats_.rows_in += record.keys.size();
  cpu_stats_.bytes_in += record.bytes;
  RequestState* req = requests_.FindOrNull(record.request_id);
  for (size_t k = 0; k < record.keys.size(); ++k) {
    jobs_.Complete(record.job_id, record.index[k], ChunkResult{ChunkOutcome::kOk, Status::Ok()});
    if (req != nullptr) PinIfWanted(*req, record.first_chunk + record.index[k], record.keys[k]);
  }
  WriteThrough(record.keys, crcs.size() == record.keys.size() ? std::span<const uint32_t>(crcs) : std::span<const uint32_t>(),
               record.block_hashes);
}

// With mu_ held. Each secondary tier holds a reader reference on the rows
// until its store finishes, so they cannot be evicted while being written.
// Tiers that can (TierRouter::staged) write `crcs`, the rows' CRC32C from
// their copy, instead of computing their own. `block_hashes` (empty, or one
// list per key): what each chunk's file records, for the KV events.
void TieredStoreImpl::WriteThrough(std::span<const OffloadKey> keys, std::span<const uint32_t> crcs,
                                   std::span<const std::vector<BlockHash>> block_hashes) {
  for (size_t t = 0; t < router_.size(); ++t) {
    FsJobRecord record{FsJobRecord::Kind::kWriteThrough, {keys.begin(), keys.end()}, cpu_->Acquire(keys), 0, 0, {}, {}, {},
                       {block_hashes.begin(), block_hashes.end()}};
    if (router_.staged(t)) record.crcs.assign(crcs.begin(), crcs.end());
    if (!router_.Submit(t, record).ok()) cpu_->Release(keys);
  }
}

void TieredStoreImpl::OnFsJobFinished(size_t tier, FsJobRecord& record, JobResult& result) {
  switch (record.kind) {
    case FsJobRecord::Kind::kWriteThrough:
      cpu_->Release(record.keys);
      break;
    case FsJobRecord::Kind::kPromote:
      OnPromotionFinished(tier, record, result);
      break;
    case FsJobRecord::Kind::kLookup:
      OnLookupFinished(tier, record, result);
      break;
    case FsJobRecord::Kind::kRemove:  // counted by the tier (a corrupt load)
      break;
  }
}

// With mu_ held. Loaded rows become ready; a Prefetch key that missed tries
// the next tier with the same reserved row; other failures free the row.
void TieredStoreImpl::OnPromotionFinished(size_t tier, FsJobRecord& record, JobResult& result) {
  FsJobRecord next{FsJobRecord::Kind::kPromote, {}, {}, 0, record.job_id, {}, {}, {}, {}};
  for (size_t k = 0; k < record.keys.size(); ++k) {
    const OffloadKey one[] = {record.keys[k]};
    const KeyResult& r = result.keys[k];
    const bool from_prefetch = record.job_id != 0;
    if (r.outcome == KeyOutcome::kOk) {
      NoteRowCheck(tier, record, k);
      cpu_->CompleteWrite(one, /*success=*/true);
      router_.CountPromotion(tier, /*ok=*/true);
      if (from_prefetch) jobs_.Complete(record.job_id, record.index[k], ChunkResult{ChunkOutcome::kOk, Status::Ok()});
      continue;
    }
    if (from_prefetch && r.outcome == KeyOutcome::kMiss && router_.NextTier(tier)) {
      next.keys.push_back(record.keys[k]);
      next.rows.push_back(record.rows[k]);
      next.index.push_back(record.index[k]);
      continue;
    }
    cpu_->CompleteWrite(one, /*success=*/false);
    if (!from_prefetch) router_.CountPromotion(tier, /*ok=*/false);  // a lookup hit whose file went away or was bad
    requests_.ForgetHits(record.keys[k]);
    if (from_prefetch) {
      const bool miss = r.outcome == KeyOutcome::kMiss || r.outcome == KeyOutcome::kCorrupt;
      jobs_.Complete(record.job_id, record.index[k], ChunkResult{miss ? ChunkOutcome::kMiss : ChunkOutcome::kError, r.status});
    }
  }
  if (!next.keys.empty()) SubmitPromotion(*router_.NextTier(tier), std::move(next));
  if (record.job_id != 0) MaybeFinishJob(record.job_id);
}

void TieredStoreImpl::OnLookupFinished(size_t tier, FsJobRecord& record, JobResult& result) {
  for (size_t k = 0; k < record.keys.size(); ++k) {
    // A failed lookup counts as a miss, as vLLM's failing batch_lookup. A
    // request finished meanwhile has no verdicts left to set.
    const TierVerdict verdict = result.keys[k].outcome == KeyOutcome::kOk ? TierVerdict::kHit : TierVerdict::kMiss;
    if (!requests_.SetVerdict(record.request_id, record.keys[k], tier, verdict)) return;
  }
}

void BusyClock::Start() {
  if (in_flight_++ == 0) since_ = Clock::now();
}

void BusyClock::Stop() {
  if (--in_flight_ == 0) total_s_ += std::chrono::duration<double>(Clock::now() - since_).count();
}

double BusyClock::seconds() const {
  const double running = in_flight_ > 0 ? std::chrono::duration<double>(Clock::now() - since_).count() : 0;
  return total_s_ + running;
}

}  // namespace kvtier::internal
