// SglangStore: SGLang's synchronous batch calls over one FsTier.
//
// Each call submits one job and waits for it on a condition variable: the
// tier's on_job_finished wakes the waiters, and whichever waiter holds the
// lock polls the tier and files every finished job under its id, so several
// threads (SGLang's prefetch, prefetch I/O and backup threads) each get
// their own job back. No I/O call times out on its own: a call waits until
// its job finishes, and the tier bounds that (io_timeout_ms, then the
// abandonment of fs_tier_engine.cc). Giving up earlier would be unsafe: a
// load's op may still copy into the caller's pieces, and a store's may
// still read them, until its job is returned. Clear touches no caller
// memory, so its walk runs on a thread of its own under a watch
// (ops/io_watch.h) and is abandoned on a hung mount.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "format/root_list.h"
#include "kvtier/sglang.h"
#include "ops/io_watch.h"
#include "sglang/sglang_clear.h"
#include "util/log.h"

namespace kvtier {
namespace {

// Failures are logged once per kind for the life of a store (SGLang calls
// every step; its threads must not flood the log).
enum class LogOnce : int { kBadPage, kLoadFailed, kStoreFailed, kLookupFailed, kSubmit, kCount };

}  // namespace

struct SglangStore::Rep {
  explicit Rep(SglangNamespace n) : ns(std::move(n)) {}

  SglangNamespace ns;
  std::optional<Namespace> stored;  // where the tier's files are: ns's, or its key's when sealed (L162)
  std::vector<std::string> roots;  // the tier's roots, for Clear
  uint32_t io_timeout_ms = 0;      // Clear's deadline per file-system call (0: none)
  std::unique_ptr<FsTier> tier;    // null after Close

  std::mutex mu;
  std::condition_variable cv;
  std::unordered_map<uint64_t, JobResult> finished;  // polled, not yet taken by their caller
  int calls = 0;        // calls using `tier` now
  bool closing = false;
  std::mutex close_mu;  // one Close at a time; the second returns once the first is done
  std::atomic<bool> logged[static_cast<int>(LogOnce::kCount)] = {};

  void Notify() {
    std::lock_guard lock(mu);
    cv.notify_all();
  }

  void WarnOnce(LogOnce kind, const std::string& message) {
    if (!logged[static_cast<int>(kind)].exchange(true)) {
      internal::LogWarning("sglang store " + ns.dir_name() + ": " + message + " (logged once)");
    }
  }

  // Marks a call in progress; false after Close began.
  bool Enter() {
    std::lock_guard lock(mu);
    if (closing) return false;
    ++calls;
    return true;
  }
  void Leave() {
    std::lock_guard lock(mu);
    if (--calls == 0) cv.notify_all();
  }

  // Waits for job `id` (the caller is inside Enter/Leave).
  std::vector<KeyResult> Wait(uint64_t id) {
    std::unique_lock lock(mu);
    for (;;) {
      std::vector<JobResult> polled;
      tier->PollFinished(&polled);  // takes only the tier's own lock, never calls back
      for (JobResult& r : polled) finished.emplace(r.job_id, std::move(r));
      const auto it = finished.find(id);
      if (it != finished.end()) {
        std::vector<KeyResult> keys = std::move(it->second.keys);
        finished.erase(it);
        return keys;
      }
      // Jobs filed for other callers: they may have been woken before the
      // filing and be waiting again.
      if (!polled.empty()) cv.notify_all();
      cv.wait(lock);
    }
  }

  // Enter / Leave for one call's scope.
  class Scope {
   public:
    explicit Scope(Rep* rep) : rep_(rep), entered_(rep->Enter()) {}
    ~Scope() {
      if (entered_) rep_->Leave();
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    bool entered() const { return entered_; }

   private:
    Rep* rep_;
    bool entered_;
  };

