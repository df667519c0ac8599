#include "support/kv_event_sub.h"

#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <thread>

namespace kvtier::testing {
namespace {

using internal::BlockRemovedEvent;
using internal::BlockStoredEvent;
using internal::KvEvent;
using internal::WireHash;
using Clock = std::chrono::steady_clock;

std::vector<WireHash> DecodeHashes(const msgpack::object& o) {
  std::vector<WireHash> out;
  for (uint32_t i = 0; i < o.via.array.size; ++i) out.push_back(DecodeHash(o.via.array.ptr[i]));
  return out;
}

template <class T>
std::optional<T> Optional(const msgpack::object& o) {
  if (o.is_nil()) return std::nullopt;
  return o.as<T>();
}

BlockStoredEvent DecodeStored(const msgpack::object* f, uint32_t n) {
  BlockStoredEvent e;
  e.block_hashes = DecodeHashes(f[1]);
  if (!f[2].is_nil()) e.parent_block_hash = DecodeHash(f[2]);
  e.token_ids = f[3].as<std::vector<int64_t>>();
  e.block_size = f[4].as<int64_t>();
  e.lora_id = Optional<int64_t>(f[5]);
  e.medium = Optional<std::string>(f[6]);
  e.lora_name = Optional<std::string>(f[7]);
  if (n > 9) e.group_idx = f[9].as<int64_t>();
  return e;
}

}  // namespace

WireHash DecodeHash(const msgpack::object& o) {
  if (o.type == msgpack::type::POSITIVE_INTEGER) return WireHash::Int(o.via.u64);
  if (o.type == msgpack::type::BIN) {
    const auto* p = reinterpret_cast<const uint8_t*>(o.via.bin.ptr);
    return WireHash::Bytes({p, o.via.bin.size});
  }
  EXPECT_EQ(o.type, msgpack::type::STR);
  return WireHash::PageKey(o.as<std::string>());
}

KvEvent DecodeEvent(const msgpack::object& o) {
  const msgpack::object* f = o.via.array.ptr;
  const uint32_t n = o.via.array.size;
  const std::string tag = f[0].as<std::string>();
  if (tag == "BlockStored") return DecodeStored(f, n);
  if (tag == "BlockRemoved") {
    BlockRemovedEvent e;
    e.block_hashes = DecodeHashes(f[1]);
    e.medium = Optional<std::string>(f[2]);
    if (n > 3) e.group_idx = f[3].as<int64_t>();
    return e;
  }
  EXPECT_EQ(tag, "AllBlocksCleared");
  return internal::AllBlocksClearedEvent{};
}

DecodedBatch DecodeBatch(const zmq::message_t& payload) {
  const msgpack::object_handle h = msgpack::unpack(static_cast<const char*>(payload.data()), payload.size());
  const msgpack::object& o = h.get();
  DecodedBatch batch;
  EXPECT_EQ(o.via.array.size, 2u);  // [ts, events]: no data_parallel_rank
  EXPECT_EQ(o.via.array.ptr[0].type, msgpack::type::FLOAT64);
  batch.ts = o.via.array.ptr[0].as<double>();
  const msgpack::object& events = o.via.array.ptr[1];
  for (uint32_t i = 0; i < events.via.array.size; ++i) batch.events.push_back(DecodeEvent(events.via.array.ptr[i]));
  return batch;
}

int64_t SeqOf(const zmq::message_t& frame) {
  EXPECT_EQ(frame.size(), 8u);
  const auto* p = static_cast<const uint8_t*>(frame.data());
  uint64_t v = 0;
  for (size_t i = 0; i < frame.size(); ++i) v = (v << 8) | p[i];
  return static_cast<int64_t>(v);
}

std::vector<zmq::message_t> Receive(zmq::socket_t& s, std::chrono::milliseconds timeout) {
  std::vector<zmq::message_t> frames;
  zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, timeout) == 0) return frames;
  while (true) {
    zmq::message_t m;
    EXPECT_TRUE(s.recv(m).has_value());
    const bool more = m.more();
    frames.push_back(std::move(m));
    if (!more) break;
  }
  return frames;
}

EventSub::EventSub(const std::string& endpoint, bool bind) : endpoint_(endpoint) {
  sub_.set(zmq::sockopt::subscribe, "");
  static std::atomic<int> monitors{0};
  monitor_.init(sub_, "inproc://kv-event-sub-monitor-" + std::to_string(monitors++), ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
  if (bind) {
    sub_.bind(endpoint);
    endpoint_ = sub_.get(zmq::sockopt::last_endpoint);
  } else {
    sub_.connect(endpoint);
  }
}

bool EventSub::ReceiveOne(std::chrono::milliseconds timeout, std::vector<KvEvent>* out) {
  std::vector<zmq::message_t> frames = Receive(sub_, timeout);
  if (frames.empty()) return false;
  EXPECT_EQ(frames.size(), 3u) << "a message is (topic, seq, payload)";
  if (frames.size() != 3) return true;
  const int64_t seq = SeqOf(frames[1]);
  if (next_seq_ >= 0) {
    EXPECT_EQ(seq, next_seq_) << "a batch was lost or reordered";
  }
  next_seq_ = seq + 1;
  for (KvEvent& e : DecodeBatch(frames[2]).events) out->push_back(std::move(e));
  return true;
}

std::vector<KvEvent> EventSub::Drain(std::chrono::milliseconds quiet) {
  std::vector<KvEvent> out;
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < deadline && ReceiveOne(quiet, &out)) {
  }
  return out;
}

bool EventSub::WaitConnected(int n) {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (monitor_.handshakes < n && Clock::now() < deadline) monitor_.check_event(100);
  // libzmq hands a new peer this socket's subscription only when the
  // application calls into the socket: do so, then give it time to travel.
  for (int i = 0; i < 5; ++i) {
    static_cast<void>(sub_.get(zmq::sockopt::events));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return monitor_.handshakes >= n;
}

std::vector<KvEvent> EventSub::WaitFor(size_t n) {
  std::vector<KvEvent> out;
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (out.size() < n && Clock::now() < deadline) ReceiveOne(std::chrono::milliseconds(100), &out);
  return out;
}

}  // namespace kvtier::testing
