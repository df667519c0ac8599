// FsTier: a filesystem tier of vLLM-compatible block files, driven by an
// io_uring I/O loop (or, where the kernel refuses a ring, a syscall thread pool).
//
// Jobs are asynchronous batches: SubmitStore / SubmitLoad / SubmitLookup
// return a job id at once (they never wait for I/O); PollFinished hands back
// finished jobs with one result per key, so a caller keeps the prefix that
// loaded. Stores follow vLLM's procedure (FORMAT.md L54-L61): skip if the file
// exists, write a temp file beside it, set the CRC32C xattr (checksum_blocks,
// L102) or append it in a trailer where user xattrs do not work (L130,
// L131), rename. Loads return a block only if its size and (when present and
// checksum_blocks is on) CRC32C match; a corrupt block is never returned and
// its file is removed.
//
// Thread safety: every method may be called from any thread, concurrently,
// but not concurrently with (or after) the destructor. Buffer ownership: the
// row buffers passed to a job must stay valid, and a store's must stay
// unmodified, until that job is returned by PollFinished (or the tier is
// destroyed). A row is used with O_DIRECT only when its address and length
// are multiples of 4096 (and the probe at Open allowed it); others go
// through the page cache.
//
// Several roots (path_sharding kByBlockHash, FORMAT.md L99): one I/O loop per
// root, each with its own queues and the options' limits; a job's keys are
// split by root and its results merged back into one JobResult, in
// submission order.
//
// Errors come back at two levels: a Submit call fails as a whole only for
// bad arguments (kInvalidArgument, nothing submitted); everything that
// happens to a key (I/O errors, deadlines, corruption, backpressure) is that
// key's KeyResult in the job's JobResult.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/export.h"
#include "kvtier/fs_tier_options.h"
#include "kvtier/fs_tier_metrics.h"
#include "kvtier/hashing.h"
#include "kvtier/layout.h"
#include "kvtier/options.h"
#include "kvtier/result.h"

