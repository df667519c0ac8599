// `kvtier bench fs` (see bench_fs.h).
#include "bench/bench_fs.h"

#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <unordered_map>
#include <vector>

#include "format/root_list.h"
#include "kvtier/layout.h"
#include "util/name_escape.h"

namespace kvtier::internal {
namespace {

// One stream of rows through the tier: a kind, a depth, a row range and the
// figures of the rows it moved.
//
// Row buffers come from one arena registered with the tier's ring, as
// TieredStore registers its CPU tier: loads and stores then use fixed
// buffers instead of pinning pages per I/O.
class SlotArena {
 public:
  SlotArena(uint64_t row_bytes, uint64_t rows) : row_bytes_(row_bytes), rows_(rows), buffer_(row_bytes * rows) {}
  std::span<uint8_t> all() { return buffer_.span(); }
  // Every phase starts from the arena's first row.
  void Reset() { next_ = 0; }
  // The phases take at most the rows sized for them (buffered_rows).
  std::span<uint8_t> Take() {
    const uint64_t row = next_++ % rows_;
    return buffer_.span().subspan(row * row_bytes_, row_bytes_);
  }

 private:
  uint64_t row_bytes_, rows_, next_ = 0;
  AlignedBuffer buffer_;
};

struct Lane {
  JobKind kind = JobKind::kStore;
  int depth = 1;       // rows in flight at most
  uint64_t first = 0;  // rows [first, first + count)
  uint64_t count = 0;
  bool stream = false;         // a background stream: stopped once the other lanes are done
  const Lane* gate = nullptr;  // submit only once gate has finished gate_rows rows
  uint64_t gate_rows = 0;

  std::vector<std::span<uint8_t>> slots;
  std::vector<int> free_slots;
  uint64_t next = 0;      // rows submitted
  uint64_t finished = 0;  // rows returned
  int in_flight = 0;      // rows submitted and not returned
  bool stop = false;      // no more submissions

  std::vector<uint64_t> latencies_ns;  // rows that moved
  uint64_t ok = 0, skipped = 0, errors = 0, corrupt = 0, missing = 0;
  uint64_t first_submit_ns = 0, last_done_ns = 0;
  double harness_cpu_s = 0;
  std::string first_error;

  bool Open() const {
    if (stop || next >= count) return false;
    return gate == nullptr || gate->finished >= gate_rows || gate->Done();
  }
  bool Done() const { return (stop || next >= count) && in_flight == 0; }
  void Allocate(SlotArena* arena, int batch) {
    const int n = std::max(depth, batch);
    slots.clear();
    free_slots.clear();
    for (int i = 0; i < n; ++i) {
      slots.push_back(arena->Take());
      free_slots.push_back(n - 1 - i);
    }
  }
  DirectionFigures Figures(uint64_t row_bytes) const {
    DirectionFigures f;
    f.rows = ok;
    f.bytes = ok * row_bytes;
    f.wall_s = last_done_ns > first_submit_ns
                   ? static_cast<double>(last_done_ns - first_submit_ns) * 1e-9
                   : 0;
    f.harness_cpu_s = harness_cpu_s;
    f.p50_us = PercentileUs(latencies_ns, 50);
    f.p99_us = PercentileUs(latencies_ns, 99);
    return f;
  }
};

struct InFlightJob {
  Lane* lane = nullptr;
  uint64_t submit_ns = 0;
  std::vector<int> slots;
  std::vector<uint64_t> rows;
};

class Pump {
 public:
  // hashes_per_file: the block hashes each store gives (1: none, the key alone).
  Pump(FsTier* tier, const BenchRows* rows, const BenchFsOptions& o, size_t hashes_per_file)
      : tier_(tier), rows_(rows), o_(o), hashes_per_file_(hashes_per_file) {}

