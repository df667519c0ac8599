// FsTier start-up: directories, config.json (written once, atomically), and
// the O_DIRECT and (with checksum_blocks) xattr probes (tier_probes.cc), the
// latter deciding where block checksums go (FORMAT.md L130), all with plain
// syscalls before the I/O loop runs.
// root_dir is the operator's and is created like `mkdir -p`; below it, on a
// volume others may write, everything goes through directory fds that
// follow no symlink (tier_dirs.h): a symlinked <NS>, <NS>_r<rank> or .kvtier
// fails the open with a Status naming it.
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "fs/block_codec.h"
#include "format/block_hashes.h"
#include "fs/fs_tier_internal.h"
#include "format/layout_names.h"
#include "format/root_list.h"
#include "fs/tier_dirs.h"
#include "fs/tier_events.h"
#include "fs/tier_space.h"
#include "fs/volume_kind.h"
#include "io/io_watch.h"
#include "seal/seal_cipher.h"
#include "util/log.h"

namespace kvtier::internal {
namespace {

// Creates path (root_dir) and its missing parents. With `durable`, the parent
// of each directory created is fsynced so the new entry survives power loss.
Status MkdirAll(const std::string& path, bool durable) {
  for (size_t at = 1; at <= path.size(); ++at) {
    if (at != path.size() && path[at] != '/') continue;
    std::string prefix = path.substr(0, at);
    if (mkdir(prefix.c_str(), 0777) == 0) {
      if (durable) {
        const size_t slash = prefix.rfind('/');
        const std::string parent = slash == 0 ? "/" : slash == std::string::npos ? "." : prefix.substr(0, slash);
        int fd = open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd >= 0) {
          fsync(fd);
          close(fd);
        }
      }
    } else if (errno != EEXIST) {
      return ErrnoToStatus(errno, "mkdir " + prefix);
    }
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return ErrnoToStatus(errno, "stat " + path);
  if (!S_ISDIR(st.st_mode)) return Status(StatusCode::kInvalidArgument, path + " is not a directory");
  return Status::Ok();
}

// Each span in whole rows of at most 1 GiB (the kernel's limit on one
// registered buffer), so that no row straddles two buffers and every row that
// starts at a multiple of row_bytes from its span's start can use fixed-buffer
// I/O. Rows above 1 GiB: none (plain I/O).
std::vector<std::span<uint8_t>> RowAlignedBuffers(const std::vector<std::span<uint8_t>>& spans,
                                                  uint64_t row_bytes) {
  constexpr uint64_t kBufferBytesMax = uint64_t{1} << 30;
  const uint64_t piece = row_bytes == 0 ? 0 : kBufferBytesMax / row_bytes * row_bytes;
  std::vector<std::span<uint8_t>> out;
  if (piece == 0) return out;
  for (std::span<uint8_t> span : spans) {
    for (uint64_t at = 0; at < span.size(); at += piece) {
      out.push_back(span.subspan(at, std::min<uint64_t>(piece, span.size() - at)));
    }
  }
  return out;
}

Status WriteAll(int fd, const void* data, size_t n, const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return ErrnoToStatus(w < 0 ? errno : EIO, what);
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

// FORMAT.md L28: config.json is written only when absent (or empty: what a
// power cut leaves of an unsynced write, never a valid file), through a temp
// file that is synced before the rename, so neither a crash nor a power cut
// leaves a torn one. It is informational: a differing one from another
// writer is left alone, and so is anything else at that name (fsck reports
// it). The sync happens once per tier open.
Status WriteConfigOnce(int ns_fd, const std::string& ns_dir, const std::string& text, uint64_t suffix) {
  struct stat st;
  if (fstatat(ns_fd, std::string(format::kConfigName).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      !(S_ISREG(st.st_mode) && st.st_size == 0)) {
    return Status::Ok();
  }
  const std::string tmp = format::ConfigTmpName(suffix);
  const std::string shown = ns_dir + "/" + tmp;
  int fd = openat(ns_fd, tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, "create " + shown);
  Status s = WriteAll(fd, text.data(), text.size(), "write " + shown);
  if (s.ok() && fdatasync(fd) != 0) s = ErrnoToStatus(errno, "fdatasync " + shown);
  if (close(fd) != 0 && s.ok()) s = ErrnoToStatus(errno, "close " + shown);
  if (s.ok() && renameat(ns_fd, tmp.c_str(), ns_fd, std::string(format::kConfigName).c_str()) != 0) s = ErrnoToStatus(errno, "rename " + shown);
  if (!s.ok()) unlinkat(ns_fd, tmp.c_str(), 0);
  return s;
}

// The tier's block codec (block_codec.h), chosen once here. A sealed tier's
// was chosen with its keys (SealedTierNamespace): its tag checks a block
// (L163), no CRC. Else, with checksum_blocks (L102), FORMAT.md L130: where
// stores put a block's CRC32C (PickChecksumPlace, the one decision that
// `kvtier doctor` prints too) and whether loads ask for the attribute of a
// block that has no trailer. Only checksum_place "xattr" refuses a volume
// without user xattrs, as vLLM's tier with checksum_blocks does: silently
// storing blocks without their CRC would defeat it.
Status ChooseCodec(int ns_fd, const FsTierOptions& t, const std::string& ns_dir, uint64_t suffix, TierShared* shared) {
  if (shared->codec != nullptr) return Status::Ok();
  if (!t.checksum_blocks) {
    shared->codec = MakeNoChecksumCodec();
    return Status::Ok();
  }
  const Status probe = ProbeXattr(ns_fd, ns_dir, suffix);
  const bool xattrs_work = probe.ok();
  if (!xattrs_work && t.checksum_place == ChecksumPlaceKind::kXattr) {
    return probe.WithContext("fs tier under root_dir " + t.root_dir +
                             ": checksum_place \"xattr\" needs user xattrs (user.vllm.kv_crc32c) and they do not "
                             "work here; \"checksum_place\": \"auto\" or \"trailer\" keeps checksums in a "
                             "trailer after each row, \"checksum_blocks\": false runs without them");
  }
  const ChecksumPlace place = t.checksum_place == ChecksumPlaceKind::kAuto    ? PickChecksumPlace(xattrs_work)
                              : t.checksum_place == ChecksumPlaceKind::kXattr ? ChecksumPlace::kXattr
                                                                              : ChecksumPlace::kTrailer;
  // Where user xattrs do not work, a load's fgetxattr could only fail: trailer loads skip it.
  shared->codec = place == ChecksumPlace::kXattr ? MakeXattrCrcCodec(&shared->checksum_ns)
                                                 : MakeTrailerCrcCodec(xattrs_work, &shared->checksum_ns);
  if (!xattrs_work && t.checksum_place == ChecksumPlaceKind::kAuto) {
    Log(LogLevel::kInfo, "fs tier under " + t.root_dir + ": no user xattrs here (" + probe.ToString() +
                             "); block checksums go in a 4096-byte trailer after each row (FORMAT.md L131)");
  }
  return Status::Ok();
}

uint64_t RandomU63() {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, 0) != sizeof v) v = std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32);
  return v & ((uint64_t{1} << 63) - 1);
}

}  // namespace

