#include "events/volume_events.h"

#include <map>
#include <mutex>
#include <utility>

#include "kvtier/status.h"

namespace kvtier::internal {
namespace {

constexpr std::string_view kMedia[] = {"STORAGE", "FS", "SHARED_STORAGE"};

Status CheckConfig(const KvEventsConfig& config) {
  bool known = false;
  for (std::string_view m : kMedia) known = known || config.medium == m;
  if (!known) {
    return Status(StatusCode::kInvalidArgument, "kv_events_config.medium: expected one of \"STORAGE\", \"FS\", "
                                                "\"SHARED_STORAGE\", got \"" + config.medium + "\"");
  }
  if (!config.publisher.empty() && config.publisher != "zmq" && config.publisher != "null") {
    return Status(StatusCode::kInvalidArgument,
                  "kv_events_config.publisher: expected \"zmq\" or \"null\", got \"" + config.publisher + "\"");
  }
  return Status::Ok();
}

bool SamePublisher(const KvEventsOptions& a, const KvEventsOptions& b) {
  return a.endpoint == b.endpoint && a.replay_endpoint == b.replay_endpoint && a.buffer_steps == b.buffer_steps &&
         a.hwm == b.hwm && a.max_queue_size == b.max_queue_size && a.topic == b.topic;
}

// The publishers open in this process, by PUB endpoint as configured: a
// second source naming one shares it (its options must match).
struct Registry {
  std::mutex mu;
  std::map<std::string, std::pair<KvEventsOptions, std::weak_ptr<KvEventPublisher>>> open;
};

Registry& TheRegistry() {
  static Registry* registry = new Registry;  // never destroyed: sources may close during exit
  return *registry;
}

Result<std::shared_ptr<KvEventPublisher>> AcquirePublisher(const KvEventsOptions& options) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.open.find(options.endpoint);
  if (it != r.open.end()) {
    if (std::shared_ptr<KvEventPublisher> shared = it->second.second.lock()) {
      if (SamePublisher(it->second.first, options)) return shared;
      return Status(StatusCode::kInvalidArgument,
                    "kv_events_config.endpoint: '" + options.endpoint +
                        "' is already published in this process with other kv_events_config options");
    }
  }
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<KvEventPublisher> opened, KvEventPublisher::Open(options));
  std::shared_ptr<KvEventPublisher> shared(std::move(opened));
  r.open[options.endpoint] = {options, shared};
  return shared;
}

}  // namespace

KvEventsOptions PublisherOptions(const KvEventsConfig& config, std::string_view volume_id) {
  KvEventsOptions o;
  o.endpoint = config.endpoint;
  o.replay_endpoint = config.replay_endpoint;
  o.buffer_steps = config.buffer_steps;
  o.hwm = config.hwm;
  o.max_queue_size = config.max_queue_size;
  const std::string_view volume = config.volume_id.empty() ? volume_id : std::string_view(config.volume_id);
  std::string topic = config.topic;
  for (size_t at = topic.find("{volume}"); at != std::string::npos; at = topic.find("{volume}", at + volume.size())) {
    topic.replace(at, 8, volume);
  }
  o.topic = std::move(topic);
  return o;
}

Result<std::shared_ptr<VolumeEvents>> VolumeEvents::Open(const KvEventsConfig& config,
                                                         std::string_view default_volume_id) {
  KVTIER_RETURN_IF_ERROR(CheckConfig(config));
  if (!config.publishes()) return std::shared_ptr<VolumeEvents>();
  KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<KvEventPublisher> publisher,
                          AcquirePublisher(PublisherOptions(config, default_volume_id)));
  return std::shared_ptr<VolumeEvents>(new VolumeEvents(config, std::move(publisher)));
}

VolumeEvents::VolumeEvents(KvEventsConfig config, std::shared_ptr<KvEventPublisher> publisher)
    : config_(std::move(config)),
      encoding_(ResolveHashEncoding(config_.block_hash_encoding)),
      publisher_(std::move(publisher)) {}

const std::string& VolumeEvents::pub_endpoint() const { return publisher_->pub_endpoint(); }

KvEventMetrics VolumeEvents::Metrics() const { return publisher_->Metrics(); }

void VolumeEvents::Publish(std::vector<KvEvent> events) {
  if (!events.empty()) publisher_->Publish(std::move(events));
}