  // Runs the lanes until every non-stream one is done; streams are then
  // stopped and drained.
  Status Run(const std::vector<Lane*>& lanes) {
    std::vector<JobResult> results;
    while (true) {
      for (Lane* lane : lanes) KVTIER_RETURN_IF_ERROR(Refill(lane));
      bool bounded_done = true, all_done = true;
      for (Lane* lane : lanes) {
        if (!lane->stream && !lane->Done()) bounded_done = false;
        if (!lane->Done()) all_done = false;
      }
      if (bounded_done) {
        for (Lane* lane : lanes) lane->stop = true;
        all_done = std::all_of(lanes.begin(), lanes.end(), [](const Lane* l) { return l->Done(); });
      }
      if (all_done) return Status::Ok();
      const bool waiting = std::any_of(lanes.begin(), lanes.end(), [](const Lane* l) { return l->in_flight > 0; });
      if (!waiting) return Internal("bench: no lane can make progress");  // a gate that never opens
      results.clear();
      if (tier_->PollFinished(&results) == 0) {
        const double c0 = ThreadCpuSeconds();
        std::this_thread::sleep_for(std::chrono::microseconds(o_.poll_us));
        poll_wait_cpu_s_ += ThreadCpuSeconds() - c0;
        continue;
      }
      const uint64_t now = BenchNowNs();
      for (JobResult& r : results) KVTIER_RETURN_IF_ERROR(Account(r, now));
    }
  }

 private:
  Status Refill(Lane* lane) {
    while (lane->Open()) {
      const uint64_t left = lane->count - lane->next;
      const int n = static_cast<int>(std::min<uint64_t>(left, static_cast<uint64_t>(o_.batch)));
      if (lane->in_flight > 0 && lane->in_flight + n > lane->depth) return Status::Ok();
      if (static_cast<int>(lane->free_slots.size()) < n) return Status::Ok();
      InFlightJob job{.lane = lane, .submit_ns = 0, .slots = {}, .rows = {}};
      std::vector<OffloadKey> keys;
      std::vector<std::span<const uint8_t>> store_rows;
      std::vector<std::span<uint8_t>> load_rows;
      std::vector<std::vector<BlockHash>> block_hashes;
      for (int i = 0; i < n; ++i) {
        const int slot = lane->free_slots.back();
        lane->free_slots.pop_back();
        const uint64_t row = lane->first + lane->next + static_cast<uint64_t>(i);
        job.slots.push_back(slot);
        job.rows.push_back(row);
        keys.push_back(rows_->Key(row));
        std::span<uint8_t> buf = lane->slots[static_cast<size_t>(slot)];
        if (lane->kind == JobKind::kStore) {
          FillStoreRow(lane, row, buf, &block_hashes);
          store_rows.emplace_back(buf.data(), buf.size());
        } else {
          load_rows.push_back(buf);
        }
      }
      job.submit_ns = BenchNowNs();
      Result<uint64_t> id = lane->kind == JobKind::kStore
                                ? tier_->SubmitStore(keys, store_rows, block_hashes)
                                : tier_->SubmitLoad(keys, load_rows);
      if (!id.ok()) return id.status().WithContext("submit");
      if (lane->first_submit_ns == 0) lane->first_submit_ns = job.submit_ns;
      lane->next += static_cast<uint64_t>(n);
      lane->in_flight += n;
      jobs_.emplace(*id, std::move(job));
    }
    return Status::Ok();
  }

  // A store row's content and, in files of several blocks, their hashes:
  // the harness's CPU, not the tier's.
  void FillStoreRow(Lane* lane, uint64_t row, std::span<uint8_t> buf,
                    std::vector<std::vector<BlockHash>>* block_hashes) const {
    const double t0 = ThreadCpuSeconds();
    rows_->Fill(row, buf);
    if (hashes_per_file_ > 1) block_hashes->push_back(rows_->BlockHashes(row, hashes_per_file_));
    lane->harness_cpu_s += ThreadCpuSeconds() - t0;
  }

