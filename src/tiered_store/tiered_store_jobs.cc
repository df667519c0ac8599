// Request lifecycle and the transfer jobs: Store (GPU -> CPU, then write-
// through), Load (CPU -> GPU) and Prefetch (secondary -> CPU).
#include <algorithm>
#include <string>

#include "tiered_store/tiered_store_impl.h"

namespace kvtier::internal {
namespace {

ChunkResult Outcome(ChunkOutcome outcome, Status status = Status::Ok()) { return ChunkResult{outcome, std::move(status)}; }

}  // namespace

// The checks a Store or Load makes before its job exists: the request, the
// chunk range and every GPU block id (a bad one fails the call, nothing runs).
Result<uint64_t> TieredStoreImpl::OpenJob(TransferKind kind, uint64_t request_id, size_t first_chunk,
                                          std::span<const uint32_t> gpu_blocks, RequestState** req) {
  KVTIER_ASSIGN_OR_RETURN(*req, requests_.Find(request_id));
  KVTIER_RETURN_IF_ERROR(requests_.CheckChunkRange(**req, first_chunk, gpu_blocks.size(), config_.blocks_per_chunk));
  KVTIER_RETURN_IF_ERROR(CheckGpuBlocks(gpu_blocks));
  return jobs_.Create(kind, request_id, gpu_blocks.size() / config_.blocks_per_chunk);
}

// Every GPU block id below each device's num_blocks: checked before a job
// starts, so a bad id fails the call, not one copy of a job whose other
// copies already run.
Status TieredStoreImpl::CheckGpuBlocks(std::span<const uint32_t> gpu_blocks) const {
  uint32_t limit = UINT32_MAX;
  for (const DeviceKvCache& device : options_.devices) {
    if (!device.tensors.empty()) limit = std::min(limit, device.tensors[0].num_blocks);
  }
  for (size_t k = 0; k < gpu_blocks.size(); ++k) {
    if (gpu_blocks[k] >= limit) {
      return InvalidArgument("gpu_blocks[" + std::to_string(k) + "] = " + std::to_string(gpu_blocks[k]) +
                             " is out of range: the KV cache has " + std::to_string(limit) + " blocks");
    }
  }
  return Status::Ok();
}

Status TieredStoreImpl::StartRequest(uint64_t request_id, RequestSpec spec) {
  std::lock_guard lock(mu_);
  return requests_.Start(request_id, std::move(spec));
}

Status TieredStoreImpl::AppendChunkKeys(uint64_t request_id, std::span<const OffloadKey> keys,
                                        std::span<const BlockHash> block_hashes) {
  std::lock_guard lock(mu_);
  return requests_.Append(request_id, keys, block_hashes);
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

Result<uint64_t> TieredStoreImpl::Store(uint64_t request_id, size_t first_chunk, std::span<const uint32_t> gpu_blocks) {
  std::lock_guard lock(mu_);
  RequestState* req = nullptr;
  KVTIER_ASSIGN_OR_RETURN(const uint64_t job_id, OpenJob(TransferKind::kStore, request_id, first_chunk, gpu_blocks, &req));
  const size_t bpc = config_.blocks_per_chunk, n = gpu_blocks.size() / bpc;
  std::vector<OffloadKey> keys;  // the chunks within the offloadable range
  std::vector<size_t> index;     // their positions in the job
  for (size_t i = 0; i < n; ++i) {
    if (requests_.Offloadable(*req, first_chunk + i)) {
      keys.push_back(req->chunk_keys()[first_chunk + i]);
      index.push_back(i);
    } else {
      jobs_.Settle(job_id, i, Outcome(ChunkOutcome::kNotOffloaded));
    }
  }
  std::optional<PreparedWrite> prepared = cpu_->PrepareWrite(keys, /*apply_threshold=*/true);
  CopyRecord record{CopyDirection::kDeviceToHost, job_id, request_id, first_chunk, {}, {}, 0, {}, false, {}, {}};
  std::vector<uint32_t> blocks = PlanStoreCopies(*req, keys, index, prepared, gpu_blocks, &record);
  if (!record.keys.empty()) {
    record.rows = prepared->rows;
    CopyChecksums checksums;
    checksums.compute = staged_crc_;  // for the fs tiers to write (WriteThrough)
    SubmitCopy(std::move(record), std::move(blocks), checksums);
  }
  MaybeFinishJob(job_id);
  return job_id;
}

// With mu_ held. Settles the offloadable chunks of a store that need no copy
// (no row free, already cached, below store_threshold); the others join
// `record` (with their block hashes, where the request gave them), and
// their GPU blocks are returned in the same order.
std::vector<uint32_t> TieredStoreImpl::PlanStoreCopies(const RequestState& req, std::span<const OffloadKey> keys,
                                                       std::span<const size_t> index,
                                                       const std::optional<PreparedWrite>& prepared,
                                                       std::span<const uint32_t> gpu_blocks, CopyRecord* record) {
  const size_t bpc = config_.blocks_per_chunk;
  std::vector<uint32_t> blocks;
  for (size_t d = 0; d < keys.size(); ++d) {
    const size_t i = index[d];
    if (!prepared) {
      ++cpu_stats_.stores_no_space;
      jobs_.Settle(record->job_id, i,
                   Outcome(ChunkOutcome::kNoSpace,
                           Status(StatusCode::kNoSpace, "no CPU row could be freed for " + std::to_string(keys.size()) +
                                                            " chunks (the CPU tier has " +
                                                            std::to_string(cpu_->rows()) + " rows)")));
    } else if (prepared->disposition[d] == WriteDisposition::kPresent) {
      jobs_.Settle(record->job_id, i, Outcome(ChunkOutcome::kAlreadyCached));
    } else if (prepared->disposition[d] == WriteDisposition::kBelowThreshold) {
      jobs_.Settle(record->job_id, i, Outcome(ChunkOutcome::kNotOffloaded));
    } else {
      record->keys.push_back(keys[d]);
      record->index.push_back(i);
      if (req.has_block_hashes()) {
        const std::span<const BlockHash> hashes = req.ChunkBlockHashes(record->first_chunk + i);
        record->block_hashes.emplace_back(hashes.begin(), hashes.end());
      }
      blocks.insert(blocks.end(), gpu_blocks.begin() + i * bpc, gpu_blocks.begin() + (i + 1) * bpc);
    }
  }
  return blocks;
}

Result<uint64_t> TieredStoreImpl::Load(uint64_t request_id, size_t first_chunk, std::span<const uint32_t> gpu_blocks) {
  std::lock_guard lock(mu_);
  RequestState* req = nullptr;
  KVTIER_ASSIGN_OR_RETURN(const uint64_t job_id, OpenJob(TransferKind::kLoad, request_id, first_chunk, gpu_blocks, &req));
  const size_t bpc = config_.blocks_per_chunk, n = gpu_blocks.size() / bpc;
  CopyRecord record{CopyDirection::kHostToDevice, job_id, request_id, first_chunk, {}, {}, 0, {}, false, {}, {}};
  for (size_t i = 0; i < n; ++i) {
    const OffloadKey& key = req->chunk_keys()[first_chunk + i];
    if (!cpu_->ReadyRow(key)) {
      // This chunk and every later one: a load serves a prefix only.
      for (size_t j = i; j < n; ++j) jobs_.Settle(job_id, j, Outcome(ChunkOutcome::kMiss));
      break;
    }
    record.keys.push_back(key);
    record.index.push_back(i);
  }
  if (!record.keys.empty()) {
    cpu_->Touch(record.keys);
    std::vector<uint32_t> rows = cpu_->Acquire(record.keys);
    SubmitLoadCopies(std::move(record), std::move(rows), gpu_blocks);
  }
  MaybeFinishJob(job_id);
  return job_id;
}

Result<uint64_t> TieredStoreImpl::Prefetch(std::span<const OffloadKey> keys) {
  std::lock_guard lock(mu_);
  const uint64_t job_id = jobs_.Create(TransferKind::kPrefetch, 0, keys.size());
  FsJobRecord batch{FsJobRecord::Kind::kPromote, {}, {}, 0, job_id, {}, {}, {}, {}};
  for (size_t i = 0; i < keys.size(); ++i) {
    if (cpu_->Contains(keys[i])) {
      jobs_.Settle(job_id, i, Outcome(ChunkOutcome::kAlreadyCached));
      continue;
    }
    if (router_.empty()) {
      jobs_.Settle(job_id, i, Outcome(ChunkOutcome::kMiss));
      continue;
    }
    const OffloadKey one[] = {keys[i]};
    std::optional<PreparedWrite> prepared = cpu_->PrepareWrite(one, /*apply_threshold=*/false);
    if (!prepared || prepared->rows.empty()) {
      jobs_.Settle(job_id, i, Outcome(ChunkOutcome::kNoSpace, Status(StatusCode::kNoSpace, "no CPU row could be freed")));
      continue;
    }
    batch.keys.push_back(keys[i]);
    batch.rows.push_back(prepared->rows[0]);
    batch.index.push_back(i);
  }
  for (size_t i : batch.index) jobs_.Expect(job_id, i);
  if (!batch.keys.empty()) SubmitPromotion(0, std::move(batch));
  MaybeFinishJob(job_id);
  return job_id;
}

// With mu_ held. record.rows and `gpu_blocks` line up with record.keys.
void TieredStoreImpl::SubmitCopy(CopyRecord record, std::vector<uint32_t> gpu_blocks, const CopyChecksums& checksums) {
  std::vector<uint8_t*> ptrs;
  ptrs.reserve(record.rows.size());
  for (uint32_t row : record.rows) ptrs.push_back(RowPtr(row));
  record.bytes = record.rows.size() * row_bytes_;
  record.checksums = checksums.wanted();
  for (size_t k : record.index) jobs_.Expect(record.job_id, k);
  Result<uint64_t> ticket = stager_->Submit(record.direction, ptrs, gpu_blocks, checksums);
  if (!ticket.ok()) {
    OnCopyFinished(record, ticket.status());
    return;
  }
  cpu_stats_.clock(record.direction).Start();
  jobs_.AddCopy(*ticket, std::move(record));
}

// With mu_ held. Moves a job with nothing pending to the finished list.
void TieredStoreImpl::MaybeFinishJob(uint64_t job_id) {
  if (jobs_.FinishIfDone(job_id)) changed_cv_.notify_all();
}

size_t TieredStoreImpl::PollFinished(std::vector<TransferResult>* out) {
  std::lock_guard lock(mu_);
  return jobs_.Poll(out);
}

bool TieredStoreImpl::IdleLocked() const {
  return jobs_.Idle() && router_.Idle();
}

Status TieredStoreImpl::WaitIdle(uint32_t timeout_ms) {
  std::unique_lock lock(mu_);
  if (changed_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return IdleLocked(); })) {
    return Status::Ok();
  }
  return Status(StatusCode::kTimedOut, "tiered store: transfers still running after " + std::to_string(timeout_ms) + " ms");
}

}  // namespace kvtier::internal
