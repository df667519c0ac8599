// Maximal-prefix lookup (vLLM's _maximal_prefix_lookup and
// TieringOffloadingManager.lookup): the CPU tier first, then the secondary
// tiers in config order through asynchronous, batched existence checks whose
// verdicts live as long as the request (vLLM's AsyncLookupManager). A secondary hit
// reserves a CPU row at once and starts a promotion.
#include "tiered_store/tiered_store_impl.h"

namespace kvtier::internal {

// With mu_ held. The verdict of a key the CPU tier does not hold: the
// request's tier verdicts (lookups start for tiers that have none yet), the
// first tier that is not a miss answering. A secondary hit reserves a
// not-ready CPU row and joins that tier's promotion batch.
ChunkVerdict TieredStoreImpl::SecondaryLookup(RequestState& req, const OffloadKey& key, int* source, Walk* walk) {
  if (router_.empty()) return ChunkVerdict::kMiss;
  const TierRouter::Route route = TierRouter::FirstAnswer(requests_.AskTiers(req, key, &walk->to_lookup));
  if (route.verdict == TierVerdict::kInFlight) return ChunkVerdict::kRetry;
  if (route.verdict == TierVerdict::kMiss) return ChunkVerdict::kMiss;
  const OffloadKey keys[] = {key};
  std::optional<PreparedWrite> prepared = cpu_->PrepareWrite(keys, /*apply_threshold=*/false, &walk->walked);
  const size_t tier = static_cast<size_t>(route.tier);
  if (!prepared || prepared->rows.empty()) {
    router_.CountPromotion(tier, /*ok=*/false);  // no CPU row could be freed: a miss, as in vLLM
    return ChunkVerdict::kMiss;
  }
  FsJobRecord& batch = walk->promote[tier];
  batch.keys.push_back(key);
  batch.rows.push_back(prepared->rows[0]);
  *source = route.tier + 1;
  requests_.NotePromotion(req, key, *source);
  return ChunkVerdict::kHitPending;
}

// With mu_ held. Each chunk of a request is counted once, at its first
// definite verdict: a CPU hit, a hit in secondary tier t (the tiers before it
// missed), or a miss everywhere.
void TieredStoreImpl::CountVerdict(RequestState& req, size_t chunk, ChunkVerdict verdict, int source) {
  if (verdict == ChunkVerdict::kRetry || !requests_.FirstCount(req, chunk)) return;
  if (source == 0) {
    ++cpu_stats_.hits;
    return;
  }
  ++cpu_stats_.misses;
  router_.CountLookup(source > 0 ? std::optional<size_t>(source - 1) : std::nullopt);
}

// With mu_ held. Pins a ready row the request asked to keep resident: the
// first pin of a key holds its row until the last pinning request finishes.
void TieredStoreImpl::PinIfWanted(RequestState& req, size_t chunk, const OffloadKey& key) {
  if (requests_.Pin(req, chunk, key) != PinResult::kFirst) return;
  const OffloadKey keys[] = {key};
  cpu_->Acquire(keys);
}

PrefixLookup TieredStoreImpl::WalkPrefix(uint64_t request_id, RequestState& req, size_t first_chunk) {
  PrefixLookup out;
  Walk walk;
  walk.to_lookup.resize(router_.size());
  walk.promote.assign(router_.size(), FsJobRecord{FsJobRecord::Kind::kPromote, {}, {}, 0, 0, {}, {}, {}, {}});
  bool leading = true;  // still in the leading run of hits
  for (size_t i = first_chunk; i < req.chunk_keys().size(); ++i) {
    const OffloadKey& key = req.chunk_keys()[i];
    walk.walked.insert(key);
    ChunkVerdict verdict = ChunkVerdict::kHitPending;
    int source = 0;
    switch (cpu_->Lookup(key)) {
      case CpuVerdict::kHit:
        verdict = ChunkVerdict::kHit;
        PinIfWanted(req, i, key);
        break;
      case CpuVerdict::kHitPending:
        break;
      case CpuVerdict::kMiss:
        source = -1;
        verdict = SecondaryLookup(req, key, &source, &walk);
        break;
    }
    if (source == 0) source = requests_.PromotedFrom(req, key);  // 0 unless promoted for it
    CountVerdict(req, i, verdict, source);
    out.verdicts.push_back(verdict);
    out.source_tier.push_back(source);
    if (verdict == ChunkVerdict::kMiss) break;
    leading = leading && verdict != ChunkVerdict::kRetry;
    if (leading) ++out.hit_chunks;
    if (verdict != ChunkVerdict::kHit) out.pending = true;
  }
  SubmitLookups(request_id, walk.to_lookup);
  for (size_t t = 0; t < router_.size(); ++t) {
    if (!walk.promote[t].keys.empty()) SubmitPromotion(t, std::move(walk.promote[t]));
  }
  return out;
}

void TieredStoreImpl::SubmitLookups(uint64_t request_id, std::vector<std::vector<OffloadKey>>& to_lookup) {
  for (size_t t = 0; t < router_.size(); ++t) {
    if (to_lookup[t].empty()) continue;
    FsJobRecord record{FsJobRecord::Kind::kLookup, std::move(to_lookup[t]), {}, request_id, 0, {}, {}, {}, {}};
    if (router_.Submit(t, record).ok()) continue;
    // A lookup that cannot start counts as a miss (as vLLM's failing batch_lookup).
    for (const OffloadKey& key : record.keys) requests_.SetVerdict(request_id, key, t, TierVerdict::kMiss);
  }
}

// With mu_ held. The rows were reserved by PrepareWrite (not ready).
void TieredStoreImpl::SubmitPromotion(size_t tier, FsJobRecord record) {
  const Status submitted = router_.Submit(tier, record);
  if (submitted.ok()) return;
  // Nothing was read: give the rows back and report the failure.
  JobResult failed{0, JobKind::kLoad, std::vector<KeyResult>(record.keys.size(), KeyResult{KeyOutcome::kError, submitted})};
  OnPromotionFinished(tier, record, failed);
}

Result<PrefixLookup> TieredStoreImpl::Lookup(uint64_t request_id, size_t first_chunk) {
  std::lock_guard lock(mu_);
  KVTIER_ASSIGN_OR_RETURN(RequestState * req, requests_.Find(request_id));
  return WalkPrefix(request_id, *req, first_chunk);
}

Result<PrefixLookup> TieredStoreImpl::LookupWait(uint64_t request_id, size_t first_chunk, uint32_t timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::unique_lock lock(mu_);
  while (true) {
    KVTIER_ASSIGN_OR_RETURN(RequestState * req, requests_.Find(request_id));
    PrefixLookup out = WalkPrefix(request_id, *req, first_chunk);
    if (!out.pending) return out;
    if (changed_cv_.wait_until(lock, deadline) == std::cv_status::timeout) return out;
  }
}

}  // namespace kvtier::internal
