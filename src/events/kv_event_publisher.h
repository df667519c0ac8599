// Publishes KV events to routers over ZeroMQ the way vLLM's
// ZmqEventPublisher does (vllm/distributed/kv_events.py), so a consumer of
// vLLM's events (llm-d's indexer, Dynamo) reads kvtier's unchanged.
//
// Transport: a PUB socket sends each batch as the multipart message
// (topic, seq as 8-byte big-endian, msgpack EventBatch); seq counts batches
// from 0. An optional ROUTER socket at replay_endpoint answers a request
// [identity, "", start_seq (8-byte BE)] with one (identity, "", seq, payload)
// per buffered batch with seq >= start_seq, then (identity, "", -1, "").
//
// Never in the I/O path's way: Publish() only moves the events onto a
// bounded queue under a short mutex; when the queue is full it drops them
// and counts them. One publisher thread batches, encodes and sends with
// ZMQ_DONTWAIT, so an absent or slow subscriber costs the caller nothing.
//
// Thread safety: Publish() and Metrics() may be called from any thread at
// once. Close() (or the destructor) must not race with Publish() on the same
// object's destruction; Publish() after Close() drops and counts.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "events/kv_event.h"
#include "kvtier/result.h"

namespace kvtier::internal {

// vLLM's KVEventsConfig publisher keys, with vLLM's defaults. The config key
// of each is kv_events_config.<name>, as errors name it.
struct KvEventsOptions {
  // PUB address. Bound when it holds "*" or "::" or is ipc:// or inproc://,
  // else connected (vLLM's heuristic: bind stable, connect volatile).
  std::string endpoint = "tcp://*:5557";
  // ROUTER address for replay requests, always bound; empty: no replay.
  std::string replay_endpoint;
  // Batches kept for replay; >= 1.
  int64_t buffer_steps = 10000;
  // ZMQ_SNDHWM of the PUB socket, in messages (0: unlimited); >= 0.
  int64_t hwm = 100000;
  // Events Publish() may queue before it drops; >= 1.
  int64_t max_queue_size = 100000;
  // First frame of every PUB message.
  std::string topic;

  // Not vLLM keys. Most events in one batch (one batch per wake-up).
  size_t batch_events_max = 1024;
  // How long Close() keeps sending what is still queued.
  std::chrono::milliseconds shutdown_drain_ms{1000};
  // How long the first batch waits for a subscriber: a PUB drops what it
  // sends before a subscriber's subscription has reached it (ZeroMQ's slow
  // joiner: about 250 ms over loopback TCP here), so without the wait a
  // one-shot `kvtier gc` would reach no router at all. Events queue
  // meanwhile; after the first batch nothing waits again. 0: no wait.
  std::chrono::milliseconds subscriber_wait_ms{1000};
  // Tests only: runs on the publisher thread each time it finds queued events,
  // before it takes them; blocking in it is how a test holds the thread.
  std::function<void()> before_take_for_test;
};

// A snapshot of the publisher's counters (exported as kvtier_kv_events_*).
struct KvEventMetrics {
  uint64_t events_published = 0;     // events sent in a batch
  uint64_t batches_published = 0;    // batches sent (= next seq)
  uint64_t events_dropped = 0;       // refused by a full queue or after Close()
  uint64_t replay_requests = 0;      // well-formed replay requests served
  uint64_t replay_batches_sent = 0;  // batches re-sent to replay requests
  uint64_t queue_depth = 0;          // events queued now
};

class KvEventPublisher {
 public:
  // Validates `options`, creates the sockets and binds or connects them now
  // (so a bad endpoint fails here), then starts the publisher thread.
  // kInvalidArgument naming the key (kv_events_config.endpoint, ...) and the
  // value for a bad option, a malformed endpoint, an unknown transport or an
  // address already in use; kUnavailable if ZeroMQ cannot start.
  static Result<std::unique_ptr<KvEventPublisher>> Open(const KvEventsOptions& options);

  // Close()s.
  virtual ~KvEventPublisher() = default;
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // Queues `events` in order; those that do not fit (and all after Close())
  // are dropped and counted. Never blocks on I/O, never throws. Returns how
  // many were queued.
  virtual size_t Publish(std::vector<KvEvent> events) = 0;
  size_t Publish(KvEvent event);

  // Sends what is queued for at most shutdown_drain_ms, drops the rest,
  // closes the sockets (linger 0) and joins the thread. Idempotent.
  virtual void Close() = 0;

  virtual KvEventMetrics Metrics() const = 0;

  // The address the PUB / ROUTER socket is bound to, wildcards resolved
  // (ZMQ_LAST_ENDPOINT: "tcp://127.0.0.1:*" gives the port chosen); for a
  // connected PUB, the endpoint as given. Empty: no replay socket.
  virtual const std::string& pub_endpoint() const = 0;
  virtual const std::string& replay_endpoint() const = 0;

 protected:
  KvEventPublisher() = default;
};

}  // namespace kvtier::internal
