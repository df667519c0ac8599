// The tier router (see tier_router.h).
#include "tiered_store/tier_router.h"

#include <algorithm>

namespace kvtier::internal {

TierRouter::Route TierRouter::FirstAnswer(std::span<const TierVerdict> verdicts) {
  for (size_t t = 0; t < verdicts.size(); ++t) {
    if (verdicts[t] == TierVerdict::kMiss) continue;
    const TierVerdict v =
        verdicts[t] == TierVerdict::kHit ? TierVerdict::kHit : TierVerdict::kInFlight;
    return Route{v, static_cast<int>(t)};
  }
  return Route{};
}

void TierRouter::AttachRows(std::span<uint8_t> region, uint64_t row_bytes) {
  region_ = region;
  row_bytes_ = row_bytes;
}

void TierRouter::AddTier(std::string name, std::unique_ptr<FsTier> fs, bool staged_crc) {
  // "xattr" or "trailer": checksums on and unsealed ("seal": the GCM tag is
  // the check, L169; "off": none; "mixed": several roots).
  const std::string_view place = fs->checksum_place();
  StagedCrcTier* staged = staged_crc && (place == "xattr" || place == "trailer") ? dynamic_cast<StagedCrcTier*>(fs.get()) : nullptr;
  tiers_.push_back(Tier{std::move(name), std::move(fs), staged, {}, 0, 0, 0, 0});
}

bool TierRouter::any_staged() const {
  return std::any_of(tiers_.begin(), tiers_.end(), [](const Tier& t) { return t.staged != nullptr; });
}

std::optional<size_t> TierRouter::NextTier(size_t t) const {
  if (t + 1 >= tiers_.size()) return std::nullopt;
  return t + 1;
}

Status TierRouter::Submit(size_t t, FsJobRecord& record) {
  if (t >= tiers_.size())
    return Status(StatusCode::kInvalidArgument, "no secondary tier " + std::to_string(t));
  const uint64_t rows = row_bytes_ == 0 ? 0 : region_.size() / row_bytes_;
  for (uint32_t row : record.rows) {
    if (row >= rows) {
      return Status(
          StatusCode::kInvalidArgument,
          "row " + std::to_string(row) + " is outside the " + std::to_string(rows) + " CPU rows");
    }
  }
  Tier& tier = tiers_[t];
  KVTIER_ASSIGN_OR_RETURN(const uint64_t id, Start(tier, record));
  tier.jobs.emplace(id, std::move(record));
  return Status::Ok();
}

Result<uint64_t> TierRouter::Start(Tier& tier, FsJobRecord& record) {
  switch (record.kind) {
    case FsJobRecord::Kind::kWriteThrough: {
      std::vector<std::span<const uint8_t>> spans;
      spans.reserve(record.rows.size());
      for (uint32_t row : record.rows)
        spans.emplace_back(region_.data() + uint64_t{row} * row_bytes_, row_bytes_);
      if (tier.staged != nullptr && !record.crcs.empty()) {
        return tier.staged->SubmitStoreWithCrcs(record.keys, spans, record.crcs, record.block_hashes);
      }
      return tier.fs->SubmitStore(record.keys, spans, record.block_hashes);
    }
    case FsJobRecord::Kind::kPromote: {
      std::vector<std::span<uint8_t>> spans;
      spans.reserve(record.rows.size());
      for (uint32_t row : record.rows)
        spans.emplace_back(region_.data() + uint64_t{row} * row_bytes_, row_bytes_);
      if (tier.staged == nullptr) return tier.fs->SubmitLoad(record.keys, spans);
      // Written by the tier's I/O thread before the job is pollable; the
      // vector's buffer moves with the record (Submit), never reallocated.
      record.loaded.assign(record.keys.size(), LoadedBlock{});
      return tier.staged->SubmitLoadUnchecked(record.keys, spans, record.loaded);
    }
    case FsJobRecord::Kind::kLookup:
      return tier.fs->SubmitLookup(record.keys);
    case FsJobRecord::Kind::kRemove:
      if (tier.staged == nullptr) return Status(StatusCode::kInvalidArgument, "removal on a tier that checks its own loads");
      return tier.staged->SubmitRemoveCorrupt(record.keys, record.loaded);
  }
  return Status(StatusCode::kInternal, "unknown fs job kind");
}

size_t TierRouter::Poll(size_t t, std::vector<JobResult>* out) {
  return tiers_[t].fs->PollFinished(out);
}

std::optional<FsJobRecord> TierRouter::Take(size_t t, uint64_t fs_job_id) {
  if (t >= tiers_.size()) return std::nullopt;
  auto it = tiers_[t].jobs.find(fs_job_id);
  if (it == tiers_[t].jobs.end()) return std::nullopt;
  FsJobRecord record = std::move(it->second);
  tiers_[t].jobs.erase(it);
  return record;
}

bool TierRouter::Idle() const {
  return std::all_of(tiers_.begin(), tiers_.end(), [](const Tier& t) { return t.jobs.empty(); });
}

void TierRouter::CountLookup(std::optional<size_t> hit_tier) {
  const size_t missed = std::min(hit_tier.value_or(tiers_.size()), tiers_.size());
  for (size_t t = 0; t < missed; ++t) ++tiers_[t].misses;
  if (hit_tier && *hit_tier < tiers_.size()) ++tiers_[*hit_tier].hits;
}

void TierRouter::CountPromotion(size_t t, bool ok) {
  if (t >= tiers_.size()) return;
  ++(ok ? tiers_[t].promotions : tiers_[t].promotions_failed);
}

TierUsage TierRouter::Usage(size_t t) const {
  const Tier& tier = tiers_.at(t);
  const FsTierMetrics fs = tier.fs->Metrics();
  TierUsage u;
  u.name = tier.name;
  u.hits = tier.hits, u.misses = tier.misses;
  u.promotions = tier.promotions, u.promotions_failed = tier.promotions_failed;
  u.rows_in = fs.rows_stored, u.bytes_in = fs.bytes_stored;
  u.rows_out = fs.rows_loaded, u.bytes_out = fs.bytes_loaded;
  u.stores_dropped = fs.rows_dropped;
  u.stores_failed = fs.store_errors;
  u.stores_skipped = fs.rows_skipped_exists;
  return u;
}

std::string TierRouter::PrometheusText(size_t t) const {
  return tiers_.at(t).fs->PrometheusText(tiers_.at(t).name);
}

}  // namespace kvtier::internal
