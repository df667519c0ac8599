// Proves the KV event publisher speaks vLLM's ZmqEventPublisher protocol
// and stays out of its callers' way. Method: real ZeroMQ sockets in this
// process (ipc:// in a temp dir, tcp://127.0.0.1): a SUB socket checks the
// (topic, seq, payload) frames, seq 0, 1, 2... and payloads that decode
// (msgpack-cxx) back to the events published; a DEALER asks the replay
// ROUTER for old batches; the test hook holds the publisher thread so a full
// queue is reached for certain, and Publish() must drop and count rather
// than wait; bad and busy endpoints (ports out of range, hosts that do not
// resolve: libzmq takes those) must fail Open() naming the config key;
// Close() with no subscriber must return; the first batch waits for a
// subscriber to join (ZeroMQ's slow joiner would drop it), and only then. Time bounds here only catch hangs
// (seconds); nothing asserts throughput.
#include <gtest/gtest.h>
#include <msgpack.hpp>
#include <zmq.hpp>

#include <atomic>
#include <chrono>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "events/kv_event_publisher.h"
#include "support/kv_event_sub.h"
#include "support/test_support.h"

namespace kvtier::internal {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Decoding what the publisher sent, independently of the encoder.
using kvtier::testing::DecodeBatch;
using kvtier::testing::DecodedBatch;
using kvtier::testing::SeqOf;

std::string SeqBytes(uint64_t seq) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i, seq >>= 8) out[i] = static_cast<char>(seq & 0xff);
  return out;
}

// ---- helpers ----

BlockStoredEvent Stored(uint64_t hash) {
  BlockStoredEvent e;
  e.block_hashes = {WireHash::Int(hash)};
  e.parent_block_hash = WireHash::Int(hash - 1);
  e.token_ids = {1, 2, 3, 4};
  e.block_size = 4;
  e.medium = std::string(kMediumStorage);
  return e;
}

// Polls `done` every millisecond for up to 10 s (a hang, not a slow run).
template <class F>
bool Eventually(F done) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

// Publishes `events` and waits until the thread has sent them as one batch.
void PublishOneBatch(KvEventPublisher& p, std::vector<KvEvent> events) {
  const uint64_t before = p.Metrics().batches_published;
  ASSERT_EQ(p.Publish(events), events.size());
  ASSERT_TRUE(Eventually([&] { return p.Metrics().batches_published == before + 1; }));
}

using kvtier::testing::Receive;

KvEventsOptions IpcOptions(const testing::TempDir& dir) {
  KvEventsOptions o;
  o.endpoint = "ipc://" + (dir.path() / "pub.sock").string();
  return o;
}

// PUB drops what it sends before a subscription reaches it (ZeroMQ's slow
// joiner), so probe batches go out one at a time until the SUB gets one.
// Returns how many batches the probes took.
int64_t WaitUntilSubscribed(KvEventPublisher& p, zmq::socket_t& sub) {
  while (true) {
    PublishOneBatch(p, {AllBlocksClearedEvent{}});
    if (!Receive(sub, milliseconds(100)).empty()) {
      // Drain probes that were merely late, so the test sees only its own.
      while (!Receive(sub, milliseconds(50)).empty()) {
      }
      return static_cast<int64_t>(p.Metrics().batches_published);
    }
  }
}

// ---- tests ----

TEST(KvEventPublisher, SubscriberGetsTopicSeqAndTheEventsPublished) {
  testing::TempDir dir;
  KvEventsOptions options = IpcOptions(dir);
  options.topic = "kv-events";
  ASSERT_OK_AND_ASSIGN(auto pub, KvEventPublisher::Open(options));
  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "kv-events");
  sub.connect(pub->pub_endpoint());
  const int64_t probes = WaitUntilSubscribed(*pub, sub);

  std::vector<std::vector<KvEvent>> sent;
  sent.push_back({Stored(100), Stored(101)});
  BlockRemovedEvent removed;
  removed.block_hashes = {WireHash::Int(100), WireHash::PageKey("page")};
  removed.medium = std::string(kMediumStorage);
  removed.group_idx = 1;
  sent.push_back({removed});
  sent.push_back({AllBlocksClearedEvent{}});
  const double t0 = std::chrono::duration<double>(
                        std::chrono::system_clock::now().time_since_epoch()).count();
  for (const auto& batch : sent) PublishOneBatch(*pub, batch);

  for (size_t i = 0; i < sent.size(); ++i) {
    std::vector<zmq::message_t> frames = Receive(sub, milliseconds(5000));
    ASSERT_EQ(frames.size(), 3u) << "batch " << i;
    EXPECT_EQ(frames[0].to_string(), "kv-events");
    // Every batch took one seq, the probes first: seq counts batches from 0.
    EXPECT_EQ(SeqOf(frames[1]), probes + static_cast<int64_t>(i));
    const DecodedBatch got = DecodeBatch(frames[2]);
    EXPECT_EQ(got.events, sent[i]) << "batch " << i;
    EXPECT_GE(got.ts, t0 - 1);  // wall-clock seconds
    EXPECT_LE(got.ts, t0 + 60);
  }
  const KvEventMetrics m = pub->Metrics();
  EXPECT_EQ(m.batches_published, static_cast<uint64_t>(probes) + 3);
  EXPECT_EQ(m.events_published, static_cast<uint64_t>(probes) + 4);
  EXPECT_EQ(m.events_dropped, 0u);
  EXPECT_EQ(m.queue_depth, 0u);
}

