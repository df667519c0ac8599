// SglangTier: SGLang's synchronous batch calls over one FsTier, inside a
// TierShell (include/kvtier/tier_shell.h): each job is one admitted use,
// submitted and waited for (the shell files other callers' results for
// them, so SGLang's prefetch, prefetch I/O and backup threads each get their
// own job back); a call is one job, a large store several in turn. No I/O call times out on its own: a call waits until
// its job finishes, and the tier bounds that (io_timeout_ms, then the
// abandonment of fs_tier_io_loop.cc). Giving up earlier would be unsafe: a
// load's op may still copy into the caller's pieces, and a store's may
// still read them, until its job is returned. For the same reason a page
// whose memory a call in flight writes (or, for a load, reads) is that
// key's false. Clear touches no caller memory: the shell's ClearNamespace
// runs its walk under a watch and abandons it on a hung mount.
#include <algorithm>
#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

#include "format/layout_names.h"
#include "format/root_list.h"
#include "kvtier/sglang.h"
#include "kvtier/tier_shell.h"
#include "util/log_once.h"

namespace kvtier {
namespace {

// Failures are logged once per kind for the life of a store (SGLang calls
// every step; its threads must not flood the log).
enum LogKind : size_t { kBadPage, kLoadFailed, kStoreFailed, kLookupFailed, kSubmit, kShared, kLogKinds };

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

struct SglangTier::Rep {
  explicit Rep(SglangNamespace n) : ns(std::move(n)), log("sglang store " + ns.dir_name(), kLogKinds) {}

  SglangNamespace ns;
  std::unique_ptr<TierShell> shell;
  internal::LogOnce log;
  size_t pages_per_store = 1;  // pages of one store job: at most half of store_queue_bytes_max

  // The pages of page_bytes (the others stay false).
  template <class Piece>
  Batch<Piece> GoodPages(std::span<const std::string_view> keys, std::span<const std::vector<Piece>> pages) {
    Batch<Piece> b;
    for (size_t i = 0; i < keys.size(); ++i) {
      uint64_t bytes = 0;
      for (const auto& p : pages[i]) bytes += p.size();
      if (bytes != ns.page_bytes()) {
        log.Warn(kBadPage, "page of key \"" + std::string(keys[i]) + "\" is " + std::to_string(bytes) +
                               " bytes in its pieces, a page is " + std::to_string(ns.page_bytes()) + ": not moved");
        continue;
      }
      b.keys.push_back(SglangNamespace::PageKey(keys[i]));
      b.pages.push_back(pages[i]);
      b.at.push_back(i);
    }
    return b;
  }

