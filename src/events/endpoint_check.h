// What kvtier checks of a ZeroMQ endpoint before handing it to libzmq, which
// accepts more than works: a TCP port out of range is wrapped modulo 2^16
// (tcp://*:99999 binds port 34463), and a connect to a host name that does
// not resolve, or to no host at all, succeeds and then retries for ever. Both
// are errors at the tier's (or tool's) open here, naming the config key.
#pragma once

#include <string>
#include <string_view>

#include "kvtier/status.h"

namespace kvtier::internal {

// `endpoint` as `key` names it; `bind`: it will be bound, else connected.
// tcp://: the port is 1-65535 (a bind may also say * or 0: any free port),
// and a connect's host is not empty and resolves (getaddrinfo, which may
// ask DNS: open is where waiting is allowed). Other transports are left to
// libzmq, which refuses what it cannot use.
[[nodiscard]] Status CheckEndpoint(std::string_view key, const std::string& endpoint, bool bind);

}  // namespace kvtier::internal
