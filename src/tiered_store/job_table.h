// The job table: the transfer jobs a TieredStore caller started (Store, Load,
// Prefetch) until PollFinished hands their results back, and the Stager
// copies that serve them.
//
// A job has one result per chunk. A chunk is either settled when the job is
// submitted (its outcome is known at once: already cached, not offloaded,
// no space, miss) or expected: it waits for a copy or a promotion, which
// completes it exactly once. A job with no chunk pending finishes: it moves
// to the finished list, in finishing order, for Poll.
//
// Invariants:
//  - job ids start at 1, increase and are never reused; 0 is never a job;
//  - a running job has pending() > 0 or is about to be finished by its
//    submitter; a finished job is no longer running and takes no results;
//  - a chunk is completed at most once per Expect; a second completion, or
//    one for an unknown job or index, changes nothing and returns false;
//  - each copy ticket names one CopyRecord until TakeCopy.
//
// Thread-safety: none. TieredStoreImpl calls it with its mutex held, which
// also orders a copy's record (AddCopy) before its completion (TakeCopy).
#pragma once

#include <cstdint>
#include <cstddef>
#include <optional>
#include <unordered_map>
#include <vector>

#include "kvtier/tiered_store.h"
#include "staging/stager.h"

namespace kvtier::internal {

// A Stager ticket: a store (GPU->CPU) or load (CPU->GPU) of some chunks of
// one job.
struct CopyRecord {
  CopyDirection direction = CopyDirection::kDeviceToHost;
  uint64_t job_id = 0;
  uint64_t request_id = 0;
  size_t first_chunk = 0;
  std::vector<OffloadKey> keys;
  std::vector<size_t> index;  // position of each key in the job's chunks
  uint64_t bytes = 0;
  std::vector<uint32_t> rows;  // the CPU rows of the keys
  bool checksums = false;      // the copy computes (a store) or checks (a load) each row's CRC32C
  std::vector<uint32_t> expected;  // a checked load: the CRC32C each row must hash to
  // A store of a request with block hashes: each key's (RequestState::
  // ChunkBlockHashes), taken when the store starts, for its write-through
  // (the request may finish before the copy does). Else empty.
  std::vector<std::vector<BlockHash>> block_hashes;
};

class JobTable {
 public:
  // A new running job of `chunks` chunks, none settled or pending.
  uint64_t Create(TransferKind kind, uint64_t request_id, size_t chunks);
  // Sets the outcome of a chunk known at submission. False (nothing changes)
  // for an unknown job or index, or a chunk that is pending.
  bool Settle(uint64_t job_id, size_t index, ChunkResult result);
  // The chunk now waits for a copy or promotion. False (nothing changes) for
  // an unknown job or index, or a chunk already pending.
  bool Expect(uint64_t job_id, size_t index);
  // A pending chunk's result. False (nothing changes) for an unknown or
  // finished job, an index out of range, or a chunk not pending.
  bool Complete(uint64_t job_id, size_t index, ChunkResult result);
  // A load serves a prefix only: chunk `index` was not served, so every later
  // chunk that is kOk when the job finishes becomes kMiss (its copy ran, but
  // the engine may only use the prefix before `index`). Unknown job: no-op.
  void EndPrefix(uint64_t job_id, size_t index);
  // Finishes the job if no chunk is pending. True if it finished now.
  bool FinishIfDone(uint64_t job_id);
  // Appends finished jobs to `out` (oldest first) and forgets them.
  size_t Poll(std::vector<TransferResult>* out);

  // Chunks of a running job still pending; 0 for an unknown job.
  size_t pending(uint64_t job_id) const;
  size_t running() const { return jobs_.size(); }

  // The record of a copy in flight, until its completion takes it. False
  // (the first record stays) for a ticket already recorded.
  bool AddCopy(uint64_t ticket, CopyRecord record);
  std::optional<CopyRecord> TakeCopy(uint64_t ticket);

  // No job is running and no copy is in flight (finished results may still
  // wait for Poll).
  bool Idle() const { return jobs_.empty() && copies_.empty(); }

 private:
  struct Job {
    TransferKind kind = TransferKind::kLoad;
    uint64_t request_id = 0;
    std::vector<ChunkResult> chunks;
    std::vector<bool> pending;  // per chunk: waiting for Complete
    size_t outstanding = 0;     // chunks pending
    size_t prefix_end = SIZE_MAX;  // EndPrefix: chunks after it are not served
  };
  Job* FindChunk(uint64_t job_id, size_t index);

  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, Job> jobs_;           // running
  std::vector<TransferResult> finished_;             // waiting for Poll
  std::unordered_map<uint64_t, CopyRecord> copies_;  // by Stager ticket
};

}  // namespace kvtier::internal