// Calls make(group, run) for each run of keys of one group, and publishes
// what it returns in one call (or appends it to `into`).
template <class Make>
void VolumeEvents::PublishByGroup(std::span<const OffloadKey> keys, const Make& make, std::vector<KvEvent>* into) {
  std::vector<KvEvent> own;
  std::vector<KvEvent>& events = into != nullptr ? *into : own;
  for (size_t begin = 0; begin < keys.size();) {
    size_t end = begin + 1;
    while (end < keys.size() && keys[end].group_idx == keys[begin].group_idx) ++end;
    events.push_back(make(keys[begin].group_idx, keys.subspan(begin, end - begin)));
    begin = end;
  }
  if (into == nullptr) Publish(std::move(own));
}

namespace {

std::vector<WireHash> HashesOf(EventHashKind kind, std::span<const OffloadKey> keys, BlockHashEncoding encoding) {
  std::vector<WireHash> out;
  out.reserve(keys.size());
  for (const OffloadKey& k : keys) out.push_back(EventHashOfBytes(kind, k.hash.bytes(), encoding));
  return out;
}

std::vector<WireHash> HashesOf(EventHashKind kind, std::span<const BlockHash> hashes, BlockHashEncoding encoding) {
  std::vector<WireHash> out;
  out.reserve(hashes.size());
  for (const BlockHash& h : hashes) out.push_back(EventHashOfBytes(kind, h.bytes(), encoding));
  return out;
}

// vLLM leaves group_idx out (None) for the first group.
std::optional<int64_t> GroupField(uint32_t group) {
  return group == 0 ? std::nullopt : std::optional<int64_t>(group);
}

}  // namespace

void VolumeEvents::Stored(EventHashKind kind, std::span<const OffloadKey> keys, int64_t block_size_tokens,
                          std::vector<KvEvent>* into) {
  PublishByGroup(keys, [&](uint32_t group, std::span<const OffloadKey> run) -> KvEvent {
    BlockStoredEvent e;
    e.block_hashes = HashesOf(kind, run, encoding_);
    e.block_size = block_size_tokens;
    e.medium = config_.medium;
    e.group_idx = GroupField(group);
    return e;
  }, into);
}

void VolumeEvents::Removed(EventHashKind kind, std::span<const OffloadKey> keys, std::vector<KvEvent>* into) {
  PublishByGroup(keys, [&](uint32_t group, std::span<const OffloadKey> run) -> KvEvent {
    return BlockRemovedEvent{HashesOf(kind, run, encoding_), config_.medium, GroupField(group)};
  }, into);
}

void VolumeEvents::StoredBlocks(EventHashKind kind, uint32_t group, std::span<const BlockHash> hashes,
                                int64_t block_size_tokens, std::vector<KvEvent>* into) {
  BlockStoredEvent e;
  e.block_hashes = HashesOf(kind, hashes, encoding_);
  e.block_size = block_size_tokens;
  e.medium = config_.medium;
  e.group_idx = GroupField(group);
  if (into != nullptr) return into->push_back(std::move(e));
  std::vector<KvEvent> one;
  one.push_back(std::move(e));
  Publish(std::move(one));
}

void VolumeEvents::RemovedBlocks(EventHashKind kind, uint32_t group, std::span<const BlockHash> hashes,
                                 std::vector<KvEvent>* into) {
  BlockRemovedEvent e{HashesOf(kind, hashes, encoding_), config_.medium, GroupField(group)};
  if (into != nullptr) return into->push_back(std::move(e));
  std::vector<KvEvent> one;
  one.push_back(std::move(e));
  Publish(std::move(one));
}

size_t VolumeEvents::RemovedNamed(EventHashKind kind, std::span<const NamedBlock> blocks,
                                  std::vector<KvEvent>* into) {
  std::vector<KvEvent> own;
  std::vector<KvEvent>& events = into != nullptr ? *into : own;
  size_t skipped = 0;
  for (const NamedBlock& b : blocks) {
    const std::optional<WireHash> hash = EventHashOfName(kind, b.stem, encoding_);
    const std::optional<uint32_t> group = EventGroupOfDirName(b.group_dir);
    if (!hash || !group) {
      ++skipped;
      continue;
    }
    events.push_back(BlockRemovedEvent{{*hash}, config_.medium, GroupField(*group)});
  }
  names_skipped_.fetch_add(skipped, std::memory_order_relaxed);
  if (into == nullptr) Publish(std::move(own));
  return skipped;
}

}  // namespace kvtier::internal
