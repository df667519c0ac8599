// Request lifecycle and the transfer jobs: Store (GPU -> CPU, then write-
// through), Load (CPU -> GPU) and Prefetch (secondary -> CPU).
#include <algorithm>
#include <limits>
#include <string>

#include "tier/tiered_store_impl.h"

namespace kvtier::internal {
namespace {

ChunkResult Outcome(ChunkOutcome outcome, Status status = Status::Ok()) { return ChunkResult{outcome, std::move(status)}; }

}  // namespace

Status TieredStoreImpl::StartRequest(uint64_t request_id, RequestSpec spec) {
  std::lock_guard lock(mu_);
  return requests_.Start(request_id, std::move(spec));
}

Status TieredStoreImpl::AppendChunkKeys(uint64_t request_id, std::span<const OffloadKey> keys) {
  std::lock_guard lock(mu_);
  return requests_.Append(request_id, keys);
}

Status TieredStoreImpl::FinishRequest(uint64_t request_id) {
  std::lock_guard lock(mu_);
  KVTIER_ASSIGN_OR_RETURN(const std::vector<OffloadKey> unpinned, requests_.Finish(request_id));
  for (const OffloadKey& key : unpinned) {
    const OffloadKey keys[] = {key};
    cpu_->Release(keys);
  }
  return Status::Ok();
}

uint64_t TieredStoreImpl::NewJob(TransferKind kind, uint64_t request_id, size_t chunks) {
  const uint64_t id = next_job_id_++;
  UserJob& job = jobs_[id];
  job.kind = kind;
  job.request_id = request_id;
  job.chunks.resize(chunks);
  return id;
}

Result<uint64_t> TieredStoreImpl::Store(uint64_t request_id, size_t first_chunk, std::span<const uint32_t> gpu_blocks) {
  std::lock_guard lock(mu_);
  KVTIER_ASSIGN_OR_RETURN(RequestState * req, requests_.Find(request_id));
  const size_t bpc = config_.blocks_per_chunk, n = gpu_blocks.size() / bpc;
  KVTIER_RETURN_IF_ERROR(requests_.CheckChunkRange(*req, first_chunk, gpu_blocks.size(), bpc));
  const uint64_t job_id = NewJob(TransferKind::kStore, request_id, n);
  UserJob& job = jobs_[job_id];
  std::vector<OffloadKey> keys;  // the chunks within the offloadable range
  for (size_t i = 0; i < n; ++i) {
    if (!requests_.Offloadable(*req, first_chunk + i)) {
      job.chunks[i] = Outcome(ChunkOutcome::kNotOffloaded);
    } else {
      keys.push_back(req->chunk_keys()[first_chunk + i]);
    }
  }
  std::optional<PreparedWrite> prepared = cpu_->PrepareWrite(keys, /*apply_threshold=*/true);
  CopyRecord record{CopyDirection::kDeviceToHost, job_id, request_id, first_chunk, {}, {}, 0};
  std::vector<uint32_t> blocks;
  for (size_t i = 0, k = 0; i < n; ++i) {
    if (job.chunks[i].outcome == ChunkOutcome::kNotOffloaded) continue;
    const size_t d = k++;
    if (!prepared) {
      ++stores_no_space_;
      job.chunks[i] = Outcome(ChunkOutcome::kNoSpace,
                              Status(StatusCode::kNoSpace, "no CPU row could be freed for " + std::to_string(keys.size()) +
                                                               " chunks (the CPU tier has " +
                                                               std::to_string(cpu_->rows()) + " rows)"));
    } else if (prepared->disposition[d] == WriteDisposition::kPresent) {
      job.chunks[i] = Outcome(ChunkOutcome::kAlreadyCached);
    } else if (prepared->disposition[d] == WriteDisposition::kBelowThreshold) {
      job.chunks[i] = Outcome(ChunkOutcome::kNotOffloaded);
    } else {
      record.keys.push_back(keys[d]);
      record.index.push_back(i);
      blocks.insert(blocks.end(), gpu_blocks.begin() + i * bpc, gpu_blocks.begin() + (i + 1) * bpc);
    }
  }
  if (!record.keys.empty()) SubmitCopy(std::move(record), prepared->rows, std::move(blocks));
  MaybeFinishJob(job_id);
  return job_id;
}

Result<uint64_t> TieredStoreImpl::Load(uint64_t request_id, size_t first_chunk, std::span<const uint32_t> gpu_blocks) {
  std::lock_guard lock(mu_);
  KVTIER_ASSIGN_OR_RETURN(RequestState * req, requests_.Find(request_id));
  const size_t bpc = config_.blocks_per_chunk, n = gpu_blocks.size() / bpc;
  KVTIER_RETURN_IF_ERROR(requests_.CheckChunkRange(*req, first_chunk, gpu_blocks.size(), bpc));
  const uint64_t job_id = NewJob(TransferKind::kLoad, request_id, n);
  CopyRecord record{CopyDirection::kHostToDevice, job_id, request_id, first_chunk, {}, {}, 0};
  for (size_t i = 0; i < n; ++i) {
    const OffloadKey& key = req->chunk_keys()[first_chunk + i];
    if (!cpu_->ReadyRow(key)) {
      // This chunk and every later one: a load serves a prefix only.
      for (size_t j = i; j < n; ++j) jobs_[job_id].chunks[j] = Outcome(ChunkOutcome::kMiss);
      break;
    }
    record.keys.push_back(key);
    record.index.push_back(i);
  }
  if (!record.keys.empty()) {
    cpu_->Touch(record.keys);
    std::vector<uint32_t> rows = cpu_->Acquire(record.keys);
    std::vector<uint32_t> blocks(gpu_blocks.begin(), gpu_blocks.begin() + record.keys.size() * bpc);
    SubmitCopy(std::move(record), rows, std::move(blocks));
  }
  MaybeFinishJob(job_id);
  return job_id;
}

Result<uint64_t> TieredStoreImpl::Prefetch(std::span<const OffloadKey> keys) {
  std::lock_guard lock(mu_);
  const uint64_t job_id = NewJob(TransferKind::kPrefetch, 0, keys.size());
  UserJob& job = jobs_[job_id];
  FsJobRecord batch{FsJobRecord::Kind::kPromote, {}, {}, 0, job_id, {}};
  for (size_t i = 0; i < keys.size(); ++i) {
    if (cpu_->Contains(keys[i])) {
      job.chunks[i] = Outcome(ChunkOutcome::kAlreadyCached);
      continue;
    }
    if (tiers_.empty()) {
      job.chunks[i] = Outcome(ChunkOutcome::kMiss);
      continue;
    }
    const OffloadKey one[] = {keys[i]};
    std::optional<PreparedWrite> prepared = cpu_->PrepareWrite(one, /*apply_threshold=*/false);
    if (!prepared || prepared->rows.empty()) {
      job.chunks[i] = Outcome(ChunkOutcome::kNoSpace, Status(StatusCode::kNoSpace, "no CPU row could be freed"));
      continue;
    }
    batch.keys.push_back(keys[i]);
    batch.rows.push_back(prepared->rows[0]);
    batch.index.push_back(i);
  }
  job.outstanding += batch.keys.size();
  if (!batch.keys.empty()) SubmitPromotion(0, std::move(batch));
  MaybeFinishJob(job_id);
  return job_id;
}

// With mu_ held. `rows` and `gpu_blocks` line up with record.keys.
void TieredStoreImpl::SubmitCopy(CopyRecord record, std::span<const uint32_t> rows, std::vector<uint32_t> gpu_blocks) {
  std::vector<uint8_t*> ptrs;
  ptrs.reserve(rows.size());
  for (uint32_t row : rows) ptrs.push_back(RowPtr(row));
  record.bytes = rows.size() * row_bytes_;
  UserJob& job = jobs_[record.job_id];
  Result<uint64_t> ticket = stager_->Submit(record.direction, ptrs, gpu_blocks);
  if (!ticket.ok()) {
    job.outstanding += record.keys.size();
    OnCopyFinished(record, ticket.status());
    return;
  }
  job.outstanding += record.keys.size();
  (record.direction == CopyDirection::kDeviceToHost ? in_clock_ : out_clock_).Start();
  copies_.emplace(*ticket, std::move(record));
}

void TieredStoreImpl::FinishChunk(uint64_t job_id, size_t index, ChunkResult result) {
  UserJob& job = jobs_.at(job_id);
  job.chunks[index] = std::move(result);
  --job.outstanding;
}

// With mu_ held. Moves a job with nothing outstanding to the finished list.
void TieredStoreImpl::MaybeFinishJob(uint64_t job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second.outstanding > 0) return;
  finished_.push_back(TransferResult{job_id, it->second.kind, it->second.request_id, std::move(it->second.chunks)});
  jobs_.erase(it);
  changed_cv_.notify_all();
}

size_t TieredStoreImpl::PollFinished(std::vector<TransferResult>* out) {
  std::lock_guard lock(mu_);
  const size_t n = finished_.size();
  for (TransferResult& r : finished_) out->push_back(std::move(r));
  finished_.clear();
  return n;
}

bool TieredStoreImpl::IdleLocked() const {
  if (!jobs_.empty() || !copies_.empty()) return false;
  return std::all_of(tiers_.begin(), tiers_.end(), [](const SecondaryTier& t) { return t.jobs.empty(); });
}

Status TieredStoreImpl::WaitIdle(uint32_t timeout_ms) {
  std::unique_lock lock(mu_);
  if (changed_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return IdleLocked(); })) {
    return Status::Ok();
  }
  return Status(StatusCode::kTimedOut, "tiered store: transfers still running after " + std::to_string(timeout_ms) + " ms");
}

}  // namespace kvtier::internal
