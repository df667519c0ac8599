// CollectOnce (kvtier/collector.h): a gc run that holds the volume's
// collector lease for its capacity trim (FORMAT.md L124), and the lease's
// one-shot holder, OneShotLease (ops/one_shot_lease.h).
#include <fcntl.h>

#include <chrono>
#include <thread>

#include "format/layout_names.h"
#include "format/root_list.h"
#include "kvtier/collector.h"
#include "ops/collector_lease.h"
#include "ops/one_shot_lease.h"
#include "ops/ops_internal.h"
#include "util/dir_fd.h"

namespace kvtier::internal {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

// L120: .kvtier is made only where the root looks like one.
Result<bool> RootLooksLikeOne(const std::string& root, bool force) {
  UniqueFd fd;
  std::vector<DirEntry> entries;
  int err = OpenDirAt(AT_FDCWD, root, &fd);
  if (err == 0) err = ListDir(fd.get(), &entries);
  if (err != 0) return ErrnoToStatus(err, root);
  bool looks = force || entries.empty();
  for (const DirEntry& e : entries) {
    looks = looks || e.name == format::kMetaDirName || format::NamespaceDigest(e.name) || format::ParseBlockDirName(e.name);
  }
  return looks;
}

bool LooksLikeRootDir(const std::string& root, bool force) {
  const Result<bool> looks = RootLooksLikeOne(root, force);
  return looks.ok() && *looks;
}

std::shared_ptr<OneShotLease> OneShotLease::Start(const GcOptions& o, uint64_t ttl_ms) {
  std::shared_ptr<OneShotLease> out(new OneShotLease());
  // Long enough to judge a dead holder's lease stale (TTL), take it over and settle (V + R, L122).
  out->deadline_ns_ = NowNs() + static_cast<int64_t>(ttl_ms + 8 * CollectorLease::RefreshMsFor(ttl_ms)) * 1000000;
  Result<std::vector<std::string>> roots = format::SplitRootDirs(o.root, o.root.find(',') != std::string::npos);
  if (!roots.ok()) {
    out->open_error_ = "not a root: no lease taken";  // Gc refuses it; this is never asked
    out->phase_ = kFailed;
    return out;
  }
  out->where_ = roots->front() + "/" + std::string(format::kMetaDirName) + "/" + std::string(format::kCollectorLeaseName);
  std::thread([self = out, root = roots->front(), force = o.force, ttl_ms] { self->Tick(root, force, ttl_ms); }).detach();
  return out;
}

// The lease's own thread: opens it, ticks it until Finish, gives it up.
void OneShotLease::Tick(const std::string& root, bool force, uint64_t ttl_ms) {
  Result<std::unique_ptr<CollectorLease>> opened =
      LooksLikeRootDir(root, force) ? CollectorLease::Open(root, ttl_ms) : Status(StatusCode::kInvalidArgument, "not a root");
  if (opened.ok()) {
    lease_ = std::move(*opened);
    phase_ = kTicking;
    while (!done_) {
      lease_->Tick();
      for (uint64_t slept = 0; slept < lease_->refresh_ms() && !done_; slept += 5) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    lease_->Release();
  } else {
    open_error_ = "cannot take the collector lease: " + opened.status().ToString();
    phase_ = kFailed;
  }
  std::lock_guard lock(mu_);
  exited_ = true;
  exited_cv_.notify_all();
}

std::string OneShotLease::Gate() {
  std::lock_guard lock(mu_);
  if (answered_) return answer_;
  answered_ = true;
  while (!done_) {
    const int phase = phase_.load();
    if (phase == kFailed) return answer_ = open_error_;
    // Checked before MayCollect: a collector seen alive during this run
    // (its lease refreshed, or given up after its trim) may have trimmed
    // what this run's walk measured, even if this one holds the lease now.
    if (phase == kTicking && lease_->changes_seen() > 0) {
      other_collector_ = true;
      return answer_ = "another collector is active on " + where_ + " (its lease changed during this run: kvtier gc --watch, "
                       "or another gc): the bound is its job; "
                       "--ignore-lease removes anyway";
    }
    if (phase == kTicking && lease_->MayCollect()) {
      gated_ = true;
      return answer_ = "";
    }
    if (NowNs() > deadline_ns_) {
      const std::string problem = phase == kTicking ? lease_->problem() : "";
      if (phase == kTicking && lease_->root_replaced()) {
        return answer_ = "the root path now names another directory than the one whose collector lease " + where_ +
                         " this run watched: nothing removed for capacity";
      }
      return answer_ = "could not take the collector lease " + where_ + " within its TTL and a settle" +
                       (problem.empty() ? "" : ": " + problem);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return answer_ = "stopped";
}

bool OneShotLease::Failed() {
  std::lock_guard lock(mu_);
  return answered_ && !answer_.empty() && !other_collector_ && answer_ != "stopped";
}

// Asked before each removal: the root path must still name the lease's directory (L154).
bool OneShotLease::Lost() const { return gated_ && (done_ || !lease_->MayCollect() || !lease_->RootStill()); }

void OneShotLease::Finish() {
  done_ = true;
  std::unique_lock lock(mu_);
  exited_cv_.wait_for(lock, std::chrono::seconds(2), [this] { return exited_ || phase_ == kFailed; });
}

}  // namespace kvtier::internal

namespace kvtier {

bool CollectOnceTakesLease(const CollectOnceOptions& o) { return o.max_bytes && !o.dry_run && !o.ignore_lease; }

Result<GcReport> CollectOnce(const CollectOnceOptions& options) {
  if (!CollectOnceTakesLease(options)) return Gc(options);
  // Refused before the lease is touched: a bad root makes no .kvtier anywhere.
  KVTIER_RETURN_IF_ERROR(internal::CheckGcOptions(options));
  if (options.collector_ttl_ms == 0) return InvalidArgument("collector_ttl_ms: must be more than 0");
  const std::shared_ptr<internal::OneShotLease> lease = internal::OneShotLease::Start(options, options.collector_ttl_ms);
  GcOptions o = options;
  o.capacity_gate = [lease, gate = options.capacity_gate] {
    std::string why = lease->Gate();
    return why.empty() && gate ? gate() : why;
  };
  // Each removal: the caller's stop (a SIGTERM finishes the removal under
  // way and gives the lease up, L122), and the lease still held (L122, L154).
  o.stop = [lease, stop = options.stop] { return (stop && stop()) || lease->Lost(); };
  // Given up on every way out, exceptions included (Finish is idempotent).
  const std::unique_ptr<internal::OneShotLease, void (*)(internal::OneShotLease*)> finish(
      lease.get(), [](internal::OneShotLease* l) { l->Finish(); });
  Result<GcReport> r = Gc(o);
  lease->Finish();
  if (r.ok()) r->capacity_lease_failed = lease->Failed();
  return r;
}

}  // namespace kvtier
