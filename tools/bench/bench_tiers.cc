// `kvtier bench tiers` (see bench_tiers.h).
#include "bench/bench_tiers.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include "cli/kv_groups.h"
#include "cli/spawn.h"
#include "kvtier/layout.h"
#include "kvtier/tiered_store.h"
#include "staging/engine_kv_cache.h"
#include "util/utf8.h"

namespace kvtier::internal {
namespace {

using nlohmann::json;

// Any block size works with one block per chunk; 16 is vLLM's default.
constexpr uint32_t kGpuBlockTokens = kVllmDefaultBlockTokens;
// Per job, per LookupWait and per WaitIdle: far beyond any healthy run.
constexpr uint32_t kWaitMs = 60000;
constexpr auto kPollInterval = std::chrono::microseconds(50);

// HostKvCache::Fill's seed for a row: distinct per (seed, row), and the same
// whichever GPU block stages the row.
uint64_t ContentSeed(uint64_t seed, uint64_t row) {
  return SplitMix64(SplitMix64(seed ^ 0x74696572732d6263ull) + row);
}

std::string ModelName(const BenchTiersOptions& o) {
  return o.model.empty() ? "kvtier-bench/tiers-" + std::to_string(o.row_bytes) : o.model;
}

// What TieredStore derives for its fs tiers (blocks_per_file = blocks_per_chunk)
// for the model's KV-cache groups (--layers / --kv-groups).
Result<NamespaceSpec> BenchNamespaceSpec(const BenchTiersOptions& o) {
  NamespaceSpec spec;
  spec.model_name = ModelName(o);
  spec.blocks_per_file = 1;
  KVTIER_ASSIGN_OR_RETURN(std::vector<KvCacheGroupSpec> groups, KvGroupsFromFlags(o.kv_groups, kGpuBlockTokens));
  ApplyKvGroups(std::move(groups), &spec);
  return spec;
}

uint32_t CpuRows(const BenchTiersOptions& o) {
  return static_cast<uint32_t>(std::min<uint64_t>(o.cpu_bytes / o.row_bytes, UINT32_MAX));
}

// A request's chunks are stored or promoted together, so a batch larger than
// the CPU tier could never fit: it is cut to the tier's rows.
uint32_t EffectiveBatch(const BenchTiersOptions& o) { return std::min(o.batch, CpuRows(o)); }

Status CheckTiersArgs(const BenchTiersOptions& o) {
  KVTIER_RETURN_IF_ERROR(CheckBenchArgs(o.root, o.row_bytes, o.rows, 1));
  if (!IsValidUtf8(o.root))
    return InvalidArgument("--root must be UTF-8 (it goes into the config JSON)");
  if (o.rows > UINT64_MAX / o.row_bytes)
    return InvalidArgument("--rows x --row-bytes overflows 64 bits");
  if (o.cpu_bytes < o.row_bytes) {
    return InvalidArgument("--cpu-bytes (" + std::to_string(o.cpu_bytes) +
                           ") must hold at least one row of " + "--row-bytes (" +
                           std::to_string(o.row_bytes) + ")");
  }
  if (o.device < kHostStandInDevice)
    return InvalidArgument("--device must be a CUDA ordinal or -1 (the host stand-in)");
  if (o.batch < 1 || o.batch > 4096)
    return InvalidArgument("--batch must be in [1, 4096], got " + std::to_string(o.batch));
  // The CPU tier and the stand-in GPU blocks are both host memory here.
  const Status memory = CheckBufferMemory(o.row_bytes, uint64_t{CpuRows(o)} + EffectiveBatch(o));
  if (!memory.ok()) return InvalidArgument("--cpu-bytes and --batch: " + memory.message());
  return Status::Ok();
}

// The engine side of one process: its KV cache and the store over it. The
// store is declared last so it is destroyed first, while its tensors still
// exist.
struct Bench {
  explicit Bench(const BenchTiersOptions& o) : keys(o.seed, 8) {}
  std::unique_ptr<EngineKvCache> gpu;  // one tensor whose page is a row, `batch` blocks
  BenchRows keys;                      // only its keys: the content is the EngineKvCache's
  std::unique_ptr<TieredStore> store;
};

Status OpenStore(const BenchTiersOptions& o, Bench* b) {
  KVTIER_ASSIGN_OR_RETURN(b->gpu, EngineKvCache::Make(o.device, {{o.row_bytes, 0}}, EffectiveBatch(o)));
  const json tier = {{"type", "fs"}, {"root_dir", o.root}};
  const json config = {{"spec_name", "TieringOffloadingSpec"},
                       {"cpu_bytes_to_use", o.cpu_bytes},
                       {"blocks_per_chunk", 1},
                       {"secondary_tiers", json::array({tier})}};
  TieredStoreOptions options;
  options.config_json = config.dump();  // root is UTF-8 (checked): dump cannot throw
  options.engine.gpu_block_size_tokens = kGpuBlockTokens;
  KVTIER_ASSIGN_OR_RETURN(options.ns, BenchNamespaceSpec(o));
  options.devices = {b->gpu->Registration()};
  KVTIER_ASSIGN_OR_RETURN(b->store, TieredStore::Open(options));
  if (b->store->row_bytes() != o.row_bytes || b->store->secondary_tier_count() != 1) {
    return Internal("bench tiers: the store's rows are " + std::to_string(b->store->row_bytes()) +
                    " bytes, expected --row-bytes");
  }
  return Status::Ok();
}

std::vector<OffloadKey> BatchKeys(const Bench& b, uint64_t first, uint32_t n) {
  std::vector<OffloadKey> keys;
  for (uint32_t i = 0; i < n; ++i) keys.push_back(b.keys.Key(first + i));
  return keys;
}

std::vector<uint32_t> BatchBlocks(uint32_t n) {
  std::vector<uint32_t> blocks(n);
  for (uint32_t i = 0; i < n; ++i) blocks[i] = i;
  return blocks;
}

void SleepPolling(double* poll_cpu_s) {
  const double c0 = ThreadCpuSeconds();
  std::this_thread::sleep_for(kPollInterval);
  *poll_cpu_s += ThreadCpuSeconds() - c0;
}

// Polls until job `id` is reported. The phases keep one job in flight, so
// nothing else is expected; anything else is dropped.
Result<TransferResult> WaitJob(TieredStore* store, uint64_t id, double* poll_cpu_s) {
  const uint64_t deadline = BenchNowNs() + uint64_t{kWaitMs} * 1'000'000;
  std::vector<TransferResult> done;
  while (BenchNowNs() < deadline) {
    done.clear();
    if (store->PollFinished(&done) == 0) SleepPolling(poll_cpu_s);
    for (TransferResult& r : done) {
      if (r.job_id == id) return std::move(r);
    }
  }
  return Status(StatusCode::kTimedOut,
                "bench tiers: job " + std::to_string(id) + " not finished after 60 s");
}

// Wall time, process CPU (minus the harness) and its breakdown over a phase.
class PhaseClock {
 public:
  PhaseClock()
      : threads0_(SnapshotThreadCpu()),
        switches0_(ProcessContextSwitches()),
        cpu0_(ProcessCpuSeconds()),
        t0_(BenchNowNs()) {}
  void Stop(DirectionFigures* f) const {
    f->wall_s = static_cast<double>(BenchNowNs() - t0_) * 1e-9;
    f->cpu_s = std::max(0.0, ProcessCpuSeconds() - cpu0_ - f->harness_cpu_s - f->poll_wait_cpu_s);
    SetThreadCpuBreakdown(threads0_, SnapshotThreadCpu(), f);
    f->context_switches = ProcessContextSwitches() - switches0_;
  }

