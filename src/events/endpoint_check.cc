#include "events/endpoint_check.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cerrno>

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

// A connect's host as libzmq will resolve it: "[v6]" without brackets.
std::string HostOf(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return std::string(host);
}

Status CheckResolves(std::string_view key, const std::string& endpoint, const std::string& host) {
  if (host.empty()) return Refused(key, endpoint, "no host to connect to");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (found != nullptr) freeaddrinfo(found);
  if (rc != 0) return Refused(key, endpoint, "host '" + host + "' does not resolve (" + gai_strerror(rc) + ")");
  return Status::Ok();
}

}  // namespace

Status CheckEndpoint(std::string_view key, const std::string& endpoint, bool bind) {
  if (!std::string_view(endpoint).starts_with(kTcp)) return Status::Ok();
  std::string_view rest = std::string_view(endpoint).substr(kTcp.size());
  // A connect may name its source first ("tcp://src;host:port").
  if (const size_t semi = rest.rfind(';'); !bind && semi != std::string_view::npos) rest = rest.substr(semi + 1);
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos) return Refused(key, endpoint, "no port (tcp://host:port)");
  const std::string_view port = rest.substr(colon + 1);
  if (!PortOk(port, bind)) {
    return Refused(key, endpoint, "port '" + std::string(port) + "' is not 1-65535" + (bind ? " or *" : ""));
  }
  if (bind) return Status::Ok();  // a wildcard, an address or an interface: libzmq's to judge
  return CheckResolves(key, endpoint, HostOf(rest.substr(0, colon)));
}

}  // namespace kvtier::internal