  // Logs the first failure of a kind, naming its key; true for success.
  bool Outcome(LogKind log_kind, JobKind kind, std::string_view key, const KeyResult& r) {
    if (KeySucceeded(kind, r.outcome)) return true;
    if (r.outcome != KeyOutcome::kMiss) {
      log.Warn(log_kind, "key \"" + std::string(key) + "\": " + std::string(KeyOutcomeName(r.outcome)) + " (" +
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
std::vector<KeyResult> SglangTier::Rep::SubmitAndWait(std::span<const std::string_view> keys,
                                                       const Batch<Piece>& b, Batch<Piece>& sent) {
  constexpr bool kLoad = !std::is_const_v<typename Piece::element_type>;
  std::vector<size_t> shared;
  Result<JobResult> done = shell->SubmitAndWait(
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
      &shared);
  if (!shared.empty()) {
    log.Warn(kShared, "page of key \"" + std::string(keys[b.at[shared.front()]]) +
                          "\" shares host memory with another page of the call or a call in flight: not moved");
  }
  // A call holds its Use: the wait cannot fail, so a failure is the submit's.
  if (!done.ok() && shared.size() != b.keys.size()) log.Warn(kSubmit, "job refused: " + done.status().ToString());
  return done.ok() ? std::move(done->keys) : std::vector<KeyResult>{};
}

template <class Piece>
std::vector<bool> SglangTier::Rep::Move(std::span<const std::string_view> keys,
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
    ok[i] = Outcome(kLoad ? kLoadFailed : kStoreFailed, kLoad ? JobKind::kLoad : JobKind::kStore, keys[i], results[j]);
  }
  return ok;
}

SglangTier::SglangTier(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
SglangTier::~SglangTier() { Close(); }

Result<std::unique_ptr<SglangTier>> SglangTier::Open(const SglangTierOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(SglangNamespace ns, SglangNamespace::Create(options.spec));
  const uint64_t queue = options.tier.store_queue_bytes_max;
  if (ns.page_bytes() > queue) {
    return InvalidArgument("config key 'store_queue_bytes_max': " + std::to_string(queue) +
                           " bytes cannot hold one page of " + std::to_string(ns.page_bytes()) +
                           " bytes (a store larger than it is dropped)");
  }
  auto rep = std::make_unique<Rep>(std::move(ns));
  rep->pages_per_store = std::max<uint64_t>(1, queue / 2 / rep->ns.page_bytes());
  FsTierOpenOptions o;
  o.tier = options.tier;
  o.prebuilt_ns = rep->ns.fs_namespace();
  o.row_bytes = rep->ns.page_bytes();
  o.registered_memory = options.registered_memory;
  KVTIER_ASSIGN_OR_RETURN(rep->shell, TierShell::Open(o, "sglang store"));
  return std::unique_ptr<SglangTier>(new SglangTier(std::move(rep)));
}

size_t SglangTier::ExistsPrefix(std::span<const std::string_view> keys) {
  TierShell::Use use(*rep_->shell);
  if (!use || keys.empty()) return 0;
  std::vector<OffloadKey> page_keys;
  page_keys.reserve(keys.size());
  for (std::string_view k : keys) page_keys.push_back(SglangNamespace::PageKey(k));
  Result<JobResult> done =
      rep_->shell->SubmitAndWait(MemoryUse::kRead, {}, [&](FsTier& t) { return t.SubmitLookup(page_keys); });
  if (!done.ok()) {  // a call holds its Use: the wait cannot fail, so a failure is the submit's
    rep_->log.Warn(kSubmit, "lookup refused: " + done.status().ToString());
    return 0;
  }
  size_t n = 0;
  while (n < done->keys.size() && rep_->Outcome(kLookupFailed, JobKind::kLookup, keys[n], done->keys[n])) ++n;
  return n;
}

std::vector<bool> SglangTier::Load(std::span<const std::string_view> keys, std::span<const SglangPagePieces> pages) {
  return rep_->Move(keys, pages);
}

std::vector<bool> SglangTier::Store(std::span<const std::string_view> keys,
                                    std::span<const SglangConstPagePieces> pages) {
  std::vector<bool> ok(keys.size(), false);
  if (pages.size() != keys.size()) return ok;
  for (size_t at = 0; at < keys.size(); at += rep_->pages_per_store) {  // jobs the tier takes whole
    const size_t n = std::min(rep_->pages_per_store, keys.size() - at);
    const std::vector<bool> job = rep_->Move(keys.subspan(at, n), pages.subspan(at, n));
    std::copy(job.begin(), job.end(), ok.begin() + static_cast<std::ptrdiff_t>(at));
    if (std::find(job.begin(), job.end(), false) != job.end()) break;  // SGLang stops at the first failure
  }
  return ok;
}

Result<uint64_t> SglangTier::Clear() {
  // A page is group 0 with a 64-hex name (L106); other block files are not this store's.
  return rep_->shell->ClearNamespace(
      [](std::string_view hex, uint32_t group) { return group == 0 && hex.size() == format::kBlockHexCharsLong; });
}

FsTierMetrics SglangTier::Metrics() const {
  return rep_->shell->closing() ? FsTierMetrics{} : rep_->shell->Metrics();
}

const SglangNamespace& SglangTier::ns() const { return rep_->ns; }
const Namespace& SglangTier::stored_namespace() const { return rep_->shell->ns(); }

std::string SglangTier::PagePath(std::string_view key) const {
  // The roots never change and BlockPath needs no I/O, but the tier may be gone.
  const OffloadKey page = SglangNamespace::PageKey(key);
  const std::vector<std::string>& roots = rep_->shell->roots();
  const size_t root = roots.size() == 1 ? 0 : format::RootIndexOf(page.hash.bytes(), roots.size());
  return JoinRoot(roots[root], rep_->shell->ns().BlockRelPath(page));  // a sealed store's own directory (L162)
}

void SglangTier::Close() { rep_->shell->Close(); }

}  // namespace kvtier
