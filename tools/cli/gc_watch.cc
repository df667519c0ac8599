// `kvtier gc --watch` (gc_watch.h): wiring of the library's Collector to
// stderr, a metrics port and the exit status.
#include "cli/gc_watch.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>

#include "cli/metrics_server.h"
#include "cli/ops_command.h"
#include "util/name_escape.h"

namespace kvtier::internal {
namespace {

void Log(std::string_view text) {
  char when[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::string line = std::string(when) + " kvtier gc --watch[" + std::to_string(getpid()) + "]: ";
  line += EscapeUnprintable(text);  // roots and paths are any bytes: one line each, whatever they hold
  line += "\n";
  std::fputs(line.c_str(), stderr);  // one write per line: several threads log
  std::fflush(stderr);
}

}  // namespace

Result<FreeSpace> ParseFreeSpace(std::string_view text) {
  FreeSpace out;
  if (!text.empty() && text.back() == '%') {
    const std::string number(text.substr(0, text.size() - 1));
    char* end = nullptr;
    out.percent = std::strtod(number.c_str(), &end);
    if (number.empty() || end != number.c_str() + number.size() || !(out.percent >= 0 && out.percent <= 100)) {
      return InvalidArgument("expected a percentage 0%..100% or a size (e.g. 10%, 50G), got \"" + std::string(text) + "\"");
    }
    return out;
  }
  KVTIER_ASSIGN_OR_RETURN(out.bytes, ParseSizeBytes(text));
  return out;
}

int RunGcWatch(GcWatchOptions o, const std::atomic<bool>& stop) {
  struct OnEnd {
    std::function<void()> f;
    ~OnEnd() {
      if (f) f();
    }
  } on_end{o.on_end};  // every way out; ExitHung's below calls it first
  auto server = std::make_shared<std::unique_ptr<MetricsServer>>();
  o.collector.log = &Log;
  o.collector.on_metrics = [server](const std::string& text) {
    if (*server) (*server)->Set(text);
  };
  Result<std::unique_ptr<Collector>> collector = Collector::Open(std::move(o.collector));
  if (!collector.ok()) {
    const bool invalid = collector.status().code() == StatusCode::kInvalidArgument;
    Log(invalid ? collector.status().message() : collector.status().ToString());  // the latter with its errno
    return invalid ? 2 : 1;
  }
  if (o.metrics_port) {
    Result<std::unique_ptr<MetricsServer>> started = MetricsServer::Start(o.metrics_address, *o.metrics_port);
    if (!started.ok()) return Log("--metrics-port: " + started.status().ToString()), 1;
    *server = std::move(*started);
    Log("serving /metrics on " + o.metrics_address + ":" + std::to_string((*server)->port()));
  }
  const Status end = (*collector)->Run(stop);
  if (end.code() == StatusCode::kTimedOut) {
    if (on_end.f) on_end.f();
    ExitHung();  // said already; its stuck thread cannot be joined
  }
  return end.ok() ? 0 : 4;
}

}  // namespace kvtier::internal