  Status Account(JobResult& r, uint64_t now) {
    auto it = jobs_.find(r.job_id);
    if (it == jobs_.end())
      return Internal("bench: PollFinished returned an unknown job " + std::to_string(r.job_id));
    InFlightJob job = std::move(it->second);
    jobs_.erase(it);
    Lane* lane = job.lane;
    if (r.keys.size() != job.rows.size())
      return Internal("bench: a job came back with the wrong number of keys");
    for (size_t i = 0; i < job.rows.size(); ++i) {
      const KeyResult& k = r.keys[i];
      std::span<const uint8_t> buf = lane->slots[static_cast<size_t>(job.slots[i])];
      bool moved = false;
      if (lane->kind == JobKind::kStore) {
        if (k.outcome == KeyOutcome::kOk) {
          moved = true;
        } else if (k.outcome == KeyOutcome::kSkippedExists) {
          ++lane->skipped;
        } else {
          ++lane->errors;
          Note(lane, KeyNote("store", job.rows[i], k));
        }
      } else if (k.outcome == KeyOutcome::kOk) {
        const double t0 = ThreadCpuSeconds();
        const bool good = rows_->Verify(job.rows[i], buf);
        lane->harness_cpu_s += ThreadCpuSeconds() - t0;
        if (good) {
          moved = true;
        } else {
          ++lane->corrupt;
          Note(lane, "load row " + std::to_string(job.rows[i]) +
                         ": the bytes read differ from the bytes stored");
        }
      } else {
        ++(k.outcome == KeyOutcome::kMiss      ? lane->missing
           : k.outcome == KeyOutcome::kCorrupt ? lane->corrupt
                                               : lane->errors);
        Note(lane, KeyNote("load", job.rows[i], k));
      }
      if (moved) {
        ++lane->ok;
        lane->latencies_ns.push_back(now - job.submit_ns);
      }
      lane->free_slots.push_back(job.slots[i]);
    }
    lane->in_flight -= static_cast<int>(job.rows.size());
    lane->finished += job.rows.size();
    lane->last_done_ns = now;
    return Status::Ok();
  }

 public:
  double TakePollWaitCpu() {
    const double v = poll_wait_cpu_s_;
    poll_wait_cpu_s_ = 0;
    return v;
  }

 private:
  // "<op> row <n>: <outcome>[ <status>]", built by appending: GCC 12 at -O2
  // misreports `"literal" + std::string&&` (an insert at offset 0) as an
  // overlapping memcpy (a -Wrestrict false positive), which fails Release
  // builds with KVTIER_WERROR.
  static std::string KeyNote(std::string_view op, uint64_t row, const KeyResult& k) {
    std::string note(op);
    note += " row ";
    note += std::to_string(row);
    note += ": ";
    note += KeyOutcomeName(k.outcome);
    if (!k.status.ok()) {
      note += ' ';
      note += k.status.ToString();
    }
    return note;
  }

  static void Note(Lane* lane, std::string what) {
    if (lane->first_error.empty()) lane->first_error = std::move(what);
  }

