// The accept loop and the one-request answers of MetricsServer (metrics_server.h).
#include "cli/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kvtier::internal {

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& address, uint16_t port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  if (inet_pton(AF_INET, address.c_str(), &sa.sin_addr) != 1) {
    return InvalidArgument("metrics address: expected an IPv4 address (e.g. 127.0.0.1, 0.0.0.0), got \"" + address + "\"");
  }
  const std::string where = address + ":" + std::to_string(port);
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoToStatus(errno, "socket for " + where);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(fd, 16) != 0) {
    const int err = errno;
    close(fd);
    return ErrnoToStatus(err, "listen on " + where);
  }
  socklen_t len = sizeof sa;
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  std::unique_ptr<MetricsServer> server(new MetricsServer(fd, ntohs(sa.sin_port)));
  server->thread_ = std::thread([s = server.get()] { s->Serve(); });
  return server;
}

MetricsServer::~MetricsServer() {
  stop_ = true;
  thread_.join();
  close(fd_);
}

void MetricsServer::Set(std::string text) {
  std::lock_guard lock(mu_);
  text_ = std::move(text);
}

void MetricsServer::Serve() {
  while (!stop_) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;  // wake up to see stop_
    const int client = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    Answer(client);
    close(client);
  }
}

// Reads the request line (at most 4 KiB, for at most 1 s) and answers it.
void MetricsServer::Answer(int client) {
  const timeval timeout{1, 0};
  setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  std::string request;
  char buf[1024];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < 4096) {
    const ssize_t n = recv(client, buf, sizeof buf, 0);
    if (n <= 0) break;
    request.append(buf, static_cast<size_t>(n));
  }
  const bool metrics = request.rfind("GET /metrics ", 0) == 0 || request.rfind("GET /metrics?", 0) == 0;
  std::string body, status = "404 Not Found", type = "text/plain";
  if (metrics) {
    std::lock_guard lock(mu_);
    body = text_;
    status = "200 OK";
    type = "text/plain; version=0.0.4; charset=utf-8";
  }
  const std::string answer = "HTTP/1.1 " + status + "\r\nContent-Type: " + type + "\r\nContent-Length: " +
                             std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  for (size_t at = 0; at < answer.size();) {
    const ssize_t n = send(client, answer.data() + at, answer.size() - at, MSG_NOSIGNAL);
    if (n <= 0) return;
    at += static_cast<size_t>(n);
  }
}

}  // namespace kvtier::internal
