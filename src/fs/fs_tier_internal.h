// Internal pieces of the fs tier shared by its start-up and its I/O loop.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fs/block_ops.h"
#include "fs/lease.h"
#include "fs/volume_kind.h"
#include "io/backend.h"
#include "io/clock.h"
#include "kvtier/fs_tier.h"
#include "seal/seal_key.h"

namespace kvtier::internal {

// What inline_metadata and bounce_loads resolve to for a root that is
// `local` (LocalFilesystem(t.root_dir), found where a hung mount is watched).
// The tier's open and `kvtier doctor` both ask here.
bool InlineMetadataFor(const FsTierOptions& t, bool local);
bool BounceLoadsFor(const FsTierOptions& t, bool local);

// The O_DIRECT start-up probe (FORMAT.md L63) in the namespace directory
// `ns_fd` (`ns_dir` names it in the log): whether the tier uses O_DIRECT.
// false only when !want_direct or the filesystem refuses O_DIRECT (EINVAL);
// a probe that fails otherwise (EACCES, ENOSPC, ...) proves nothing and
// keeps it on. Logs a warning naming the errno whenever the probe fails.
bool ProbeODirect(int ns_fd, const std::string& ns_dir, uint64_t suffix, bool want_direct);
// The user-xattr start-up probe (FORMAT.md L102) there: Ok when user xattrs
// work, kUnavailable when they do not; a probe that fails otherwise proves
// nothing, is logged and counts as Ok.
Status ProbeXattr(int ns_fd, const std::string& ns_dir, uint64_t suffix);

// `keys`: a sealed tier's keys, loaded once by the caller (a tier over
// several roots hands one keyring to every root, FORMAT.md L160); nullptr:
// the tier reads the keys options.tier names (none when it is unsealed).
Result<std::unique_ptr<FsTier>> OpenFsTier(const FsTierOpenOptions& options,
                                           std::shared_ptr<const SealKeyring> keys = nullptr);
// The same with a given backend (tests inject faults this way); nullptr
// chooses one from options.tier.io_backend. `clock` times the I/O loop's
// sick-volume policy (io/clock.h); tests pass a clock they move by hand.
Result<std::unique_ptr<FsTier>> OpenFsTierWithBackend(const FsTierOpenOptions& options,
                                                       std::unique_ptr<IoBackend> backend,
                                                       const Clock& clock = MonotonicClock(),
                                                       std::shared_ptr<const SealKeyring> keys = nullptr);

// A tier over several roots (path_sharding, FORMAT.md L99): `roots` is the
// split root_dir; one single-root tier per root behind a router.
Result<std::unique_ptr<FsTier>> OpenMultiRootTier(const FsTierOpenOptions& options,
                                                  const std::vector<std::string>& roots);

// A row's bytes: one span, or the sum of its pieces.
template <class T>
uint64_t RowSize(std::span<T> row) {
  return row.size();
}
template <class T>
uint64_t RowSize(const std::vector<std::span<T>>& pieces) {
  uint64_t n = 0;
  for (const auto& p : pieces) n += p.size();
  return n;
}

// The namespace a tier stores under: the prebuilt one, else from the spec.
inline Result<Namespace> TierNamespace(const FsTierOpenOptions& o) {
  if (o.prebuilt_ns) return *o.prebuilt_ns;
  return Namespace::Create(o.ns);
}

// The namespace a tier opened with `o` stores under: TierNamespace's, or,
// sealed (FORMAT.md L162), that of the primary key of `keys` (the keys
// o.tier names, loaded by the caller; nullptr when it is unsealed).
Result<Namespace> StoreNamespace(const FsTierOpenOptions& o, const SealKeyring* keys);

// kInvalidArgument unless there is one row of row_bytes per key: the one
// whole-call error of SubmitStore and SubmitLoad (fs_tier.h).
template <class Rows>
Status CheckRows(size_t keys, const Rows& rows, uint64_t row_bytes) {
  if (rows.size() != keys) return InvalidArgument("fs tier: one row buffer per key is required");
  for (const auto& row : rows) {
    if (RowSize(row) != row_bytes) {
      return InvalidArgument("fs tier: row buffers must be row_bytes (" + std::to_string(row_bytes) + ") long");
    }
  }
  return Status::Ok();
}

// The block-hash record (FORMAT.md L197-L198) each key's file gets: one
// per key ("" where its list is empty or names one block), or none when
// `hashes` is empty. kInvalidArgument naming the key for a list that is not
// the file's blocks (format::BlockHashListProblem; a namespace whose files
// hold one block takes none), or for other than one list per key.
Result<std::vector<std::string>> BlockHashRecords(const Namespace& ns, std::span<const OffloadKey> keys,
                                                  std::span<const std::vector<BlockHash>> hashes);

// The scheduler's limits from the tier's options (n_read_threads, ...; an
// abandon deadline io_timeout_ms + kAbandonGraceMs after a request's issue).
SchedulerLimits SchedulerLimitsFor(const FsTierOpenOptions& o);
// Where a store writes `key`'s block (L8), relative to root_dir.
BlockPathParts BlockParts(const Namespace& ns, const OffloadKey& key);

// Starts the I/O thread over a prepared namespace and backend; `clock`
// must outlive the tier.
std::unique_ptr<FsTier> MakeFsTierImpl(const FsTierOpenOptions& options, Namespace ns,
                                       std::unique_ptr<TierShared> shared, std::unique_ptr<IoBackend> backend,
                                       std::unique_ptr<Lease> lease, const Clock& clock);

}  // namespace kvtier::internal
