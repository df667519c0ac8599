// TierShell: the safety shell every front end puts around one FsTier, so
// that a front end (vLLM's VllmTier, SGLang's SglangTier, Python's
// kvtier.FsTier) only translates its engine's types. It owns:
//
//  * Admission. Calls enter, and Close() first stops admitting (from its
//    first instant: a caller racing it cannot keep it waiting), then waits
//    for the calls in flight and for every job, collects the results not
//    yet taken, and destroys the tier. A call racing Close either completes
//    or fails with kUnavailable ("<name>: closed"); Close is idempotent, and
//    a second caller returns once the first has finished.
//  * Claims on the memory of jobs not yet taken. A load writes its rows, a
//    store reads them: a job may not write memory that another job not yet
//    taken reads or writes, nor read memory that one writes, nor write one
//    byte from two of its own rows. Two loads into one row would check one
//    key's CRC over the other's bytes (and remove a valid block as corrupt);
//    a store reading a row that a load overwrites would store the loaded
//    bytes under its own key. A job's claim lasts until Release(job), or
//    until WaitFor returns the job.
//  * Results. Poll hands over every finished job, in completion order;
//    WaitFor waits for one job of the caller's own, with a deadline, while
//    other threads wait for theirs (a thread that polls files the others'
//    results for them).
//
// Thread safety: every method may be called from any thread, Close
// included; the destructor must not race other calls. The shell never calls
// back into the caller: the submit functions run on the calling thread,
// under the shell's lock (so no poll sees a job before its claim is taken),
// and must not call the shell.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/export.h"
#include "kvtier/fs_tier.h"
#include "kvtier/result.h"

namespace kvtier {

// How a job uses its rows' memory: a store reads it, a load writes it.
enum class MemoryUse : uint8_t { kRead, kWrite };

// One piece of a job's memory: bytes [begin, end) of the job's row `row`
// (a row is one key's memory, in one piece or several).
struct MemoryRange {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  size_t row = 0;
};

// The ranges of rows given one span each, or as pieces (empty ones left out).
KVTIER_API std::vector<MemoryRange> RowRanges(std::span<const std::span<uint8_t>> rows);
KVTIER_API std::vector<MemoryRange> RowRanges(std::span<const std::vector<std::span<uint8_t>>> rows);
KVTIER_API std::vector<MemoryRange> RowRanges(std::span<const std::vector<std::span<const uint8_t>>> rows);

// Whether a key did what its job asked: a store's key is on disk (written,
// or there already), a load's or a lookup's was found (and loaded).
inline bool KeySucceeded(JobKind kind, KeyOutcome outcome) {
  return outcome == KeyOutcome::kOk || (kind == JobKind::kStore && outcome == KeyOutcome::kSkippedExists);
}

class KVTIER_API TierShell {
 public:
  using Opener = std::function<Result<std::unique_ptr<FsTier>>(const FsTierOpenOptions&)>;
  using SubmitFn = std::function<Result<uint64_t>(FsTier&)>;
  // A row's name in messages ("slot 7"); empty: "rows[i]".
  using RowNamer = std::function<std::string(size_t row)>;
  // Which block files ClearNamespace removes, by the hash hex of their name
  // and their group (FORMAT.md L6); empty: every one.
  using BlockFilter = std::function<bool(std::string_view hex, uint32_t group)>;

  // Opens the tier with FsTier::Open (or `open`, for tests), its
  // on_job_finished set to the shell's (the options' own, if any, is called
  // too). `name` prefixes the shell's messages ("engine tier"). Errors: the
  // opener's.
  static Result<std::unique_ptr<TierShell>> Open(FsTierOpenOptions options, std::string name, Opener open = {});
  ~TierShell();  // Close()s
  TierShell(const TierShell&) = delete;
  TierShell& operator=(const TierShell&) = delete;

  // One call in flight: Close waits until it ends. Not admitted (false)
  // once Close began.
  class KVTIER_API Use {
   public:
    explicit Use(TierShell& shell);
    ~Use();
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;
    explicit operator bool() const { return shell_ != nullptr; }