bool InlineMetadataFor(const FsTierOptions& t, bool local) {
  switch (t.inline_metadata) {
    case InlineMetadata::kOn: return true;
    case InlineMetadata::kOff: return false;
    case InlineMetadata::kAuto: return local;
  }
  return false;
}

bool BounceLoadsFor(const FsTierOptions& t, bool local) {
  switch (t.bounce_loads) {
    case BounceLoads::kOn: return true;
    case BounceLoads::kOff: return false;
    case BounceLoads::kAuto: return !local;
  }
  return true;
}

namespace {

// Four ring entries per I/O slot (an SQE per op, with room), a power of two:
// at most 32768, the kernel's IORING_MAX_ENTRIES, for the kFsTierIoSlotsMax
// slots that ValidateOptions allows. A larger ring would be refused with
// EINVAL and wrongly reported as io_uring being unavailable.
unsigned RingEntries(int slots) {
  unsigned entries = 64;
  while (entries < 4 * static_cast<unsigned>(slots)) entries *= 2;
  return entries;
}

// io_backend "auto" is PickBackend's choice for the root's volume
// (volume_kind.h, classified while the start-up was watched), logged once
// per open; an unclassifiable root (statfs failed) keeps io_uring. Where the
// kernel refuses a ring, "auto" still runs, on the syscall pool, with a
// warning; an explicit "uring" fails the open.
IoBackendKind ChooseBackend(const FsTierOpenOptions& o, const VolumeKind& volume) {
  if (o.tier.io_backend != IoBackendKind::kAuto) return o.tier.io_backend;
  const IoBackendKind kind = PickBackend(volume);
  const std::string fs = volume.fs_name + (volume.mount_type.empty() ? "" : ", mount type " + volume.mount_type);
  Log(LogLevel::kInfo, "fs tier under " + o.tier.root_dir + " (" + fs + "): io_backend \"auto\" runs " +
                           BackendName(kind) +
                           (volume.network_or_fuse ? " (a network or FUSE filesystem: every call may be a round trip)"
                                                   : " (a local filesystem)"));
  return kind;
}

Result<std::unique_ptr<IoBackend>> MakeBackend(const FsTierOpenOptions& o, const VolumeKind& volume) {
  const bool local = volume.local;
  const int slots = o.tier.n_read_threads + o.tier.n_write_threads;
  // One thread more than the slots: the I/O loop's probe of a root that is
  // down must find one even while every op's request is stuck in the kernel
  // (the ring has room for it in any case).
  const int threads = slots + 1;
  if (ChooseBackend(o, volume) == IoBackendKind::kUring) {
    UringOptions uring_options;
    uring_options.inline_metadata = InlineMetadataFor(o.tier, local);
    uring_options.inline_fd_metadata = local;
    uring_options.force_async = !uring_options.inline_fd_metadata;
    // Each request of a network or FUSE root waits a round trip in a kernel
    // worker: as many workers as the syscall pool has threads.
    if (uring_options.force_async) uring_options.workers_max = static_cast<unsigned>(threads);
    auto uring = MakeUringBackend(RingEntries(slots), uring_options);
    if (uring.ok() || o.tier.io_backend == IoBackendKind::kUring) return uring;
    LogWarning("io_uring is unavailable (" + uring.status().ToString() +
               "): falling back to a pool of " + std::to_string(threads) + " syscall threads");
  }
  return MakeSyncBackend(threads);
}

Status ValidateOptions(const FsTierOpenOptions& o) {
  if (o.tier.root_dir.empty()) return InvalidArgument("fs tier: root_dir is required");
  if (o.row_bytes == 0) return InvalidArgument("fs tier: row_bytes must be > 0");
  if (o.tier.n_read_threads < 1 || o.tier.n_write_threads < 1) {
    return InvalidArgument("fs tier: n_read_threads and n_write_threads must be >= 1");
  }
  // In 64 bits: two ints near INT_MAX must not wrap into a small sum.
  if (int64_t{o.tier.n_read_threads} + o.tier.n_write_threads > kFsTierIoSlotsMax) {
    return InvalidArgument("fs tier: n_read_threads + n_write_threads must be at most " +
                           std::to_string(kFsTierIoSlotsMax) + " (kFsTierIoSlotsMax), got " +
                           std::to_string(o.tier.n_read_threads) + " + " + std::to_string(o.tier.n_write_threads));
  }
  if (o.tier.stores_while_loading_max < 0) {
    return InvalidArgument("fs tier: stores_while_loading_max must be >= 0 (0: no cap)");
  }
  return CheckCapacityOptions(o.tier, o.row_bytes, 1);
}

}  // namespace

