// A subscriber of kvtier's KV events for the tests: a real ZeroMQ SUB
// socket, and a decoder of vLLM's msgpack layout written from the format
// (docs/kv-events.md) with msgpack-cxx, independently of kvtier's encoder.
#pragma once

#include <msgpack.hpp>
#include <zmq.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "events/kv_event.h"

namespace kvtier::testing {

struct DecodedBatch {
  double ts = 0;
  std::vector<internal::KvEvent> events;
};

// One wire hash, event, or batch payload ([ts, [event, ...]]) decoded.
internal::WireHash DecodeHash(const msgpack::object& o);
internal::KvEvent DecodeEvent(const msgpack::object& o);
DecodedBatch DecodeBatch(const zmq::message_t& payload);
// An 8-byte big-endian sequence frame; -1 decodes from all ones.
int64_t SeqOf(const zmq::message_t& frame);
// Receives one multipart message within `timeout`; empty on timeout.
std::vector<zmq::message_t> Receive(zmq::socket_t& s, std::chrono::milliseconds timeout);

// A SUB socket subscribed to everything, bound at `endpoint` (the publisher
// then connects: no slow-joiner race) or connected to it.
class EventSub {
 public:
  EventSub(const std::string& endpoint, bool bind);
  // Every event received until none came for `quiet` (at most 20 s), in
  // order; checks each message's frames and that seq rises by one.
  std::vector<internal::KvEvent> Drain(std::chrono::milliseconds quiet = std::chrono::milliseconds(300));
  // Waits until `n` events arrived in all (Drain's), or 20 s passed.
  std::vector<internal::KvEvent> WaitFor(size_t n);
  // Waits (at most 20 s) until `n` publishers in all have connected, and
  // hands them this socket's subscription (libzmq does so only inside a call
  // on the socket): a PUB drops what it sends before it has one.
  bool WaitConnected(int n);
  const std::string& endpoint() const { return endpoint_; }
  // The next message may start a new publisher's sequence (from 0).
  void ExpectNewPublisher() { next_seq_ = -1; }

 private:
  bool ReceiveOne(std::chrono::milliseconds timeout, std::vector<internal::KvEvent>* out);
  zmq::context_t ctx_{1};
  zmq::socket_t sub_{ctx_, zmq::socket_type::sub};
  struct Monitor : zmq::monitor_t {
    int handshakes = 0;
    void on_event_handshake_succeeded(const zmq_event_t&, const char*) override { ++handshakes; }
  } monitor_;
  std::string endpoint_;
  int64_t next_seq_ = -1;  // unknown until the first message
};

}  // namespace kvtier::testing