 private:
  ThreadCpuSnapshot threads0_;
  uint64_t switches0_;
  double cpu0_;
  uint64_t t0_;
};

// The store phase: batches of rows through the CPU tier to fs.
class StorePhase {
 public:
  StorePhase(const BenchTiersOptions& o, Bench* b, BenchTiersResult* r)
      : o_(o), b_(b), r_(r), batch_(EffectiveBatch(o)), cpu_rows_(b->store->cpu_rows()) {}

  Status Run() {
    const TieredStoreMetrics m0 = b_->store->Metrics();
    PhaseClock clock;
    for (uint64_t first = 0; first < o_.rows; first += batch_) {
      KVTIER_RETURN_IF_ERROR(
          Batch(first, static_cast<uint32_t>(std::min<uint64_t>(batch_, o_.rows - first))));
    }
    KVTIER_RETURN_IF_ERROR(b_->store->WaitIdle(kWaitMs));  // the phase ends with every row on fs
    clock.Stop(&f_);
    f_.rows = r_->rows_stored;
    f_.bytes = r_->rows_stored * o_.row_bytes;
    f_.p50_us = PercentileUs(latencies_ns_, 50);
    f_.p99_us = PercentileUs(latencies_ns_, 99);
    r_->store = f_;
    const TieredStoreMetrics m1 = b_->store->Metrics();
    r_->rows_evicted = m1.tiers[0].rows_evicted - m0.tiers[0].rows_evicted;
    r_->rows_written_through = m1.tiers[1].rows_in - m0.tiers[1].rows_in;
    r_->fs_stores_failed = m1.tiers[1].stores_failed - m0.tiers[1].stores_failed;
    r_->fs_stores_dropped = m1.tiers[1].stores_dropped - m0.tiers[1].stores_dropped;
    return Status::Ok();
  }

