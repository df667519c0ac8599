// The watch loop of `kvtier gc --watch` (gc_watch.h): a lease thread ticks the
// collector lease; the main thread samples free space, runs passes while it
// holds the lease, and writes the metrics file.
#include "cli/gc_watch.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstring>
#include <cstdio>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cli/metrics_server.h"
#include "cli/ops_command.h"
#include "format/layout_names.h"
#include "format/root_list.h"
#include "ops/collector_lease.h"
#include "ops/io_watch.h"
#include "util/dir_fd.h"
#include "util/name_escape.h"

namespace kvtier::internal {
namespace {

using Clock = std::chrono::steady_clock;

// The reasons a gc report gives (GcReport, Reclaimed::reason), each exported
// from the first write so that rate() works from zero.
constexpr const char* kReasons[] = {"capacity", "min_free", "orphaned_namespace", "stale_tmp", "corrupt"};

struct RootUsage {
  std::string root;
  bool ok = false;  // statvfs answered
  uint64_t size = 0, used = 0, avail = 0;  // bytes; avail: free to unprivileged writers
  uint64_t floor = 0, target = 0;          // min_free and its target, in bytes (0: none)
};

struct Metrics {
  std::map<std::string, std::pair<uint64_t, uint64_t>> reclaimed;  // reason -> files, bytes
  uint64_t failed = 0, passes = 0, pass_errors = 0, passes_stopped = 0, passes_min_free = 0;
  double last_pass_s = 0;
  int64_t last_pass_end_unix = 0;
  std::vector<RootUsage> roots;
  bool holding = false;
  uint64_t acquisitions = 0;
};

__attribute__((format(printf, 1, 2))) void Log(const char* fmt, ...) {
  char when[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::string line = std::string(when) + " kvtier gc --watch[" + std::to_string(getpid()) + "]: ";
  char text[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(text, sizeof text, fmt, args);
  va_end(args);
  line += EscapeUnprintable(text);  // roots and paths are any bytes: one line each, whatever they hold
  line += "\n";
  std::fputs(line.c_str(), stderr);  // one write per line: several threads log
  std::fflush(stderr);
}

std::string LabelValue(const std::string& s) {
  std::string out;
  for (const char c : s) out += c == '\\' ? "\\\\" : c == '"' ? "\\\"" : c == '\n' ? "\\n" : std::string(1, c);
  return out;
}

void Family(std::string* out, const char* name, const char* type, const char* help) {
  *out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void RootGauge(std::string* out, const Metrics& m, const char* name, const char* help, uint64_t RootUsage::*field) {
  Family(out, name, "gauge", help);
  for (const RootUsage& r : m.roots) {
    if (r.ok) *out += std::string(name) + "{root=\"" + LabelValue(r.root) + "\"} " + std::to_string(r.*field) + "\n";
  }
}

std::string MetricsText(const Metrics& m) {
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

// For node-exporter's textfile collector: a reader never sees half a file.
void WriteMetricsFile(const std::string& path, const std::string& text) {
  static std::string last_error;
  const std::string tmp = path + "." + std::to_string(getpid()) + ".tmp";
  UniqueFd fd(open(tmp.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644));
  bool ok = fd.valid() && write(fd.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size());
  fd = UniqueFd();
  ok = ok && rename(tmp.c_str(), path.c_str()) == 0;
  const std::string err = ok ? "" : std::strerror(errno);
  if (!ok) unlink(tmp.c_str());
  if (err != last_error && !err.empty()) Log("cannot write the metrics file %s: %s", path.c_str(), err.c_str());
  last_error = err;
}

void Publish(const GcWatchOptions& o, const Metrics& m, MetricsServer* server) {
  if (o.metrics_file.empty() && server == nullptr) return;
  std::string text = MetricsText(m);
  if (!o.metrics_file.empty()) WriteMetricsFile(o.metrics_file, text);
  if (server != nullptr) server->Set(std::move(text));
}

// statvfs under the io deadline: on a hung mount the watch exits 8 (its
// supervisor restarts it) rather than wait in the kernel forever.
bool StatFs(const std::string& root, uint64_t io_timeout_ms, struct statvfs* out) {
  auto v = std::make_shared<struct statvfs>();
  auto ok = std::make_shared<bool>(false);
  const Status s = RunWatched(io_timeout_ms, "", [root, v, ok] {
    IoScope io(root);
    *ok = statvfs(root.c_str(), v.get()) == 0;
  });
  if (!s.ok()) {
    Log("statvfs: %s", s.ToString().c_str());
    ExitHung();
  }
  *out = *v;
  return *ok;
}

void SampleRoots(const GcWatchOptions& o, std::vector<RootUsage>* roots) {
  for (RootUsage& r : *roots) {
    struct statvfs v {};
    r.ok = StatFs(r.root, o.gc.io_timeout_ms, &v);
    if (!r.ok) continue;
    r.size = uint64_t{v.f_blocks} * v.f_frsize;
    r.used = r.size - uint64_t{v.f_bfree} * v.f_frsize;
    r.avail = uint64_t{v.f_bavail} * v.f_frsize;
    r.floor = o.min_free ? o.min_free->Of(r.size) : 0;
    const uint64_t target = o.min_free_target ? o.min_free_target->Of(r.size) : r.floor + r.floor / 4;
    r.target = std::min(std::max(target, r.floor), r.size);
  }
}

bool BelowFloor(const std::vector<RootUsage>& roots) {
  for (const RootUsage& r : roots) {
    if (r.ok && r.avail < r.floor) return true;
  }
  return false;
}

// The roots must look like kvtier roots before anything is created there:
// empty, only our .kvtier, or holding a namespace or block directory.
int CheckRoot(const std::string& root, bool force) {
  UniqueFd fd;
  std::vector<DirEntry> entries;
  int err = OpenDirAt(AT_FDCWD, root, &fd);
  if (err == 0) err = ListDir(fd.get(), &entries);
  if (err != 0) return Log("%s: %s", root.c_str(), std::strerror(err)), 1;
  bool looks = force;
  for (const DirEntry& e : entries) {
    looks = looks || e.name == format::kMetaDirName || format::NamespaceDigest(e.name) || format::ParseBlockDirName(e.name);
  }
  if (looks || entries.empty()) return 0;
  Log("%s does not look like a kvtier/vLLM root_dir (no <model>_<digest> directories); pass --force to watch it anyway", root.c_str());
  return 2;
}

void Accumulate(const GcReport& r, Metrics* m) {
  for (const auto& [reason, t] : r.by_reason) {
    auto& [files, bytes] = m->reclaimed[reason];
    files += t.files;
    bytes += t.bytes;
  }
  m->failed += r.failed.size();
  m->passes_stopped += r.stopped ? 1 : 0;
}

// One gc pass as the lease holder; false when it failed.
bool RunPass(const GcWatchOptions& o, const std::atomic<bool>& stop, const std::shared_ptr<CollectorLease>& lease,
             bool min_free, Metrics* m) {
  GcOptions g = o.gc;
  if (o.min_free) {
    for (const RootUsage& r : m->roots) g.reclaim_bytes.push_back(r.ok && r.avail < r.floor ? r.target - r.avail : 0);
  }
  // Before each removal: the lease still valid, and the root path still naming its directory (L154).
  g.stop = [&stop, lease] { return stop.load() || !lease->MayCollect() || !lease->RootStill(); };
  const auto t0 = Clock::now();
  Result<GcReport> r = Gc(g);
  m->last_pass_s = std::chrono::duration<double>(Clock::now() - t0).count();
  m->last_pass_end_unix = std::time(nullptr);
  ++m->passes;
  m->passes_min_free += min_free ? 1 : 0;
  if (!r.ok()) {
    Log("pass failed: %s", r.status().ToString().c_str());
    if (r.status().code() == StatusCode::kTimedOut) ExitHung();
    ++m->pass_errors;
    return false;
  }
  Accumulate(*r, m);
  char line[256];
  std::snprintf(line, sizeof line, "pass %llu (%s): removed %zu files, %llu bytes, %zu failed, exit %d%s in %.2f s, %llu walks",
                static_cast<unsigned long long>(m->passes), min_free ? "min_free" : "interval", r->reclaimed.size(),
                static_cast<unsigned long long>(r->bytes_reclaimed), r->failed.size(), r->ExitCode(),
                r->stopped ? ", stopped" : "", m->last_pass_s, static_cast<unsigned long long>(r->walks));
  Log("%s%s", line,
      r->far_future_blocks == 0 ? ""
                                : (", " + std::to_string(r->far_future_blocks) +
                                   " blocks dated more than 300 s ahead of this host's clock, taken first (FORMAT.md L155)").c_str());
  return r->bytes_reclaimed > 0;
}

void SleepUnlessStopped(const std::atomic<bool>& stop, uint64_t ms) {
  const auto until = Clock::now() + std::chrono::milliseconds(ms);
  while (!stop && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

// The lease the watch competes for: the lease thread replaces it when the
// root path comes to name another directory; the main thread reads it.
class LeaseSlot {
 public:
  explicit LeaseSlot(std::shared_ptr<CollectorLease> lease) : lease_(std::move(lease)) {}
  std::shared_ptr<CollectorLease> Get() const {
    std::lock_guard lock(mu_);
    return lease_;
  }
  void Set(std::shared_ptr<CollectorLease> lease) {
    std::lock_guard lock(mu_);
    earlier_acquisitions_ += lease_->acquisitions();
    lease_ = std::move(lease);
  }
  uint64_t Acquisitions() const {
    std::lock_guard lock(mu_);
    return earlier_acquisitions_ + lease_->acquisitions();
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<CollectorLease> lease_;
  uint64_t earlier_acquisitions_ = 0;
};

// The root path names another directory (or none) than the lease's: the
// lease was given up (CollectorLease::Tick); a lease of the directory the
// path names now replaces it once that looks like a root. True when it did.
bool Rehome(const GcWatchOptions& o, const std::string& root, LeaseSlot* slot, bool* said) {
  if (!*said) {
    Log("the root path %s no longer names the directory whose collector lease this watch held or watched (moved, or "
        "removed): stopped removing there and gave its lease up; competing for the lease of the directory the path names",
        root.c_str());
    *said = true;
  }
  if (!LooksLikeRootDir(root, o.gc.force)) return false;  // gone, or not a root (yet): next tick
  Result<std::unique_ptr<CollectorLease>> opened = CollectorLease::Open(root, o.collector_ttl_ms);
  if (!opened.ok()) return false;
  slot->Set(std::move(*opened));
  Log("watching the collector lease %s of the directory %s names now", slot->Get()->lease_path().c_str(), root.c_str());
  *said = false;
  return true;
}

// Ticks the lease until `done`, logging each change of state, and what keeps
// it from the lease once per TTL (FORMAT.md L153).
void LeaseLoop(const GcWatchOptions& o, const std::string& root, LeaseSlot* slot, const std::atomic<bool>& done) {
  CollectorLease::State was = CollectorLease::State::kObserving;
  uint64_t problem_seq = 0;
  bool said_replaced = false;
  while (!done) {
    std::shared_ptr<CollectorLease> lease = slot->Get();
    const CollectorLease::State now = lease->Tick();
    const char* where = lease->lease_path().c_str();
    if (now != was && now == CollectorLease::State::kHolding) Log("holding the collector lease %s (token %s)", where, lease->token().c_str());
    if (now != was && now == CollectorLease::State::kSettling) Log("took the collector lease %s; settling", where);
    if (now != was && now == CollectorLease::State::kObserving && !lease->root_replaced()) Log("lost the collector lease %s; watching it", where);
    if (lease->problem_seq() != problem_seq) Log("%s", lease->problem().c_str());
    problem_seq = lease->problem_seq();
    was = now;
    if (lease->root_replaced() && Rehome(o, root, slot, &said_replaced)) {
      problem_seq = 0;
      was = CollectorLease::State::kObserving;
      continue;  // tick the new one at once
    }
    SleepUnlessStopped(done, lease->refresh_ms());
  }
}

// Samples, runs passes while holding the lease, publishes; until *stop.
void WatchLoop(const GcWatchOptions& o, const std::atomic<bool>& stop, const LeaseSlot& slot, MetricsServer* server,
               Metrics* m_out) {
  Metrics& m = *m_out;
  auto next_pass = Clock::now();
  bool stuck = false;  // the last pass ran below the floor and freed nothing: wait for the interval
  while (!stop) {
    SampleRoots(o, &m.roots);
    const bool below = BelowFloor(m.roots);
    std::shared_ptr<CollectorLease> lease = slot.Get();
    // MayCollect is false once the lease thread found the root path naming
    // another directory; each removal checks the path itself (RunPass).
    if (lease->MayCollect() && (Clock::now() >= next_pass || (below && !stuck))) {
      next_pass = Clock::now() + std::chrono::milliseconds(o.interval_ms);
      stuck = !RunPass(o, stop, lease, below, &m) && below;
      SampleRoots(o, &m.roots);
    }
    m.holding = lease->state() == CollectorLease::State::kHolding && !lease->root_replaced();
    m.acquisitions = slot.Acquisitions();
    Publish(o, m, server);
    SleepUnlessStopped(stop, o.check_ms);
  }
}

}  // namespace

uint64_t FreeSpace::Of(uint64_t fs_bytes) const {
  if (bytes) return std::min(*bytes, fs_bytes);
  return static_cast<uint64_t>(std::floor(static_cast<double>(fs_bytes) * percent / 100.0));
}

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

int RunGcWatch(const GcWatchOptions& o, const std::atomic<bool>& stop) {
  Result<std::vector<std::string>> roots = format::SplitRootDirs(o.gc.root, o.gc.root.find(',') != std::string::npos);
  if (!roots.ok()) return Log("%s", roots.status().ToString().c_str()), 2;
  for (const std::string& root : *roots) {
    if (const int rc = CheckRoot(root, o.gc.force)) return rc;
  }
  // L120: one lease per volume, on the first root of a list.
  Result<std::unique_ptr<CollectorLease>> opened = CollectorLease::Open(roots->front(), o.collector_ttl_ms);
  if (!opened.ok()) return Log("%s", opened.status().ToString().c_str()), 1;
  LeaseSlot slot(std::move(*opened));
  std::unique_ptr<MetricsServer> server;
  if (o.metrics_port) {
    Result<std::unique_ptr<MetricsServer>> started = MetricsServer::Start(o.metrics_address, *o.metrics_port);
    if (!started.ok()) return Log("--metrics-port: %s", started.status().ToString().c_str()), 1;
    server = std::move(*started);
    Log("serving /metrics on %s:%u", o.metrics_address.c_str(), static_cast<unsigned>(server->port()));
  }
  Metrics m;
  for (const std::string& root : *roots) m.roots.push_back({root});
  std::atomic<bool> lease_done{false};
  std::thread ticker([&] { LeaseLoop(o, roots->front(), &slot, lease_done); });
  Log("watching %s (token %s)", o.gc.root.c_str(), slot.Get()->token().c_str());
  WatchLoop(o, stop, slot, server.get(), &m);
  lease_done = true;
  ticker.join();
  const std::shared_ptr<CollectorLease> lease = slot.Get();
  lease->Release();
  m.holding = false;
  Publish(o, m, server.get());
  // Kept from the lease by something no collector will clear: say so in the exit status.
  if (lease->blocked() || lease->root_replaced()) {
    Log("stopped; it could not collect: %s",
        lease->root_replaced() ? "the root path names no directory that looks like a root" : lease->problem().c_str());
    return 4;
  }
  Log("stopped");
  return 0;
}

}  // namespace kvtier::internal
