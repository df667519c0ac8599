#include "fs/tier_events.h"

#include <utility>

#include "fs/block_ops.h"

namespace kvtier::internal {

Result<std::unique_ptr<TierEvents>> TierEvents::Open(const FsTierOpenOptions& o, const Namespace& ns) {
  KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<VolumeEvents> events,
                          VolumeEvents::Open(o.tier.kv_events_config, o.tier.root_dir));
  if (!events) return std::unique_ptr<TierEvents>();
  const NamespaceSpec& spec = ns.spec();
  return std::unique_ptr<TierEvents>(new TierEvents(std::move(events), EventHashKindOf(spec.inference_engine),
                                                    spec.tokens_per_hash * spec.blocks_per_file));
}

std::unique_ptr<JobEventKeys> TierEvents::ForJob(std::span<const OffloadKey> keys,
                                                 std::span<const std::string> evictions) const {
  auto job = std::make_unique<JobEventKeys>();
  job->keys.assign(keys.begin(), keys.end());
  job->evictions.assign(evictions.begin(), evictions.end());
  return job;
}

void TierEvents::OnOp(const JobEventKeys& job, JobKind kind, size_t index, const FsBlockOp& op) {
  if (index >= job.keys.size()) {
    const size_t eviction = index - job.keys.size();
    if (op.unlinked && eviction < job.evictions.size()) {
      const NamedBlock named = NamedBlockOfPath(job.evictions[eviction]);
      events_->RemovedNamed(kind_, std::span(&named, 1), &pending_);
    }
    return;
  }
  const std::span<const OffloadKey> key(&job.keys[index], 1);
  const KeyOutcome outcome = op.result.outcome;
  if (kind == JobKind::kStore) {
    if (outcome == KeyOutcome::kOk || (outcome == KeyOutcome::kSkippedExists && events_->announce_existing())) {
      events_->Stored(kind_, key, block_size_, &pending_);
    }
  } else if (op.unlinked) {
    events_->Removed(kind_, key, &pending_);
  }
}

void TierEvents::Flush() {
  if (!pending_.empty()) events_->Publish(std::exchange(pending_, {}));
}

void TierEvents::FillMetrics(FsTierMetrics* m) const {
  const KvEventMetrics k = events_->Metrics();
  m->kv_events_published = k.events_published;
  m->kv_events_dropped = k.events_dropped;
  m->kv_events_batches = k.batches_published;
  m->kv_events_replay_requests = k.replay_requests;
  m->kv_events_queue_depth = k.queue_depth;
}

NamedBlock NamedBlockOfPath(std::string_view rel_path) {
  NamedBlock out;
  const size_t file_at = rel_path.rfind('/');
  if (file_at == std::string_view::npos) return out;
  const std::string_view file = rel_path.substr(file_at + 1);
  if (file.size() > 4 && file.substr(file.size() - 4) == ".bin") out.stem = std::string(file.substr(0, file.size() - 4));
  const std::string_view dirs = rel_path.substr(0, file_at);
  const size_t group_at = dirs.rfind('/');
  out.group_dir = std::string(group_at == std::string_view::npos ? dirs : dirs.substr(group_at + 1));
  return out;
}

}  // namespace kvtier::internal
