// A job of the fs tier's I/O loop (fs_tier_io_loop.cc): the keys' results as
// their ops finish, and the ops of one submission on their way to the
// scheduler. I/O thread only, once submitted.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fs/block_ops.h"
#include "fs/tier_events.h"
#include "fs/tier_space.h"
#include "io/scheduler.h"
#include "kvtier/fs_tier.h"

// Its own namespace: "Job" is a common name, and this one is the loop's.
namespace kvtier::internal::io_loop {

struct Job {
  uint64_t id = 0;
  JobKind kind = JobKind::kLoad;
  std::vector<KeyResult> results;
  size_t remaining = 0;
  std::vector<CapacityKey> capacity_keys;  // per key, with max_bytes (tier_space.h)
  bool removal = false;  // RemoveCorrupt's: counts corrupt blocks, neither loads nor load latency
  std::unique_ptr<JobEventKeys> event_keys;  // with KV events: the names its ops publish
};

struct Submission {
  std::unique_ptr<Job> job;
  std::vector<std::unique_ptr<FsBlockOp>> ops;
  IoClass cls = IoClass::kRead;
  uint64_t enqueued_ns = 0;
};

// Job `id` of `n` keys, none done yet, its ops to come.
inline Submission NewSubmission(uint64_t id, JobKind kind, size_t n, IoClass cls) {
  Submission sub;
  sub.job = std::make_unique<Job>();
  sub.job->id = id;
  sub.job->kind = kind;
  sub.job->results.resize(n);
  sub.job->remaining = n;
  sub.cls = cls;
  return sub;
}

// A key's result while its root is down (`why`): a lookup misses, a load
// fails, a store is dropped.
inline KeyResult DownResult(JobKind kind, const std::string& why) {
  switch (kind) {
    case JobKind::kLookup: return {KeyOutcome::kMiss, Status()};
    case JobKind::kLoad: return {KeyOutcome::kError, Status(StatusCode::kUnavailable, why)};
    case JobKind::kStore: return {KeyOutcome::kDropped, Status(StatusCode::kRejected, why)};
  }
  return {};
}

}  // namespace kvtier::internal::io_loop