Result<std::unique_ptr<FsTier>> OpenFsTier(const FsTierOpenOptions& o, std::shared_ptr<const SealKeyring> keys) {
  return OpenFsTierWithBackend(o, nullptr, MonotonicClock(), std::move(keys));
}

namespace {

// The directories, config.json and probes: every syscall of the start-up
// that touches the volume, but the lease's. Each step is one watched call
// when FsTier::Open runs under a watch (io_watch.h): a later scope restarts
// the clock with its path, and the first one covers the fds closed on the
// way out. Fills `shared`; returns the namespace directory's fd.
Result<UniqueFd> PrepareDirs(const FsTierOpenOptions& o, const Namespace& ns, TierShared* shared,
                             VolumeKind* volume) {
  const std::string ns_dir = JoinRoot(o.tier.root_dir, ns.dir_name());
  const bool durable = o.tier.durability == Durability::kFull;
  IoScope at_root(o.tier.root_dir);
  KVTIER_RETURN_IF_ERROR(MkdirAll(o.tier.root_dir, durable));
  KVTIER_ASSIGN_OR_RETURN(shared->root, OpenRootDir(o.tier.root_dir));
  shared->root_dir = o.tier.root_dir;
  IoScope at_ns(ns_dir);
  KVTIER_ASSIGN_OR_RETURN(UniqueFd ns_fd, MakeTierDir(shared->root.get(), ns.dir_name(), ns_dir, durable));
  // The block directory is only checked here: the ops resolve their paths
  // from the root fd, refusing symlinks on the way (block_ops.h).
  const std::string block_dir = JoinRoot(o.tier.root_dir, ns.block_dir_name());
  IoScope at_blocks(block_dir);
  KVTIER_RETURN_IF_ERROR(MakeTierDir(shared->root.get(), ns.block_dir_name(), block_dir, durable).status());
  shared->tmp_base = RandomU63();
  IoScope at_config(ns_dir + "/config.json");
  KVTIER_RETURN_IF_ERROR(WriteConfigOnce(ns_fd.get(), ns_dir, ns.config_json(), shared->tmp_base));
  IoScope at_probes(ns_dir);
  shared->o_direct = ProbeODirect(ns_fd.get(), ns_dir, shared->tmp_base, o.tier.o_direct);
  KVTIER_RETURN_IF_ERROR(ChooseCodec(ns_fd.get(), o.tier, ns_dir, shared->tmp_base, shared));
  // Under the probes' watch: statfs of a hung mount is bounded too. A root
  // statfs cannot classify is neither local nor network (io_uring, bounce on).
  Result<VolumeKind> kind = ClassifyVolume(o.tier.root_dir);
  if (kind.ok()) *volume = std::move(*kind);
  return ns_fd;
}

}  // namespace