TEST(KvEventPublisher, OnePublishCallOfSeveralEventsIsOneBatch) {
  testing::TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto pub, KvEventPublisher::Open(IpcOptions(dir)));
  PublishOneBatch(*pub, {Stored(1), Stored(2), Stored(3)});
  EXPECT_EQ(pub->Metrics().events_published, 3u);
}

TEST(KvEventPublisher, FirstBatchWaitsForASubscriberToJoin) {
  testing::TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto pub, KvEventPublisher::Open(IpcOptions(dir)));
  ASSERT_EQ(pub->Publish(Stored(1)), 1u);  // before anyone listens
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(pub->Metrics().batches_published, 0u) << "the first batch is held for a subscriber";
  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "");
  sub.connect(pub->pub_endpoint());
  std::vector<zmq::message_t> f = Receive(sub, milliseconds(5000));
  ASSERT_EQ(f.size(), 3u) << "the batch published before the subscriber joined is lost";
  EXPECT_EQ(SeqOf(f[1]), 0);
  EXPECT_EQ(DecodeBatch(f[2]).events, std::vector<KvEvent>{Stored(1)});
  // Without the wait, the batch goes at once, to no one.
  KvEventsOptions no_wait = IpcOptions(dir);
  no_wait.endpoint = "ipc://" + (dir.path() / "no-wait.sock").string();
  no_wait.subscriber_wait_ms = milliseconds(0);
  ASSERT_OK_AND_ASSIGN(auto eager, KvEventPublisher::Open(no_wait));
  PublishOneBatch(*eager, {Stored(2)});
}

TEST(KvEventPublisher, ReplayReturnsTheBufferedBatchesFromStartThenMinusOne) {
  testing::TempDir dir;
  KvEventsOptions options = IpcOptions(dir);
  options.replay_endpoint = "ipc://" + (dir.path() / "replay.sock").string();
  options.buffer_steps = 4;  // of the 6 batches below, seq 2..5 stay
  ASSERT_OK_AND_ASSIGN(auto pub, KvEventPublisher::Open(options));
  for (uint64_t i = 0; i < 6; ++i) PublishOneBatch(*pub, {Stored(1000 + i)});

  zmq::context_t ctx;
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.connect(pub->replay_endpoint());
  // A DEALER sends ("", start); the ROUTER sees (identity, "", start).
  for (const uint64_t start : {3u, 0u}) {
    dealer.send(zmq::str_buffer(""), zmq::send_flags::sndmore);
    dealer.send(zmq::buffer(SeqBytes(start)));
    const int64_t first = std::max<int64_t>(start, 2);
    for (int64_t seq = first; seq <= 5; ++seq) {
      std::vector<zmq::message_t> f = Receive(dealer, milliseconds(5000));
      ASSERT_EQ(f.size(), 3u);  // "", seq, payload
      EXPECT_EQ(f[0].size(), 0u);
      EXPECT_EQ(SeqOf(f[1]), seq);
      EXPECT_EQ(DecodeBatch(f[2]).events, std::vector<KvEvent>{Stored(1000 + seq)});
    }
    std::vector<zmq::message_t> end = Receive(dealer, milliseconds(5000));
    ASSERT_EQ(end.size(), 3u);
    EXPECT_EQ(SeqOf(end[1]), -1);
    EXPECT_EQ(end[2].size(), 0u);
  }
  EXPECT_EQ(pub->Metrics().replay_requests, 2u);
  EXPECT_EQ(pub->Metrics().replay_batches_sent, 3u + 4u);
}

TEST(KvEventPublisher, MalformedReplayRequestIsIgnored) {
  testing::TempDir dir;
  KvEventsOptions options = IpcOptions(dir);
  options.replay_endpoint = "ipc://" + (dir.path() / "replay.sock").string();
  ASSERT_OK_AND_ASSIGN(auto pub, KvEventPublisher::Open(options));
  PublishOneBatch(*pub, {Stored(7)});

  zmq::context_t ctx;
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.connect(pub->replay_endpoint());
  dealer.send(zmq::str_buffer("no delimiter"));  // (identity, frame): 2 frames
  EXPECT_TRUE(Receive(dealer, milliseconds(300)).empty());
  // The publisher goes on answering well-formed requests.
  dealer.send(zmq::str_buffer(""), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(SeqBytes(0)));
  std::vector<zmq::message_t> f = Receive(dealer, milliseconds(5000));
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(SeqOf(f[1]), 0);
  EXPECT_EQ(SeqOf(Receive(dealer, milliseconds(5000)).at(1)), -1);
  EXPECT_EQ(pub->Metrics().replay_requests, 1u);
}

