// RemovalEvents and the --events-* flags (cli/ops_events.h).
#include "cli/ops_events.h"

#include <CLI/CLI.hpp>

#include <utility>

#include "events/event_hash.h"
#include "ops/collector_metrics.h"

namespace kvtier::internal {
namespace {

// The flag that sets each kv_events_config key the publisher may name.
constexpr std::pair<std::string_view, std::string_view> kFlagOfKey[] = {
    {"kv_events_config.endpoint", "--events-endpoint"},
    {"kv_events_config.replay_endpoint", "--events-replay-endpoint"},
    {"kv_events_config.topic", "--events-topic"},
    {"kv_events_config.medium", "--events-medium"},
    {"kv_events_config.hwm", "--events-hwm"},  // bench fs; its flag's range check comes first
};

}  // namespace

Status NameTheEventsFlag(const Status& s) {
  std::string_view flag = "--events-endpoint";
  for (const auto& [key, f] : kFlagOfKey) {
    if (s.message().rfind(std::string(key) + ":", 0) == 0) flag = f;
  }
  return Status(StatusCode::kInvalidArgument, std::string(flag) + ": " + s.message());
}

void AddEventsFlags(CLI::App* cmd, EventsFlags* f) {
  CLI::Option* endpoint = cmd->add_option(
      "--events-endpoint", f->endpoint,
      "Publish vLLM's BlockRemoved KV event for every block file removed, on a ZMQ PUB socket here (bound when "
      "it holds * or :: or is ipc:// or inproc://, else connected; docs/kv-events.md)");
  cmd->add_option("--events-replay-endpoint", f->replay_endpoint,
                  "With --events-endpoint: a ROUTER socket here answers replay requests (vLLM's)")
      ->needs(endpoint);
  cmd->add_option("--events-topic", f->topic,
                  "With --events-endpoint: the topic frame; each {volume} in it is the volume id")
      ->needs(endpoint);
  cmd->add_option("--events-medium", f->medium, "With --events-endpoint: STORAGE | FS | SHARED_STORAGE")
      ->capture_default_str()
      ->needs(endpoint);
  cmd->add_option("--events-volume-id", f->volume_id, "With --events-endpoint: what {volume} stands for (default: ROOT as given)")
      ->needs(endpoint);
  cmd->add_option("--events-hash-encoding", f->hash_encoding,
                  "With --events-endpoint: a vLLM block hash as auto (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES, "
                  "default int) | int (its last 8 bytes) | bytes")
      ->capture_default_str()
      ->needs(endpoint);
}

Result<KvEventHashEncoding> ParseHashEncoding(std::string_view text) {
  if (text == "auto") return KvEventHashEncoding::kAuto;
  if (text == "int") return KvEventHashEncoding::kInt;
  if (text == "bytes") return KvEventHashEncoding::kBytes;
  return InvalidArgument("--events-hash-encoding: expected auto, int or bytes, got \"" + std::string(text) + "\"");
}

Result<KvEventsConfig> EventsConfigOf(const EventsFlags& f, const std::string& root) {
  KvEventsConfig c;
  c.enable_kv_cache_events = true;
  c.publisher = "zmq";
  c.endpoint = f.endpoint;
  c.replay_endpoint = f.replay_endpoint;
  c.topic = f.topic;
  c.medium = f.medium;
  c.volume_id = f.volume_id.empty() ? root : f.volume_id;
  KVTIER_ASSIGN_OR_RETURN(c.block_hash_encoding, ParseHashEncoding(f.hash_encoding));
  return c;
}

Result<std::shared_ptr<RemovalEvents>> RemovalEvents::Open(const EventsFlags& flags, const std::string& root) {
  if (flags.endpoint.empty()) return std::shared_ptr<RemovalEvents>();
  KVTIER_ASSIGN_OR_RETURN(const KvEventsConfig config, EventsConfigOf(flags, root));
  Result<std::shared_ptr<VolumeEvents>> events = VolumeEvents::Open(config, root);
  if (!events.ok()) return NameTheEventsFlag(events.status());
  std::shared_ptr<RemovalEvents> out(new RemovalEvents(std::move(*events)));
  out->self_ = out;
  return out;
}

OnBlockRemoved RemovalEvents::Callback() {
  return [self = self_.lock()](const RemovedBlock& block) { self->Removed(block); };
}

// One event per removal, queued at once: the publisher's thread sends what
// has queued in batches (up to 1024 events), so nothing waits for a pass's
// end, and a watch's quiet volume leaves nothing unsent.
void RemovalEvents::Removed(const RemovedBlock& block) {
  std::shared_ptr<VolumeEvents> events;
  {
    std::lock_guard lock(mu_);
    events = events_;
  }
  if (!events) return;
  const EventHashKind kind = EventHashKindOf(block.engine);
  // A file of several blocks names each, as its record says (FORMAT.md L200).
  const std::optional<uint32_t> group = EventGroupOfDirName(block.group_dir);
  if (!block.block_hashes.empty() && group) return events->RemovedBlocks(kind, *group, block.block_hashes);
  const NamedBlock named{block.stem, block.group_dir};
  (void)events->RemovedNamed(kind, std::span<const NamedBlock>(&named, 1));
}

void RemovalEvents::Close() {
  std::shared_ptr<VolumeEvents> events;
  {
    std::lock_guard lock(mu_);
    events = std::move(events_);
  }
  events.reset();  // the last owner: the publisher drains (<= 1 s) and closes
}

std::string RemovalEvents::MetricsText() const {
  std::lock_guard lock(mu_);
  return events_ ? KvEventsMetricsText(events_->Metrics(), events_->names_skipped()) : "";
}

}  // namespace kvtier::internal
