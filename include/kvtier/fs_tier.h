// FsTier: a filesystem tier of vLLM-compatible block files, driven by an
// io_uring engine (or, where the kernel refuses a ring, a syscall thread pool).
//
// Jobs are asynchronous batches: SubmitStore / SubmitLoad / SubmitLookup
// return a job id at once (they never wait for I/O); PollFinished hands back
// finished jobs with one result per key, so a caller keeps the prefix that
// loaded. Stores follow vLLM's procedure (FORMAT.md L54-L61): skip if the file
// exists, write a temp file beside it, set the CRC32C xattr, rename. Loads
// return a block only if its size and (when present) CRC32C match; a corrupt
// block is never returned and its file is removed.
//
// Thread safety: every method may be called from any thread. Buffer
// ownership: the row buffers passed to a job must stay valid, and a store's
// must stay unmodified, until that job is returned by PollFinished.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/export.h"
#include "kvtier/hashing.h"
#include "kvtier/layout.h"
#include "kvtier/result.h"

namespace kvtier {

enum class Durability {
  kNone,  // as vLLM: no fsync (a crash can lose recent blocks, never tear a checked one)
  kFile,  // fdatasync the temp file before the rename
  kFull,  // kFile, plus fsync of the directory after the rename
};

enum class IoBackendKind {
  kAuto,     // io_uring; the syscall pool (with a logged warning) if the kernel refuses a ring
  kUring,    // io_uring or fail
  kSyscall,  // the syscall thread pool
};

// Store backpressure as vLLM's EMABackpressureDetector (PR #50045): an EMA of
// store latency per MiB; above the high water mark new stores are dropped
// until it falls below the low water mark. Loads are never dropped.
struct StoreBackpressure {
  bool enabled = false;
  double high_water_s_per_mib = 0.005;  // enter pressure above this
  double low_water_s_per_mib = 0.001;   // leave pressure below this
  double ema_alpha = 0.3;               // weight of the newest sample
  uint32_t warmup_completions = 3;      // samples before the detector may trip
};

struct FsTierOpenOptions {
  std::string root_dir;          // required; used verbatim, as vLLM does
  NamespaceSpec ns;              // the model configuration (names the directories)
  uint64_t row_bytes = 0;        // size of every block file, > 0 (a multiple of 4096 for O_DIRECT)
  int n_read_threads = 16;       // concurrent load/lookup block operations
  int n_write_threads = 16;      // concurrent store block operations
  // Read priority at the disk: while loads are running or queued (and for
  // 10 ms after the last; lookups do not count), at most this many stores
  // run at once, so a load never queues in the device behind a full set of
  // store writes. Running stores finish; new ones wait (and, past
  // store_queue_bytes_max, are dropped). 0: no cap (stores keep all
  // n_write_threads slots).
  int stores_while_loading_max = 2;
  Durability durability = Durability::kNone;
  uint32_t io_timeout_ms = 30000;  // deadline of every I/O; 0: none
  uint64_t store_queue_bytes_max = uint64_t{1} << 30;  // queued store bytes before stores are dropped
  StoreBackpressure backpressure;  // latency-based dropping of stores (off by default)
  IoBackendKind backend = IoBackendKind::kAuto;
  bool o_direct = true;  // use O_DIRECT after a successful probe (buffered otherwise)
  // Memory that row buffers will come from (the CPU tier's region). With
  // io_uring it is registered once, so reads and writes into it skip the
  // per-I/O page mapping. Not owned; must outlive the tier. Where the kernel
  // refuses (memlock limits), a warning is logged and I/O proceeds without.
  std::vector<std::span<uint8_t>> registered_memory;
  // Called after a job becomes pollable, from a kvtier thread or from inside
  // a Submit call, with no kvtier lock held; it must not block (signal a
  // condition variable, write an eventfd). Empty: no notification.
  std::function<void()> on_job_finished;
};

enum class KeyOutcome : uint8_t {
  kOk,             // stored / loaded / found
  kSkippedExists,  // store: the file already existed (another writer had it)
  kMiss,           // load or lookup: no such regular file (a symlink, FIFO or directory there is a miss too)
  kCorrupt,        // load: wrong size or CRC; never returned (short or bad-CRC files removed)
  kDropped,        // store: refused by backpressure, nothing written
  kError,          // an I/O error or an expired deadline; see KeyResult::status
};
KVTIER_API std::string_view KeyOutcomeName(KeyOutcome outcome);

struct KeyResult {
  KeyOutcome outcome = KeyOutcome::kError;
  Status status;  // details for kError and kCorrupt
};

enum class JobKind { kStore, kLoad, kLookup };

struct JobResult {
  uint64_t job_id = 0;
  JobKind kind = JobKind::kLoad;
  std::vector<KeyResult> keys;  // in submission order
  // How many leading keys are kOk (for loads: the prefix that can be used).
  KVTIER_API size_t OkPrefix() const;
};

struct FsTierMetrics {
  uint64_t rows_stored = 0, bytes_stored = 0, rows_skipped_exists = 0, rows_dropped = 0;
  uint64_t rows_loaded = 0, bytes_loaded = 0, rows_missed = 0, rows_corrupt = 0;
  uint64_t lookups_hit = 0, lookups_miss = 0;
  uint64_t store_errors = 0, load_errors = 0, lookup_errors = 0;
  uint64_t read_queue_depth = 0, write_queue_depth = 0, in_flight = 0;
  uint64_t store_queue_bytes = 0;
  uint64_t backpressure_active = 0;  // 1 while stores are being dropped for latency
  double store_latency_ema_s_per_mib = 0;
  uint64_t fixed_buffer_ios = 0;  // reads and writes into registered memory
  uint64_t checksum_ns = 0;       // time spent computing CRC32C, stores and loads
  // Latency histograms per direction: bucket i counts operations that took
  // < 2^i microseconds (the last bucket is everything slower).
  static constexpr int kLatencyBuckets = 24;
  uint64_t store_latency_us[kLatencyBuckets] = {};
  uint64_t load_latency_us[kLatencyBuckets] = {};
};

class KVTIER_API FsTier {
 public:
  // Creates the namespace and block directories and config.json (when
  // absent), probes O_DIRECT and user xattrs, and starts the engine.
  static Result<std::unique_ptr<FsTier>> Open(const FsTierOpenOptions& options);
  virtual ~FsTier() = default;

  virtual Result<uint64_t> SubmitStore(std::span<const OffloadKey> keys,
                                       std::span<const std::span<const uint8_t>> rows) = 0;
  virtual Result<uint64_t> SubmitLoad(std::span<const OffloadKey> keys,
                                      std::span<const std::span<uint8_t>> rows) = 0;
  virtual Result<uint64_t> SubmitLookup(std::span<const OffloadKey> keys) = 0;

  // Appends finished jobs to `out`; never blocks. Returns how many.
  virtual size_t PollFinished(std::vector<JobResult>* out) = 0;
  // Blocks until no job is queued or running; kTimedOut after timeout_ms.
  virtual Status WaitIdle(uint32_t timeout_ms) = 0;

  virtual FsTierMetrics Metrics() const = 0;
  // Prometheus text exposition of Metrics(), labelled tier="<tier_name>".
  virtual std::string PrometheusText(std::string_view tier_name) const = 0;

  virtual const Namespace& ns() const = 0;
  virtual std::string_view backend_name() const = 0;
  virtual bool o_direct() const = 0;
  virtual bool xattrs_supported() const = 0;
  // The absolute path of a key's block file.
  virtual std::string BlockPath(const OffloadKey& key) const = 0;
};

}  // namespace kvtier
