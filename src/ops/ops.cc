// The public du, fsck and gc: their arguments checked, then each run under a
// deadline per file-system call (io/io_watch.h), so a hung mount ends the
// call with kTimedOut rather than hanging the caller.
#include <cstring>

#include "format/root_list.h"
#include "io/io_watch.h"
#include "ops/ops_internal.h"

namespace kvtier {
namespace internal {

Status CheckScanOptions(const ScanOptions& o) {
  if (o.root.empty()) return InvalidArgument("root: a root directory is required");
  // The kernel reads a path up to its first NUL: the rest would be ignored
  // and the tools would act on another directory (as the tier config refuses it).
  if (o.root.find('\0') != std::string::npos) return InvalidArgument("root: must not contain a NUL character");
  if (o.jobs < 1 || o.jobs > kScanJobsMax) {
    return InvalidArgument("jobs: must be 1.." + std::to_string(kScanJobsMax) + ", got " + std::to_string(o.jobs));
  }
  return Status::Ok();
}

Status CheckGcOptions(const GcOptions& o) {
  KVTIER_RETURN_IF_ERROR(CheckScanOptions(o));
  if (o.max_bytes && o.low_water_bytes && *o.low_water_bytes > *o.max_bytes) {
    return InvalidArgument("low_water_bytes (--low-water) must not exceed max_bytes (--max-bytes)");
  }
  // One free-space goal per root: any other count is a caller's mistake.
  if (!o.reclaim_bytes.empty()) {
    auto roots = format::SplitRootDirs(o.root, IsRootList(o.root));
    const size_t n = roots.ok() ? roots->size() : 1;
    if (o.reclaim_bytes.size() != n) {
      return InvalidArgument("reclaim_bytes: expected one entry per root (" + std::to_string(n) + "), got " +
                             std::to_string(o.reclaim_bytes.size()));
    }
  }
  // A keep entry is compared with directory names: one that no directory can
  // be named would protect nothing, silently.
  for (size_t i = 0; i < o.keep.size(); ++i) {
    const std::string& k = o.keep[i];
    if (k.empty() || k == "." || k == ".." || k.find('/') != std::string::npos || k.find('\0') != std::string::npos) {
      return InvalidArgument("keep[" + std::to_string(i) + "]: expected a namespace directory name (no '/', no NUL), got \"" +
                             std::string(k.c_str()) + (k.find('\0') != std::string::npos ? "\\0...\"" : "\""));
    }
  }
  return Status::Ok();
}

}  // namespace internal

Result<DuReport> Du(const ScanOptions& options) {
  KVTIER_RETURN_IF_ERROR(internal::CheckScanOptions(options));
  return internal::RunWatchedFor<DuReport>(options.io_timeout_ms, "", [o = options] { return internal::DuUnwatched(o); });
}

Result<FsckReport> Fsck(const FsckOptions& options) {
  KVTIER_RETURN_IF_ERROR(internal::CheckScanOptions(options));
  return internal::RunWatchedFor<FsckReport>(options.io_timeout_ms, "",
                                             [o = options] { return internal::FsckUnwatched(o); });
}

Result<GcReport> Gc(const GcOptions& options) {
  KVTIER_RETURN_IF_ERROR(internal::CheckGcOptions(options));
  return internal::RunWatchedFor<GcReport>(options.io_timeout_ms, "", [o = options] { return internal::GcUnwatched(o); });
}

}  // namespace kvtier
