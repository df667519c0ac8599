// Proves what kvtier checks of an events endpoint before libzmq sees it
// (events/endpoint_check.h): the resolver's answers are judged by kind (a
// name that certainly does not exist is refused, naming the key; one the
// resolver cannot answer for now, as a Kubernetes service name at pod start,
// is taken), an IPv6 address is checked as one (no DNS), and an IPv6 host
// gets the socket's IPv6 option, so a publisher
// binds [::1] or [::] and connects to [::1] for real (a SUB here receives
// its batch). Without the option libzmq refuses the bind ("No such device")
// and never reaches the connect. Skips the sockets where this machine has no
// IPv6 loopback.
#include <gtest/gtest.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "events/endpoint_check.h"
#include "events/kv_event_publisher.h"
#include "support/kv_event_sub.h"
#include "support/test_support.h"

namespace kvtier::internal {
namespace {

using std::chrono::milliseconds;

constexpr std::string_view kKey = "kv_events_config.endpoint";


TEST(EndpointCheck, TheResolversAnswersAreJudgedByKind) {
  const std::string ep = "tcp://svc.ns.svc.cluster.local:5557";
  for (int certain : {EAI_NONAME, EAI_FAIL, EAI_NODATA, EAI_ADDRFAMILY}) {
    Result<EndpointNeeds> r = JudgeResolution(kKey, ep, "svc.ns.svc.cluster.local", certain, false);
    ASSERT_FALSE(r.ok()) << certain;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("kv_events_config.endpoint: '" + ep + "': host 'svc.ns.svc.cluster.local' "
                                        "does not resolve"),
              std::string::npos)
        << r.status().ToString();
  }
  // Not resolvable now (no DNS answer yet): taken; libzmq connects once it
  // resolves, over IPv4 (the option would prefer an AAAA answer).
  for (int temporary : {EAI_AGAIN, EAI_SYSTEM, EAI_MEMORY}) {
    Result<EndpointNeeds> r = JudgeResolution(kKey, ep, "svc", temporary, false);
    ASSERT_TRUE(r.ok()) << temporary << ": " << r.status().ToString();
    EXPECT_FALSE(r->ipv6);
  }
  ASSERT_OK_AND_ASSIGN(EndpointNeeds v4, JudgeResolution(kKey, ep, "svc", 0, true));
  EXPECT_FALSE(v4.ipv6);
  ASSERT_OK_AND_ASSIGN(EndpointNeeds v6_only, JudgeResolution(kKey, ep, "svc", 0, false));
  EXPECT_TRUE(v6_only.ipv6);
}

TEST(EndpointCheck, AnIpv6HostNeedsTheIpv6Option) {
  const std::pair<const char*, bool> cases[] = {
      {"tcp://[::1]:5557", true}, {"tcp://[fe80::1%lo]:5557", true}, {"tcp://127.0.0.1:5557", false},
      {"tcp://localhost:5557", false}, {"ipc:///tmp/x", false}};
  for (const auto& [endpoint, ipv6] : cases) {
    ASSERT_OK_AND_ASSIGN(EndpointNeeds needs, CheckEndpoint(kKey, endpoint, false));
    EXPECT_EQ(needs.ipv6, ipv6) << endpoint;
  }
  // An address that is not one is refused, without asking DNS.
  Result<EndpointNeeds> bad = CheckEndpoint(kKey, "tcp://[fd00::zz]:5557", false);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'fd00::zz' is not an IPv6 address"), std::string::npos)
      << bad.status().ToString();
  const std::pair<const char*, bool> binds[] = {
      {"tcp://[::]:*", true}, {"tcp://[::1]:0", true}, {"tcp://*:*", false}, {"tcp://eth0:5557", false}};
  for (const auto& [endpoint, ipv6] : binds) {
    ASSERT_OK_AND_ASSIGN(EndpointNeeds needs, CheckEndpoint(kKey, endpoint, true));
    EXPECT_EQ(needs.ipv6, ipv6) << endpoint;
  }
}

bool HasIpv6Loopback() {
  const int fd = socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

// Publishes until `sub` receives a batch (ZeroMQ's slow joiner drops the
// first ones); false after 10 s.
bool SubscriberReceives(KvEventPublisher& pub, zmq::socket_t& sub) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    (void)pub.Publish(std::vector<KvEvent>{AllBlocksClearedEvent{}});
    if (!testing::Receive(sub, milliseconds(100)).empty()) return true;
  }
  return false;
}

TEST(EndpointCheck, APublisherBindsAndConnectsOverIpv6) {
  if (!HasIpv6Loopback()) GTEST_SKIP() << "no IPv6 loopback on this machine";
  zmq::context_t ctx;
  for (const char* bind_at : {"tcp://[::1]:*", "tcp://[::]:*"}) {
    KvEventsOptions o;
    o.endpoint = bind_at;
    ASSERT_OK_AND_ASSIGN(auto pub, KvEventPublisher::Open(o));
    const std::string bound = pub->pub_endpoint();  // tcp://[::1]:<port>, tcp://[::]:<port>
    zmq::socket_t sub(ctx, zmq::socket_type::sub);
    sub.set(zmq::sockopt::ipv6, true);
    sub.set(zmq::sockopt::subscribe, "");
    sub.connect("tcp://[::1]:" + bound.substr(bound.rfind(':') + 1));
    EXPECT_TRUE(SubscriberReceives(*pub, sub)) << bound;
  }
  // The publisher connects (a router's SUB binds), as kvtier does for a host.
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::ipv6, true);
  sub.set(zmq::sockopt::subscribe, "");
  sub.bind("tcp://[::1]:*");
  const std::string bound = sub.get(zmq::sockopt::last_endpoint);
  // "::" in an endpoint means bind (vLLM's rule): ::1 spelt out connects.
  const std::string at = "tcp://[0:0:0:0:0:0:0:1]:" + bound.substr(bound.rfind(':') + 1);
  KvEventsOptions o;
  o.endpoint = at;
  ASSERT_OK_AND_ASSIGN(auto pub, KvEventPublisher::Open(o));
  EXPECT_TRUE(SubscriberReceives(*pub, sub)) << at;
}

}  // namespace
}  // namespace kvtier::internal