Result<Namespace> StoreNamespace(const FsTierOpenOptions& o, const SealKeyring* keys) {
  KVTIER_ASSIGN_OR_RETURN(Namespace base, TierNamespace(o));
  if (keys == nullptr) return base;
  return base.Sealed(keys->keys[0]->key_id_hex());
}

namespace {

// FORMAT.md L160-L162, L171: a sealed tier's keys (`given`, else read from
// the files o.tier names), its codec (with this tier's cipher and the
// namespace of each key), and its namespace (the primary's); else the plain one.
Result<Namespace> SealedTierNamespace(const FsTierOpenOptions& o, std::shared_ptr<const SealKeyring> given,
                                      TierShared* shared) {
  KVTIER_ASSIGN_OR_RETURN(Namespace base, TierNamespace(o));
  if (!o.tier.sealed()) return base;
  std::shared_ptr<const SealKeyring> ring = std::move(given);
  if (!ring) {
    KVTIER_ASSIGN_OR_RETURN(ring, LoadSealKeyring(o.tier));
  }
  std::vector<std::string> block_dirs;
  for (const std::unique_ptr<SealKey>& key : ring->keys) {
    KVTIER_ASSIGN_OR_RETURN(Namespace sealed, base.Sealed(key->key_id_hex()));
    block_dirs.push_back(sealed.block_dir_name());
  }
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<SealCipher> cipher, SealCipher::Create(ring));
  shared->codec = MakeSealedCodec(std::move(cipher), std::move(block_dirs), &shared->auth_failures);
  return base.Sealed(ring->keys[0]->key_id_hex());
}

// A block with a checksum trailer takes row_bytes + 4096 of max_bytes
// (FORMAT.md L136): a budget that fits a row but not that would refuse
// every store, so it fails the open, as a budget under one row does.
Status CheckTrailerBudget(const FsTierOptions& t, const TierShared& shared) {
  if (!t.capacity_bytes_max.has_value() || *t.capacity_bytes_max >= shared.file_bytes()) return Status::Ok();
  return InvalidArgument("fs tier under " + t.root_dir + ": max_bytes " + std::to_string(*t.capacity_bytes_max) +
                         " is less than one block here (" + std::to_string(shared.file_bytes()) +
                         " bytes: row_bytes plus the 4096-byte checksum trailer of a volume without user "
                         "xattrs): no block could ever be stored");
}

// The caller of a watched open got kTimedOut: the rest makes nothing (no
// memory registration, no lease) and the open fails.
Status CheckWanted(const std::string& ns_dir) {
  const std::shared_ptr<IoWatch> watch = CurrentIoWatch();
  if (watch && watch->abandoned()) return Status(StatusCode::kTimedOut, "fs tier open of " + ns_dir + ": abandoned");
  return Status::Ok();
}

void MakeRowPools(const FsTierOpenOptions& o, bool local, TierShared* shared) {
  if (BounceLoadsFor(o.tier, local)) {
    shared->bounce = std::make_unique<BouncePool>(o.row_bytes, o.tier.n_read_threads + o.tier.n_write_threads);
  }
  // Unaligned rows keep O_DIRECT through staging rows (block_ops.h); rows of a size O_DIRECT cannot
  // transfer whole use buffered I/O. A sealed tier encrypts into them (L168: never the caller's row).
  if ((shared->o_direct && o.row_bytes % 4096 == 0) || shared->codec->fills_stage()) {
    shared->stage = std::make_unique<BouncePool>(o.row_bytes, o.tier.n_read_threads + o.tier.n_write_threads);
  }
}

}  // namespace