 private:
  Status Batch(uint64_t first, uint32_t n) {
    const uint64_t id = ++request_id_;
    KVTIER_RETURN_IF_ERROR(
        b_->store->StartRequest(id, RequestSpec{BatchKeys(*b_, first, n), 0, std::nullopt, 0, {}}));
    const std::vector<uint32_t> blocks = BatchBlocks(n);
    // Filling overlaps the write-through of earlier batches; GPU blocks are
    // reused only after the previous Store reported (its copy is done).
    const double c0 = ThreadCpuSeconds();
    for (uint32_t i = 0; i < n; ++i) KVTIER_RETURN_IF_ERROR(b_->gpu->Fill(i, ContentSeed(o_.seed, first + i)));
    f_.harness_cpu_s += ThreadCpuSeconds() - c0;
    KVTIER_RETURN_IF_ERROR(WaitForRoom(n));
    const uint64_t submit_ns = BenchNowNs();
    KVTIER_ASSIGN_OR_RETURN(const uint64_t job, b_->store->Store(id, 0, blocks));
    KVTIER_ASSIGN_OR_RETURN(const TransferResult done,
                            WaitJob(b_->store.get(), job, &f_.poll_wait_cpu_s));
    latencies_ns_.push_back(BenchNowNs() - submit_ns);
    if (done.chunks.size() != n)
      return Internal("bench tiers: a store job came back with the wrong chunk count");
    for (uint32_t k = 0; k < n; ++k) Count(first + k, done.chunks[k]);
    return b_->store->FinishRequest(id);
  }

  // Rows being written through are held in the CPU tier until fs has them,
  // and a Store that finds no free or evictable row fails with kNoSpace. A
  // batch that might not fit next to the rows stored since the store was last
  // idle waits until it is idle again. That is exact (the fs tier's metrics
  // count rows as they are written, but a write-through job releases all its
  // rows only when its last row is written), and with a CPU tier of several
  // batches the fs writes still overlap the fills and copies in between.
  Status WaitForRoom(uint32_t n) {
    if (in_flight_ + n <= cpu_rows_) return Status::Ok();
    KVTIER_RETURN_IF_ERROR(b_->store->WaitIdle(kWaitMs));
    ++r_->idle_waits;
    in_flight_ = 0;
    return Status::Ok();
  }

  void Count(uint64_t row, const ChunkResult& c) {
    if (c.outcome == ChunkOutcome::kOk) {
      ++r_->rows_stored;
      ++in_flight_;
    } else if (c.outcome == ChunkOutcome::kAlreadyCached) {
      ++r_->rows_already_cached;
    } else {
      ++r_->store_errors;
      if (r_->first_error.empty()) {
        r_->first_error = "store row " + std::to_string(row) + ": " +
                          std::string(ChunkOutcomeName(c.outcome)) +
                          (c.status.ok() ? "" : " " + c.status.ToString());
      }
    }
  }

