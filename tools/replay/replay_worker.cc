// One replay instance (see replay.h): a simulated GPU prefix cache in front
// of a TieredStore, serving its share of a trace request by request.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <list>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "kvtier/config.h"
#include "kvtier/tiered_store.h"
#include "replay/replay.h"
#include "cpu_tier/cache_policy.h"
#include "staging/engine_kv_cache.h"
#include "util/json_text.h"

namespace kvtier::internal {
namespace {

using Clock = std::chrono::steady_clock;

struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const noexcept {
    size_t v = 0;
    std::memcpy(&v, h.bytes().data(), std::min(sizeof(v), h.size()));
    return v;
  }
};

// vLLM's GPU prefix cache, reduced to what replay needs: cached blocks by
// hash, evicted least recently used first. Requests run one at a time, so
// every block is free between requests.
class GpuPool {
 public:
  explicit GpuPool(uint32_t blocks) : capacity_(blocks) {}

  // Leading hashes that are cached; touches them.
  size_t CachedPrefix(std::span<const BlockHash> hashes) {
    size_t n = 0;
    while (n < hashes.size() && Touch(hashes[n])) ++n;
    return n;
  }
  std::optional<uint32_t> Find(const BlockHash& hash) const {
    auto it = map_.find(hash);
    if (it == map_.end()) return std::nullopt;
    return it->second->second;
  }
  // A block for `hash` (evicting the least recently used block not in
  // `keep`), cached under it.
  uint32_t Insert(const BlockHash& hash) {
    uint32_t block = 0;
    if (next_ < capacity_) {
      block = next_++;
    } else {
      block = lru_.front().second;
      map_.erase(lru_.front().first);
      lru_.pop_front();
    }
    lru_.emplace_back(hash, block);
    map_[hash] = std::prev(lru_.end());
    return block;
  }

 private:
  bool Touch(const BlockHash& hash) {
    auto it = map_.find(hash);
    if (it == map_.end()) return false;
    lru_.splice(lru_.end(), lru_, it->second);
    return true;
  }

  uint32_t capacity_;
  uint32_t next_ = 0;
  std::list<std::pair<BlockHash, uint32_t>> lru_;
  std::unordered_map<BlockHash, std::list<std::pair<BlockHash, uint32_t>>::iterator, BlockHashHasher> map_;
};

uint64_t ContentSeed(const BlockHash& hash) {
  uint64_t seed = 0;
  std::memcpy(&seed, hash.bytes().data(), std::min(sizeof(seed), hash.size()));
  return seed;
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The requests of the trace this worker serves, in arrival order.
std::vector<const TraceRequest*> Select(const Trace& trace, uint32_t instance, uint32_t instances, int phase) {
  std::vector<const TraceRequest*> out;
  const size_t half = trace.requests.size() / 2;
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    if (phase == 1 && i >= half) break;
    if (phase == 2 && i < half) continue;
    if (RouteSession(trace.requests[i].session, instances) == instance) out.push_back(&trace.requests[i]);
  }
  return out;
}

class Worker {
 public:
  Worker(const ReplayOptions& options, BlockHasher hasher, std::unique_ptr<EngineKvCache> gpu)
      : o_(options), hasher_(std::move(hasher)), gpu_(std::move(gpu)), pool_(o_.gpu_blocks) {}

  // The GPU pool's registration (one KV tensor, one page per block).
  DeviceKvCache gpu_registration() const { return gpu_->Registration(); }
  int device() const { return gpu_->device(); }
  void set_store(std::unique_ptr<TieredStore> store) {
    store_ = std::move(store);
    bpc_ = store_->blocks_per_chunk();
  }
  TieredStore* store() { return store_.get(); }
  // Remembers the blocks of every trace request before `index`.
  Status SeeEarlier(const Trace& trace, size_t index, bool after_restart);
  Status Serve(const TraceRequest& request, uint64_t id, int phase, PhaseReport* report);

