// cppzmq reports errors by throwing zmq::error_t; kvtier never throws, so
// every call into it is caught here and turned into a Status (at Open) or a
// once-per-kind warning (on the publisher thread, where nobody waits for it).
#include "events/kv_event_sockets.h"

#include <zmq.hpp>

#include <climits>
#include <deque>
#include <string_view>
#include <utility>

#include "events/endpoint_check.h"
#include "util/log_once.h"

namespace kvtier::internal {
namespace {

constexpr std::string_view kEndpointKey = "kv_events_config.endpoint";
constexpr std::string_view kReplayKey = "kv_events_config.replay_endpoint";
// Replay requests answered per ServiceReplay(): enough to keep up, few
// enough that a flood of them cannot hold back new batches for long.
constexpr int kReplayRequestsPerPass = 8;

enum WarnKind : size_t { kWarnSend, kWarnReplay, kWarnMalformed, kWarnKinds };

// vLLM's rule: wildcards and local transports are bound, the rest connected.
bool ShouldBind(std::string_view endpoint) {
  return endpoint.find('*') != std::string_view::npos ||
         endpoint.find("::") != std::string_view::npos || endpoint.starts_with("ipc://") ||
         endpoint.starts_with("inproc://");
}

std::string SeqBytes(int64_t seq) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i, seq >>= 8) out[i] = static_cast<char>(seq & 0xff);
  return out;
}

// int.from_bytes(b, "big") as vLLM reads start_seq; a value beyond 64 bits
// is past every seq, so it saturates.
uint64_t ParseStartSeq(const zmq::message_t& frame) {
  const auto* p = static_cast<const uint8_t*>(frame.data());
  uint64_t v = 0;
  for (size_t i = 0; i < frame.size(); ++i) {
    if (v >> 56) return UINT64_MAX;
    v = (v << 8) | p[i];
  }
  return v;
}

// One frame, without waiting. Its result is not needed: PUB and ROUTER
// (without ZMQ_ROUTER_MANDATORY) drop rather than refuse, and a whole
// multipart message is queued or dropped as one.
void SendFrame(zmq::socket_t& socket, zmq::const_buffer frame, bool more) {
  const zmq::send_flags flags =
      more ? zmq::send_flags::sndmore | zmq::send_flags::dontwait : zmq::send_flags::dontwait;
  static_cast<void>(socket.send(frame, flags));
}

// The reason is the errno, which Status::ToString() spells out.
Status EndpointError(std::string_view key, std::string_view verb, const std::string& endpoint,
                     const zmq::error_t& e) {
  return Status(StatusCode::kInvalidArgument,
                std::string(key) + ": cannot " + std::string(verb) + " '" + endpoint + "'",
                e.num());
}

}  // namespace

struct KvEventSockets::Rep {
  Rep(const KvEventsOptions& o, KvEventCounters* c)
      : options(o), counters(c), warn("kv events", kWarnKinds) {}

  Status OpenPub();
  Status OpenReplay();
  bool ReceiveRequest(std::vector<zmq::message_t>* frames);
  void AnswerRequest(std::vector<zmq::message_t>& frames);
  void SendReply(zmq::const_buffer id, const std::string& seq_bytes, std::string_view payload);

  const KvEventsOptions options;
  KvEventCounters* const counters;
  LogOnce warn;
  zmq::context_t context{1};
  zmq::socket_t pub;
  zmq::socket_t replay;
  std::string pub_endpoint;
  std::string replay_endpoint;
  std::string topic;
  int64_t next_seq = 0;
  bool subscribed = false;  // a subscription message has come (Subscribed())
  // The last buffer_steps batches, seq ascending and contiguous.
  std::deque<std::pair<int64_t, std::string>> buffer;
};

Status KvEventSockets::Rep::OpenPub() {
  const std::string& ep = options.endpoint;
  const bool bind = ShouldBind(ep);
  KVTIER_ASSIGN_OR_RETURN(const EndpointNeeds needs, CheckEndpoint(kEndpointKey, ep, bind));
  try {
    pub = zmq::socket_t(context, zmq::socket_type::xpub);
    pub.set(zmq::sockopt::linger, 0);
    pub.set(zmq::sockopt::ipv6, needs.ipv6);
    pub.set(zmq::sockopt::sndhwm, static_cast<int>(options.hwm));
    if (bind) {
      pub.bind(ep);
      pub_endpoint = pub.get(zmq::sockopt::last_endpoint);
    } else {
      pub.connect(ep);
      pub_endpoint = ep;
    }
  } catch (const zmq::error_t& e) {
    return EndpointError(kEndpointKey, bind ? "bind" : "connect to", ep, e);
  }
  return Status::Ok();
}

Status KvEventSockets::Rep::OpenReplay() {
  if (options.replay_endpoint.empty()) return Status::Ok();
  KVTIER_ASSIGN_OR_RETURN(const EndpointNeeds needs, CheckEndpoint(kReplayKey, options.replay_endpoint, true));
  try {
    replay = zmq::socket_t(context, zmq::socket_type::router);
    replay.set(zmq::sockopt::linger, 0);
    replay.set(zmq::sockopt::ipv6, needs.ipv6);
    replay.bind(options.replay_endpoint);
    replay_endpoint = replay.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return EndpointError(kReplayKey, "bind", options.replay_endpoint, e);
  }
  return Status::Ok();
}

