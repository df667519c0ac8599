// SglangStore: SGLang's synchronous batch calls over one FsTier, inside a
// TierShell (include/kvtier/tier_shell.h): each call is one admitted use,
// submits one job and waits for it (the shell files other callers' results
// for them, so SGLang's prefetch, prefetch I/O and backup threads each get
// their own job back). No I/O call times out on its own: a call waits until
// its job finishes, and the tier bounds that (io_timeout_ms, then the
// abandonment of fs_tier_io_loop.cc). Giving up earlier would be unsafe: a
// load's op may still copy into the caller's pieces, and a store's may
// still read them, until its job is returned. For the same reason a page
// whose memory a call in flight writes (or, for a load, reads) is that
// key's false. Clear touches no caller memory, so its walk runs on a thread
// of its own under a watch (ops/io_watch.h) and is abandoned on a hung mount.
#include <algorithm>
#include <atomic>
#include <optional>
#include <type_traits>

#include "format/root_list.h"
#include "kvtier/sglang.h"
#include "kvtier/tier_shell.h"
#include "ops/io_watch.h"
#include "sglang/sglang_clear.h"
#include "util/log.h"

namespace kvtier {
namespace {

// Failures are logged once per kind for the life of a store (SGLang calls
// every step; its threads must not flood the log).
enum class LogOnce : int { kBadPage, kLoadFailed, kStoreFailed, kLookupFailed, kSubmit, kShared, kCount };

// The keys and pages to submit, with each one's index in the call.
template <class Piece>
struct Batch {
  std::vector<OffloadKey> keys;
  std::vector<std::vector<Piece>> pages;
  std::vector<size_t> at;

  void Add(const Batch& from, size_t i) {
    keys.push_back(from.keys[i]);
    pages.push_back(from.pages[i]);
    at.push_back(from.at[i]);
  }
};

}  // namespace

struct SglangStore::Rep {
  explicit Rep(SglangNamespace n) : ns(std::move(n)) {}

  SglangNamespace ns;
  std::optional<Namespace> stored;  // where the tier's files are: ns's, or its key's when sealed (L162)
  std::vector<std::string> roots;  // the tier's roots, for Clear
  uint32_t io_timeout_ms = 0;      // Clear's deadline per file-system call (0: none)
  std::unique_ptr<TierShell> shell;
  std::atomic<bool> logged[static_cast<int>(LogOnce::kCount)] = {};

  void WarnOnce(LogOnce kind, const std::string& message) {
    if (!logged[static_cast<int>(kind)].exchange(true)) {
      internal::LogWarning("sglang store " + ns.dir_name() + ": " + message + " (logged once)");
    }
  }

  // The pages of page_bytes (the others stay false).
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

