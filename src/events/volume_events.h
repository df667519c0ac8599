// The events one source publishes about the blocks of a volume (a tier, or a
// gc / fsck run): kv_events_config resolved (topic, medium, hash encoding)
// over a publisher shared by every source in this process that names the
// same endpoint, so two tiers of one TieredStore (or the roots of one tier)
// do not fight over a port. Calls only queue events (KvEventPublisher), so
// they may run on the I/O loop and never wait.
//
// Thread safety: every method may be called from any thread at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "events/event_hash.h"
#include "events/kv_event_publisher.h"
#include "kvtier/hashing.h"
#include "kvtier/kv_events.h"
#include "kvtier/result.h"

namespace kvtier::internal {

// A block file named on the volume, for the tools: its stem and group as
// read, both untrusted (EventHashOfName checks them).
struct NamedBlock {
  std::string stem;  // "<hex>" of "<hex>.bin"
  std::string group_dir;  // "<hh>_g<group>"
};

class VolumeEvents {
 public:
  // nullptr (OK) when config.publishes() is false. `default_volume_id`
  // stands for "{volume}" in the topic when volume_id is "". Errors:
  // kInvalidArgument naming kv_events_config.<key> (a medium other than
  // STORAGE, FS, SHARED_STORAGE; a publisher other than zmq or null; the
  // publisher's own checks: a malformed, unknown or busy endpoint; a second
  // source naming an endpoint already open here with other options).
  static Result<std::shared_ptr<VolumeEvents>> Open(const KvEventsConfig& config,
                                                     std::string_view default_volume_id);
  ~VolumeEvents() = default;
  VolumeEvents(const VolumeEvents&) = delete;
  VolumeEvents& operator=(const VolumeEvents&) = delete;

  // BlockStored for `keys` (one event per run of one group), each block
  // `block_size_tokens` long. With `into`, the events are appended there
  // (for one Publish() of many, later) instead of published now; so below.
  void Stored(EventHashKind kind, std::span<const OffloadKey> keys, int64_t block_size_tokens,
              std::vector<KvEvent>* into = nullptr);
  // BlockRemoved for `keys` (one event per run of one group).
  void Removed(EventHashKind kind, std::span<const OffloadKey> keys, std::vector<KvEvent>* into = nullptr);
  // One BlockStored / BlockRemoved for the blocks one file of group `group`
  // holds (its block-hash record, FORMAT.md L200), each of
  // `block_size_tokens`.
  void StoredBlocks(EventHashKind kind, uint32_t group, std::span<const BlockHash> hashes, int64_t block_size_tokens,
                    std::vector<KvEvent>* into = nullptr);
  void RemovedBlocks(EventHashKind kind, uint32_t group, std::span<const BlockHash> hashes,
                     std::vector<KvEvent>* into = nullptr);
  // BlockRemoved for files named on the volume; a name outside the layout
  // (EventHashOfName, EventGroupOfDirName) is skipped and counted. Returns
  // how many were skipped.
  size_t RemovedNamed(EventHashKind kind, std::span<const NamedBlock> blocks, std::vector<KvEvent>* into = nullptr);
  // Queues `events` (in order) for the publisher's thread.
  void Publish(std::vector<KvEvent> events);

  bool announce_existing() const { return config_.announce_existing; }
  const std::string& medium() const { return config_.medium; }
  const std::string& pub_endpoint() const;
  KvEventMetrics Metrics() const;
  // Names skipped by RemovedNamed.
  uint64_t names_skipped() const { return names_skipped_.load(std::memory_order_relaxed); }

 private:
  VolumeEvents(KvEventsConfig config, std::shared_ptr<KvEventPublisher> publisher);
  template <class Make>
  void PublishByGroup(std::span<const OffloadKey> keys, const Make& make, std::vector<KvEvent>* into);
  KvEventsConfig config_;
  BlockHashEncoding encoding_;
  std::shared_ptr<KvEventPublisher> publisher_;
  std::atomic<uint64_t> names_skipped_{0};
};

// The publisher options of `config`, its topic's "{volume}" replaced.
KvEventsOptions PublisherOptions(const KvEventsConfig& config, std::string_view volume_id);

}  // namespace kvtier::internal