  FsTier* tier_;
  const BenchRows* rows_;
  const BenchFsOptions& o_;
  size_t hashes_per_file_;
  std::unordered_map<uint64_t, InFlightJob> jobs_;
  double poll_wait_cpu_s_ = 0;
};

// A percentile of a power-of-two latency histogram (bucket i: < 2^i µs),
// interpolated linearly inside its bucket.
double HistogramPercentileUs(const uint64_t* buckets, double p) {
  uint64_t total = 0;
  for (int i = 0; i < FsTierMetrics::kLatencyBuckets; ++i) total += buckets[i];
  if (total == 0) return 0;
  const double rank = std::max(1.0, p / 100.0 * static_cast<double>(total));
  double seen = 0;
  for (int i = 0; i < FsTierMetrics::kLatencyBuckets; ++i) {
    if (buckets[i] == 0) continue;
    if (seen + static_cast<double>(buckets[i]) >= rank) {
      const double lo = i == 0 ? 0 : static_cast<double>(uint64_t{1} << (i - 1));
      const double hi = static_cast<double>(uint64_t{1} << i);
      return lo + (hi - lo) * (rank - seen) / static_cast<double>(buckets[i]);
    }
    seen += static_cast<double>(buckets[i]);
  }
  return static_cast<double>(uint64_t{1} << (FsTierMetrics::kLatencyBuckets - 1));
}

void HistogramDelta(const uint64_t* after, const uint64_t* before, uint64_t* out) {
  for (int i = 0; i < FsTierMetrics::kLatencyBuckets; ++i) out[i] = after[i] - before[i];
}

// Runs lanes as one measured phase: wall time per lane, process CPU over the
// whole phase (minus the harness: fill/verify and the sleeps between polls),
// attributed to `measured`.
// Submits lookups of rows [0, rows) in jobs of kBenchLookupBatch keys, up
// to `depth` jobs in flight, and polls them back.
Status RunLookups(FsTier* tier, const BenchRows& rows, uint64_t count, int depth, BenchFsResult::Lookups* out) {
  const uint64_t deadline = BenchNowNs() + uint64_t{60} * 1'000'000'000;
  const double cpu0 = ProcessCpuSeconds();
  const uint64_t t0 = BenchNowNs();
  uint64_t next = 0;
  int in_flight = 0;
  std::vector<OffloadKey> keys;
  std::vector<JobResult> done;
  while (out->keys < count) {
    for (; in_flight < depth && next < count; ++in_flight) {
      keys.clear();
      for (uint32_t i = 0; i < kBenchLookupBatch && next < count; ++i) keys.push_back(rows.Key(next++));
      KVTIER_RETURN_IF_ERROR(tier->SubmitLookup(keys).status());
    }
    done.clear();
    if (tier->PollFinished(&done) == 0) {
      if (BenchNowNs() > deadline) return Status(StatusCode::kTimedOut, "bench fs: lookups not done after 60 s");
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    for (const JobResult& job : done) {
      --in_flight;
      for (const KeyResult& k : job.keys) out->hits += k.outcome == KeyOutcome::kOk ? 1 : 0;
      out->keys += job.keys.size();
    }
  }
  out->wall_s = static_cast<double>(BenchNowNs() - t0) * 1e-9;
  out->cpu_s = ProcessCpuSeconds() - cpu0;
  return Status::Ok();
}

Status RunPhase(FsTier* tier, Pump* pump, const std::vector<Lane*>& lanes, Lane* measured,
                DirectionFigures* out, uint64_t row_bytes) {
  pump->TakePollWaitCpu();
  const uint64_t checksum0 = tier->Metrics().checksum_ns;
  const ThreadCpuSnapshot threads0 = SnapshotThreadCpu();
  const uint64_t switches0 = ProcessContextSwitches();
  const double cpu0 = ProcessCpuSeconds();
  KVTIER_RETURN_IF_ERROR(pump->Run(lanes));
  const double cpu1 = ProcessCpuSeconds();
  const uint64_t switches1 = ProcessContextSwitches();
  const ThreadCpuSnapshot threads1 = SnapshotThreadCpu();
  double harness = 0;
  for (const Lane* l : lanes) harness += l->harness_cpu_s;
  *out = measured->Figures(row_bytes);
  out->poll_wait_cpu_s = pump->TakePollWaitCpu();
  out->cpu_s = std::max(0.0, cpu1 - cpu0 - harness - out->poll_wait_cpu_s);
  out->harness_cpu_s = harness;
  SetThreadCpuBreakdown(threads0, threads1, out);
  out->context_switches = switches1 - switches0;
  out->checksum_s = static_cast<double>(tier->Metrics().checksum_ns - checksum0) * 1e-9;
  return Status::Ok();
}

// --root a,b: the roots of a path_sharding tier (FORMAT.md L99); one root otherwise.
std::vector<std::string> BenchRoots(const std::string& root) {
  auto roots = format::SplitRootDirs(root, root.find(',') != std::string::npos);
  return roots.ok() ? *roots : std::vector<std::string>{root};
}

void RemoveNamespace(const std::string& root_list, const Namespace& ns) {
  std::error_code ec;
  for (const std::string& root : BenchRoots(root_list)) {
    std::filesystem::remove_all(JoinRoot(root, ns.block_dir_name()), ec);
    std::filesystem::remove_all(JoinRoot(root, ns.dir_name()), ec);
  }
}

void CollectErrors(const Lane& lane, BenchFsResult* r) {
  if (r->first_error.empty()) r->first_error = lane.first_error;
}

// The benchmark's own model name (one per row size) with the model's
// KV-cache groups: the namespace vLLM would use for that model.
Result<NamespaceSpec> BenchFsNamespaceSpec(const BenchFsOptions& o) {
  NamespaceSpec spec;
  spec.model_name = "kvtier-bench/fs-" + std::to_string(o.row_bytes);
  KVTIER_ASSIGN_OR_RETURN(std::vector<KvCacheGroupSpec> groups, KvGroupsFromFlags(o.kv_groups, kVllmDefaultBlockTokens));
  ApplyKvGroups(std::move(groups), &spec);
  spec.blocks_per_file = o.blocks_per_file;
  return spec;
}

// kInvalidArgument (exit 2) for options out of range.
Status CheckBenchFsOptions(const BenchFsOptions& o) {
  for (const std::string& root : BenchRoots(o.root)) {
    KVTIER_RETURN_IF_ERROR(CheckBenchArgs(root, o.row_bytes, o.rows, o.queue_depth));
  }
  if (o.batch < 1 || o.batch > 4096) return InvalidArgument("--batch must be in [1, 4096]");
  if (o.poll_us < 1 || o.poll_us > 100000)
    return InvalidArgument("--poll-us must be in [1, 100000]");
  if (o.mixed_load_depth < 1 || o.mixed_load_depth > 4096) {
    return InvalidArgument("--mixed-load-depth must be in [1, 4096]");
  }
  if (o.mixed && o.mixed_rows == 0) return InvalidArgument("--mixed-rows must be at least 1");
  if (o.mixed_store_depth < 0 || o.mixed_store_depth > 8192) {
    return InvalidArgument("--mixed-store-depth must be in [0, 8192] (0: twice the queue depth)");
  }
  return Status::Ok();
}

// The sizes of a run, derived from its (checked) options.
struct BenchFsPlan {
  int stream_depth = 0;        // store rows outstanding in the --mixed stream
  uint64_t buffered_rows = 0;  // slot buffers of the largest phase, plus the content's base row
  uint64_t half = 0;           // unloaded loads: rows [0, n); loaded: [half, half + n)
  uint64_t mixed_loads = 0;    // n: timed loads per mixed sub-phase
  uint64_t stream_rows = 0;    // rows the store stream of --mixed may write (0 without it)
  size_t hashes_per_file = 1;  // block hashes each store gives (HashesPerFile of the namespace)
};

BenchFsPlan PlanBenchFs(const BenchFsOptions& o) {
  BenchFsPlan p;
  p.stream_depth = o.mixed_store_depth == 0 ? 2 * o.queue_depth : o.mixed_store_depth;
  p.buffered_rows =
      1 + static_cast<uint64_t>(std::max(
              std::max(o.queue_depth, o.batch),
              o.mixed ? p.stream_depth + std::max(o.mixed_load_depth, o.batch) + 2 * o.batch : 0));
  // The store stream of --mixed writes up to stream_rows more rows: enough to
  // outlast the timed loads, which are slow under a saturating stream.
  p.half = o.rows >= 2 ? o.rows / 2 : 0;
  p.mixed_loads = std::min<uint64_t>(o.mixed_rows, std::max<uint64_t>(1, o.rows - p.half));
  p.stream_rows = o.mixed ? std::max<uint64_t>(o.rows, 8 * p.mixed_loads) : 0;
  return p;
}

// The fs tier of the run, its I/O into the arena's registered rows.
Result<std::unique_ptr<FsTier>> OpenBenchTier(const BenchFsOptions& o, const NamespaceSpec& spec,
                                              int stream_depth, SlotArena* arena) {
  FsTierOpenOptions topt;
  topt.registered_memory = {arena->all()};
  topt.tier.root_dir = o.root;
  if (o.root.find(',') != std::string::npos) topt.tier.path_sharding = PathSharding::kByBlockHash;
  topt.ns = spec;
  topt.row_bytes = o.row_bytes;
  topt.tier.n_read_threads = topt.tier.n_write_threads = o.queue_depth;
  topt.tier.io_backend = o.backend;
  topt.tier.o_direct = o.o_direct;
  topt.tier.checksum_blocks = o.checksum_blocks;
  topt.tier.seal_key_file = o.seal_key_file, topt.tier.seal_key_group_read = o.seal_key_group_read;
  topt.tier.inline_metadata = o.inline_metadata, topt.tier.bounce_loads = o.bounce_loads;
  topt.tier.io_timeout_ms = o.io_timeout_ms;
  topt.tier.stores_while_loading_max = o.stores_while_loading_max;
  topt.tier.kv_events_config = o.kv_events_config;
  // Enough queued store bytes for the stream of --mixed: nothing is dropped.
  topt.tier.store_queue_bytes_max = std::max<uint64_t>(
      topt.tier.store_queue_bytes_max,
      o.row_bytes * static_cast<uint64_t>(2 * o.queue_depth + 2 * stream_depth + o.batch));
  Result<std::unique_ptr<FsTier>> opened = FsTier::Open(topt);
  if (!opened.ok()) {
    // A bad root surfaced at run time (io_error); a bad kv_events_config is an --events-* flag's (usage).
    const Status s = opened.status();
    if (s.message().starts_with("kv_events_config.")) return s;
    const StatusCode code = s.code() == StatusCode::kInvalidArgument ? StatusCode::kIoError : s.code();
    return Status(code, "open the fs tier under " + o.root + ": " + s.ToString());
  }
  return opened;
}

Lane MakeLane(JobKind kind, int depth, uint64_t first, uint64_t count) {
  Lane lane;
  lane.kind = kind;
  lane.depth = depth;
  lane.first = first;
  lane.count = count;
  return lane;
}

// p50 and p99 of the tier's power-of-two histogram over a phase.
void HistogramPercentiles(const uint64_t* after, const uint64_t* before, double* p50, double* p99) {
  uint64_t hist[FsTierMetrics::kLatencyBuckets];
  HistogramDelta(after, before, hist);
  *p50 = HistogramPercentileUs(hist, 50);
  *p99 = HistogramPercentileUs(hist, 99);
}

void AddLoadErrors(const Lane& lane, BenchFsResult* r) {
  r->rows_corrupt += lane.corrupt;
  r->rows_missing += lane.missing;
  r->load_errors += lane.errors;
  CollectErrors(lane, r);
}

// The measured phases of a run, in order: store, load, lookups and, with
// --mixed, loads alone and then under a store stream. Every phase starts
// from the arena's first row.
class BenchFsPhases {
 public:
  BenchFsPhases(const BenchFsOptions& o, const BenchFsPlan& plan, FsTier* tier, SlotArena* arena,
                BenchFsResult* r)
      : o_(o),
        plan_(plan),
        tier_(tier),
        arena_(arena),
        rows_(o.seed, o.row_bytes),
        pump_(tier, &rows_, o, plan.hashes_per_file),
        r_(r) {}

  Status Run() {
    KVTIER_RETURN_IF_ERROR(Store());
    KVTIER_RETURN_IF_ERROR(Load());
    KVTIER_RETURN_IF_ERROR(RunLookups(tier_, rows_, o_.rows, o_.queue_depth, &r_->lookups));
    if (!o_.mixed) return Status::Ok();
    BenchFsMixed mixed;
    KVTIER_RETURN_IF_ERROR(UnloadedLoads(&mixed));
    KVTIER_RETURN_IF_ERROR(LoadsUnderStream(&mixed));
    r_->mixed = mixed;
    return Status::Ok();
  }

 private:
  Status Store() {
    const FsTierMetrics before = tier_->Metrics();
    Lane store = MakeLane(JobKind::kStore, o_.queue_depth, 0, o_.rows);
    arena_->Reset();
    store.Allocate(arena_, o_.batch);
    KVTIER_RETURN_IF_ERROR(RunPhase(tier_, &pump_, {&store}, &store, &r_->store, o_.row_bytes));
    after_store_ = tier_->Metrics();
    HistogramPercentiles(after_store_.store_latency_us, before.store_latency_us,
                         &r_->store_hist_p50_us, &r_->store_hist_p99_us);
    r_->rows_stored = store.ok;
    r_->rows_skipped = store.skipped;
    r_->store_errors = store.errors;
    CollectErrors(store, r_);
    return Status::Ok();
  }

  Status Load() {
    r_->page_cache_dropped = DropPageCache(&r_->page_cache_note);
    Lane load = MakeLane(JobKind::kLoad, o_.queue_depth, 0, o_.rows);
    arena_->Reset();
    load.Allocate(arena_, o_.batch);
    KVTIER_RETURN_IF_ERROR(RunPhase(tier_, &pump_, {&load}, &load, &r_->load, o_.row_bytes));
    FsTierMetrics after_load = tier_->Metrics();
    HistogramPercentiles(after_load.load_latency_us, after_store_.load_latency_us,
                         &r_->load_hist_p50_us, &r_->load_hist_p99_us);
    r_->rows_verified = load.ok;
    r_->rows_corrupt = load.corrupt;
    r_->rows_missing = load.missing;
    r_->load_errors = load.errors;
    CollectErrors(load, r_);
    r_->fixed_buffer_ios = tier_->Metrics().fixed_buffer_ios;
    return Status::Ok();
  }

  // --mixed, first: the timed loads alone, on rows [0, n).
  Status UnloadedLoads(BenchFsMixed* mixed) {
    std::string ignored;
    DropPageCache(&ignored);
    Lane alone = MakeLane(JobKind::kLoad, o_.mixed_load_depth, 0, plan_.mixed_loads);
    arena_->Reset();
    alone.Allocate(arena_, o_.batch);
    KVTIER_RETURN_IF_ERROR(
        RunPhase(tier_, &pump_, {&alone}, &alone, &mixed->unloaded_load, o_.row_bytes));
    AddLoadErrors(alone, r_);
    return Status::Ok();
  }

  // --mixed, then: the same kind of loads on rows [half, half + n) under a
  // saturating store stream on new keys.
  Status LoadsUnderStream(BenchFsMixed* mixed) {
    std::string ignored;
    DropPageCache(&ignored);
    // By default a backlog beyond the write slots: saturating. Its rows are
    // bounded by the disk space checked before the run.
    Lane stream = MakeLane(JobKind::kStore, plan_.stream_depth, o_.rows, plan_.stream_rows);
    stream.stream = true;
    arena_->Reset();
    stream.Allocate(arena_, o_.batch);
    Lane under = MakeLane(JobKind::kLoad, o_.mixed_load_depth, plan_.half, plan_.mixed_loads);
    under.gate = &stream;  // start once the stream is in full swing
    under.gate_rows = static_cast<uint64_t>(o_.queue_depth);
    under.Allocate(arena_, o_.batch);
    KVTIER_RETURN_IF_ERROR(
        RunPhase(tier_, &pump_, {&stream, &under}, &under, &mixed->loaded_load, o_.row_bytes));
    mixed->store_stream = stream.Figures(o_.row_bytes);
    // Loads that ran after the stream ran out were not measured under load.
    mixed->stream_exhausted =
        stream.next >= stream.count && under.last_done_ns > stream.last_done_ns;
    AddLoadErrors(under, r_);
    r_->store_errors += stream.errors;
    CollectErrors(stream, r_);
    return Status::Ok();
  }

  const BenchFsOptions& o_;
  const BenchFsPlan& plan_;
  FsTier* tier_;
  SlotArena* arena_;
  BenchRows rows_;
  Pump pump_;
  BenchFsResult* r_;
  FsTierMetrics after_store_;  // the load phase's histogram starts from here
};

}  // namespace

Result<BenchFsResult> RunBenchFs(const BenchFsOptions& o) {
  KVTIER_RETURN_IF_ERROR(CheckBenchFsOptions(o));
  BenchFsPlan plan = PlanBenchFs(o);
  KVTIER_RETURN_IF_ERROR(CheckBufferMemory(o.row_bytes, plan.buffered_rows));

  KVTIER_ASSIGN_OR_RETURN(const NamespaceSpec spec, BenchFsNamespaceSpec(o));
  KVTIER_ASSIGN_OR_RETURN(plan.hashes_per_file, BenchHashesPerFile(spec));
  KVTIER_ASSIGN_OR_RETURN(Namespace ns, BenchNamespace(o, spec));
  RemoveNamespace(o.root, ns);  // an earlier run's files (--keep) would be skipped, not stored
  for (const std::string& root : BenchRoots(o.root)) {
    KVTIER_RETURN_IF_ERROR(CheckFreeSpace(root, o.row_bytes * (o.rows + plan.stream_rows)));
  }

  SlotArena arena(o.row_bytes, plan.buffered_rows - 1);
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<FsTier> tier,
                          OpenBenchTier(o, spec, plan.stream_depth, &arena));
  BenchFsResult r = BenchFsHeader(o, *tier, ns, plan.stream_depth, plan.hashes_per_file);

