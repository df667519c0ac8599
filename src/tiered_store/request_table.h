// The request table: what the tiered store knows about each live request
// (vLLM's TieringOffloadingManager, vllm/v1/kv_offload/tiering/manager.py).
// Per request: its chunk keys (and the block hashes they were made from),
// how far it may be offloaded, each secondary tier's verdict on each key it
// looked up, the keys it pinned, the keys its lookups promoted (and from
// where) and which chunks the hit/miss metrics already counted. Across
// requests: one pin count per pinned key, capped at a number of rows.
//
// Invariants:
//  - a request id is live from Start to Finish; 0 is never live;
//  - a key's pin count equals the number of live requests whose pinned set
//    holds it, and the pinned keys never outnumber pin_rows_max;
//  - each request holds one verdict per secondary tier for every key it has
//    asked about, and counted.size() == chunk_keys().size();
//  - a request's block hashes, where given, made its first chunk keys:
//    chunk i < hashed_chunks is ChunkBlockHashes(i), its key the last.
//
// The table does no I/O and calls no tier: it tells the caller what to do
// (which rows to hold or release, which lookups to start).
//
// Thread-safety: none. TieredStoreImpl calls it with its mutex held; the
// table is read by every public call and by the progress thread, so a lock
// of its own would be taken and released right under the store's one, and
// the store's mutex already orders a lookup's submission before its result.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvtier/result.h"
#include "kvtier/tiered_store.h"
#include "cpu_tier/cache_policy.h"  // OffloadKeyHasher, OffloadKeySet

namespace kvtier::internal {

// What one secondary tier said about a key, for one request.
enum class TierVerdict : uint8_t { kUnknown, kInFlight, kHit, kMiss };

// One live request. Read through the accessors; changed only by RequestTable.
class RequestState {
 public:
  const std::vector<OffloadKey>& chunk_keys() const { return spec_.chunk_keys; }
  // Whether the request has block hashes for its chunks (RequestSpec::
  // block_hashes, or given with chunks appended).
  bool has_block_hashes() const { return hashed_chunks_ > 0; }
  // The block hashes of chunk `chunk`, in order, its key's the last: what
  // its file records (FsTier::SubmitStore's block_hashes). Empty without
  // them, and for chunks appended without theirs.
  std::span<const BlockHash> ChunkBlockHashes(size_t chunk) const;

 private:
  friend class RequestTable;
  RequestSpec spec_;
  uint64_t offload_limit_tokens_ = 0;  // chunks ending beyond this are not stored
  // spec_.block_hashes: chunks [0, hashed_chunks_) have hashes_per_chunk_ each.
  size_t hashes_per_chunk_ = 0;
  size_t hashed_chunks_ = 0;
  // Per key, one verdict per secondary tier (kept while the request lives).
  std::unordered_map<OffloadKey, std::vector<TierVerdict>, OffloadKeyHasher> verdicts_;
  OffloadKeySet pinned_;  // keys this request holds a pin on
  // Keys this request's lookups promoted, and from which source tier
  // (PrefixLookup::source_tier keeps naming it once the row is in CPU).
  std::unordered_map<OffloadKey, int, OffloadKeyHasher> promoted_from_;
  // Chunks already counted in the hit/miss metrics (each chunk once, at its
  // first definite verdict, however often the request looks up).
  std::vector<bool> counted_;
};

// What Pin asks of the caller.
enum class PinResult : uint8_t {
  kNotWanted,  // beyond the request's pin_tokens, or it already pins the key
  kRefused,    // the pin cap is reached; counted in pins_refused()
  kShared,     // another live request pins the key already: nothing to do
  kFirst,      // the key's first pin: the caller holds its row until Unpinned
};

class RequestTable {
 public:
  struct Options {
    uint64_t chunk_tokens = 0;        // tokens per chunk (> 0)
    bool offload_prompt_only = true;  // the config's offload_prompt_only
    size_t tier_count = 0;            // secondary tiers (verdicts per key)
    // The fs tiers' namespace (blocks_per_file = blocks_per_chunk): how many
    // block hashes a chunk of a group holds (format::HashesPerFile).
    NamespaceSpec chunk_files;
  };
  explicit RequestTable(const Options& options) : options_(options) {}

