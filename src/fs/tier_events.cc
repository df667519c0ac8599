#include "fs/tier_events.h"

#include <utility>

#include "format/block_hashes.h"
#include "fs/block_ops.h"

namespace kvtier::internal {
namespace {

std::span<const uint8_t> AsBytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace

void KeyEventLog::Add(OffloadKey key, bool removed) {
  std::lock_guard lock(mu_);
  if (events_.size() >= events_max_) {
    ++dropped_;
    return;
  }
  events_.push_back(TierKeyEvent{std::move(key), removed});
}

std::vector<TierKeyEvent> KeyEventLog::Take() {
  std::lock_guard lock(mu_);
  return std::exchange(events_, {});
}

uint64_t KeyEventLog::dropped() const {
  std::lock_guard lock(mu_);
  return dropped_;
}

std::atomic<size_t>& KeyEventLogBoundForTest() {
  static std::atomic<size_t> bound{0};
  return bound;
}

std::unique_ptr<KeyEventLog> TierEvents::MakeLog() {
  const size_t bound = KeyEventLogBoundForTest().load();
  return std::make_unique<KeyEventLog>(bound == 0 ? KeyEventLog::kEventsMax : bound);
}

Result<std::unique_ptr<TierEvents>> TierEvents::Open(const FsTierOpenOptions& o, const Namespace& ns) {
  KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<VolumeEvents> events,
                          VolumeEvents::Open(o.tier.kv_events_config, o.tier.root_dir));
  const bool log = o.tier.enable_kv_events && o.keep_key_events;
  if (!events && !log) return std::unique_ptr<TierEvents>();
  const NamespaceSpec& spec = ns.spec();
  return std::unique_ptr<TierEvents>(new TierEvents(std::move(events), spec, log));
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
    if (op.unlinked && eviction < job.evictions.size()) OnEvicted(job.evictions[eviction], op.block_hashes);
    return;
  }
  if (kind == JobKind::kStore) {
    // A rename that landed made the block visible, even if the durable
    // directory sync after it failed or was abandoned.
    OnStored(job.keys[index],
             op.renamed && op.result.outcome == KeyOutcome::kError ? KeyOutcome::kOk : op.result.outcome,
             op.block_hashes);
  } else if (op.unlinked) {
    OnRemoved(job.keys[index], op.block_hashes);
  }
}

// vLLM's channel announces a block found already there, as vLLM's own tier
// does for a store that succeeded; kvtier's only with announce_existing.
// A file of several blocks announces each, as the record its store wrote
// says; a file found already there holds what its writer wrote (perhaps no
// record): its key alone.
void TierEvents::OnStored(const OffloadKey& key, KeyOutcome outcome, const std::string& record) {
  const bool existed = outcome == KeyOutcome::kSkippedExists;
  if (outcome != KeyOutcome::kOk && !existed) return;
  if (events_ && (!existed || events_->announce_existing())) {
    if (auto blocks = existed ? std::nullopt : BlocksOf(key, record)) {
      events_->StoredBlocks(kind_, key.group_idx, *blocks, hash_tokens_, &pending_);
    } else {
      events_->Stored(kind_, std::span(&key, 1), block_size_, &pending_);
    }
  }
  if (log_) log_->Add(key, false);
}

// L200: a record is believed only whole and ending with the file's own key;
// else the file is named by its key.
void TierEvents::OnRemoved(const OffloadKey& key, const std::string& record) {
  if (events_) {
    if (auto blocks = BlocksOf(key, record)) {
      events_->RemovedBlocks(kind_, key.group_idx, *blocks, &pending_);
    } else {
      events_->Removed(kind_, std::span(&key, 1), &pending_);
    }
  }
  if (log_) log_->Add(key, true);
}

// An eviction names its file by path: what the events carry is read back
// from that name, so only a name exactly as the layout writes yields one.
void TierEvents::OnEvicted(const std::string& rel_path, const std::string& record) {
  const NamedBlock named = NamedBlockOfPath(rel_path);
  const std::optional<OffloadKey> key = OffloadKeyOfName(named.stem, named.group_dir);
  if (events_) {
    const std::optional<std::vector<BlockHash>> blocks = key ? BlocksOf(*key, record) : std::nullopt;
    if (blocks) {
      events_->RemovedBlocks(kind_, key->group_idx, *blocks, &pending_);
    } else {
      events_->RemovedNamed(kind_, std::span(&named, 1), &pending_);
    }
  }
  if (log_ && key) log_->Add(*key, true);
}

void TierEvents::OnPublishedLate(const std::string& rel_path, const std::string& record) {
  const NamedBlock named = NamedBlockOfPath(rel_path);
  if (std::optional<OffloadKey> key = OffloadKeyOfName(named.stem, named.group_dir)) OnStored(*key, KeyOutcome::kOk, record);
}

// L200, and a record of exactly the blocks a file of the key's group holds
// (HashesPerFile): a planted one cannot name more.
std::optional<std::vector<BlockHash>> TierEvents::BlocksOf(const OffloadKey& key, const std::string& record) const {
  if (record.empty()) return std::nullopt;
  std::optional<std::vector<BlockHash>> blocks = format::ParseBlockHashRecord(AsBytes(record), key.hash);
  if (blocks && blocks->size() != format::HashesPerFile(spec_, key.group_idx)) return std::nullopt;
  return blocks;
}

void TierEvents::Flush() {
  if (events_ && !pending_.empty()) events_->Publish(std::exchange(pending_, {}));
}

void TierEvents::FillMetrics(FsTierMetrics* m) const {
  // vLLM's channel's log is this root's own (summed over roots); the
  // publisher is shared by every root naming its endpoint (the highest).
  m->kv_events_channel_dropped = log_ ? log_->dropped() : 0;
  if (!events_) return;
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
