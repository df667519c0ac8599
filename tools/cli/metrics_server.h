// A tiny HTTP server for `kvtier gc --watch --metrics-port`: GET /metrics
// answers the latest Prometheus text, anything else 404. One thread, one
// connection at a time, each closed after its answer; a client gets at most
// 1 s to send its request. Enough for a Prometheus scrape, nothing more.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "kvtier/result.h"

namespace kvtier::internal {

class MetricsServer {
 public:
  // Listens on address:port (an IPv4 address; port 0 picks one). Errors:
  // kInvalidArgument for an address that does not parse, ErrnoToStatus of
  // bind or listen (EADDRINUSE, EACCES...) naming address:port.
  static Result<std::unique_ptr<MetricsServer>> Start(const std::string& address, uint16_t port);
  ~MetricsServer();  // stops the thread
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  void Set(std::string text);  // what the next GET /metrics answers
  uint16_t port() const { return port_; }

 private:
  MetricsServer(int fd, uint16_t port) : fd_(fd), port_(port) {}
  void Serve();
  void Answer(int client);

  int fd_;
  uint16_t port_;
  std::mutex mu_;
  std::string text_;  // guarded by mu_
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace kvtier::internal
