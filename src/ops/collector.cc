// The watch collector (kvtier/collector.h): a lease thread ticks the
// collector lease; the thread that runs the loop samples free space, runs
// passes while it holds the lease, and publishes the metrics.
#include "kvtier/collector.h"

#include <sys/statvfs.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <thread>
#include <vector>

#include "format/root_list.h"
#include "io/io_watch.h"
#include "ops/collector_lease.h"
#include "ops/collector_metrics.h"
#include "ops/one_shot_lease.h"
#include "ops/ops_internal.h"
#include "util/log.h"
#include "util/name_escape.h"

namespace kvtier {
namespace internal {

// The lease the watch competes for: the lease thread replaces it when the
// root path comes to name another directory; the loop reads it.
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

// The lease thread's end: the loop waits for it, except after a hung call
// (the thread may be stuck in the kernel on the same mount).
struct LeaseThread {
  std::atomic<bool> done{false};
  std::mutex mu;
  std::condition_variable cv;
  bool exited = false;  // guarded by mu
};

}  // namespace internal

// Shared by the collector, its loop and its lease thread: a thread left
// stuck on a hung mount keeps it alive.
struct Collector::State {
  State(CollectorOptions options, std::vector<std::string> r, std::shared_ptr<internal::CollectorLease> lease)
      : o(std::move(options)), roots(std::move(r)), slot(std::move(lease)) {}
  const CollectorOptions o;
  const std::vector<std::string> roots;
  internal::LeaseSlot slot;
  std::atomic<bool> own_stop{false}, ran{false}, running{false};
  mutable std::mutex mu;  // guards snapshot, metrics_error, runner, runner_status
  internal::CollectorMetrics snapshot;
  std::string metrics_error;
  std::thread runner;
  Status runner_status;
};

namespace internal {
namespace {

using Clock = std::chrono::steady_clock;
using State = Collector::State;

void Say(const State& s, const std::string& line) {
  if (s.o.log) return s.o.log(line);
  Log(LogLevel::kInfo, "gc collector: " + EscapeUnprintable(line));
}

void Publish(State& s, const CollectorMetrics& m) {
  std::string text = MetricsText(m) + (s.o.metrics_extra ? s.o.metrics_extra() : "");
  std::string err = s.o.metrics_file.empty() ? "" : WriteMetricsFile(s.o.metrics_file, text);
  bool say = false;
  {
    std::lock_guard lock(s.mu);
    s.snapshot = m;
    say = err != s.metrics_error && !err.empty();
    s.metrics_error = err;
  }
  if (say) Say(s, "cannot write the metrics file " + s.o.metrics_file + ": " + err);
  if (s.o.on_metrics) s.o.on_metrics(text);
}

// statvfs under the io deadline: on a hung mount the loop ends (kTimedOut)
// rather than wait in the kernel forever.
Status StatFs(const State& s, const std::string& root, struct statvfs* out, bool* ok) {
  auto v = std::make_shared<struct statvfs>();
  auto answered = std::make_shared<bool>(false);
  const Status st = RunWatched(s.o.gc.io_timeout_ms, "", [root, v, answered] {
    IoScope io(root);
    *answered = statvfs(root.c_str(), v.get()) == 0;
  });
  if (!st.ok()) {
    Say(s, "statvfs: " + st.ToString());
    return st;
  }
  *out = *v;
  *ok = *answered;
  return Status::Ok();
}

Status SampleRoots(const State& s, std::vector<RootUsage>* roots) {
  for (RootUsage& r : *roots) {
    struct statvfs v {};
    KVTIER_RETURN_IF_ERROR(StatFs(s, r.root, &v, &r.ok));
    if (!r.ok) continue;
    r.size = uint64_t{v.f_blocks} * v.f_frsize;
    r.used = r.size - uint64_t{v.f_bfree} * v.f_frsize;
    r.avail = uint64_t{v.f_bavail} * v.f_frsize;
    r.floor = s.o.min_free ? s.o.min_free->Of(r.size) : 0;
    const uint64_t target = s.o.min_free_target ? s.o.min_free_target->Of(r.size) : r.floor + r.floor / 4;
    r.target = std::min(std::max(target, r.floor), r.size);
  }
  return Status::Ok();
}

bool BelowFloor(const std::vector<RootUsage>& roots) {
  for (const RootUsage& r : roots) {
    if (r.ok && r.avail < r.floor) return true;
  }
  return false;
}

std::string PassLine(const GcReport& r, const CollectorMetrics& m, bool min_free) {
  char line[256];
  std::snprintf(line, sizeof line, "pass %llu (%s): removed %zu files, %llu bytes, %zu failed, exit %d%s in %.2f s, %llu walks",
                static_cast<unsigned long long>(m.passes), min_free ? "min_free" : "interval", r.reclaimed.size(),
                static_cast<unsigned long long>(r.bytes_reclaimed), r.failed.size(), r.ExitCode(),
                r.stopped ? ", stopped" : "", m.last_pass_s, static_cast<unsigned long long>(r.walks));
  return line + (r.far_future_blocks == 0 ? ""
                                          : ", " + std::to_string(r.far_future_blocks) +
                                                " blocks dated more than 300 s ahead of this host's clock, taken first (FORMAT.md L155)");
}

// One gc pass as the lease holder: whether it freed anything, or kTimedOut.
// `stop` outlives an abandoned pass: it holds the state, not the loop's frame.
Result<bool> RunPass(State& s, const std::function<bool()>& stop, const std::shared_ptr<CollectorLease>& lease,
                     bool min_free, CollectorMetrics* m) {
  GcOptions g = s.o.gc;
  if (s.o.min_free) {
    for (const RootUsage& r : m->roots) g.reclaim_bytes.push_back(r.ok && r.avail < r.floor ? r.target - r.avail : 0);
  }
  // Before each removal: the lease still valid, and the root path still naming its directory (L154).
  g.stop = [stop, lease] { return stop() || !lease->MayCollect() || !lease->RootStill(); };
  g.capacity_gate = nullptr;
  const auto t0 = Clock::now();
  Result<GcReport> r = Gc(g);
  m->last_pass_s = std::chrono::duration<double>(Clock::now() - t0).count();
  m->last_pass_end_unix = std::time(nullptr);
  ++m->passes;
  m->passes_min_free += min_free ? 1 : 0;
  if (!r.ok()) {
    Say(s, "pass failed: " + r.status().ToString());
    if (r.status().code() == StatusCode::kTimedOut) return r.status();
    ++m->pass_errors;
    return false;
  }
  Accumulate(*r, m);
  Say(s, PassLine(*r, *m, min_free));
  return r->bytes_reclaimed > 0;
}

void SleepUnless(const std::function<bool()>& stop, uint64_t ms) {
  const auto until = Clock::now() + std::chrono::milliseconds(ms);
  while (!stop() && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

// The root path names another directory (or none) than the lease's: the
// lease was given up (CollectorLease::Tick); a lease of the directory the
// path names now replaces it once that looks like a root. True when it did.
bool Rehome(State& s, bool* said) {
  const std::string& root = s.roots.front();
  if (!*said) {
    Say(s, "the root path " + root + " no longer names the directory whose collector lease this watch held or watched "
           "(moved, or removed): stopped removing there and gave its lease up; competing for the lease of the directory "
           "the path names");
    *said = true;
  }
  if (!LooksLikeRootDir(root, s.o.gc.force)) return false;  // gone, or not a root (yet): next tick
  Result<std::unique_ptr<CollectorLease>> opened = CollectorLease::Open(root, s.o.collector_ttl_ms);
  if (!opened.ok()) return false;
  s.slot.Set(std::move(*opened));
  Say(s, "watching the collector lease " + s.slot.Get()->lease_path() + " of the directory " + root + " names now");
  *said = false;
  return true;
}

// Says each change of the lease's state, and what keeps it from the lease
// once per TTL (FORMAT.md L153).
void SayChange(const State& s, const CollectorLease& lease, CollectorLease::State was, CollectorLease::State now) {
  const std::string& where = lease.lease_path();
  if (now != was && now == CollectorLease::State::kHolding) Say(s, "holding the collector lease " + where + " (token " + lease.token() + ")");
  if (now != was && now == CollectorLease::State::kSettling) Say(s, "took the collector lease " + where + "; settling");
  if (now != was && now == CollectorLease::State::kObserving && !lease.root_replaced()) Say(s, "lost the collector lease " + where + "; watching it");
}

// What a standing-by watch said last: the holder, and when to say it again.
struct Standby {
  std::string holder;
  Clock::time_point again{};
};

// A watch behind another collector's lease removes nothing: it says so at
// once, naming the holder as its lease's owner record does (FORMAT.md L195),
// and again every --interval (where a holder says its pass) while it lasts.
void SayStandby(const State& s, const CollectorLease& lease, Standby* said) {
  std::string holder = lease.OtherHolder();
  const auto now = Clock::now();
  if (holder.empty()) {
    said->holder.clear();  // holding, or no lease there: a holder seen later is news
    return;
  }
  if (holder == said->holder && now < said->again) return;
  Say(s, std::string(holder == said->holder ? "still standing by" : "standing by") + ": the collector lease " +
             lease.lease_path() + " is held by " + holder + "; this watch removes nothing until that lease is given up " +
             "or goes unrefreshed for the collector TTL (" + std::to_string(s.o.collector_ttl_ms) + " ms), then takes it over");
  said->holder = std::move(holder);
  said->again = now + std::chrono::milliseconds(s.o.interval_ms);
}

// Ticks the lease until `t.done`.
void LeaseLoop(State& s, LeaseThread& t) {
  CollectorLease::State was = CollectorLease::State::kObserving;
  uint64_t problem_seq = 0;
  bool said_replaced = false;
  Standby standby;
  const std::function<bool()> done = [&t] { return t.done.load(); };
  while (!t.done) {
    std::shared_ptr<CollectorLease> lease = s.slot.Get();
    const CollectorLease::State now = lease->Tick();
    if (t.done) break;  // the loop has ended: say nothing more
    SayChange(s, *lease, was, now);
    if (lease->problem_seq() != problem_seq) Say(s, lease->problem());
    problem_seq = lease->problem_seq();
    SayStandby(s, *lease, &standby);
    was = now;
    if (lease->root_replaced() && Rehome(s, &said_replaced)) {
      problem_seq = 0;
      was = CollectorLease::State::kObserving;
      continue;  // tick the new one at once
    }
    SleepUnless(done, lease->refresh_ms());
  }
}

// Samples, runs passes while holding the lease, publishes; until `stop`.
Status WatchLoop(State& s, const std::function<bool()>& stop, CollectorMetrics* m) {
  auto next_pass = Clock::now();
  bool stuck = false;  // the last pass ran below the floor and freed nothing: wait for the interval
  while (!stop()) {
    KVTIER_RETURN_IF_ERROR(SampleRoots(s, &m->roots));
    const bool below = BelowFloor(m->roots);
    std::shared_ptr<CollectorLease> lease = s.slot.Get();
    // MayCollect is false once the lease thread found the root path naming
    // another directory; each removal checks the path itself (RunPass).
    if (lease->MayCollect() && (Clock::now() >= next_pass || (below && !stuck))) {
      next_pass = Clock::now() + std::chrono::milliseconds(s.o.interval_ms);
      KVTIER_ASSIGN_OR_RETURN(const bool freed, RunPass(s, stop, lease, below, m));
      stuck = !freed && below;
      KVTIER_RETURN_IF_ERROR(SampleRoots(s, &m->roots));
    }
    m->holding = lease->state() == CollectorLease::State::kHolding && !lease->root_replaced();
    m->acquisitions = s.slot.Acquisitions();
    Publish(s, *m);
    SleepUnless(stop, s.o.check_ms);
  }
  return Status::Ok();
}

// The lease thread holds the state: after a hung call it may outlive the loop.
// It gives the lease up as it leaves, however the loop ended: after a call
// that outlived io_timeout_ms the loop returns at once, and only this thread
// may wait on the mount (a slow call, once answered, frees the lease then).
std::shared_ptr<LeaseThread> StartLeaseThread(const std::shared_ptr<State>& state) {
  auto ticker = std::make_shared<LeaseThread>();
  std::thread([st = state, ticker] {
    LeaseLoop(*st, *ticker);
    st->slot.Get()->Release();
    std::lock_guard lock(ticker->mu);
    ticker->exited = true;
    ticker->cv.notify_all();
  }).detach();
  return ticker;
}

// The loop's end (its lease thread gone, the lease given up): publishes, and
// says whether something no collector will clear kept it from the lease.
Status GiveUp(State& s, CollectorMetrics* m) {
  const std::shared_ptr<CollectorLease> lease = s.slot.Get();
  m->holding = false;
  Publish(s, *m);
  s.running = false;
  if (lease->blocked() || lease->root_replaced()) {
    const std::string why = "it could not collect: " + (lease->root_replaced()
                                                            ? std::string("the root path names no directory that looks like a root")
                                                            : lease->problem());
    Say(s, "stopped; " + why);
    return Status(StatusCode::kUnavailable, why);
  }
  Say(s, "stopped");
  return Status::Ok();
}

Status CheckCollectorOptions(const CollectorOptions& o) {
  KVTIER_RETURN_IF_ERROR(CheckScanOptions(o.gc));
  if (o.gc.dry_run) return InvalidArgument("gc.dry_run: a collector removes (not with a watch)");
  const std::pair<uint64_t, const char*> positive[] = {
      {o.interval_ms, "interval_ms"}, {o.check_ms, "check_ms"}, {o.collector_ttl_ms, "collector_ttl_ms"}};
  for (const auto& [v, name] : positive) {
    if (v == 0) return InvalidArgument(std::string(name) + ": must be more than 0");
  }
  for (const auto& [f, name] : {std::pair{&o.min_free, "min_free"}, std::pair{&o.min_free_target, "min_free_target"}}) {
    if (*f && !(*f)->bytes && !((*f)->percent >= 0 && (*f)->percent <= 100)) {
      return InvalidArgument(std::string(name) + ": a percentage must be 0..100");
    }
  }
  if (o.min_free_target && !o.min_free) return InvalidArgument("min_free_target: needs min_free");
  return Status::Ok();
}

}  // namespace
}  // namespace internal

uint64_t FreeSpace::Of(uint64_t fs_bytes) const {
  if (bytes) return std::min(*bytes, fs_bytes);
  return static_cast<uint64_t>(std::floor(static_cast<double>(fs_bytes) * percent / 100.0));
}

Result<std::unique_ptr<Collector>> Collector::Open(CollectorOptions o) {
  KVTIER_RETURN_IF_ERROR(internal::CheckCollectorOptions(o));
  KVTIER_ASSIGN_OR_RETURN(std::vector<std::string> roots, format::SplitRootDirs(o.gc.root, internal::IsRootList(o.gc.root)));
  for (const std::string& root : roots) {
    KVTIER_ASSIGN_OR_RETURN(const bool looks, internal::RootLooksLikeOne(root, o.gc.force));
    if (!looks) {
      return InvalidArgument(root + " does not look like a kvtier/vLLM root_dir (no <model>_<digest> directories); "
                                    "pass --force to watch it anyway");
    }
  }
  // L120: one lease per volume, on the first root of a list.
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<internal::CollectorLease> lease,
                          internal::CollectorLease::Open(roots.front(), o.collector_ttl_ms));
  auto state = std::make_shared<State>(std::move(o), std::move(roots), std::move(lease));
  for (const std::string& root : state->roots) state->snapshot.roots.push_back({root});
  return std::unique_ptr<Collector>(new Collector(std::move(state)));
}

Collector::Collector(std::shared_ptr<State> state) : state_(std::move(state)) {}

Collector::~Collector() {
  Stop();
  (void)Wait();
}

Status Collector::Run(const std::atomic<bool>& stop) {
  State& s = *state_;
  if (s.ran.exchange(true)) return InvalidArgument("Collector: runs once");
  s.running = true;
  const std::atomic<bool>* caller = &stop;
  const std::function<bool()> stopped = [st = state_, caller] { return st->own_stop.load() || caller->load(); };
  internal::CollectorMetrics m;
  {
    std::lock_guard lock(s.mu);
    m = s.snapshot;
  }
  const std::shared_ptr<internal::LeaseThread> ticker = internal::StartLeaseThread(state_);
  internal::Say(s, "watching " + s.o.gc.root + " (token " + s.slot.Get()->token() + ")");
  const Status end = internal::WatchLoop(s, stopped, &m);
  ticker->done = true;
  if (!end.ok()) {  // a hung mount: nothing more is asked of it, nor waited for
    s.running = false;
    return end;
  }
  {
    std::unique_lock lock(ticker->mu);
    ticker->cv.wait(lock, [&] { return ticker->exited; });
  }
  return internal::GiveUp(s, &m);
}

Status Collector::Start() {
  std::lock_guard lock(state_->mu);
  if (state_->ran || state_->runner.joinable()) return InvalidArgument("Collector: runs once");
  state_->running = true;  // from now: status() says so before the thread is scheduled
  // The thread holds the state (not this object): Stop and Wait reach it.
  state_->runner = std::thread([st = state_, self = this] {
    const Status end = self->Run(st->own_stop);
    std::lock_guard l(st->mu);
    st->runner_status = end;
  });
  return Status::Ok();
}

void Collector::Stop() { state_->own_stop = true; }

Status Collector::Wait() {
  std::thread runner;
  {
    std::lock_guard lock(state_->mu);
    runner = std::move(state_->runner);
  }
  if (runner.joinable()) runner.join();
  std::lock_guard lock(state_->mu);
  return state_->runner_status;
}

CollectorStatus Collector::status() const {
  internal::CollectorMetrics m;
  {
    std::lock_guard lock(state_->mu);
    m = state_->snapshot;
  }
  CollectorStatus out;
  out.running = state_->running;
  out.holding = m.holding;
  out.passes = m.passes;
  out.passes_min_free = m.passes_min_free;
  out.pass_errors = m.pass_errors;
  out.passes_stopped = m.passes_stopped;
  for (const auto& [reason, fb] : m.reclaimed) {
    out.files_reclaimed += fb.first;
    out.bytes_reclaimed += fb.second;
  }
  out.failed_removals = m.failed;
  out.lease_acquisitions = m.acquisitions;
  out.last_pass_s = m.last_pass_s;
  out.last_pass_end_unix = m.last_pass_end_unix;
  return out;
}

std::string Collector::MetricsText() const {
  std::string text;
  {
    std::lock_guard lock(state_->mu);
    text = internal::MetricsText(state_->snapshot);
  }
  return text + (state_->o.metrics_extra ? state_->o.metrics_extra() : "");
}

}  // namespace kvtier
