// FsTier: a filesystem tier of vLLM-compatible block files, driven by an
// io_uring engine (or, where the kernel refuses a ring, a syscall thread pool).
//
// Jobs are asynchronous batches: SubmitStore / SubmitLoad / SubmitLookup
// return a job id at once (they never wait for I/O); PollFinished hands back
// finished jobs with one result per key, so a caller keeps the prefix that
// loaded. Stores follow vLLM's procedure (FORMAT.md L54-L61): skip if the file
// exists, write a temp file beside it, set the CRC32C xattr (checksum_blocks,
// L102), rename. Loads return a block only if its size and (when present and
// checksum_blocks is on) CRC32C match; a corrupt block is never returned and
// its file is removed.
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
#include "kvtier/fs_tier_options.h"
#include "kvtier/hashing.h"
#include "kvtier/layout.h"
#include "kvtier/options.h"
#include "kvtier/result.h"

namespace kvtier {

// What FsTier::Open needs: the tier's options, as an fs entry of the config
// sets them (ParseFsTierConfig, OffloadConfig::secondary_tiers[i].fs), and
// what only the caller knows.
struct FsTierOpenOptions {
  // root_dir is required; locality and enable_kv_events are not used here.
  FsTierOptions tier;
  NamespaceSpec ns;        // the model configuration (names the directories)
  uint64_t row_bytes = 0;  // size of every block file, > 0 (a multiple of 4096 for O_DIRECT)
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
  // absent), probes O_DIRECT and (with checksum_blocks) user xattrs, and
  // starts the engine. With checksum_blocks, a filesystem without user
  // xattrs fails the open (kUnavailable, naming root_dir), as vLLM's tier.
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
  // true when checksum_blocks is on (the open proved user xattrs work).
  virtual bool xattrs_supported() const = 0;
  // The absolute path of a key's block file.
  virtual std::string BlockPath(const OffloadKey& key) const = 0;
};

}  // namespace kvtier