TEST(KvEventPublisher, FullQueueDropsAndCountsWithoutBlocking) {
  testing::TempDir dir;
  KvEventsOptions options = IpcOptions(dir);
  options.max_queue_size = 4;
  std::latch entered(1), release(1);
  std::atomic<bool> held{false};
  options.before_take_for_test = [&] {
    if (held.exchange(true)) return;
    entered.count_down();
    release.wait();
  };
  ASSERT_OK_AND_ASSIGN(auto pub, KvEventPublisher::Open(options));
  ASSERT_EQ(pub->Publish(Stored(1)), 1u);
  entered.wait();  // the thread is held: nothing leaves the queue now

  const auto t0 = Clock::now();
  EXPECT_EQ(pub->Publish({Stored(2), Stored(3), Stored(4), Stored(5), Stored(6)}), 3u);
  EXPECT_EQ(pub->Publish(Stored(7)), 0u);
  // Only a proof that Publish did not wait for the held thread.
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  KvEventMetrics m = pub->Metrics();
  EXPECT_EQ(m.events_dropped, 3u);
  EXPECT_EQ(m.queue_depth, 4u);
  EXPECT_EQ(m.events_published, 0u);

  release.count_down();
  ASSERT_TRUE(Eventually([&] { return pub->Metrics().events_published == 4; }));
  EXPECT_EQ(pub->Metrics().queue_depth, 0u);
}

TEST(KvEventPublisher, CloseSendsWhatIsQueuedThenDropsLaterPublishes) {
  testing::TempDir dir;
  KvEventsOptions options = IpcOptions(dir);
  options.shutdown_drain_ms = milliseconds(30000);  // a loaded machine must not drop here
  ASSERT_OK_AND_ASSIGN(auto pub, KvEventPublisher::Open(options));
  std::vector<KvEvent> burst;
  for (uint64_t i = 0; i < 3000; ++i) burst.push_back(Stored(i + 1));
  ASSERT_EQ(pub->Publish(std::move(burst)), 3000u);
  pub->Close();
  EXPECT_EQ(pub->Metrics().events_published, 3000u);
  EXPECT_GE(pub->Metrics().batches_published, 3u);  // at most 1024 events a batch
  EXPECT_EQ(pub->Publish(Stored(1)), 0u);
  EXPECT_EQ(pub->Metrics().events_dropped, 1u);
  pub->Close();  // idempotent
}

TEST(KvEventPublisher, CloseReturnsPromptlyWithAnAbsentOrStalledSubscriber) {
  // Connected PUB to a port nobody listens on; then a bound PUB whose only
  // subscriber never reads and whose high-water mark is 1.
  testing::TempDir dir;
  KvEventsOptions absent;
  absent.endpoint = "tcp://127.0.0.1:9";  // discard port: nothing listens
  KvEventsOptions stalled = IpcOptions(dir);
  stalled.hwm = 1;
  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "");
  sub.set(zmq::sockopt::rcvhwm, 1);
  for (const KvEventsOptions& options : {absent, stalled}) {
    ASSERT_OK_AND_ASSIGN(auto pub, KvEventPublisher::Open(options));
    if (options.endpoint == stalled.endpoint) sub.connect(pub->pub_endpoint());
    for (uint64_t i = 0; i < 200; ++i) {
      std::vector<KvEvent> batch(50, KvEvent{Stored(i + 1)});
      static_cast<void>(pub->Publish(std::move(batch)));
    }
    const auto t0 = Clock::now();
    pub->Close();
    // The drain takes at most ~1 s; this bound only catches a hang.
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5)) << options.endpoint;
    const KvEventMetrics m = pub->Metrics();
    EXPECT_EQ(m.events_published + m.events_dropped, 200u * 50u) << options.endpoint;
  }
}

