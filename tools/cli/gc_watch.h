// `kvtier gc --watch`: gc as a long-running sidecar (docs/ops.md).
//
// Every interval, and sooner when a root's free space falls below its floor
// (statvfs, sampled every check period), the holder of the volume's collector
// lease (src/ops/collector_lease.h, FORMAT.md L120-L123) runs one gc pass over
// all roots: the one-shot gc's bounds (max_bytes/low_water, older_than, stale
// temp files, short blocks) plus the free-space floor, turned into a number of
// block bytes to free on each root (GcOptions::reclaim_bytes). The other
// watchers only watch the lease, and take it over when its holder dies.
// What it did and sees is exported as Prometheus text (docs/metrics.md).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "kvtier/ops.h"

namespace kvtier::internal {

// A free-space amount: a share of the file system's size, or bytes.
struct FreeSpace {
  double percent = 0;  // 0..100, used when bytes is empty
  std::optional<uint64_t> bytes;
  uint64_t Of(uint64_t fs_bytes) const;
};
// "10%", "12.5%", "50G", "1048576" -> a FreeSpace; kInvalidArgument otherwise.
Result<FreeSpace> ParseFreeSpace(std::string_view text);

struct GcWatchOptions {
  GcOptions gc;                   // what each pass enforces (root, bounds, keep, ...)
  uint64_t interval_ms = 60000;   // between full passes
  uint64_t check_ms = 2000;       // between statvfs samples (and metrics writes)
  std::optional<FreeSpace> min_free;         // a pass when a root's free space is below this ...
  std::optional<FreeSpace> min_free_target;  // ... frees blocks up to this (default: min_free + a quarter)
  uint64_t collector_ttl_ms = 30000;         // L122: a lease unchanged this long is taken over
  std::string metrics_file;                  // "" : none; written by temp file and rename
  std::optional<uint16_t> metrics_port;      // serve GET /metrics here (0: any free port, logged)
  std::string metrics_address = "127.0.0.1";  // ... on this IPv4 address
};

// Runs until *stop (exit 0), or a hung mount (exit 8, ExitHung). Logs one
// line per pass and per lease change to stderr, and what keeps it from the
// lease once per TTL (FORMAT.md L153). 1 when the lease directory cannot be
// made or the metrics port cannot be listened on, 2 for a root that does not
// look like one (without force); 4 when it stops while something other than
// a live collector keeps it from collecting (a non-lease it cannot move, a
// lease it cannot create, a root path that names no root any more).
// When the root path comes to name another directory it stops removing,
// gives up its lease and competes for the new directory's (logged once).
int RunGcWatch(const GcWatchOptions& options, const std::atomic<bool>& stop);

// Whether `root` may hold the volume's .kvtier (FORMAT.md L120): empty, or
// holding .kvtier, a namespace or a block directory, or `force`.
bool LooksLikeRootDir(const std::string& root, bool force);

}  // namespace kvtier::internal

namespace kvtier::internal {

class CollectorLease;

// A one-shot `kvtier gc` with a capacity bound and the volume's collector
// lease (FORMAT.md L124): it watches the lease from before its walk and
// takes it when absent or stale, so that the walk overlaps the wait; its
// capacity removals wait until it holds the lease, and are skipped when a
// live collector holds it. Temp files, orphaned namespaces and short blocks
// are removed either way (each is one unlink of a file still the inode
// judged: two collectors remove it once).
class OneShotLease : public std::enable_shared_from_this<OneShotLease> {
 public:
  // Starts a thread that opens and ticks the lease of the first root of
  // `o.root` (not created under a directory that does not look like a root:
  // Gc refuses it). Nothing here waits on the volume: on a hung mount the
  // thread is left behind and Gate answers at its deadline.
  static std::shared_ptr<OneShotLease> Start(const GcOptions& o, uint64_t ttl_ms);
  // Waits until the lease is held (""), or says why not: a live collector
  // holds it, it could not be taken within the TTL and a settle, or the
  // lease directory cannot be made. The first answer is every later one.
  std::string Gate();
  // Held once, and no longer (a takeover, or Finish): remove nothing more.
  bool Lost() const;
  // Whether Gate's answer was a failure to take the lease (it could not be
  // made or read, or not within its deadline), not another collector's
  // holding it: the bound went unenforced and nobody else enforces it.
  bool Failed();
  // Stops ticking and gives the lease up (if held), waiting at most 2 s.
  void Finish();

 private:
  OneShotLease() = default;
  void Tick(const std::string& first_root, bool force, uint64_t ttl_ms);

  std::shared_ptr<CollectorLease> lease_;  // set before phase_ becomes kTicking
  std::string where_, open_error_;         // set before phase_ leaves kStarting
  enum Phase { kStarting, kFailed, kTicking };
  std::atomic<int> phase_{kStarting};
  std::atomic<bool> gated_{false}, done_{false};
  int64_t deadline_ns_ = 0;
  std::mutex mu_;  // guards answer_, answered_, exited_
  std::condition_variable exited_cv_;
  bool answered_ = false, exited_ = false, other_collector_ = false;
  std::string answer_;
};

}  // namespace kvtier::internal