  template <class Piece>
  std::vector<bool> Move(std::span<const std::string_view> keys, std::span<const std::vector<Piece>> pages);
  // Submits the pages of `b` that share no memory with a call in flight
  // (into `sent`) and waits for them; the keys' results, in sent's order.
  template <class Piece>
  std::vector<KeyResult> SubmitAndWait(std::span<const std::string_view> keys, const Batch<Piece>& b,
                                       Batch<Piece>& sent);
};

template <class Piece>
std::vector<KeyResult> SglangStore::Rep::SubmitAndWait(std::span<const std::string_view> keys,
                                                       const Batch<Piece>& b, Batch<Piece>& sent) {
  constexpr bool kLoad = !std::is_const_v<typename Piece::element_type>;
  std::vector<size_t> shared;
  Result<uint64_t> id = shell->Submit(
      kLoad ? MemoryUse::kWrite : MemoryUse::kRead, RowRanges(std::span(b.pages)),
      [&](FsTier& tier) -> Result<uint64_t> {
        for (size_t i = 0, s = 0; i < b.keys.size(); ++i) {
          if (s < shared.size() && shared[s] == i) ++s;
          else sent.Add(b, i);
        }
        if (sent.keys.empty()) return Status(StatusCode::kRejected, "every page shares memory with a call in flight");
        if constexpr (kLoad) return tier.SubmitLoadPieces(sent.keys, sent.pages);
        else return tier.SubmitStorePieces(sent.keys, sent.pages);
      },
      {}, &shared);
  if (!shared.empty()) {
    WarnOnce(LogOnce::kShared, "page of key \"" + std::string(keys[b.at[shared.front()]]) +
                                   "\" shares host memory with another page of the call or a call in flight: not moved");
  }
  if (!id.ok()) {
    if (shared.size() != b.keys.size()) WarnOnce(LogOnce::kSubmit, "job refused: " + id.status().ToString());
    return {};
  }
  Result<JobResult> done = shell->WaitFor(*id, TierShell::kForever);
  return done.ok() ? std::move(done->keys) : std::vector<KeyResult>{};
}

template <class Piece>
std::vector<bool> SglangStore::Rep::Move(std::span<const std::string_view> keys,
                                         std::span<const std::vector<Piece>> pages) {
  constexpr bool kLoad = !std::is_const_v<typename Piece::element_type>;
  std::vector<bool> ok(keys.size(), false);
  TierShell::Use use(*shell);
  if (!use || keys.empty() || pages.size() != keys.size()) return ok;
  const Batch<Piece> b = GoodPages(keys, pages);
  if (b.keys.empty()) return ok;
  Batch<Piece> sent;
  const std::vector<KeyResult> results = SubmitAndWait(keys, b, sent);
  for (size_t j = 0; j < results.size() && j < sent.at.size(); ++j) {
    const size_t i = sent.at[j];
    ok[i] = Outcome(kLoad ? LogOnce::kLoadFailed : LogOnce::kStoreFailed, keys[i], results[j], !kLoad);
  }
  return ok;
}

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
  KVTIER_ASSIGN_OR_RETURN(rep->shell, TierShell::Open(o, "sglang store"));
  rep->stored = rep->shell->ns();
  return std::unique_ptr<SglangStore>(new SglangStore(std::move(rep)));
}

size_t SglangStore::ExistsPrefix(std::span<const std::string_view> keys) {
  TierShell::Use use(*rep_->shell);
  if (!use || keys.empty()) return 0;
  std::vector<OffloadKey> page_keys;
  page_keys.reserve(keys.size());
  for (std::string_view k : keys) page_keys.push_back(SglangNamespace::PageKey(k));
  Result<uint64_t> id = rep_->shell->Submit([&](FsTier& t) { return t.SubmitLookup(page_keys); });
  if (!id.ok()) {
    rep_->WarnOnce(LogOnce::kSubmit, "lookup refused: " + id.status().ToString());
    return 0;
  }
  Result<JobResult> done = rep_->shell->WaitFor(*id, TierShell::kForever);
  const std::vector<KeyResult> results = done.ok() ? std::move(done->keys) : std::vector<KeyResult>{};
  size_t n = 0;
  while (n < results.size() && rep_->Outcome(LogOnce::kLookupFailed, keys[n], results[n], false)) ++n;
  return n;
}

std::vector<bool> SglangStore::Load(std::span<const std::string_view> keys, std::span<const SglangPagePieces> pages) {
  return rep_->Move(keys, pages);
}

std::vector<bool> SglangStore::Store(std::span<const std::string_view> keys,
                                     std::span<const SglangConstPagePieces> pages) {
  return rep_->Move(keys, pages);
}

Result<uint64_t> SglangStore::Clear() {
  TierShell::Use use(*rep_->shell);
  if (!use) return rep_->shell->Closed();
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
  return rep_->shell->closing() ? FsTierMetrics{} : rep_->shell->Metrics();
}

const SglangNamespace& SglangStore::ns() const { return rep_->ns; }
const Namespace& SglangStore::stored_namespace() const { return *rep_->stored; }

std::string SglangStore::PagePath(std::string_view key) const {
  // The roots never change and BlockPath needs no I/O, but the tier may be gone.
  const OffloadKey page = SglangNamespace::PageKey(key);
  const size_t root = rep_->roots.size() == 1 ? 0 : format::RootIndexOf(page.hash.bytes(), rep_->roots.size());
  return JoinRoot(rep_->roots[root], rep_->stored->BlockRelPath(page));  // a sealed store's own directory (L162)
}

void SglangStore::Close() { rep_->shell->Close(); }

}  // namespace kvtier