  const BenchTiersOptions& o_;
  Bench* b_;
  BenchTiersResult* r_;
  const uint32_t batch_, cpu_rows_;
  DirectionFigures f_;
  std::vector<uint64_t> latencies_ns_;
  uint64_t request_id_ = 0;
  uint64_t in_flight_ = 0;  // rows stored since the store was last idle
};

// The load phase: per batch, look up, load the hit prefix and verify it.
// The next batch's request starts as soon as this batch's Load has released
// its CPU rows, so its lookups and promotions (fs reads) overlap this
// batch's verification, as an engine's next request overlaps its compute.
class LoadPhase {
 public:
  LoadPhase(const BenchTiersOptions& o, Bench* b, BenchTiersLoad* r)
      : o_(o), b_(b), r_(r), batch_(EffectiveBatch(o)) {}

  Status Run() {
    r_->cpu_rows = b_->store->cpu_rows();
    r_->hits["cpu"] = 0;
    for (size_t i = 0; i < b_->store->secondary_tier_count(); ++i) {
      r_->hits["fs" + std::to_string(i)] = 0;
    }
    PhaseClock clock;
    KVTIER_ASSIGN_OR_RETURN(Request request, Begin(0));
    for (uint64_t first = 0; first < o_.rows; first += batch_) {
      const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(batch_, o_.rows - first));
      KVTIER_ASSIGN_OR_RETURN(const uint32_t hit, LookupAndLoad(request, first, n));
      Request next;
      if (first + n < o_.rows) {
        KVTIER_ASSIGN_OR_RETURN(next, Begin(first + n));
      }
      Verify(first, loaded_, next.id);
      r_->errors += hit - loaded_;
      r_->missing += n - hit;
      if (hit < n) Note(first + hit, "not found in any tier");
      KVTIER_RETURN_IF_ERROR(b_->store->FinishRequest(request.id));
      request = next;
    }
    DirectionFigures& f = r_->figures;
    clock.Stop(&f);
    f.rows = r_->verified;
    f.bytes = r_->verified * o_.row_bytes;
    f.p50_us = PercentileUs(latencies_ns_, 50);
    f.p99_us = PercentileUs(latencies_ns_, 99);
    return Status::Ok();
  }

 private:
  struct Request {
    uint64_t id = 0;  // 0: none
    uint64_t begin_ns = 0;
  };

  // Starts the request of the batch at `first` and its first lookup, which
  // submits the fs existence checks without waiting for them.
  Result<Request> Begin(uint64_t first) {
    const Request request{++request_id_, BenchNowNs()};
    const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(batch_, o_.rows - first));
    KVTIER_RETURN_IF_ERROR(b_->store->StartRequest(
        request.id, RequestSpec{BatchKeys(*b_, first, n), 0, std::nullopt, 0, {}}));
    KVTIER_RETURN_IF_ERROR(b_->store->Lookup(request.id, 0).status());
    return request;
  }

  // Waits for the lookup, loads the hit prefix into GPU blocks [0, hit) and
  // sets loaded_ (the chunks the Load returned); returns hit.
  Result<uint32_t> LookupAndLoad(const Request& request, uint64_t first, uint32_t n) {
    loaded_ = 0;
    KVTIER_ASSIGN_OR_RETURN(const PrefixLookup lookup,
                            b_->store->LookupWait(request.id, 0, kWaitMs));
    const uint32_t hit = static_cast<uint32_t>(std::min<size_t>(n, lookup.hit_chunks));
    for (uint32_t i = 0; i < hit && i < lookup.source_tier.size(); ++i) {
      CountHit(lookup.source_tier[i]);
    }
    if (hit == 0) return hit;
    KVTIER_ASSIGN_OR_RETURN(const uint64_t job, b_->store->Load(request.id, 0, BatchBlocks(hit)));
    KVTIER_ASSIGN_OR_RETURN(const TransferResult done,
                            WaitJob(b_->store.get(), job, &r_->figures.poll_wait_cpu_s));
    latencies_ns_.push_back(BenchNowNs() - request.begin_ns);
    loaded_ = static_cast<uint32_t>(std::min<size_t>(hit, done.OkPrefix()));
    if (loaded_ < hit && loaded_ < done.chunks.size()) {
      const ChunkResult& c = done.chunks[loaded_];
      Note(first + loaded_, std::string(ChunkOutcomeName(c.outcome)) +
                                (c.status.ok() ? "" : " " + c.status.ToString()));
    }
    return hit;
  }

