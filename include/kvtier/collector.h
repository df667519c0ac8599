// The volume's collector (`kvtier gc` with a capacity bound, and
// `kvtier gc --watch`) as library calls, so that an embedder (Python's
// kvtier.gc, a sidecar of one's own) follows the same collector lease as the
// CLI (layout-spec/FORMAT.md L120-L124, L153, L154): of all the collectors
// of one volume, only the holder of <root>/.kvtier/gc.lease trims it for
// capacity.
//
// - CollectOnce: one gc run (ops.h's Gc) that, when it has a capacity bound,
//   takes the lease for its run, or skips the trim when another collector
//   is alive (L124).
// - Collector: the watch loop. Every interval, and sooner when a root's free
//   space falls below a floor (statvfs, sampled every check period), the
//   holder of the lease runs one gc pass over all roots: the bounds of its
//   GcOptions plus the free-space floor, turned into a number of block bytes
//   to free on each root (GcOptions::reclaim_bytes). The other collectors
//   only watch the lease, and take it over when its holder dies. What it did
//   and sees is kept as Prometheus text (docs/metrics.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "kvtier/export.h"
#include "kvtier/ops.h"
#include "kvtier/result.h"

namespace kvtier {

// L122's TTL: a lease unchanged this long is taken over. All collectors of
// one volume must use the same.
inline constexpr uint64_t kDefaultCollectorTtlMs = 30000;

struct CollectOnceOptions : GcOptions {
  uint64_t collector_ttl_ms = kDefaultCollectorTtlMs;  // > 0 when the lease is taken
  // Trim for capacity without the lease (one node, by hand): a plain Gc.
  bool ignore_lease = false;
};

// Whether CollectOnce takes the lease for these options: a capacity bound
// (max_bytes), not a dry run, not ignore_lease.
KVTIER_API bool CollectOnceTakesLease(const CollectOnceOptions& options);

// Gc(options), as a collector of the volume when CollectOnceTakesLease
// (FORMAT.md L124): from its start it watches, creates or takes over the
// lease of the first root, so that the walk overlaps the wait, and removes
// blocks for capacity only while it holds it (after its settle). When it has
// seen another collector alive (the lease refreshed, replaced or given up)
// before its first capacity removal, it removes nothing for capacity:
// GcReport::capacity_skipped says why, and ExitCode is unchanged (the other
// enforces the bound). When it cannot take the lease within TTL + 8R, or
// cannot make or read it, it removes nothing for capacity either,
// capacity_skipped names the lease and what kept it, and
// GcReport::capacity_lease_failed is set (ExitCode has 4: nobody enforced
// the bound). It gives the lease up before returning. Temp files, orphaned
// namespaces and short blocks are removed either way. options.stop and
// options.capacity_gate are asked too (after the lease's own checks).
// Errors: Gc's, checked before the lease is touched; kInvalidArgument for a
// collector_ttl_ms of 0 when the lease is taken.
KVTIER_API Result<GcReport> CollectOnce(const CollectOnceOptions& options);

// A free-space amount: a share of the file system's size, or bytes.
struct FreeSpace {
  double percent = 0;  // 0..100, used when bytes is empty
  std::optional<uint64_t> bytes;
  KVTIER_API uint64_t Of(uint64_t fs_bytes) const;
};

struct CollectorOptions {
  // What each pass enforces (root, bounds, keep, io_timeout_ms, ...). The
  // loop sets reclaim_bytes, stop and capacity_gate itself; dry_run is refused.
  GcOptions gc;
  uint64_t interval_ms = 60000;              // between full passes, > 0
  uint64_t check_ms = 2000;                  // between statvfs samples (and metrics writes), > 0
  std::optional<FreeSpace> min_free;         // a pass when a root's free space is below this ...
  std::optional<FreeSpace> min_free_target;  // ... frees blocks up to this (default: min_free + a quarter)
  uint64_t collector_ttl_ms = kDefaultCollectorTtlMs;  // > 0
  std::string metrics_file;  // "": none; else rewritten every check by temp file and rename
  // Receives each line the collector says (a pass, a lease change, what
  // keeps it from the lease once per TTL, FORMAT.md L153), raw: paths may
  // hold any bytes. Called from the collector's threads. Empty: kvtier's log
  // (include/kvtier/log.h, level info, unprintable bytes escaped).
  std::function<void(std::string_view line)> log;
  // Receives the Prometheus text after every check and once at the end,
  // from the thread that runs the loop. Empty: none.
  std::function<void(const std::string& text)> on_metrics;
  // Whole Prometheus families appended to the collector's own at every
  // write and in MetricsText(), from the thread asking (the CLI's
  // kvtier_kv_events_* with --events-endpoint, docs/metrics.md). Empty: none.
  std::function<std::string()> metrics_extra;
};

// A snapshot of what a collector did (the counters of its metrics).
struct CollectorStatus {
  bool running = false;  // its loop runs
  bool holding = false;  // it holds the volume's lease
  uint64_t passes = 0, passes_min_free = 0, pass_errors = 0, passes_stopped = 0;
  uint64_t files_reclaimed = 0, bytes_reclaimed = 0, failed_removals = 0;
  uint64_t lease_acquisitions = 0;
  double last_pass_s = 0;
  int64_t last_pass_end_unix = 0;  // 0: no pass yet
};

// The watch loop of one collector (`kvtier gc --watch`). Open checks and
// prepares; Run (on the caller's thread) or Start (on a thread of its own)
// runs it until stopped. Thread-safe: Stop, status and MetricsText from any
// thread.
class KVTIER_API Collector {
 public:
  // Checks the options and the roots and opens the lease directory of the
  // first root (takes nothing yet). kInvalidArgument: a bad option (naming
  // it), a bad list of roots, or a root that does not look like one (has
  // entries, none of them .kvtier, a namespace or a block directory) without
  // gc.force; otherwise the errno's status of a root that cannot be listed
  // or a lease directory that cannot be made.
  static Result<std::unique_ptr<Collector>> Open(CollectorOptions options);
  ~Collector();  // Stop and Wait
  Collector(const Collector&) = delete;
  Collector& operator=(const Collector&) = delete;

  // Runs the loop until `stop` becomes true or Stop is called; gives the
  // lease up at the end. Once per collector (kInvalidArgument again).
  // Ok: stopped. kTimedOut: a file-system call outlived gc.io_timeout_ms (a
  // hung mount): the loop ended at once, the stuck thread abandoned; the
  // lease thread gives the lease up once the mount answers it (a mount that
  // never does leaves the lease to go stale). kUnavailable: stopped while something other than
  // a live collector kept it from collecting (a non-lease it cannot move, a
  // lease it cannot create, a root path that names no root any more). When
  // the root path comes to name another directory it stops removing, gives
  // up its lease and competes for the new directory's (said once). After
  // kTimedOut the abandoned pass may still read `stop` until the mount
  // answers: let it outlive the collector (a signal handler's global does).
  Status Run(const std::atomic<bool>& stop);
  // Run on a thread of its own (kInvalidArgument if it ran already).
  Status Start();
  void Stop();
  // After Start: waits until the loop ends (call it from one thread); Run's
  // status (Ok when it never started).
  Status Wait();
  CollectorStatus status() const;
  std::string MetricsText() const;

  struct State;

 private:
  explicit Collector(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace kvtier