   private:
    TierShell* shell_;
  };
  // True once Close began.
  bool closing() const;
  // kUnavailable "<name>: closed".
  Status Closed() const;

  // Submits one job: under the shell's lock, checks `memory` against the
  // claims held, calls submit(tier), and on success claims the memory for
  // the job it returns. Errors (nothing submitted): kUnavailable once Close
  // began; kInvalidArgument "<name>: <row name>: ..." naming the first
  // conflicting row; submit's own errors. With `refused`, conflicting rows
  // do not fail the call: their indices (ascending) are put there before
  // submit is called, which must leave them out, and they are not claimed.
  Result<uint64_t> Submit(MemoryUse use, std::span<const MemoryRange> memory, const SubmitFn& submit,
                          const RowNamer& row_name = {}, std::vector<size_t>* refused = nullptr);
  // A job without memory (a lookup).
  Result<uint64_t> Submit(const SubmitFn& submit) { return Submit(MemoryUse::kRead, {}, submit); }
  // Submit, then WaitFor(job, kWaitForever): for a front end whose calls are
  // synchronous. Errors: Submit's (nothing submitted), else WaitFor's.
  Result<JobResult> SubmitAndWait(MemoryUse use, std::span<const MemoryRange> memory, const SubmitFn& submit,
                                  std::vector<size_t>* refused = nullptr);

  // Appends every job finished and not yet taken, in completion order (after
  // Close: those it collected); never blocks. Claims stay until Release.
  size_t Poll(std::vector<JobResult>* out);
  // Ends job `job`'s claim (its memory is the caller's again).
  void Release(uint64_t job);
  // Waits for job `job` (submitted through this shell, not taken by Poll)
  // and returns it, its claim ended. kTimedOut after timeout_ms (kWaitForever:
  // no limit): the job is then dropped, its claim ending only once it has
  // finished. kNotFound once Close has finished without it.
  Result<JobResult> WaitFor(uint64_t job, uint32_t timeout_ms);
  // Returns once a job finished that Poll would hand over, Close began, no
  // job is outstanding, or timeout_ms passed.
  void WaitForAny(uint32_t timeout_ms);
  // Waits until no job of the tier runs (FsTier::WaitIdle: 0 only checks;
  // kWaitForever: no limit), then every result is ready for Poll; once Close
  // began, until Close has finished. kTimedOut after timeout_ms.
  Status WaitIdle(uint32_t timeout_ms);
  // See the admission paragraph above.
  void Close();

  // Removes the namespace's block files (and their temp files, FORMAT.md
  // L55) that `filter` accepts, on every root, and the shard directories
  // left empty; returns how many files it removed. The walk runs on a
  // thread of its own, each file-system call with the tier's io_timeout_ms:
  // kTimedOut on a hung mount, the walk then abandoned (jobs in flight are
  // not waited for: a store racing the clear may leave its block). Errors:
  // kUnavailable once Close began; ErrnoToStatus naming the path (and
  // "root_dir[i]" where there are several roots).
  Result<uint64_t> ClearNamespace(const BlockFilter& filter = {});

  // FsTier::PrometheusText and BlockPath; kUnavailable once Close began.
  Result<std::string> PrometheusText(std::string_view tier_name) const;
  Result<std::string> BlockPath(const OffloadKey& key) const;
  // The tier's counters; after Close, their last values.
  FsTierMetrics Metrics() const;
  // FsTier::TakeKeyEvents; after Close, those of the close's drain, once.
  std::vector<TierKeyEvent> TakeKeyEvents();
  // As Open settled them (valid for the shell's lifetime).
  std::string_view backend_name() const;
  bool o_direct() const;
  bool xattrs_supported() const;
  std::string_view checksum_place() const;
  // The namespace the tier's files are in (FsTier::ns(): the key's own when sealed).
  const Namespace& ns() const;
  // The tier's root directories (one, or path_sharding's several), in order.
  const std::vector<std::string>& roots() const;
  // The tier, for tests on one thread; null after Close.
  FsTier* tier_for_tests();

 private:
  struct Rep;
  explicit TierShell(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

}  // namespace kvtier