TEST(KvEventPublisher, BadEndpointsFailOpenNamingTheKey) {
  const char* bad[] = {"tcp://127.0.0.1:notaport", "bogus://somewhere", "", "tcp://no-port-here",
                       "tcp://*:notaport"};
  for (const char* endpoint : bad) {
    KvEventsOptions o;
    o.endpoint = endpoint;
    auto r = KvEventPublisher::Open(o);
    ASSERT_FALSE(r.ok()) << endpoint;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().sys_errno(), 0);  // EINVAL, EPROTONOSUPPORT: the reason
    EXPECT_NE(r.status().message().find("kv_events_config.endpoint"), std::string::npos)
        << r.status().ToString();
    EXPECT_NE(r.status().message().find("'" + std::string(endpoint) + "'"), std::string::npos)
        << r.status().ToString();
  }
  KvEventsOptions o;
  o.endpoint = "tcp://127.0.0.1:*";
  o.replay_endpoint = "nonsense";
  auto r = KvEventPublisher::Open(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("kv_events_config.replay_endpoint: cannot bind 'nonsense'"),
            std::string::npos)
      << r.status().ToString();
}

// libzmq itself takes these: it wraps a port modulo 2^16 (tcp://*:99999
// binds 34463) and connects to a host that does not resolve, or to none,
// retrying for ever.
TEST(KvEventPublisher, PortsOutOfRangeAndHostsThatDoNotResolveFailOpen) {
  std::vector<std::pair<const char*, const char*>> bad = {
      {"tcp://*:99999", "port '99999' is not 1-65535"}, {"tcp://*:70000", "port '70000'"},
      {"tcp://*:-1", "port '-1'"},                      {"tcp://127.0.0.1:0", "port '0' is not 1-65535"},
      {"tcp://:5557", "no host to connect to"},         {"tcp://127.0.0.1:65536", "port '65536'"}};
  // Only where the resolver says so for certain (a machine without a
  // reachable nameserver answers "try again", which is taken: endpoint_check_test).
  if (testing::ResolverSaysNoSuchHost("no-such-host.invalid")) {
    bad.emplace_back("tcp://no-such-host.invalid:5557", "does not resolve");
  }
  for (const auto& [endpoint, why] : bad) {
    KvEventsOptions o;
    o.endpoint = endpoint;
    auto r = KvEventPublisher::Open(o);
    ASSERT_FALSE(r.ok()) << endpoint;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << endpoint;
    EXPECT_NE(r.status().message().find(std::string("kv_events_config.endpoint: '") + endpoint + "'"),
              std::string::npos)
        << r.status().ToString();
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().ToString();
  }
  KvEventsOptions replay;
  replay.endpoint = "tcp://127.0.0.1:*";
  replay.replay_endpoint = "tcp://*:65536";
  auto r = KvEventPublisher::Open(replay);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("kv_events_config.replay_endpoint: 'tcp://*:65536'"), std::string::npos)
      << r.status().ToString();
  // The edges that are fine: the highest port, and a name that resolves.
  for (const char* good : {"tcp://127.0.0.1:65535", "tcp://localhost:65534"}) {
    KvEventsOptions o;
    o.endpoint = good;
    EXPECT_TRUE(KvEventPublisher::Open(o).ok()) << good;
  }
}

TEST(KvEventPublisher, AddressInUseFailsOpenNamingTheKey) {
  KvEventsOptions first;
  first.endpoint = "tcp://*:*";  // a free port, chosen by the system
  ASSERT_OK_AND_ASSIGN(auto holder, KvEventPublisher::Open(first));
  const std::string bound = holder->pub_endpoint();  // tcp://0.0.0.0:<port>
  const std::string busy = "tcp://*:" + bound.substr(bound.rfind(':') + 1);

  KvEventsOptions second;
  second.endpoint = busy;
  auto r = KvEventPublisher::Open(second);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().sys_errno(), EADDRINUSE);
  EXPECT_NE(r.status().message().find("kv_events_config.endpoint: cannot bind '" + busy + "'"),
            std::string::npos)
      << r.status().ToString();

  KvEventsOptions replay;
  replay.endpoint = "tcp://127.0.0.1:*";
  replay.replay_endpoint = busy;
  r = KvEventPublisher::Open(replay);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("kv_events_config.replay_endpoint"), std::string::npos)
      << r.status().ToString();
}

TEST(KvEventPublisher, OptionsOutOfRangeFailOpenNamingTheKey) {
  struct Case {
    void (*set)(KvEventsOptions&);
    const char* key;
  };
  const Case cases[] = {
      {[](KvEventsOptions& o) { o.buffer_steps = 0; }, "kv_events_config.buffer_steps: must be >= 1"},
      {[](KvEventsOptions& o) { o.hwm = -1; }, "kv_events_config.hwm: must be >= 0"},
      {[](KvEventsOptions& o) { o.max_queue_size = 0; }, "kv_events_config.max_queue_size: must be >= 1"},
  };
  for (const Case& c : cases) {
    KvEventsOptions o;
    o.endpoint = "tcp://127.0.0.1:*";
    c.set(o);
    auto r = KvEventPublisher::Open(o);
    ASSERT_FALSE(r.ok()) << c.key;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.key), std::string::npos) << r.status().ToString();
  }
}

}  // namespace
}  // namespace kvtier::internal