 private:
  struct Chunks {
    std::vector<BlockHash> hashes;  // one per full GPU block
    std::vector<uint32_t> blocks;   // the GPU block of each hash
    size_t gpu_hit = 0;             // leading blocks the GPU cache had
  };
  Result<std::vector<BlockHash>> Hash(const TraceRequest& request) const;
  // Larger than the GPU pool (or empty): never served.
  bool Skipped(const TraceRequest& request) const;
  Result<Chunks> Prepare(const TraceRequest& request);
  void CountRepeated(const Chunks& c, size_t served_blocks, PhaseReport* report) const;
  void CountFirstTouch(const Chunks& c, size_t first_chunk, const PrefixLookup& lookup, size_t served_blocks,
                       PhaseReport* report);
  Result<TransferResult> Wait(uint64_t job_id);
  Status LoadHits(uint64_t id, const Chunks& c, size_t first_chunk, const PrefixLookup& lookup,
                  PhaseReport* report, double* load_s, size_t* loaded_chunks);
  Status StoreNew(uint64_t id, const Chunks& c, size_t first_chunk, PhaseReport* report);
  void Account(const TraceRequest& request, const Chunks& c, size_t served_blocks, double load_s, int phase,
               PhaseReport* report) const;
  void CountTiers(const Chunks& c, size_t first_chunk, const PrefixLookup& lookup, size_t loaded,
                  PhaseReport* report);

