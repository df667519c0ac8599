// The KV events of one root of an fs tier (docs/kv-events.md): a BlockStored
// for each key a store made visible (after its rename; a key skipped as
// already there only with announce_existing), a BlockRemoved for each block
// file the tier itself unlinked (a corrupt or unauthenticated block found by
// a load, a staged-CRC removal, a max_bytes eviction). Each is made as its
// op finishes, on the I/O thread, so one root's events are in the order its
// files changed, and they are published once per pass of the loop (Flush):
// one queue operation and one wake of the publisher for all a pass finished,
// not one per block; publishing only queues (KvEventPublisher).
// With enable_kv_events and keep_key_events (vLLM's own channel, which
// VllmTier drains), each store and removal is also
// kept, in the same order, for the front end to take (KeyEventLog): vLLM's
// take_events then carries removals as well as stores, in file order.
// A file of several blocks (FORMAT.md L197-L202) is announced block by
// block on kvtier's publisher, as its block-hash record names them
// (FsBlockOp::block_hashes): its store once the record is in the file (a
// store whose record could not be written, or one skipped as existing, is
// named by its key), its removal as the record the removal read says;
// vLLM's channel names chunk keys, as vLLM's own tier does (vLLM fans them
// out itself).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "events/volume_events.h"
#include "kvtier/fs_tier.h"

namespace kvtier::internal {

class FsBlockOp;

// What a job's ops need to be named in events: the job's keys, then the
// paths its max_bytes evictions unlink (ops past the keys, in order).
struct JobEventKeys {
  std::vector<OffloadKey> keys;
  std::vector<std::string> evictions;
};

// A tier's stores and removals, oldest first, until taken. Bounded: a
// front end that never takes them costs at most kEventsMax; past that, new
// ones are dropped and counted (FsTierMetrics::kv_events_channel_dropped).
class KeyEventLog {
 public:
  static constexpr size_t kEventsMax = 1 << 16;
  explicit KeyEventLog(size_t events_max = kEventsMax) : events_max_(events_max) {}
  void Add(OffloadKey key, bool removed);
  std::vector<TierKeyEvent> Take();
  uint64_t dropped() const;

 private:
  const size_t events_max_;
  mutable std::mutex mu_;
  std::vector<TierKeyEvent> events_;
  uint64_t dropped_ = 0;
};

// The bound of the logs TierEvents::Open makes from now on; 0 (the
// default): KeyEventLog::kEventsMax. For tests, which reach a small one.
std::atomic<size_t>& KeyEventLogBoundForTest();

class TierEvents {
 public:
  // nullptr (OK) when o.tier.kv_events_config does not publish and no
  // log is kept (o.tier.enable_kv_events and o.keep_key_events); errors: VolumeEvents::Open's (a bad key
  // or endpoint, named).
  static Result<std::unique_ptr<TierEvents>> Open(const FsTierOpenOptions& o, const Namespace& ns);

  // A job's names; `evictions` copied (the ops take the originals).
  std::unique_ptr<JobEventKeys> ForJob(std::span<const OffloadKey> keys,
                                       std::span<const std::string> evictions = {}) const;
  // The job's op number `index` has finished with `op`'s result: its event
  // waits for Flush(). I/O thread only.
  void OnOp(const JobEventKeys& job, JobKind kind, size_t index, const FsBlockOp& op);
  // A store abandoned at its deadline published its block all the same
  // (FsBlockOp::published_late, `rel_path`; `record`, its block-hash record):
  // its BlockStored, as OnOp's of a store that succeeded, named from the
  // path. I/O thread only.
  void OnPublishedLate(const std::string& rel_path, const std::string& record);
  // Publishes what OnOp made since the last Flush. I/O thread only (or once
  // the loop has ended: the destructor flushes too).
  void Flush();
  ~TierEvents() { Flush(); }

  // Whether kvtier's publisher is on (not only vLLM's channel's log).
  bool publishes() const { return events_ != nullptr; }
  // The kv_events_* fields of `m`: the publisher's (none without kvtier's
  // publisher) and kv_events_channel_dropped (the log's, without it too).
  void FillMetrics(FsTierMetrics* m) const;
  // What KeyEventLog::Take gives; empty without the log (enable_kv_events
  // and keep_key_events).
  std::vector<TierKeyEvent> TakeKeyEvents() { return log_ ? log_->Take() : std::vector<TierKeyEvent>(); }

 private:
  TierEvents(std::shared_ptr<VolumeEvents> events, const NamespaceSpec& spec, bool log)
      : events_(std::move(events)), kind_(EventHashKindOf(spec.inference_engine)),
        block_size_(spec.tokens_per_hash * spec.blocks_per_file), hash_tokens_(spec.tokens_per_hash), spec_(spec),
        log_(log ? MakeLog() : nullptr) {}
  static std::unique_ptr<KeyEventLog> MakeLog();
  // `record`: the store's block-hash record, or what the removal read
  // where the file's record goes ("": none, the key alone).
  void OnStored(const OffloadKey& key, KeyOutcome outcome, const std::string& record);
  void OnRemoved(const OffloadKey& key, const std::string& record);
  // The blocks `record` names for `key` (L200), or nullopt.
  std::optional<std::vector<BlockHash>> BlocksOf(const OffloadKey& key, const std::string& record) const;
  void OnEvicted(const std::string& rel_path, const std::string& record);
  std::shared_ptr<VolumeEvents> events_;  // null: kvtier's publisher is off
  EventHashKind kind_;
  int64_t block_size_;  // tokens per block file
  int64_t hash_tokens_;  // tokens per block hash (tokens_per_hash): a block of a file of several
  NamespaceSpec spec_;   // how many blocks a file holds (format::HashesPerFile)
  std::vector<internal::KvEvent> pending_;  // made by OnOp, not yet flushed
  std::unique_ptr<KeyEventLog> log_;  // null: enable_kv_events or keep_key_events off
};

// "<blockdir>/<hhh>/<hh>_g<g>/<hex>.bin" as a NamedBlock (stem, group dir);
// parts that are not there come out empty (and are then skipped).
NamedBlock NamedBlockOfPath(std::string_view rel_path);

}  // namespace kvtier::internal
