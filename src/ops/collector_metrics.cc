// The watch collector's metrics (ops/collector_metrics.h).
#include "ops/collector_metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/dir_fd.h"

namespace kvtier::internal {
namespace {

// The reasons a gc report gives (GcReport, Reclaimed::reason), each exported
// from the first write so that rate() works from zero.
constexpr const char* kReasons[] = {"capacity", "min_free", "orphaned_namespace", "stale_tmp", "corrupt"};

std::string LabelValue(const std::string& s) {
  std::string out;
  for (const char c : s) out += c == '\\' ? "\\\\" : c == '"' ? "\\\"" : c == '\n' ? "\\n" : std::string(1, c);
  return out;
}

void Family(std::string* out, const char* name, const char* type, const char* help) {
  *out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void RootGauge(std::string* out, const CollectorMetrics& m, const char* name, const char* help, uint64_t RootUsage::*field) {
  Family(out, name, "gauge", help);
  for (const RootUsage& r : m.roots) {
    if (r.ok) *out += std::string(name) + "{root=\"" + LabelValue(r.root) + "\"} " + std::to_string(r.*field) + "\n";
  }
}

}  // namespace

std::string MetricsText(const CollectorMetrics& m) {
  std::string out;
  auto one = [&](const char* name, const char* type, const char* help, const std::string& value) {
    Family(&out, name, type, help);
    out += std::string(name) + " " + value + "\n";
  };
  Family(&out, "kvtier_gc_reclaimed_bytes_total", "counter", "Bytes of files removed, by reason.");
  for (const char* reason : kReasons) {
    const auto it = m.reclaimed.find(reason);
    out += std::string("kvtier_gc_reclaimed_bytes_total{reason=\"") + reason + "\"} " +
           std::to_string(it == m.reclaimed.end() ? 0 : it->second.second) + "\n";
  }
  Family(&out, "kvtier_gc_reclaimed_files_total", "counter", "Files removed, by reason.");
  for (const char* reason : kReasons) {
    const auto it = m.reclaimed.find(reason);
    out += std::string("kvtier_gc_reclaimed_files_total{reason=\"") + reason + "\"} " +
           std::to_string(it == m.reclaimed.end() ? 0 : it->second.first) + "\n";
  }
  one("kvtier_gc_failed_removals_total", "counter", "Files selected but not removed (EACCES, EROFS, EIO...).", std::to_string(m.failed));
  one("kvtier_gc_passes_total", "counter", "Passes run (this process, as the lease holder).", std::to_string(m.passes));
  one("kvtier_gc_min_free_passes_total", "counter", "Passes started early: free space below --min-free.", std::to_string(m.passes_min_free));
  one("kvtier_gc_pass_errors_total", "counter", "Passes that failed (root unreadable...).", std::to_string(m.pass_errors));
  one("kvtier_gc_passes_stopped_total", "counter", "Passes cut short by a signal or a lost lease.", std::to_string(m.passes_stopped));
  one("kvtier_gc_last_pass_seconds", "gauge", "Wall time of the last pass.", std::to_string(m.last_pass_s));
  one("kvtier_gc_last_pass_end_timestamp_seconds", "gauge", "Unix time the last pass ended (0: none yet).",
      std::to_string(m.last_pass_end_unix));
  RootGauge(&out, m, "kvtier_gc_root_size_bytes", "Size of the root's file system (statvfs).", &RootUsage::size);
  RootGauge(&out, m, "kvtier_gc_root_used_bytes", "Bytes in use on the root's file system (statvfs).", &RootUsage::used);
  RootGauge(&out, m, "kvtier_gc_root_free_bytes", "Bytes free to unprivileged writers (statvfs f_bavail).", &RootUsage::avail);
  RootGauge(&out, m, "kvtier_gc_root_min_free_bytes", "The --min-free floor in bytes (0: none).", &RootUsage::floor);
  one("kvtier_gc_lease_held", "gauge", "1 while this process holds the volume's collector lease (FORMAT.md L120).",
      m.holding ? "1" : "0");
  one("kvtier_gc_lease_acquisitions_total", "counter", "Times this process took the collector lease.", std::to_string(m.acquisitions));
  return out;
}

std::string KvEventsMetricsText(const KvEventMetrics& m, uint64_t names_skipped) {
  std::string out;
  auto one = [&](const char* name, const char* type, const char* help, uint64_t value) {
    Family(&out, name, type, help);
    out += std::string(name) + " " + std::to_string(value) + "\n";
  };
  one("kvtier_kv_events_published_total", "counter", "KV events sent on the PUB socket.", m.events_published);
  one("kvtier_kv_events_dropped_total", "counter", "KV events dropped: the queue was full, or published after close.",
      m.events_dropped);
  one("kvtier_kv_events_batches_total", "counter", "KV event batches sent (the next sequence number).",
      m.batches_published);
  one("kvtier_kv_events_replay_requests_total", "counter", "Replay requests served.", m.replay_requests);
  one("kvtier_kv_events_replay_batches_total", "counter", "Batches re-sent to replay requests.", m.replay_batches_sent);
  one("kvtier_kv_events_queue_depth", "gauge", "KV events queued, not yet sent.", m.queue_depth);
  one("kvtier_kv_events_names_skipped_total", "counter",
      "Removed block files whose names are outside the layout's hex form: no event.", names_skipped);
  return out;
}

std::string WriteMetricsFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + "." + std::to_string(getpid()) + ".tmp";
  UniqueFd fd(open(tmp.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644));
  bool ok = fd.valid() && write(fd.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size());
  fd = UniqueFd();
  ok = ok && rename(tmp.c_str(), path.c_str()) == 0;
  const std::string err = ok ? "" : std::strerror(errno);
  if (!ok) unlink(tmp.c_str());
  return err;
}

void Accumulate(const GcReport& r, CollectorMetrics* m) {
  for (const auto& [reason, t] : r.by_reason) {
    auto& [files, bytes] = m->reclaimed[reason];
    files += t.files;
    bytes += t.bytes;
  }
  m->failed += r.failed.size();
  m->passes_stopped += r.stopped ? 1 : 0;
}

}  // namespace kvtier::internal
