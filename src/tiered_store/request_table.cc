// The request table (see request_table.h).
#include "tiered_store/request_table.h"

#include <algorithm>
#include <limits>
#include <string>

#include "format/block_hashes.h"

namespace kvtier::internal {
namespace {

// The tokens of a request that may be offloaded (offload_prompt_only and
// kv_transfer_params.max_offload_tokens, docs/config.md).
uint64_t OffloadLimitTokens(const RequestSpec& spec, bool prompt_only) {
  uint64_t limit = std::numeric_limits<uint64_t>::max();
  if (prompt_only && spec.prompt_tokens > 0) limit = spec.prompt_tokens;
  if (spec.max_offload_tokens) limit = std::min(limit, *spec.max_offload_tokens);
  return limit;
}

// Block hashes given for `keys` (RequestSpec::block_hashes, or those of
// chunks appended): the keys must be ChunkOffloadKeys(hashes, hpc, group),
// all of `group`, and each chunk's hashes a list the fs tiers take (what
// FsTier::SubmitStore checks, format::BlockHashListProblem): refused here,
// such a list would fail the chunk's write-through later, where no caller
// hears of it. `first` numbers the chunks in messages.
Status CheckBlockHashes(const std::string& what, std::span<const OffloadKey> keys,
                        std::span<const BlockHash> hashes, uint32_t group, size_t hpc,
                        size_t first) {
  if (hashes.size() / hpc != keys.size()) {
    return InvalidArgument(what + std::to_string(hashes.size()) + " hashes make " +
                           std::to_string(hashes.size() / hpc) + " chunks of " +
                           std::to_string(hpc) + " (hashes per chunk), not the " +
                           std::to_string(keys.size()) + " chunk keys");
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string chunk =
        "chunk " + std::to_string(first + i) + " (key " + keys[i].Hex() + "): ";
    if (keys[i].group_idx != group) {
      return InvalidArgument(what + chunk + "of group " + std::to_string(keys[i].group_idx) + ", chunk 0 of group " +
                             std::to_string(group) + ": the hashes make the keys of one group");
    }
    const std::string problem =
        format::BlockHashListProblem(hashes.subspan(i * hpc, hpc), keys[i].hash, hpc);
    if (!problem.empty()) return InvalidArgument(what + chunk + problem);
  }
  return Status::Ok();
}

std::string RequestWhat(uint64_t request_id, const char* field) {
  return "request " + std::to_string(request_id) + ": " + field + ": ";
}

Status NotLive(uint64_t request_id) {
  return Status(StatusCode::kNotFound,
                "request " + std::to_string(request_id) + " was not started (or finished)");
}

}  // namespace

Status RequestTable::Start(uint64_t request_id, RequestSpec spec) {
  if (request_id == 0) return Status(StatusCode::kInvalidArgument, "request id 0 is reserved");
  if (requests_.contains(request_id)) {
    return Status(StatusCode::kInvalidArgument,
                  "request " + std::to_string(request_id) + " is already started");
  }
  size_t hpc = 0;
  if (!spec.block_hashes.empty()) {
    const uint32_t group = spec.chunk_keys.empty() ? 0 : spec.chunk_keys[0].group_idx;
    hpc = format::HashesPerFile(options_.chunk_files, group);
    KVTIER_RETURN_IF_ERROR(CheckBlockHashes(RequestWhat(request_id, "block_hashes"),
                                            spec.chunk_keys, spec.block_hashes, group, hpc, 0));
  }
  RequestState& req = requests_[request_id];
  req.offload_limit_tokens_ = OffloadLimitTokens(spec, options_.offload_prompt_only);
  req.hashes_per_chunk_ = hpc;
  req.hashed_chunks_ = hpc == 0 ? 0 : spec.chunk_keys.size();
  req.counted_.assign(spec.chunk_keys.size(), false);
  req.spec_ = std::move(spec);
  return Status::Ok();
}

std::span<const BlockHash> RequestState::ChunkBlockHashes(size_t chunk) const {
  if (chunk >= hashed_chunks_) return {};
  return std::span<const BlockHash>(spec_.block_hashes).subspan(chunk * hashes_per_chunk_, hashes_per_chunk_);
}

Status RequestTable::Append(uint64_t request_id, std::span<const OffloadKey> keys,
                            std::span<const BlockHash> block_hashes) {
  KVTIER_ASSIGN_OR_RETURN(RequestState * req, Find(request_id));
  if (!block_hashes.empty())
    KVTIER_RETURN_IF_ERROR(AppendBlockHashes(request_id, *req, keys, block_hashes));
  req->spec_.chunk_keys.insert(req->spec_.chunk_keys.end(), keys.begin(), keys.end());
  req->counted_.resize(req->spec_.chunk_keys.size(), false);
  return Status::Ok();
}

// The hashes of chunks appended to `req` (before their keys are): checked as
// at Start, against the request's group, and kept after its hashed chunks,
// which must be all it has (chunks [0, hashed_chunks_) hold the hashes), so
// a request that started, or went on, without hashes gets none later.
Status RequestTable::AppendBlockHashes(uint64_t request_id, RequestState& req,
                                       std::span<const OffloadKey> keys,
                                       std::span<const BlockHash> block_hashes) const {
  const std::string what = RequestWhat(request_id, "appended block_hashes");
  const std::vector<OffloadKey>& have = req.spec_.chunk_keys;
  if (req.hashed_chunks_ != have.size()) {
    return InvalidArgument(
        what + "chunk " + std::to_string(req.hashed_chunks_) +
        " has none: a request's chunks have block hashes from its first on, or not at all");
  }
  const uint32_t group = !have.empty() ? have[0].group_idx : keys.empty() ? 0 : keys[0].group_idx;
  // A request with no chunks yet takes its group, and so its hashes per
  // chunk, from the keys appended now.
  const size_t hpc =
      !have.empty() ? req.hashes_per_chunk_ : format::HashesPerFile(options_.chunk_files, group);
  KVTIER_RETURN_IF_ERROR(CheckBlockHashes(what, keys, block_hashes, group, hpc, have.size()));
  std::vector<BlockHash>& hashes = req.spec_.block_hashes;
  hashes.resize(req.hashed_chunks_ * hpc);  // an incomplete chunk's hashes give way to its own
  hashes.insert(hashes.end(), block_hashes.begin(), block_hashes.end());
  req.hashes_per_chunk_ = hpc;
  req.hashed_chunks_ += keys.size();
  return Status::Ok();
}

Result<std::vector<OffloadKey>> RequestTable::Finish(uint64_t request_id) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return NotLive(request_id);
  std::vector<OffloadKey> unpinned;
  for (const OffloadKey& key : it->second.pinned_) {
    auto count = pin_counts_.find(key);
    if (--count->second > 0) continue;
    pin_counts_.erase(count);
    unpinned.push_back(key);
  }
  requests_.erase(it);
  return unpinned;
}

