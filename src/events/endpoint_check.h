// What kvtier checks of a ZeroMQ endpoint before handing it to libzmq, which
// accepts more than works: a TCP port out of range is wrapped modulo 2^16
// (tcp://*:99999 binds port 34463), a connect to a host name that does not
// exist, or to no host at all, succeeds and then retries for ever, and an
// IPv6 address without the socket's ZMQ_IPV6 is refused on bind ("No such
// device") and never reached on connect. The first two are errors at the
// tier's (or tool's) open here, naming the config key; the last is what
// EndpointNeeds tells the socket to set.
#pragma once

#include <string>
#include <string_view>

#include "kvtier/result.h"
#include "kvtier/status.h"

namespace kvtier::internal {

// What a socket needs, besides the endpoint, to use it.
struct EndpointNeeds {
  bool ipv6 = false;  // ZMQ_IPV6: the host is an IPv6 address, or a name with IPv6 addresses only
};

// `endpoint` as `key` names it; `bind`: it will be bound, else connected.
// tcp://: the port is 1-65535 (a bind may also say * or 0: any free port),
// and a connect's host is not empty and exists (getaddrinfo, which may ask
// DNS: open is where waiting is allowed). A name the resolver cannot answer
// for now (EAI_AGAIN: a Kubernetes service not yet in DNS at pod start) is
// taken, with a warning: libzmq connects once it resolves (over IPv4: a
// service with IPv6 addresses only must resolve at open, or be given by
// address). An IPv6 address (a host with a colon) is checked as an address,
// without DNS (AI_NUMERICHOST): one that is not is refused. Other transports
// are left to libzmq, which refuses what it cannot use.
[[nodiscard]] Result<EndpointNeeds> CheckEndpoint(std::string_view key, const std::string& endpoint, bool bind);

// The verdict on a connect's host from getaddrinfo's answer (`rc`, and for
// rc 0 whether an IPv4 address came back): CheckEndpoint's rule, apart from
// the resolver so that every answer can be tested.
[[nodiscard]] Result<EndpointNeeds> JudgeResolution(std::string_view key, const std::string& endpoint,
                                                    const std::string& host, int rc, bool any_ipv4);

}  // namespace kvtier::internal
