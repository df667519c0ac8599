// `--events-endpoint` and its companions on `kvtier gc` (one-shot and
// --watch) and `kvtier fsck --repair`: every block file the run removes is
// published as vLLM's BlockRemoved (docs/kv-events.md, "The tools"), through
// one publisher for the whole run (every pass of a watch).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "events/volume_events.h"
#include "kvtier/kv_events.h"
#include "kvtier/ops.h"
#include "kvtier/result.h"

namespace CLI {
class App;
}

namespace kvtier::internal {

struct EventsFlags {
  std::string endpoint;  // "": events off
  std::string replay_endpoint, topic, medium = "STORAGE", volume_id, hash_encoding = "auto";
};

// Adds --events-endpoint, --events-replay-endpoint, --events-topic,
// --events-medium, --events-volume-id and --events-hash-encoding (the
// companions need --events-endpoint).
void AddEventsFlags(CLI::App* cmd, EventsFlags* flags);

// `s` (a kv_events_config error) as "--events-endpoint: kv_events_config.endpoint: ...":
// the flag first, so the operator sees what to change; the key as the library says it.
Status NameTheEventsFlag(const Status& s);

// "auto", "int", "bytes" -> the encoding; kInvalidArgument otherwise.
Result<KvEventHashEncoding> ParseHashEncoding(std::string_view text);
// The kv_events_config the flags stand for (enabled); `root` (the ROOT as
// given) is the volume id by default.
Result<KvEventsConfig> EventsConfigOf(const EventsFlags& flags, const std::string& root);

// The removals of one run, published. Thread-safe: the callback may run on
// any of gc's threads while Close runs on another.
class RemovalEvents {
 public:
  // nullptr (OK) without --events-endpoint. kInvalidArgument naming the flag
  // (and the kv_events_config key) for a bad value or an endpoint that
  // cannot be bound or connected; nothing is open then.
  static Result<std::shared_ptr<RemovalEvents>> Open(const EventsFlags& flags, const std::string& root);

  // For GcOptions / FsckOptions::on_block_removed: shares this object, so it
  // is safe after Close (a removal then is dropped).
  OnBlockRemoved Callback();
  // Sends what is queued (at most 1 s) and closes the sockets; idempotent.
  void Close();
  // kvtier_kv_events_* (docs/metrics.md); "" once closed.
  std::string MetricsText() const;

 private:
  explicit RemovalEvents(std::shared_ptr<VolumeEvents> events) : events_(std::move(events)) {}
  void Removed(const RemovedBlock& block);
  mutable std::mutex mu_;
  std::shared_ptr<VolumeEvents> events_;  // null once closed
  std::weak_ptr<RemovalEvents> self_;
};

}  // namespace kvtier::internal