namespace kvtier {

// What FsTier::Open needs: the tier's options, as an fs entry of the config
// sets them (ParseFsTierConfig, OffloadConfig::secondary_tiers[i].fs), and
// what only the caller knows.
struct FsTierOpenOptions {
  // root_dir is required; locality is not used here, and enable_kv_events
  // only keeps the tier's stores and removals for TakeKeyEvents, and only
  // with keep_key_events.
  FsTierOptions tier;
  NamespaceSpec ns;        // the model configuration (names the directories)
  // A namespace built elsewhere (SglangNamespace::fs_namespace(): other
  // fields, the same tree grammar); when set, it is used and `ns` ignored.
  std::optional<Namespace> prebuilt_ns;
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
  // Keep the stores and removals for TakeKeyEvents when tier.enable_kv_events
  // is set: for a front end that drains them (VllmTier, for vLLM's
  // take_events). Others leave it off, so a config that names
  // enable_kv_events costs them nothing and drops nothing.
  bool keep_key_events = false;
};

// What happened to one key of a job. KeyResult::status carries the details:
// - kCorrupt: kCorruption (wrong size, CRC attribute or CRC32C mismatch).
// - kDropped: kRejected ("store queue full", "store latency above the
//   high water mark", or, with max_bytes, a batch that cannot fit: larger
//   than max_bytes, or the blocks that could be evicted for it are being
//   read or written; nothing of the batch is written).
// - kError: ErrnoToStatus of the failed syscall, named with the path:
//   kTimedOut (io_timeout_ms expired), kNoSpace (ENOSPC, EDQUOT),
//   kPermissionDenied (EACCES, EPERM, EROFS), kNotFound (a store whose shard
//   directories kept vanishing under a concurrent gc), kUnavailable
//   (EOPNOTSUPP), kIoError (EIO and the rest; also a store whose destination
//   is not a regular file, or whose path holds a symlink).
// - kOk, kSkippedExists, kMiss: an OK status.
enum class KeyOutcome : uint8_t {
  kOk,             // stored / loaded / found
  kSkippedExists,  // store: the file already existed (another writer had it)
  kMiss,           // load or lookup: no such regular file (a symlink, FIFO or directory there is a miss too)
  kCorrupt,        // load: wrong size or CRC; never returned (short or bad-CRC files removed)
  kDropped,        // store: refused by backpressure or max_bytes, nothing written
  kError,          // an I/O error or an expired deadline; see KeyResult::status
};
// Stable lower-case name ("ok", "skipped_exists", "miss", "corrupt",
// "dropped", "error"), for logs, JSON and the Python binding.
KVTIER_API std::string_view KeyOutcomeName(KeyOutcome outcome);

struct KeyResult {
  KeyOutcome outcome = KeyOutcome::kError;
  Status status;  // details for kError and kCorrupt
};

enum class JobKind { kStore, kLoad, kLookup };

// One finished job: the id its Submit call returned, and one KeyResult per
// submitted key.
struct JobResult {
  uint64_t job_id = 0;
  JobKind kind = JobKind::kLoad;
  std::vector<KeyResult> keys;  // in submission order
  // How many leading keys are kOk (for loads: the prefix that can be used).
  KVTIER_API size_t OkPrefix() const;
};

// The timeout_ms of a wait that sets no limit: the one spelling of
// "forever". Every kvtier call that blocks for at most timeout_ms
// (FsTier::WaitIdle, TierShell::WaitFor and WaitIdle, VllmTier::Drain,
// TieredStore::WaitIdle) reads 0 as "only check" and kWaitForever as "no
// limit" (those that do not loop on it wait UINT32_MAX ms, 49.7 days); the
// Python bindings spell it None. Deadline options are another thing: there
// 0 means none (io_timeout_ms, as vLLM's own keys).
inline constexpr uint32_t kWaitForever = UINT32_MAX;

// One change of the volume by a tier (FsTier::TakeKeyEvents): a store's
// rename landed (or found the block already there, as vLLM announces a
// successful store), or the tier removed the block file (a corrupt or
// unauthenticated block a load found, a max_bytes eviction).
struct TierKeyEvent {
  OffloadKey key;
  bool removed = false;
  friend bool operator==(const TierKeyEvent&, const TierKeyEvent&) = default;
};

class KVTIER_API FsTier {
 public:
  // Creates root_dir (and its missing parents), the namespace and block
  // directories and config.json (when absent or empty; FORMAT.md L28),
  // probes O_DIRECT (a refusal is logged: buffered I/O) and, with
  // tier.checksum_blocks, user xattrs (L102: where the CRC goes, L130), registers registered_memory
  // with io_uring (a refusal is logged), takes a heartbeat lease for gc
  // (L74), and starts the I/O thread, the thread that samples statvfs
  // and, with startup_scan (by default: with max_bytes), the one that scans
  // the block directory once (neither is waited for here, nor by the close
  // on a hung mount). Its filesystem calls do not grow with the blocks the
  // volume holds unless that scan runs. Blocks on that file system work;
  // call it off latency-critical threads.
  // Errors:
  // - kInvalidArgument: tier.root_dir empty, row_bytes 0, n_read_threads or
  //   n_write_threads < 1, stores_while_loading_max < 0, max_bytes below
  //   one row (per root with path_sharding), an invalid `ns`
  //   (Namespace::Create), or root_dir exists and is not a directory;
  // - kUnavailable: with checksum_blocks and checksum_place "xattr", user
  //   xattrs do not work under root_dir (as vLLM's tier; "auto", the
  //   default, puts checksums in a trailer there instead, L130); io_backend kUring and the kernel refuses
  //   a ring (or lacks IORING_OP_ASYNC_CANCEL);
  // - from creating or opening the directories, config.json or the lease,
  //   ErrnoToStatus naming the path: kPermissionDenied (EACCES, EPERM,
  //   EROFS), kNoSpace, kNotFound, kIoError (EIO; also ELOOP or ENOTDIR when
  //   a symlink or a file sits where a directory below root_dir belongs:
  //   no symlink below root_dir is followed);
  // - kTimedOut naming the path: with io_timeout_ms > 0, one step of the
  //   start-up (a directory, config.json, a probe, the lease) did not return
  //   within io_timeout_ms (a hung mount). The start-up runs on a thread of
  //   its own and is abandoned; if it completes later, it takes no lease and
  //   its tier is closed at once.
  // With several roots, before anything is created, also:
  // - kInvalidArgument: a ',' in root_dir without path_sharding, an empty or
  //   repeated root in the list, or a list that contradicts what the roots
  //   hold (a root's marker, L100, or where its blocks lie: the roots were
  //   reordered or their count changed);
  // - kNotFound: a root that is absent or empty while another holds the
  //   namespace (a drive that is not mounted);
  // - kCorruption: a root marker that cannot be parsed.
  // Errors of one root carry "root_dir[i]" in their message.
  static Result<std::unique_ptr<FsTier>> Open(const FsTierOpenOptions& options);
  // Finishes every submitted job (queued ones included: their I/O runs,
  // and on_job_finished is called for them), then stops the I/O thread and
  // removes the lease. Results not yet polled are discarded. No other
  // method may run, or be called, during or after it.
  virtual ~FsTier() = default;

