// The ZeroMQ side of the KV event publisher: the PUB socket, the optional
// replay ROUTER socket and the replay buffer. Only kv_event_publisher.cc
// uses it; it exists so that ZeroMQ stays out of every other file.
//
// Thread safety: Open() on any thread; every other call on one thread at a
// time (the publisher thread, then the closing thread after the join).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "events/kv_event_publisher.h"
#include "kvtier/result.h"

namespace kvtier::internal {

// The publisher's counters, written by one thread and read by Metrics().
struct KvEventCounters {
  std::atomic<uint64_t> events_published{0};
  std::atomic<uint64_t> batches_published{0};
  std::atomic<uint64_t> events_dropped{0};
  std::atomic<uint64_t> replay_requests{0};
  std::atomic<uint64_t> replay_batches_sent{0};
};

class KvEventSockets {
 public:
  // Checks the options' endpoints by binding or connecting; errors as
  // KvEventPublisher::Open documents. `counters` must outlive the sockets.
  static Result<std::unique_ptr<KvEventSockets>> Open(const KvEventsOptions& options,
                                                      KvEventCounters* counters);
  ~KvEventSockets();
  KvEventSockets(const KvEventSockets&) = delete;
  KvEventSockets& operator=(const KvEventSockets&) = delete;

  // Sends `payload` (an encoded EventBatch of `events` events) as the next
  // seq without waiting, and keeps it for replay. A send error is logged
  // (once per kind) and the batch still counts: seq numbers never repeat.
  void SendBatch(std::string payload, size_t events);

  // Answers the replay requests waiting now (at most a few, so publishing
  // goes on under a flood of them); false when there is no replay socket.
  bool ServiceReplay();
  bool has_replay() const;
  // Whether a subscriber has subscribed since the open: the PUB side is an
  // XPUB (the same wire to SUB peers), whose subscription messages are read
  // here. A batch sent before the first one reaches no one.
  bool Subscribed();

  // Closes the PUB socket with `linger` (what is unsent may still go for
  // that long), the replay socket with none, and the context. Idempotent.
  void Close(std::chrono::milliseconds linger);

  const std::string& pub_endpoint() const;
  const std::string& replay_endpoint() const;

 private:
  struct Rep;
  explicit KvEventSockets(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

}  // namespace kvtier::internal