Result<RequestState*> RequestTable::Find(uint64_t request_id) {
  RequestState* req = FindOrNull(request_id);
  if (req == nullptr) return NotLive(request_id);
  return req;
}

RequestState* RequestTable::FindOrNull(uint64_t request_id) {
  auto it = requests_.find(request_id);
  return it == requests_.end() ? nullptr : &it->second;
}

Status RequestTable::CheckChunkRange(const RequestState& req, size_t first_chunk, size_t blocks,
                                     size_t blocks_per_chunk) const {
  if (blocks == 0 || blocks % blocks_per_chunk != 0) {
    return Status(StatusCode::kInvalidArgument,
                  "gpu_blocks must hold a positive multiple of blocks_per_chunk (" +
                      std::to_string(blocks_per_chunk) + ") ids, got " + std::to_string(blocks));
  }
  const size_t n = blocks / blocks_per_chunk, have = req.chunk_keys().size();
  if (first_chunk > have || n > have - first_chunk) {
    return Status(StatusCode::kInvalidArgument, "chunks [" + std::to_string(first_chunk) + ", " +
                                                    std::to_string(first_chunk + n) +
                                                    ") are beyond the request's " +
                                                    std::to_string(have) + " chunk keys");
  }
  return Status::Ok();
}

bool RequestTable::Offloadable(const RequestState& req, size_t chunk) const {
  return (chunk + 1) * options_.chunk_tokens <= req.offload_limit_tokens_;
}

std::span<const TierVerdict> RequestTable::AskTiers(
    RequestState& req, const OffloadKey& key, std::vector<std::vector<OffloadKey>>* to_lookup) {
  std::vector<TierVerdict>& verdicts = req.verdicts_[key];
  verdicts.resize(options_.tier_count, TierVerdict::kUnknown);
  for (size_t t = 0; t < verdicts.size(); ++t) {
    if (verdicts[t] != TierVerdict::kUnknown) continue;
    verdicts[t] = TierVerdict::kInFlight;
    (*to_lookup)[t].push_back(key);
  }
  return verdicts;
}

bool RequestTable::SetVerdict(uint64_t request_id, const OffloadKey& key, size_t tier,
                              TierVerdict verdict) {
  RequestState* req = FindOrNull(request_id);
  if (req == nullptr || tier >= options_.tier_count)
    return false;  // finished meanwhile: its verdicts are gone
  std::vector<TierVerdict>& verdicts = req->verdicts_[key];
  verdicts.resize(options_.tier_count, TierVerdict::kUnknown);
  verdicts[tier] = verdict;
  return true;
}

void RequestTable::ForgetHits(const OffloadKey& key) {
  for (auto& [id, req] : requests_) {
    auto it = req.verdicts_.find(key);
    if (it == req.verdicts_.end()) continue;
    for (TierVerdict& v : it->second) {
      if (v == TierVerdict::kHit) v = TierVerdict::kUnknown;
    }
  }
}

bool RequestTable::FirstCount(RequestState& req, size_t chunk) {
  if (chunk >= req.counted_.size() || req.counted_[chunk]) return false;
  req.counted_[chunk] = true;
  return true;
}

void RequestTable::NotePromotion(RequestState& req, const OffloadKey& key, int source) {
  req.promoted_from_[key] = source;
}

int RequestTable::PromotedFrom(const RequestState& req, const OffloadKey& key) const {
  auto it = req.promoted_from_.find(key);
  return it == req.promoted_from_.end() ? 0 : it->second;
}

PinResult RequestTable::Pin(RequestState& req, size_t chunk, const OffloadKey& key) {
  if ((chunk + 1) * options_.chunk_tokens > req.spec_.pin_tokens || req.pinned_.contains(key)) {
    return PinResult::kNotWanted;
  }
  PinResult result = PinResult::kShared;
  auto it = pin_counts_.find(key);
  if (it == pin_counts_.end()) {
    if (pin_counts_.size() >= pin_rows_max_) {
      ++pins_refused_;
      return PinResult::kRefused;
    }
    it = pin_counts_.emplace(key, 0).first;
    result = PinResult::kFirst;
  }
  ++it->second;
  req.pinned_.insert(key);
  return result;
}

}  // namespace kvtier::internal