  void CountHit(int source) {
    if (source == 0) ++r_->hits["cpu"];
    if (source > 0) ++r_->hits["fs" + std::to_string(source - 1)];
  }

  // Verifies the loaded rows. A secondary hit starts its promotion only when
  // a lookup sees it, so while the next request still waits for existence
  // checks a non-blocking Lookup after each row moves it on.
  void Verify(uint64_t first, uint32_t loaded, uint64_t next_id) {
    bool next_moving = next_id == 0;
    for (uint32_t i = 0; i < loaded; ++i) {
      const double c0 = ThreadCpuSeconds();
      const Result<bool> matches = b_->gpu->Matches(i, ContentSeed(o_.seed, first + i));
      const bool good = matches.ok() && *matches;
      r_->figures.harness_cpu_s += ThreadCpuSeconds() - c0;
      if (good) {
        ++r_->verified;
      } else {
        ++r_->corrupt;
        Note(first + i, matches.ok() ? "the bytes loaded differ from the bytes stored"
                                     : "could not read the block back: " + matches.status().message());
      }
      if (!next_moving) next_moving = !Retrying(next_id);
    }
  }

  bool Retrying(uint64_t id) {
    const Result<PrefixLookup> lookup = b_->store->Lookup(id, 0);
    return lookup.ok() && std::find(lookup->verdicts.begin(), lookup->verdicts.end(),
                                    ChunkVerdict::kRetry) != lookup->verdicts.end();
  }

  void Note(uint64_t row, const std::string& what) {
    if (r_->first_error.empty()) r_->first_error = "load row " + std::to_string(row) + ": " + what;
  }

  const BenchTiersOptions& o_;
  Bench* b_;
  BenchTiersLoad* r_;
  const uint32_t batch_;
  std::vector<uint64_t> latencies_ns_;
  uint64_t request_id_ = 0;
  uint32_t loaded_ = 0;  // of the current batch
};

// The benchmark's namespace directories under root, and whether each existed
// before the run: those are kept, only the benchmark's own files removed.
struct BenchDirs {
  Namespace ns;
  std::string ns_dir, block_dir;
  bool ns_existed = false, block_existed = false;
};

void RemoveRowFiles(const BenchTiersOptions& o, const BenchDirs& d) {
  const BenchRows keys(o.seed, 8);
  std::error_code ec;
  for (uint64_t row = 0; row < o.rows; ++row)
    std::filesystem::remove(JoinRoot(o.root, d.ns.BlockRelPath(keys.Key(row))), ec);
}

Result<BenchDirs> InspectDirs(const BenchTiersOptions& o) {
  KVTIER_ASSIGN_OR_RETURN(const NamespaceSpec spec, BenchNamespaceSpec(o));
  Result<Namespace> created = Namespace::Create(spec);
  if (!created.ok()) return created.status().WithContext("--model");
  const Namespace& ns = *created;
  BenchDirs d{ns, JoinRoot(o.root, ns.dir_name()), JoinRoot(o.root, ns.block_dir_name())};
  std::error_code ec;
  d.ns_existed = std::filesystem::exists(d.ns_dir, ec);
  d.block_existed = std::filesystem::exists(d.block_dir, ec);
  // Rows left by an earlier --keep run would be skipped, not stored (nor timed).
  if (d.block_existed) RemoveRowFiles(o, d);
  return d;
}

void Cleanup(const BenchTiersOptions& o, const BenchDirs& d) {
  std::error_code ec;
  if (d.block_existed) {
    RemoveRowFiles(o, d);
  } else {
    std::filesystem::remove_all(d.block_dir, ec);
  }
  if (!d.ns_existed) std::filesystem::remove_all(d.ns_dir, ec);
}