  const int old_slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
  prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0);  // 1 µs: poll sleeps as short as asked
  BenchFsPhases phases(o, plan, tier.get(), &arena, &r);
  Status status = phases.Run();
  prctl(PR_SET_TIMERSLACK, old_slack > 0 ? old_slack : 50000, 0, 0, 0);

  Status idle = tier->WaitIdle(60000);
  CollectBenchFsEvents(o, *tier, 5000, &r);
  tier.reset();
  if (!o.keep) {
    RemoveNamespace(o.root, ns);
  } else {
    r.kept = true;
  }
  KVTIER_RETURN_IF_ERROR(status);
  KVTIER_RETURN_IF_ERROR(idle);
  return r;
}

std::string FormatBenchFs(const BenchFsResult& r) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "kvtier bench fs: %llu rows x %s under %s\n",
                static_cast<unsigned long long>(r.rows), HumanBytes(r.row_bytes).c_str(),
                QuoteName(r.root).c_str());
  out += line;
  std::snprintf(line, sizeof line,
                "backend %s, O_DIRECT %s, CRC32C xattrs %s, queue depth %d, %d row%s per job%s\n",
                r.backend.c_str(), r.o_direct ? "on" : "off", r.xattrs ? "on" : "off",
                r.queue_depth, r.batch, r.batch == 1 ? "" : "s", FilesOfBlocksNote(r).c_str());
  out += line;
  out += r.page_cache_dropped ? "page cache dropped before the load phase\n"
                              : r.page_cache_note + "\n";
  out += '\n' + FormatFiguresTable(r.store, r.load);  // char + string&&: no GCC 12 -Wrestrict at -O3
  std::snprintf(line, sizeof line,
                "of which CRC32C (integrity: one pass over each row): store %.4f, load %.4f CPU s/GB\n",
                r.store.checksum_s_per_gb(), r.load.checksum_s_per_gb());
  out += line;
  out += "\n";
  out += FormatRowCounts({r.rows_stored, r.rows_skipped, r.store_errors, r.rows_verified, r.rows_corrupt,
                          r.rows_missing, r.load_errors},
                         r.first_error);
  std::snprintf(line, sizeof line,
                "tier histogram (power-of-two buckets): store p50 %.0f / p99 %.0f us, load p50 "
                "%.0f / p99 %.0f us\n",
                r.store_hist_p50_us, r.store_hist_p99_us, r.load_hist_p50_us, r.load_hist_p99_us);
  out += line;
  std::snprintf(line, sizeof line,
                "lookups: %llu keys (%llu found) in jobs of %u, %.0f keys/s, %.2f us CPU per key\n",
                static_cast<unsigned long long>(r.lookups.keys), static_cast<unsigned long long>(r.lookups.hits),
                kBenchLookupBatch, r.lookups.keys_per_s(),
                r.lookups.keys > 0 ? r.lookups.cpu_s * 1e6 / static_cast<double>(r.lookups.keys) : 0.0);
  out += line;
  if (r.mixed) {
    const BenchFsMixed& m = *r.mixed;
    std::snprintf(line, sizeof line,
                  "mixed: load p50 %.1f / p99 %.1f us under a %.3f GB/s store stream (stores while "
                  "loading: %s); unloaded p50 %.1f / p99 %.1f us; p99 ratio %.2f\n",
                  m.loaded_load.p50_us, m.loaded_load.p99_us, m.store_stream.gbps(),
                  r.stores_while_loading_max == 0 ? "no cap" : std::to_string(r.stores_while_loading_max).c_str(),
                  m.unloaded_load.p50_us, m.unloaded_load.p99_us, m.ratio_p99());
    out += line;
    if (m.stream_exhausted)
      out += "mixed: the store stream ran out before the loads finished (raise --rows)\n";
  }
  std::snprintf(
      line, sizeof line,
      "latency: per row, submit to PollFinished (polled every %d us); CPU: getrusage user+sys, "
      "fill/verify and poll sleeps excluded (store %.3f + %.3f s, load %.3f + %.3f s); GB = 1e9 "
      "bytes\n",
      r.poll_us, r.store.harness_cpu_s, r.store.poll_wait_cpu_s, r.load.harness_cpu_s,
      r.load.poll_wait_cpu_s);
  out += line;
  out += FormatBenchFsEvents(r);
  if (r.kept) out += "files kept under " + QuoteName(r.namespace_dir) + " (and its _r0 sibling)\n";
  return out;
}

}  // namespace kvtier::internal