  // The most keys that may be pinned at once; 0 (the default) turns pinning
  // off. Set once, before the first request.
  void set_pin_rows_max(uint64_t rows) { pin_rows_max_ = rows; }

  // kInvalidArgument for id 0 or an id that is live, or block_hashes the
  // chunk keys were not made from, or that a chunk file could not record
  // (RequestSpec::block_hashes; the rules FsTier::SubmitStore checks).
  [[nodiscard]] Status Start(uint64_t request_id, RequestSpec spec);
  // Appends chunk keys (decode), and their block hashes where given
  // (TieredStore::AppendChunkKeys). kNotFound for an id that is not live;
  // kInvalidArgument for hashes that did not make the keys, or given to a
  // request with a chunk that has none (nothing is appended then).
  [[nodiscard]] Status Append(uint64_t request_id, std::span<const OffloadKey> keys,
                              std::span<const BlockHash> block_hashes = {});
  // Forgets the request; returns the keys whose last pin it held (the caller
  // releases their rows). kNotFound for an id that is not live.
  [[nodiscard]] Result<std::vector<OffloadKey>> Finish(uint64_t request_id);
  // kNotFound for an id that is not live. The pointer is valid until Finish.
  [[nodiscard]] Result<RequestState*> Find(uint64_t request_id);
  RequestState* FindOrNull(uint64_t request_id);
  size_t size() const { return requests_.size(); }

  // kInvalidArgument unless `blocks` ids name whole chunks within the
  // request's chunk keys, from first_chunk on.
  [[nodiscard]] Status CheckChunkRange(const RequestState& req, size_t first_chunk, size_t blocks,
                                       size_t blocks_per_chunk) const;
  // Whether chunk `chunk` ends within the request's offloadable tokens.
  bool Offloadable(const RequestState& req, size_t chunk) const;

  // The secondary tiers' verdicts on `key`, one per tier in order. Tiers
  // with no verdict yet are marked in flight and the key is appended to
  // (*to_lookup)[tier]: the caller must start those lookups.
  std::span<const TierVerdict> AskTiers(RequestState& req, const OffloadKey& key,
                                        std::vector<std::vector<OffloadKey>>* to_lookup);
  // A lookup's answer. False (nothing changes) when the request is no longer
  // live or `tier` is out of range.
  bool SetVerdict(uint64_t request_id, const OffloadKey& key, size_t tier, TierVerdict verdict);
  // Every live request forgets its hit verdicts on `key` (a promotion of it
  // failed), so the next lookup asks the tiers again.
  void ForgetHits(const OffloadKey& key);

  // True the first time it is called for a chunk of a request (metrics count
  // each chunk once).
  bool FirstCount(RequestState& req, size_t chunk);
  // The source tier a lookup of this request promoted `key` from (i + 1 for
  // secondary tier i), remembered until the request finishes; 0 if none.
  void NotePromotion(RequestState& req, const OffloadKey& key, int source);
  int PromotedFrom(const RequestState& req, const OffloadKey& key) const;

  // The request pins `key` (chunk `chunk` of it) if its pin_tokens cover the
  // chunk and the cap allows.
  PinResult Pin(RequestState& req, size_t chunk, const OffloadKey& key);
  size_t pinned_keys() const { return pin_counts_.size(); }
  uint64_t pins_refused() const { return pins_refused_; }

 private:
  [[nodiscard]] Status AppendBlockHashes(uint64_t request_id, RequestState& req,
                                         std::span<const OffloadKey> keys,
                                         std::span<const BlockHash> block_hashes) const;

  const Options options_;
  uint64_t pin_rows_max_ = 0;
  std::unordered_map<uint64_t, RequestState> requests_;
  std::unordered_map<OffloadKey, uint32_t, OffloadKeyHasher> pin_counts_;
  uint64_t pins_refused_ = 0;
};

}  // namespace kvtier::internal