Result<std::unique_ptr<KvEventSockets>> KvEventSockets::Open(const KvEventsOptions& options,
                                                             KvEventCounters* counters) {
  if (options.hwm > INT_MAX) {
    return InvalidArgument("kv_events_config.hwm: must be at most " + std::to_string(INT_MAX) +
                           " (got " + std::to_string(options.hwm) + ")");
  }
  std::unique_ptr<Rep> rep;
  try {
    rep = std::make_unique<Rep>(options, counters);
  } catch (const zmq::error_t& e) {
    return Status(StatusCode::kUnavailable, std::string("kv events: cannot start ZeroMQ: ") + e.what(),
                  e.num());
  }
  rep->topic = options.topic;
  KVTIER_RETURN_IF_ERROR(rep->OpenPub());
  KVTIER_RETURN_IF_ERROR(rep->OpenReplay());
  return std::unique_ptr<KvEventSockets>(new KvEventSockets(std::move(rep)));
}

KvEventSockets::KvEventSockets(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
KvEventSockets::~KvEventSockets() { Close(std::chrono::milliseconds(0)); }

void KvEventSockets::SendBatch(std::string payload, size_t events) {
  Rep& r = *rep_;
  const int64_t seq = r.next_seq++;
  const std::string seq_bytes = SeqBytes(seq);
  try {
    // PUB never blocks (at the high-water mark or without subscribers it
    // drops the message); dontwait makes sure of it.
    SendFrame(r.pub, zmq::buffer(r.topic), true);
    SendFrame(r.pub, zmq::buffer(seq_bytes), true);
    SendFrame(r.pub, zmq::buffer(payload), false);
  } catch (const zmq::error_t& e) {
    r.warn.Warn(kWarnSend, std::string("PUB send failed: ") + e.what());
  }
  r.buffer.emplace_back(seq, std::move(payload));
  if (r.buffer.size() > static_cast<size_t>(r.options.buffer_steps)) r.buffer.pop_front();
  r.counters->batches_published.fetch_add(1, std::memory_order_relaxed);
  r.counters->events_published.fetch_add(events, std::memory_order_relaxed);
}

bool KvEventSockets::has_replay() const { return static_cast<bool>(rep_->replay); }

bool KvEventSockets::Subscribed() {
  Rep& r = *rep_;
  zmq::message_t m;
  try {
    while (r.pub.recv(m, zmq::recv_flags::dontwait)) {
      r.subscribed = r.subscribed || (m.size() > 0 && static_cast<const uint8_t*>(m.data())[0] == 1);  // 1: subscribe
    }
  } catch (const zmq::error_t& e) {
    r.warn.Warn(kWarnSend, std::string("reading subscriptions failed: ") + e.what());
    r.subscribed = true;  // do not hold batches back on a socket error
  }
  return r.subscribed;
}

// One whole multipart message, or false when none is waiting.
bool KvEventSockets::Rep::ReceiveRequest(std::vector<zmq::message_t>* frames) {
  frames->clear();
  zmq::message_t frame;
  if (!replay.recv(frame, zmq::recv_flags::dontwait)) return false;
  // The other parts of a multipart message arrive with the first.
  while (true) {
    const bool more = frame.more();
    frames->push_back(std::move(frame));
    if (!more || !replay.recv(frame, zmq::recv_flags::dontwait)) break;
  }
  return true;
}

void KvEventSockets::Rep::AnswerRequest(std::vector<zmq::message_t>& frames) {
  if (frames.size() != 3) {
    warn.Warn(kWarnMalformed, "ignoring a replay request of " + std::to_string(frames.size()) +
                                  " frames (want identity, empty, start seq)");
    return;
  }
  counters->replay_requests.fetch_add(1, std::memory_order_relaxed);
  const uint64_t start = ParseStartSeq(frames[2]);
  const zmq::const_buffer id = zmq::buffer(frames[0].data(), frames[0].size());
  for (const auto& [seq, payload] : buffer) {
    if (static_cast<uint64_t>(seq) < start) continue;
    SendReply(id, SeqBytes(seq), payload);
    counters->replay_batches_sent.fetch_add(1, std::memory_order_relaxed);
  }
  SendReply(id, SeqBytes(-1), {});
}

// (identity, "", seq, payload): the ROUTER routes by the identity frame.
void KvEventSockets::Rep::SendReply(zmq::const_buffer id, const std::string& seq_bytes,
                                    std::string_view payload) {
  SendFrame(replay, id, true);
  SendFrame(replay, zmq::const_buffer(), true);
  SendFrame(replay, zmq::buffer(seq_bytes), true);
  SendFrame(replay, zmq::buffer(payload), false);
}

bool KvEventSockets::ServiceReplay() {
  Rep& r = *rep_;
  if (!r.replay) return false;
  std::vector<zmq::message_t> frames;
  try {
    for (int i = 0; i < kReplayRequestsPerPass && r.ReceiveRequest(&frames); ++i) {
      r.AnswerRequest(frames);
    }
  } catch (const zmq::error_t& e) {
    r.warn.Warn(kWarnReplay, std::string("replay failed: ") + e.what());
  }
  return true;
}

void KvEventSockets::Close(std::chrono::milliseconds linger) {
  // Linger 0 was set at creation; the PUB socket gets `linger` now, so the
  // last batches reach a connected subscriber (a one-shot gc exits right
  // after its removals), and the context's termination waits for a slow or
  // absent peer no longer than that.
  if (rep_->pub) {
    rep_->pub.set(zmq::sockopt::linger, static_cast<int>(linger.count()));
    rep_->pub.close();
  }
  if (rep_->replay) rep_->replay.close();
  rep_->context.close();
}

const std::string& KvEventSockets::pub_endpoint() const { return rep_->pub_endpoint; }
const std::string& KvEventSockets::replay_endpoint() const { return rep_->replay_endpoint; }

}  // namespace kvtier::internal