Result<std::unique_ptr<FsTier>> OpenFsTierWithBackend(const FsTierOpenOptions& o, std::unique_ptr<IoBackend> backend,
                                                       const Clock& clock, std::shared_ptr<const SealKeyring> keys) {
  KVTIER_RETURN_IF_ERROR(ValidateOptions(o));
  auto shared = std::make_unique<TierShared>();
  KVTIER_ASSIGN_OR_RETURN(Namespace ns, SealedTierNamespace(o, std::move(keys), shared.get()));
  KVTIER_ASSIGN_OR_RETURN(shared->events, TierEvents::Open(o, ns));  // a bad endpoint fails before any I/O
  // L201: removals read a file's block-hash record only for kvtier's publisher, where files may hold several.
  shared->reads_block_hashes = shared->events && shared->events->publishes() && format::MayHoldSeveralBlocks(ns.spec());
  const std::string ns_dir = JoinRoot(o.tier.root_dir, ns.dir_name());
  VolumeKind volume;
  KVTIER_ASSIGN_OR_RETURN(UniqueFd ns_fd, PrepareDirs(o, ns, shared.get(), &volume));
  const bool local = volume.local;
  KVTIER_RETURN_IF_ERROR(CheckWanted(ns_dir));
  shared->row_bytes = o.row_bytes;
  KVTIER_RETURN_IF_ERROR(CheckTrailerBudget(o.tier, *shared));
  shared->durability = o.tier.durability;
  shared->io_timeout_ms = o.tier.io_timeout_ms;
  shared->touch_atime = local;
  shared->hold_shard_dirs = !local;
  shared->local_root = local;
  MakeRowPools(o, local, shared.get());
  if (!backend) {
    KVTIER_ASSIGN_OR_RETURN(backend, MakeBackend(o, volume));
  }
  // Not watched: pinning a large host pool takes its time and no mount.
  if (!o.registered_memory.empty()) {
    Status s = backend->RegisterBuffers(RowAlignedBuffers(o.registered_memory, o.row_bytes));
    if (!s.ok() && backend->name() == "io_uring") {
      LogWarning("row memory not registered with io_uring (" + s.ToString() +
                 "; raise RLIMIT_MEMLOCK): I/O maps pages per request");
    }
  }
  IoScope at_lease(ns_dir + "/" + std::string(format::kMetaDirName));
  KVTIER_RETURN_IF_ERROR(CheckWanted(ns_dir));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Lease> lease, Lease::Acquire(ns_fd.get(), ns_dir, shared->tmp_base));
  return MakeFsTierImpl(o, std::move(ns), std::move(shared), std::move(backend), std::move(lease), clock);
}

}  // namespace kvtier::internal

namespace kvtier {

namespace {

Result<std::unique_ptr<FsTier>> OpenUnwatched(FsTierOpenOptions options) {
  // Every root's events name the volume alike: "{volume}" is the root_dir as given (docs/kv-events.md).
  KvEventsConfig& events = options.tier.kv_events_config;
  if (events.volume_id.empty()) events.volume_id = options.tier.root_dir;
  // L99: a list of roots (or a ',' that would be one without path_sharding: an error, as in vLLM).
  const bool sharded = options.tier.path_sharding == PathSharding::kByBlockHash;
  if (sharded || options.tier.root_dir.find(',') != std::string::npos) {
    KVTIER_ASSIGN_OR_RETURN(std::vector<std::string> roots, format::SplitRootDirs(options.tier.root_dir, sharded));
    return internal::OpenMultiRootTier(options, roots);
  }
  return internal::OpenFsTier(options);
}

}  // namespace

// The start-up's syscalls (mkdir, config.json, probes, lease) run on a
// thread of their own, watched step by step with io_timeout_ms, so that an
// engine's attach on a hung mount fails with kTimedOut instead of hanging
// its caller. An abandoned open owns a copy of the options; if it completes
// once the mount answers, the tier it made is closed at once on its thread
// (it never had a job, so on_job_finished is never called).
Result<std::unique_ptr<FsTier>> FsTier::Open(const FsTierOpenOptions& options) {
  return internal::RunWatchedFor<std::unique_ptr<FsTier>>(
      options.tier.io_timeout_ms, "", [options] { return OpenUnwatched(options); });
}

}  // namespace kvtier