  // The keys and pages that can be submitted (pages of page_bytes), with
  // each one's index in the call; the others stay false.
  template <class Piece>
  struct Batch {
    std::vector<OffloadKey> keys;
    std::vector<std::vector<Piece>> pages;
    std::vector<size_t> at;
  };
  template <class Piece>
  Batch<Piece> GoodPages(std::span<const std::string_view> keys, std::span<const std::vector<Piece>> pages) {
    Batch<Piece> b;
    for (size_t i = 0; i < keys.size(); ++i) {
      uint64_t bytes = 0;
      for (const auto& p : pages[i]) bytes += p.size();
      if (bytes != ns.page_bytes()) {
        WarnOnce(LogOnce::kBadPage, "page of key \"" + std::string(keys[i]) + "\" is " + std::to_string(bytes) +
                                        " bytes in its pieces, a page is " + std::to_string(ns.page_bytes()) +
                                        ": not moved");
        continue;
      }
      b.keys.push_back(SglangNamespace::PageKey(keys[i]));
      b.pages.push_back(pages[i]);
      b.at.push_back(i);
    }
    return b;
  }

  // Logs the first failure of a kind, naming its key; true for success.
  bool Outcome(LogOnce kind, std::string_view key, const KeyResult& r, bool skipped_ok) {
    if (r.outcome == KeyOutcome::kOk || (skipped_ok && r.outcome == KeyOutcome::kSkippedExists)) return true;
    if (r.outcome != KeyOutcome::kMiss) {
      WarnOnce(kind, "key \"" + std::string(key) + "\": " + std::string(KeyOutcomeName(r.outcome)) + " (" +
                         r.status.ToString() + ")");
    }
    return false;
  }
};

SglangStore::SglangStore(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
SglangStore::~SglangStore() { Close(); }

Result<std::unique_ptr<SglangStore>> SglangStore::Open(const SglangStoreOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(SglangNamespace ns, SglangNamespace::Create(options.spec));
  const bool sharded = options.tier.path_sharding == PathSharding::kByBlockHash;
  std::vector<std::string> roots{options.tier.root_dir};
  if (sharded) {
    KVTIER_ASSIGN_OR_RETURN(roots, format::SplitRootDirs(options.tier.root_dir, true));
  }
  auto rep = std::make_unique<Rep>(std::move(ns));
  rep->roots = std::move(roots);
  rep->io_timeout_ms = options.tier.io_timeout_ms;
  FsTierOpenOptions o;
  o.tier = options.tier;
  o.prebuilt_ns = rep->ns.fs_namespace();
  o.row_bytes = rep->ns.page_bytes();
  o.registered_memory = options.registered_memory;
  Rep* raw = rep.get();
  o.on_job_finished = [raw] { raw->Notify(); };
  KVTIER_ASSIGN_OR_RETURN(rep->tier, FsTier::Open(o));
  rep->stored = rep->tier->ns();
  return std::unique_ptr<SglangStore>(new SglangStore(std::move(rep)));
}

size_t SglangStore::ExistsPrefix(std::span<const std::string_view> keys) {
  Rep::Scope scope(rep_.get());
  if (!scope.entered() || keys.empty()) return 0;
  std::vector<OffloadKey> page_keys;
  page_keys.reserve(keys.size());
  for (std::string_view k : keys) page_keys.push_back(SglangNamespace::PageKey(k));
  Result<uint64_t> id = rep_->tier->SubmitLookup(page_keys);
  if (!id.ok()) {
    rep_->WarnOnce(LogOnce::kSubmit, "lookup refused: " + id.status().ToString());
    return 0;
  }
  const std::vector<KeyResult> results = rep_->Wait(*id);
  size_t n = 0;
  while (n < results.size() && rep_->Outcome(LogOnce::kLookupFailed, keys[n], results[n], false)) ++n;
  return n;
}

std::vector<bool> SglangStore::Load(std::span<const std::string_view> keys, std::span<const SglangPagePieces> pages) {
  std::vector<bool> ok(keys.size(), false);
  Rep::Scope scope(rep_.get());
  if (!scope.entered() || keys.empty() || pages.size() != keys.size()) return ok;
  Rep::Batch<std::span<uint8_t>> b = rep_->GoodPages(keys, pages);
  if (b.keys.empty()) return ok;
  Result<uint64_t> id = rep_->tier->SubmitLoadPieces(b.keys, b.pages);
  if (!id.ok()) {
    rep_->WarnOnce(LogOnce::kSubmit, "load refused: " + id.status().ToString());
    return ok;
  }
  const std::vector<KeyResult> results = rep_->Wait(*id);
  for (size_t j = 0; j < results.size() && j < b.at.size(); ++j) {
    ok[b.at[j]] = rep_->Outcome(LogOnce::kLoadFailed, keys[b.at[j]], results[j], false);
  }
  return ok;
}

std::vector<bool> SglangStore::Store(std::span<const std::string_view> keys,
                                     std::span<const SglangConstPagePieces> pages) {
  std::vector<bool> ok(keys.size(), false);
  Rep::Scope scope(rep_.get());
  if (!scope.entered() || keys.empty() || pages.size() != keys.size()) return ok;
  Rep::Batch<std::span<const uint8_t>> b = rep_->GoodPages(keys, pages);
  if (b.keys.empty()) return ok;
  Result<uint64_t> id = rep_->tier->SubmitStorePieces(b.keys, b.pages);
  if (!id.ok()) {
    rep_->WarnOnce(LogOnce::kSubmit, "store refused: " + id.status().ToString());
    return ok;
  }
  const std::vector<KeyResult> results = rep_->Wait(*id);
  for (size_t j = 0; j < results.size() && j < b.at.size(); ++j) {
    ok[b.at[j]] = rep_->Outcome(LogOnce::kStoreFailed, keys[b.at[j]], results[j], true);
  }
  return ok;
}

Result<uint64_t> SglangStore::Clear() {
  Rep::Scope scope(rep_.get());
  if (!scope.entered()) return Status(StatusCode::kUnavailable, "sglang store: closed");
  uint64_t removed = 0;
  for (size_t i = 0; i < rep_->roots.size(); ++i) {
    // On a thread of its own, watched per call: a hung mount answers
    // kTimedOut, and the abandoned walk owns its copies of the names (the
    // store may be closed and freed before it returns).
    Result<uint64_t> n = internal::RunWatchedFor<uint64_t>(
        rep_->io_timeout_ms, "", [root = rep_->roots[i], dir = rep_->stored->block_dir_name()] {
          return internal::ClearBlockDir(root, dir);
        });
    if (!n.ok()) return rep_->roots.size() == 1 ? n : n.status().WithContext("root_dir[" + std::to_string(i) + "]");
    removed += *n;
  }
  return removed;
}

FsTierMetrics SglangStore::Metrics() const {
  Rep::Scope scope(rep_.get());
  return scope.entered() ? rep_->tier->Metrics() : FsTierMetrics{};
}

const SglangNamespace& SglangStore::ns() const { return rep_->ns; }
const Namespace& SglangStore::stored_namespace() const { return *rep_->stored; }

std::string SglangStore::PagePath(std::string_view key) const {
  // The roots never change and BlockPath needs no I/O, but the tier may be gone.
  const OffloadKey page = SglangNamespace::PageKey(key);
  const size_t root = rep_->roots.size() == 1 ? 0 : format::RootIndexOf(page.hash.bytes(), rep_->roots.size());
  return JoinRoot(rep_->roots[root], rep_->ns.PageRelPath(key));
}

void SglangStore::Close() {
  std::lock_guard close_lock(rep_->close_mu);
  std::unique_ptr<FsTier> tier;
  {
    std::unique_lock lock(rep_->mu);
    rep_->closing = true;
    rep_->cv.wait(lock, [&] { return rep_->calls == 0; });
    tier = std::move(rep_->tier);
  }
  tier.reset();  // drains, removes the lease; its callbacks take rep_->mu, so not held here
}

}  // namespace kvtier
