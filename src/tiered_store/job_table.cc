// The job table (see job_table.h).
#include "tiered_store/job_table.h"

#include <algorithm>

namespace kvtier::internal {

uint64_t JobTable::Create(TransferKind kind, uint64_t request_id, size_t chunks) {
  const uint64_t id = next_id_++;
  Job& job = jobs_[id];
  job.kind = kind;
  job.request_id = request_id;
  job.chunks.resize(chunks);
  job.pending.assign(chunks, false);
  return id;
}

JobTable::Job* JobTable::FindChunk(uint64_t job_id, size_t index) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || index >= it->second.chunks.size()) return nullptr;
  return &it->second;
}

bool JobTable::Settle(uint64_t job_id, size_t index, ChunkResult result) {
  Job* job = FindChunk(job_id, index);
  if (job == nullptr || job->pending[index]) return false;
  job->chunks[index] = std::move(result);
  return true;
}

bool JobTable::Expect(uint64_t job_id, size_t index) {
  Job* job = FindChunk(job_id, index);
  if (job == nullptr || job->pending[index]) return false;
  job->pending[index] = true;
  ++job->outstanding;
  return true;
}

bool JobTable::Complete(uint64_t job_id, size_t index, ChunkResult result) {
  Job* job = FindChunk(job_id, index);
  if (job == nullptr || !job->pending[index]) return false;
  job->pending[index] = false;
  --job->outstanding;
  job->chunks[index] = std::move(result);
  return true;
}

void JobTable::EndPrefix(uint64_t job_id, size_t index) {
  auto it = jobs_.find(job_id);
  if (it != jobs_.end()) it->second.prefix_end = std::min(it->second.prefix_end, index);
}

bool JobTable::FinishIfDone(uint64_t job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second.outstanding > 0) return false;
  Job& job = it->second;
  for (size_t i = job.prefix_end + 1; job.prefix_end != SIZE_MAX && i < job.chunks.size(); ++i) {
    if (job.chunks[i].outcome != ChunkOutcome::kOk) continue;
    job.chunks[i] = ChunkResult{ChunkOutcome::kMiss, Status::Ok()};  // as a load's settled misses
  }
  finished_.push_back(TransferResult{job_id, job.kind, job.request_id, std::move(job.chunks)});
  jobs_.erase(it);
  return true;
}

size_t JobTable::Poll(std::vector<TransferResult>* out) {
  const size_t n = finished_.size();
  for (TransferResult& r : finished_) out->push_back(std::move(r));
  finished_.clear();
  return n;
}

size_t JobTable::pending(uint64_t job_id) const {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? 0 : it->second.outstanding;
}

bool JobTable::AddCopy(uint64_t ticket, CopyRecord record) {
  return copies_.emplace(ticket, std::move(record)).second;
}

std::optional<CopyRecord> JobTable::TakeCopy(uint64_t ticket) {
  auto it = copies_.find(ticket);
  if (it == copies_.end()) return std::nullopt;
  CopyRecord record = std::move(it->second);
  copies_.erase(it);
  return record;
}

}  // namespace kvtier::internal