Status RunStorePhase(const BenchTiersOptions& o, const BenchDirs& dirs, BenchTiersResult* r) {
  Bench b(o);
  KVTIER_RETURN_IF_ERROR(OpenStore(o, &b));
  if (b.store->secondary_tier(0).ns().dir_name() != dirs.ns.dir_name()) {
    return Internal("bench tiers: the store's namespace is not " + dirs.ns.dir_name());
  }
  r->cpu_rows = b.store->cpu_rows();
  StorePhase phase(o, &b, r);
  return phase.Run();
}  // the store and its CPU tier are gone before the load phase starts

// Re-executes this binary for the load phase: a fresh process, an empty CPU
// tier. Its stderr is the user's; its stdout is the report.
Result<BenchTiersLoad> RunLoadChild(const BenchTiersOptions& o) {
  std::vector<std::string> argv = {
      SelfExePath(),  "bench", "tiers", "--root=" + o.root, "--model=" + ModelName(o),
      "--phase=load", "--json", "--device=" + std::to_string(o.device)};
  for (const auto& [flag, value] : {std::pair<std::string, uint64_t>{"--rows=", o.rows},
                                    {"--cpu-bytes=", o.cpu_bytes},
                                    {"--row-bytes=", o.row_bytes},
                                    {"--batch=", o.batch},
                                    {"--seed=", o.seed}}) {
    argv.push_back(flag + std::to_string(value));
  }
  for (std::string& arg : KvGroupArgs(o.kv_groups)) argv.push_back(std::move(arg));
  KVTIER_ASSIGN_OR_RETURN(const ChildOutput child, RunChild("/proc/self/exe", argv));
  Result<BenchTiersLoad> load = ParseBenchTiersLoad(child.out);
  if (!load.ok()) {
    return Internal("the load phase (a fresh kvtier process) exited " +
                    std::to_string(child.exit_code) +
                    " without a usable report: " + load.status().message());
  }
  return load;
}

}  // namespace

Result<BenchTiersResult> RunBenchTiers(const BenchTiersOptions& options) {
  BenchTiersOptions o = options;
  o.device = ResolveDevice(o.device);
  KVTIER_RETURN_IF_ERROR(CheckTiersArgs(o));
  KVTIER_RETURN_IF_ERROR(CheckFreeSpace(o.root, o.rows * o.row_bytes));
  KVTIER_ASSIGN_OR_RETURN(const BenchDirs dirs, InspectDirs(o));
  BenchTiersResult r;
  r.root = o.root;
  r.model = ModelName(o);
  r.namespace_dir = dirs.ns_dir;
  r.rows = o.rows;
  r.row_bytes = o.row_bytes;
  r.cpu_bytes = o.cpu_bytes;
  r.batch = EffectiveBatch(o);
  r.device = o.device;
  Status status = RunStorePhase(o, dirs, &r);
  if (status.ok()) {
    Result<BenchTiersLoad> load = RunLoadChild(o);
    status = load.status();
    if (load.ok()) r.load = std::move(load).value();
  }
  r.kept = o.keep;
  if (!o.keep) Cleanup(o, dirs);
  KVTIER_RETURN_IF_ERROR(status);
  return r;
}

std::string BenchTiersWarning(const BenchTiersOptions& o) {
  // Bad options get their own message from RunBenchTiers; no warning first.
  if (!CheckTiersArgs(o).ok() || o.rows * o.row_bytes > o.cpu_bytes) return "";
  return "--rows x --row-bytes (" + HumanBytes(o.rows * o.row_bytes) +
         ") fits in the CPU tier (--cpu-bytes " + HumanBytes(o.cpu_bytes) +
         "): the store phase never evicts; use far more rows than the CPU tier holds";
}

Result<BenchTiersLoad> RunBenchTiersLoad(const BenchTiersOptions& options) {
  BenchTiersOptions o = options;
  o.device = ResolveDevice(o.device);
  KVTIER_RETURN_IF_ERROR(CheckTiersArgs(o));
  Bench b(o);
  KVTIER_RETURN_IF_ERROR(OpenStore(o, &b));
  BenchTiersLoad load;
  LoadPhase phase(o, &b, &load);
  KVTIER_RETURN_IF_ERROR(phase.Run());
  return load;
}

}  // namespace kvtier::internal