  // Stores rows[i] as the block file of keys[i] (vLLM's procedure, FORMAT.md
  // L54-L61); returns the job id (> 0, unique within this tier) at once. The
  // whole store is refused, as a finished job whose keys are all kDropped,
  // while the backpressure detector is tripped or when its bytes would take
  // the queued store bytes past store_queue_bytes_max. Errors (nothing
  // submitted): kInvalidArgument when rows.size() != keys.size() or a row is
  // not row_bytes long.
  // `block_hashes` (empty, or one list per key): the blocks keys[i]'s file
  // holds, in order, where the namespace puts several in a file (a chunk of
  // blocks_per_file blocks, a group block of several tokens_per_hash): the
  // KV events (docs/kv-events.md) announce all of them, its store here and
  // its removal wherever it is made (an eviction, a corrupt removal, gc,
  // fsck --repair, another instance), as the file records them (FORMAT.md
  // L197-L202). An empty list: the file is named by its key alone. A list
  // must hold exactly the file's blocks (HashesPerFile), each as long as
  // the key's hash, the last one the key's, at most 2048 bytes in all;
  // else kInvalidArgument, naming the key.
  virtual Result<uint64_t> SubmitStore(std::span<const OffloadKey> keys,
                                       std::span<const std::span<const uint8_t>> rows,
                                       std::span<const std::vector<BlockHash>> block_hashes = {}) = 0;
  // Reads the block file of keys[i] into rows[i]; returns the job id at
  // once. A key's row holds its block only when its outcome is kOk; for any
  // other outcome the row's bytes are unspecified (a read may have started).
  // A successful load sets the file's atime when it is over an hour old
  // (gc's notion of use, L75). Errors: as SubmitStore.
  virtual Result<uint64_t> SubmitLoad(std::span<const OffloadKey> keys,
                                      std::span<const std::span<uint8_t>> rows) = 0;
  // As SubmitStore and SubmitLoad, with each row given as the pieces whose
  // concatenation it is, in order (e.g. a page's K bytes, then its V bytes):
  // the file holds the concatenation, its CRC32C is the concatenation's,
  // and each piece is written from, or read into, where it lies when every
  // piece is page-aligned in address and length (with bounce_loads a load
  // reads a whole bounce row first and copies it to the pieces once
  // verified). With O_DIRECT on, a row with any piece not so aligned goes
  // through a page-aligned staging row of the tier's, still O_DIRECT: a
  // store copies the pieces into it, a load copies out of it once the block
  // is verified (FsTierMetrics::staged_ios counts them); only where
  // row_bytes is not a multiple of 4096 do such rows go through the page
  // cache instead. Empty pieces are ignored.
  // Errors (nothing submitted): kInvalidArgument when rows.size() !=
  // keys.size() or a row's pieces do not add up to row_bytes; block_hashes
  // as SubmitStore's.
  virtual Result<uint64_t> SubmitStorePieces(std::span<const OffloadKey> keys,
                                             std::span<const std::vector<std::span<const uint8_t>>> rows,
                                             std::span<const std::vector<BlockHash>> block_hashes = {}) = 0;
  virtual Result<uint64_t> SubmitLoadPieces(std::span<const OffloadKey> keys,
                                            std::span<const std::vector<std::span<uint8_t>>> rows) = 0;
  // Asks whether each key's block file exists (a regular file, whatever its
  // size: one statx, no data read); returns the job id at once. Never fails.
  virtual Result<uint64_t> SubmitLookup(std::span<const OffloadKey> keys) = 0;

  // Appends finished jobs to `out`, in the order they finished, and forgets
  // them; never blocks. Returns how many. Each job is returned exactly once.
  virtual size_t PollFinished(std::vector<JobResult>* out) = 0;
  // Blocks until every submitted job has finished (is pollable, polled or
  // not). kTimedOut when some job is still queued or running after
  // timeout_ms; 0 only checks (kWaitForever: no limit). Jobs submitted
  // meanwhile are waited for too.
  virtual Status WaitIdle(uint32_t timeout_ms) = 0;

  // A snapshot of the counters: lock-free atomic reads, never blocks (each
  // counter is read on its own, not all at one instant).
  virtual FsTierMetrics Metrics() const = 0;
  // Prometheus text exposition of Metrics(), labelled tier="<tier_name>".
  virtual std::string PrometheusText(std::string_view tier_name) const = 0;

  // The namespace the tier stores under (valid for the tier's lifetime).
  virtual const Namespace& ns() const = 0;
  // "io_uring" or "syscall": the backend Open settled on (the first root's).
  virtual std::string_view backend_name() const = 0;
  // Whether the O_DIRECT probe at Open succeeded (on every root; aligned
  // rows use it).
  virtual bool o_direct() const = 0;
  // True when stores set the CRC32C xattr (checksum_blocks on, and
  // checksum_place put it there: the open proved user xattrs work).
  virtual bool xattrs_supported() const = 0;
  // Where stores put a block's CRC32C (FORMAT.md L130): "xattr", "trailer"
  // (4096 bytes after the row, L131), "seal" (a sealed tier: each block's
  // GCM tag in its seal trailer, L163) or "off" (checksum_blocks false). Loads
  // check whichever form a block carries, whatever this says. With several
  // roots, the first root's, or "mixed" when they differ.
  virtual std::string_view checksum_place() const = 0;
  // The absolute path of a key's block file (its root as given, then the
  // layout's relative path); it need not exist.
  virtual std::string BlockPath(const OffloadKey& key) const = 0;
  // With tier.enable_kv_events and keep_key_events (vLLM's own channel): the block files this
  // tier made visible or removed since the last call, in the order the
  // files changed, for a front end's BlockStored and BlockRemoved events.
  // Empty otherwise. At most 65536 are kept between calls (per root); later
  // ones are dropped and counted in kv_events_channel_dropped. Any thread.
  virtual std::vector<TierKeyEvent> TakeKeyEvents() { return {}; }
};

}  // namespace kvtier
