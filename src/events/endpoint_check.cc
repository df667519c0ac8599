#include "events/endpoint_check.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cerrno>

#include "util/log.h"

namespace kvtier::internal {
namespace {

constexpr std::string_view kTcp = "tcp://";

// EINVAL as libzmq gives for what it refuses itself: the reason, for callers that show it.
Status Refused(std::string_view key, const std::string& endpoint, const std::string& why) {
  return Status(StatusCode::kInvalidArgument, std::string(key) + ": '" + endpoint + "': " + why, EINVAL);
}

// 1-65535 in decimal; a bind may also take any free port (* or 0).
bool PortOk(std::string_view port, bool bind) {
  if (bind && (port == "*" || port == "0")) return true;
  if (port.empty() || port.size() > 5) return false;
  if (!std::all_of(port.begin(), port.end(), [](unsigned char c) { return std::isdigit(c) != 0; })) return false;
  const int value = std::stoi(std::string(port));
  return value >= 1 && value <= 65535;
}

// A host as libzmq will resolve it: "[v6]" without brackets.
std::string HostOf(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return std::string(host);
}

// An IPv6 address ("::", "::1", "fe80::1%eth0"); a name or an IPv4 address has no colon.
bool IsIpv6Literal(const std::string& host) { return host.find(':') != std::string::npos; }

// getaddrinfo's answer for `host`, and whether an IPv4 address was in it.
// `numeric`: an address only, no DNS (AI_NUMERICHOST).
int Resolve(const std::string& host, bool numeric, bool* any_ipv4) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = numeric ? AI_NUMERICHOST : 0;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  *any_ipv4 = false;
  for (const addrinfo* a = rc == 0 ? found : nullptr; a != nullptr; a = a->ai_next) *any_ipv4 |= a->ai_family == AF_INET;
  if (found != nullptr) freeaddrinfo(found);
  return rc;
}

Result<EndpointNeeds> CheckResolves(std::string_view key, const std::string& endpoint, const std::string& host) {
  if (host.empty()) return Refused(key, endpoint, "no host to connect to");
  bool any_ipv4 = false;
  if (IsIpv6Literal(host)) {
    if (const int rc = Resolve(host, true, &any_ipv4); rc != 0) {
      return Refused(key, endpoint, "'" + host + "' is not an IPv6 address (" + gai_strerror(rc) + ")");
    }
    return EndpointNeeds{.ipv6 = true};
  }
  const int rc = Resolve(host, false, &any_ipv4);
  return JudgeResolution(key, endpoint, host, rc, any_ipv4);
}

}  // namespace

Result<EndpointNeeds> JudgeResolution(std::string_view key, const std::string& endpoint, const std::string& host,
                                      int rc, bool any_ipv4) {
  if (rc == 0) return EndpointNeeds{.ipv6 = !any_ipv4};
  // The resolver's certain answers that the name has no address.
  if (rc == EAI_NONAME || rc == EAI_FAIL || rc == EAI_NODATA || rc == EAI_ADDRFAMILY) {
    return Refused(key, endpoint, "host '" + host + "' does not resolve (" + gai_strerror(rc) + ")");
  }
  LogWarning(std::string(key) + ": '" + endpoint + "': host '" + host + "' cannot be resolved now (" +
             gai_strerror(rc) + "); taken: the events are sent once it resolves");
  // Over IPv4, as a name that resolves to both: with the option on, libzmq
  // would prefer an AAAA answer, which an IPv4-only network never reaches.
  return EndpointNeeds{};
}

Result<EndpointNeeds> CheckEndpoint(std::string_view key, const std::string& endpoint, bool bind) {
  if (!std::string_view(endpoint).starts_with(kTcp)) return EndpointNeeds{};
  std::string_view rest = std::string_view(endpoint).substr(kTcp.size());
  // A connect may name its source first ("tcp://src;host:port").
  if (const size_t semi = rest.rfind(';'); !bind && semi != std::string_view::npos) rest = rest.substr(semi + 1);
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos) return Refused(key, endpoint, "no port (tcp://host:port)");
  const std::string_view port = rest.substr(colon + 1);
  if (!PortOk(port, bind)) {
    return Refused(key, endpoint, "port '" + std::string(port) + "' is not 1-65535" + (bind ? " or *" : ""));
  }
  const std::string host = HostOf(rest.substr(0, colon));
  // A bind's wildcard, address or interface is libzmq's to judge, but for the IPv6 option.
  if (bind) return EndpointNeeds{.ipv6 = IsIpv6Literal(host)};
  return CheckResolves(key, endpoint, host);
}

}  // namespace kvtier::internal