  const ReplayOptions& o_;
  BlockHasher hasher_;
  std::unique_ptr<EngineKvCache> gpu_;  // declared before store_: the store copies into it until destroyed
  GpuPool pool_;
  std::unique_ptr<TieredStore> store_;
  uint32_t bpc_ = 1;
  std::unordered_map<uint64_t, TransferResult> finished_;
  std::unordered_set<BlockHash, BlockHashHasher> earlier_;  // blocks of trace requests [0, seen_)
  std::unordered_set<BlockHash, BlockHashHasher> before_;   // ... of those before the restart
  std::unordered_set<BlockHash, BlockHashHasher> touched_;  // blocks this process has served
  size_t seen_ = 0;
};

Result<std::vector<BlockHash>> Worker::Hash(const TraceRequest& request) const {
  std::vector<BlockHash> hashes;
  RequestExtras extras;
  extras.lora_name = request.lora_name;
  extras.cache_salt = request.cache_salt;
  KVTIER_RETURN_IF_ERROR(hasher_.AppendBlockHashes(request.tokens, extras, &hashes));
  return hashes;
}

Status Worker::SeeEarlier(const Trace& trace, size_t index, bool after_restart) {
  const size_t half = trace.requests.size() / 2;  // the restart point (Select)
  for (; seen_ < index; ++seen_) {
    if (Skipped(trace.requests[seen_])) continue;  // never served: its blocks exist nowhere
    KVTIER_ASSIGN_OR_RETURN(const std::vector<BlockHash> hashes, Hash(trace.requests[seen_]));
    earlier_.insert(hashes.begin(), hashes.end());
    if (after_restart && seen_ < half) before_.insert(hashes.begin(), hashes.end());
  }
  return Status::Ok();
}

void Worker::CountFirstTouch(const Chunks& c, size_t first_chunk, const PrefixLookup& lookup, size_t served_blocks,
                             PhaseReport* report) {
  const uint64_t t = o_.gpu_block_tokens;
  for (size_t b = 0; b < c.hashes.size(); ++b) {
    if (!touched_.insert(c.hashes[b]).second || !before_.contains(c.hashes[b])) continue;
    report->first_touch_tokens += t;
    if (b >= served_blocks) {
      report->first_touch_recomputed += t;
    } else if (b / bpc_ >= first_chunk && lookup.source_tier[b / bpc_ - first_chunk] > 0) {
      report->first_touch_fs += t;  // source_tier 0 is the CPU tier, i > 0 fs tier i - 1
    }
  }
}

void Worker::CountRepeated(const Chunks& c, size_t served_blocks, PhaseReport* report) const {
  const uint64_t t = o_.gpu_block_tokens;
  for (size_t b = 0; b < c.hashes.size(); ++b) {
    if (!earlier_.contains(c.hashes[b])) continue;
    report->repeated_tokens += t;
    (b < c.gpu_hit ? report->repeated_gpu : b < served_blocks ? report->repeated_kvtier : report->repeated_recomputed) +=
        t;
  }
}

Result<Worker::Chunks> Worker::Prepare(const TraceRequest& request) {
  Chunks c;
  KVTIER_ASSIGN_OR_RETURN(c.hashes, Hash(request));
  c.gpu_hit = pool_.CachedPrefix(c.hashes);
  // Blocks for the whole prompt: the cached ones keep theirs, the rest get
  // new ones (a request never evicts its own blocks: the pool is larger).
  for (const BlockHash& hash : c.hashes) {
    std::optional<uint32_t> block = pool_.Find(hash);
    c.blocks.push_back(block ? *block : pool_.Insert(hash));
  }
  return c;
}

Result<TransferResult> Worker::Wait(uint64_t job_id) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(o_.lookup_timeout_ms);
  std::vector<TransferResult> done;
  while (Clock::now() < deadline) {
    done.clear();
    store_->PollFinished(&done);
    for (TransferResult& r : done) finished_[r.job_id] = std::move(r);
    auto it = finished_.find(job_id);
    if (it != finished_.end()) {
      TransferResult r = std::move(it->second);
      finished_.erase(it);
      return r;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return Status(StatusCode::kTimedOut, "replay: a transfer did not finish in time");
}

// Per chunk after the GPU-cached prefix: the tier that served it (a lookup
// hit that also loaded), or a miss of every tier (misses count every chunk
// that was not served, not only the one that ended the lookup).
void Worker::CountTiers(const Chunks& c, size_t first_chunk, const PrefixLookup& lookup, size_t loaded,
                        PhaseReport* report) {
  const size_t chunks = c.hashes.size() / bpc_;
  const uint64_t row_bytes = store_->row_bytes();
  for (size_t i = first_chunk; i < chunks; ++i) {
    const size_t k = i - first_chunk;
    const int source = k < loaded ? lookup.source_tier[k] : -1;
    for (size_t t = 0; t <= store_->secondary_tier_count(); ++t) {
      TierCounts& counts = report->tiers[t == 0 ? "cpu" : "fs" + std::to_string(t - 1)];
      if (source == static_cast<int>(t)) {
        ++counts.hits;
        counts.bytes += row_bytes;
        break;  // the tiers after the one that served it were not asked
      }
      ++counts.misses;
    }
  }
}

Status Worker::LoadHits(uint64_t id, const Chunks& c, size_t first_chunk, const PrefixLookup& lookup,
                        PhaseReport* report, double* load_s, size_t* loaded_chunks) {
  const std::vector<uint32_t> blocks(c.blocks.begin() + first_chunk * bpc_,
                                     c.blocks.begin() + (first_chunk + lookup.hit_chunks) * bpc_);
  const Clock::time_point start = Clock::now();
  KVTIER_ASSIGN_OR_RETURN(uint64_t job, store_->Load(id, first_chunk, blocks));
  KVTIER_ASSIGN_OR_RETURN(TransferResult result, Wait(job));
  *load_s = Seconds(Clock::now() - start);
  const size_t ok = result.OkPrefix();
  report->rows_loaded += ok;
  report->load_bytes += ok * store_->row_bytes();
  for (size_t k = 0; k < ok; ++k) {
    bool match = true;
    for (size_t b = (first_chunk + k) * bpc_; b < (first_chunk + k + 1) * bpc_ && match; ++b) {
      KVTIER_ASSIGN_OR_RETURN(match, gpu_->Matches(c.blocks[b], ContentSeed(c.hashes[b])));
    }
    ++(match ? report->rows_verified : report->rows_corrupt);
  }
  *loaded_chunks = ok;
  return Status::Ok();
}

// A store refused for room (every CPU row busy) is skipped, as an engine
// would, and a failed one too; only a job that does not finish is an error.
// Both are counted (the report and --store-loss-max).
Status Worker::StoreNew(uint64_t id, const Chunks& c, size_t first_chunk, PhaseReport* report) {
  const size_t chunks = c.hashes.size() / bpc_;
  if (first_chunk >= chunks) return Status::Ok();
  const std::vector<uint32_t> blocks(c.blocks.begin() + first_chunk * bpc_, c.blocks.begin() + chunks * bpc_);
  KVTIER_ASSIGN_OR_RETURN(uint64_t job, store_->Store(id, first_chunk, blocks));
  KVTIER_ASSIGN_OR_RETURN(const TransferResult result, Wait(job));
  TierCounts& cpu = report->tiers["cpu"];
  for (const ChunkResult& chunk : result.chunks) {
    switch (chunk.outcome) {
      case ChunkOutcome::kOk: ++cpu.stores_ok; break;
      case ChunkOutcome::kAlreadyCached:
      case ChunkOutcome::kNotOffloaded: ++cpu.stores_skipped; break;
      case ChunkOutcome::kNoSpace: ++cpu.stores_dropped; break;
      case ChunkOutcome::kMiss:  // not a store outcome; counted as a failure if it ever appears
      case ChunkOutcome::kError: ++cpu.stores_failed; break;
    }
  }
  return Status::Ok();
}

// The secondary tiers' write-through outcomes, from their metrics (the
// store was opened for this phase, so they count this phase alone).
void CountTierStores(const TieredStore& store, PhaseReport* report) {
  const TieredStoreMetrics m = store.Metrics();
  for (size_t t = 1; t < m.tiers.size(); ++t) {
    TierCounts& counts = report->tiers["fs" + std::to_string(t - 1)];
    counts.stores_ok = m.tiers[t].rows_in;
    counts.stores_skipped = m.tiers[t].stores_skipped;
    counts.stores_failed = m.tiers[t].stores_failed;
    counts.stores_dropped = m.tiers[t].stores_dropped;
  }
}

void Worker::Account(const TraceRequest& request, const Chunks& c, size_t served_blocks, double load_s, int phase,
                     PhaseReport* report) const {
  const uint64_t tokens = request.tokens.size();
  const uint64_t gpu_tokens = uint64_t{c.gpu_hit} * o_.gpu_block_tokens;
  const uint64_t served_tokens = std::min<uint64_t>(tokens, uint64_t{served_blocks} * o_.gpu_block_tokens);
  ++report->requests;
  report->prompt_tokens += tokens;
  report->tokens_gpu += gpu_tokens;
  report->tokens_kvtier += served_tokens - gpu_tokens;
  report->tokens_recomputed += tokens - served_tokens;
  report->ttft_without_s += static_cast<double>(tokens - gpu_tokens) / o_.prefill_tokens_per_s;
  report->ttft_with_s += load_s + static_cast<double>(tokens - served_tokens) / o_.prefill_tokens_per_s;
  if (load_s > 0) {
    report->load_busy_s += load_s;
    report->load_ms.push_back(load_s * 1e3);
  }
  report->points.push_back(ReplayPoint{request.arrival_s, static_cast<double>(served_tokens) / static_cast<double>(tokens),
                                       load_s * 1e3, phase == 2 ? 1 : 0});
}

bool Worker::Skipped(const TraceRequest& request) const {
  const uint64_t blocks_needed = (request.tokens.size() + o_.gpu_block_tokens - 1) / o_.gpu_block_tokens;
  return request.tokens.empty() || blocks_needed > o_.gpu_blocks;
}

Status Worker::Serve(const TraceRequest& request, uint64_t id, int phase, PhaseReport* report) {
  if (Skipped(request)) {
    ++report->requests_skipped;
    return Status::Ok();
  }
  KVTIER_ASSIGN_OR_RETURN(Chunks c, Prepare(request));
  const size_t chunks = c.hashes.size() / bpc_;
  std::vector<OffloadKey> keys = ChunkOffloadKeys(c.hashes, bpc_, 0);
  KVTIER_RETURN_IF_ERROR(store_->StartRequest(id, RequestSpec{keys, request.tokens.size(), std::nullopt, 0, {}}));
  const size_t first_chunk = c.gpu_hit / bpc_;
  PrefixLookup lookup;
  if (first_chunk < chunks) {
    KVTIER_ASSIGN_OR_RETURN(lookup, store_->LookupWait(id, first_chunk, o_.lookup_timeout_ms));
  }
  double load_s = 0;
  size_t loaded = 0;
  if (lookup.hit_chunks > 0) KVTIER_RETURN_IF_ERROR(LoadHits(id, c, first_chunk, lookup, report, &load_s, &loaded));
  CountTiers(c, first_chunk, lookup, loaded, report);
  // "Compute" what no cache served: its content follows from its hash.
  const size_t served = std::max(c.gpu_hit, (first_chunk + loaded) * bpc_);
  for (size_t b = served; b < c.hashes.size(); ++b) {
    KVTIER_RETURN_IF_ERROR(gpu_->Fill(c.blocks[b], ContentSeed(c.hashes[b])));
  }
  KVTIER_RETURN_IF_ERROR(StoreNew(id, c, first_chunk + loaded, report));
  KVTIER_RETURN_IF_ERROR(store_->FinishRequest(id));
  Account(request, c, served, load_s, phase, report);
  CountRepeated(c, served, report);
  CountFirstTouch(c, first_chunk, lookup, served, report);
  return Status::Ok();
}

// The config with secondary tier 0's root_dir replaced by `root`. Parsing
// and dumping recurse per nesting level: the depth is checked first.
Result<std::string> WithRoot(const std::string& config_json, const std::string& root) {
  KVTIER_RETURN_IF_ERROR(CheckJsonDepth(config_json, static_cast<size_t>(kOffloadConfigDepthMax), "replay: the config"));
  nlohmann::json config = nlohmann::json::parse(config_json, nullptr, false);
  if (config.is_discarded() || !config.is_object()) {
    return Status(StatusCode::kInvalidArgument, "replay: the config is not a JSON object");
  }
  auto tiers = config.find("secondary_tiers");
  if (tiers != config.end() && tiers->is_array() && !tiers->empty() && (*tiers)[0].is_object()) {
    (*tiers)[0]["root_dir"] = root;
  }
  return config.dump();
}

Result<std::unique_ptr<Worker>> OpenWorker(const ReplayOptions& o) {
  TieredStoreOptions so;
  KVTIER_ASSIGN_OR_RETURN(so.config_json, WithRoot(o.config_json, o.root));
  so.engine.gpu_block_size_tokens = o.gpu_block_tokens;
  so.ns.model_name = o.model;
  KVTIER_ASSIGN_OR_RETURN(std::vector<KvCacheGroupSpec> groups, KvGroupsFromFlags(o.kv_groups, o.gpu_block_tokens));
  ApplyKvGroups(std::move(groups), &so.ns);  // tokens_per_hash: the GPU block size
  const char* seed_env = std::getenv("PYTHONHASHSEED");
  const NoneHashSeed seed = ResolveNoneHashSeed(
      o.hash_algo, seed_env ? std::optional<std::string_view>(seed_env) : std::nullopt);
  KVTIER_ASSIGN_OR_RETURN(BlockHasher hasher,
                          BlockHasher::Create(o.hash_algo, ComputeNoneHash(o.hash_algo, seed.seed), o.gpu_block_tokens));
  KVTIER_ASSIGN_OR_RETURN(
      std::unique_ptr<EngineKvCache> gpu,
      EngineKvCache::Make(o.device, {{uint64_t{o.gpu_block_tokens} * o.kv_bytes_per_token, 0}}, o.gpu_blocks));
  auto worker = std::make_unique<Worker>(o, std::move(hasher), std::move(gpu));
  so.devices = {worker->gpu_registration()};
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<TieredStore> store, TieredStore::Open(so));
  worker->set_store(std::move(store));
  return worker;
}

}  // namespace

uint32_t RouteSession(const std::string& session, uint32_t instances) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a: stable across processes and builds
  for (unsigned char ch : session) h = (h ^ ch) * 1099511628211ull;
  return instances == 0 ? 0 : static_cast<uint32_t>(h % instances);
}

Result<PhaseReport> RunReplayWorker(const ReplayOptions& options, const Trace& trace, uint32_t instance,
                                    uint32_t instances, int phase) {
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Worker> worker, OpenWorker(options));
  PhaseReport report;
  report.name = phase == 0 ? "all" : phase == 1 ? "before_restart" : "after_restart";
  report.device = worker->device();
  uint64_t id = 1;
  for (const TraceRequest* request : Select(trace, instance, instances, phase)) {
    KVTIER_RETURN_IF_ERROR(worker->SeeEarlier(trace, static_cast<size_t>(request - trace.requests.data()), phase == 2));
    KVTIER_RETURN_IF_ERROR(worker->Serve(*request, id++, phase, &report));
  }
  KVTIER_RETURN_IF_ERROR(worker->store()->WaitIdle(options.lookup_timeout_ms * 4));
  CountTierStores(*worker->store(), &report);
  return report;
}

}  // namespace kvtier::internal
