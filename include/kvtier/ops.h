// Operators' tools over a shared root_dir: du (usage per namespace), fsck
// (findings that cite layout-spec/FORMAT.md rules, optional repair) and gc
// (orphaned namespaces, capacity, temp files, corrupt files).
//
// Safe on a live shared volume that others can write:
// - the walk and every change go through directory file descriptors opened
//   one component at a time with O_NOFOLLOW, so no symlink and no swapped
//   directory can lead a scan, repair or gc outside `root`;
// - only names that match the layout exactly (layout-spec/FORMAT.md: blocks,
//   their temp files, probe files, config.json and its temp files, leases,
//   the empty directories they leave, and non-files squatting on a block
//   name) are ever removed, each only if it is still the inode scanned;
//   everything else is a finding, never a deletion;
// - non-regular files are never opened for data, and every read is bounded
//   (config.json at kConfigBytesMax, block data in fixed-size chunks);
// - files that appear or vanish during the walk are tolerated; parts that
//   cannot be read are reported (and gc keeps what it cannot judge);
// - a root that does not look like a kvtier/vLLM root is refused unless
//   `force`.
//
// What gc counts as "used": a block's activity is max(mtime, atime). kvtier
// sets atime explicitly on every load (FORMAT.md L75); other readers count
// under the mount's atime policy. `fsck --verify-data` reads with O_NOATIME
// so a verify pass never makes data look used (where the kernel refuses
// O_NOATIME, i.e. a non-owner without CAP_FOWNER, the report counts the
// blocks read without it).
//
// Calls: Du, Fsck and Gc are synchronous. Each walks the tree with
// `jobs` threads of its own and returns when the walk (and any repair or
// reclaim) is done; nothing outlives the call. They keep no state between
// calls and share none, so any number may run at once, from any threads or
// processes, over the same root or others (each acts only on what it has
// just scanned, and only if it is still the inode scanned).
//
// Errors (the Result's Status), common to the three:
// - kInvalidArgument, naming the argument: `root` is empty or holds a NUL
//   byte (the kernel would read a shorter path: another directory); `jobs`
//   is outside 1..kScanJobsMax; or the root holds entries but none
//   that looks like a namespace or block directory (FORMAT.md L2) and
//   `force` is false.
// - kTimedOut: one file-system call (an open, a directory listing, a read,
//   an unlink...) did not return within io_timeout_ms: the mount is hung.
//   The message names the path. The call returns at once; the thread stuck
//   in the kernel is abandoned (it holds a few fds and a report under
//   construction until the kernel lets it go, then does nothing more: every
//   later step of an abandoned call fails with ECANCELED, so a gc changes
//   nothing after it was reported timed out). What was removed before the
//   hang stays removed; every removal is one unlink of a name gc or fsck
//   selects afresh on each run, so a later run finishes the job.
// - the root itself cannot be opened or listed (opened following symlinks:
//   the operator named it): ErrnoToStatus of the errno, i.e. kNotFound
//   (ENOENT), kPermissionDenied (EACCES, EPERM), kIoError (ENOTDIR, ELOOP,
//   EIO, ...).
// With a list of roots (a ',' in `root`, FORMAT.md L99) each root is walked
// in turn and any error above fails the whole call, its message prefixed
// with "root_dir[i]"; also kInvalidArgument for a list with an empty or a
// repeated root, or one that contradicts a root's marker (L100: the roots
// reordered, or their count changed). Nothing is changed on any root before
// every root has been walked.
// Anything below the root that cannot be read is not an error of the call:
// the report lists it (unreadable, kept, or kUnreadable findings) and sets
// its exit code. An empty root is a valid, empty report.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/export.h"
#include "kvtier/hashing.h"
#include "kvtier/result.h"

namespace kvtier {

// The most walker threads a call takes (the CLI's --jobs cap).
inline constexpr int kScanJobsMax = 256;
// A duration (seconds) of at least this means "never": no age reaches it.
// (Python passes any int; 2^63 and more once wrapped negative and inverted gc.)
inline constexpr uint64_t kDurationNeverS = uint64_t{1} << 63;
// io_timeout_ms's default: a healthy network file system answers every call
// well within it; a hung one never does.
inline constexpr uint64_t kDefaultIoTimeoutMs = 30000;

struct ScanProgress {
  uint64_t files = 0;  // files seen so far
  uint64_t bytes = 0;  // their bytes
};

struct ScanOptions {
  // Required. A comma-separated list names the roots of one path_sharding
  // tier (FORMAT.md L99): reports cover them all, paths in them are prefixed
  // with their root, and a list that contradicts a root's marker (L100) is refused.
  std::string root;
  int jobs = 4;                 // walker threads, 1..kScanJobsMax
  bool force = false;           // walk a root that does not look like one
  uint64_t tmp_grace_s = 3600;  // temp and probe files younger than this are in flight (>= kDurationNeverS: all)
  // The longest one file-system call may take before the call gives up with
  // kTimedOut (see the top of this file); a deadline per call, not per run,
  // so a large healthy volume never times out. 0: wait forever.
  uint64_t io_timeout_ms = kDefaultIoTimeoutMs;
  // Called every 100 ms from a kvtier thread while blocks are walked, and
  // once more on the calling thread when the walk ends; may be empty.
  std::function<void(const ScanProgress&)> progress;
};

// A part of the tree that could not be read (the report is incomplete).
struct ScanProblem {
  std::string path;    // relative to the root
  std::string detail;  // the error, e.g. "open: Permission denied"
};

// config.json files larger than this are not read (a finding instead).
inline constexpr uint64_t kConfigBytesMax = 1 << 20;
// FORMAT.md L109: no block row is larger than this (a generous bound: a 405B-parameter model's
// 32-block file is ~256 MiB). A larger block file is a size_mismatch finding
// that is never read, and takes no part in a namespace's "most common size":
// a sparse file of 1 TiB apparent size costs a stat, not a terabyte of reads.
inline constexpr uint64_t kBlockBytesMax = uint64_t{1} << 30;
// GcOptions::dir_grace_s's and FsckOptions::dir_grace_s's default (FORMAT.md L108).
inline constexpr uint64_t kDefaultDirGraceS = 60;
// GcOptions::list_max's default: the longest list a GcReport holds.
inline constexpr uint64_t kDefaultGcListMax = 10000;

struct NamespaceUsage {
  std::string dir;     // "<model>_<digest>"
  std::string model;   // model_name from config.json (or the directory's prefix)
  std::string digest;  // 12 hex characters
  bool has_config = false;
  // Which engine wrote it: config.json's "inference_engine", "vllm" or
  // "sglang" ("" when unknown: no config.json, or another value).
  std::string engine;
  // From config.json when it parses: dtype and tp_size (both engines);
  // vLLM's tokens_per_hash, blocks_per_file and number of KV-cache groups;
  // SGLang's page_size and mem_layout (-1 / "" when unknown or absent).
  int64_t tokens_per_hash = -1, blocks_per_file = -1, tp_size = -1, groups = -1;
  std::string dtype;
  int64_t page_size = -1;
  std::string mem_layout;
  std::vector<int64_t> ranks;  // the _r<rank> block directories
  // bytes: what the blocks hold on disk, min(st_size, 512 * st_blocks) per
  // block: a sparse file counts its data, not its holes.
  uint64_t blocks = 0, bytes = 0, tmp_files = 0;
  int64_t newest_activity = 0, oldest_activity = 0;  // unix seconds, max(atime, mtime) of blocks
  // FORMAT.md L155: the newest activity as gc counts it (a use time more than
  // 300 s after the scan's clock counts as the epoch, one less ahead as that
  // clock), what `du --top N --by age` orders by; and how many blocks are
  // dated that far ahead (a wrong clock, on a writer or on this host).
  int64_t newest_counted_activity = 0;
  uint64_t far_future_blocks = 0;
  uint64_t live_leases = 0;
  bool leases_known = true;  // false: the lease directory or a lease could not be read
  // A sealed namespace (docs/sealed.md, FORMAT.md L162, L180): config.json
  // holds a "kvtier_seal" member. seal_key_id: its key id, 32 lowercase hex
  // digits naming the key (never the key itself); "" when config.json does
  // not say (no such member, or not a key id).
  bool sealed = false;
  std::string seal_key_id;
};

struct DuReport {
  std::vector<NamespaceUsage> namespaces;  // sorted by dir
  uint64_t total_bytes = 0, total_blocks = 0, files_scanned = 0;
  std::vector<ScanProblem> unreadable;  // the totals leave these out
  uint64_t unreadable_unlisted = 0;     // more such parts, past 10^4 of a namespace: counted, not listed
  // 0: complete; 8 (e2fsck's "operational error"): parts could not be read.
  KVTIER_API int ExitCode() const;
};

// Usage per namespace directory found under options.root (`kvtier du`):
// block counts and bytes, temp files, ranks, live leases (refreshed within
// 60 s) and what config.json says. Reads only directories and config.json
// (at most kConfigBytesMax bytes); changes nothing, and never updates a
// block's atime. Errors: those listed at the top of this file, no others.
KVTIER_API Result<DuReport> Du(const ScanOptions& options);

enum class FindingKind {
  kConfigMissing, kConfigTorn, kConfigDigestMismatch, kBadName, kSizeMismatch, kCrcMismatch,
  kStaleTmp, kProbeLeftover, kStrayFile, kEmptyDir,
  kUnreadable,  // a directory or file of the layout that could not be read
  kNotRegular,  // a directory, symlink, FIFO, socket or device at a block or config.json name
  kWrongRoot,   // several roots: a block on a root other than its own (L101); never removed
  // A block of a sealed namespace that is no sealed block of its key: no
  // seal record, a damaged one, another key's (L182), or a tag that fails
  // under the key (verify_data with FsckOptions::seal_key_files, L183).
  kSealMismatch,
  // A namespace whose blocks disagree on their size with nothing trusted to
  // say which size is its row (FORMAT.md L196): no row size given, none
  // declared; files a co-tenant plants can make any size the most common,
  // so no block was removed for its size alone. One finding per namespace.
  kSuspectSizes,
};
// Stable lower-case name of a kind ("config_missing", "not_regular", ...),
// as the CLI's JSON and the Python binding report it.
KVTIER_API std::string_view FindingKindName(FindingKind kind);

enum class RepairAction { kNone, kRemoved, kQuarantined };
// Stable lower-case name: "none", "removed" or "quarantined".
KVTIER_API std::string_view RepairActionName(RepairAction action);

struct Finding {
  FindingKind kind;
  std::string path;  // relative to the root
  std::string rule;  // "L78", ...
  RepairAction action = RepairAction::kNone;
  std::string detail;
};

// A block file gc or fsck --repair has just removed (its unlink succeeded:
// never for a dry run, a file already gone, a temp, probe, lease or
// config.json file, or a non-file at a block name), as on_block_removed
// receives it: what a KV-event publisher needs to name the block
// (docs/kv-events.md). The names are as read off the volume: a caller that
// puts them on the wire checks them (they match the layout, L5-L7, or the
// scan would not have taken the file for a block).
struct RemovedBlock {
  std::string root;       // the root the file was on (one of a list's, as given)
  std::string path;       // relative to that root: "<block_dir>/<hhh>/<group_dir>/<stem>.bin"
  std::string block_dir;  // "<model>_<digest>_r<rank>" (L5)
  std::string group_dir;  // "<hh>_g<group>" (L6)
  std::string stem;       // the file name without ".bin": the block's hex hash (L7)
  // The namespace's config.json "inference_engine" as the scan read it:
  // "vllm", "sglang", or "" (unknown: no config.json, torn, another value;
  // treat as vLLM).
  std::string engine;
  uint64_t bytes = 0;  // what it held on disk (as Reclaimed::bytes)
  // Why: gc's Reclaimed::reason (orphaned_namespace, capacity, min_free,
  // corrupt); fsck's FindingKindName of the finding (size_mismatch,
  // crc_mismatch, seal_mismatch).
  std::string reason;
  // The blocks the file held, in order, as its block-hash record names them
  // (FORMAT.md L200: whole, and its last the stem's hash), read just before
  // the unlink in a namespace whose files may hold several blocks; empty:
  // none (one block per file, or no trusted record), the stem alone.
  std::vector<BlockHash> block_hashes;
};

// Called after each successful removal of a block file, exactly once per
// file this call removed, from any of the call's threads (several at once:
// it must be thread-safe, and should be quick: removals wait on it). It may
// still be called once after the call returned kTimedOut, from the
// abandoned thread whose unlink the hung mount finally answered: capture by
// shared ownership. Empty: nothing is done (no cost).
using OnBlockRemoved = std::function<void(const RemovedBlock&)>;

struct FsckOptions : ScanOptions {
  bool repair = false;       // without it nothing changes
  bool verify_data = false;  // read every block and check its CRC32C
  uint64_t row_bytes = 0;    // expected block size; 0: each namespace's most common size
  // With repair, an empty shard directory (<hhh>, <hh>_g<g>) is removed only
  // by rmdir of the inode looked at, and only if it was unchanged (its mtime)
  // for this long: a writer may have just created it (FORMAT.md L108, as
  // gc's). A younger one is reported and left. >= kDurationNeverS: never.
  uint64_t dir_grace_s = kDefaultDirGraceS;
  // Paths of seal key files (docs/sealed.md: 32 raw bytes or 64 hex digits).
  // With verify_data, the blocks of the sealed namespaces these keys sealed
  // are checked tag by tag (FORMAT.md L183); other sealed namespaces' blocks
  // are checked for structure only (L182), as they are without keys. A key
  // file that cannot be read or is not a key fails the call
  // (kInvalidArgument naming the path, never the content); so does one
  // whose owner or mode FORMAT.md L174 refuses (kPermissionDenied), a
  // group-readable one unless seal_key_group_read.
  std::vector<std::string> seal_key_files;
  bool seal_key_group_read = false;
  // With repair: told of each block file removed (RemovedBlock, OnBlockRemoved).
  OnBlockRemoved on_block_removed;
};

struct FsckReport {
  std::vector<Finding> findings;
  // Findings found but not in `findings`, by kind: a scan lists at most
  // 10^4 of one kind per namespace (and of the root's strays), so memory is
  // bounded whatever a hostile tree holds. They are not repaired this pass
  // and count as problems left (exit 4); a later run lists them.
  std::map<FindingKind, uint64_t> findings_unlisted;
  // Every finding, listed or not.
  KVTIER_API uint64_t FindingsTotal() const;
  uint64_t files_scanned = 0, blocks_checked = 0, blocks_verified = 0;
  uint64_t verified_without_noatime = 0;  // read where O_NOATIME was refused (atime may have moved)
  // What verify_data read: a block's holes are checked as zeros without
  // being read (FORMAT.md L109), so this is bounded by the data allocated.
  uint64_t verify_read_bytes = 0;
  // Blocks of sealed namespaces whose seal record was checked (L182), and of
  // them those whose tag was checked under a key (L183).
  uint64_t sealed_checked = 0, sealed_verified = 0;
  // e2fsck's convention: 0 clean, 1 problems repaired, 4 problems left.
  KVTIER_API int ExitCode() const;
};

// Checks every namespace under options.root against layout-spec/FORMAT.md
// (`kvtier fsck`): one Finding per problem, citing its rule. Without
// `repair` it changes nothing. With it: short blocks (L65, L80), temp and
// probe files older than tmp_grace_s (L81, L82), empty layout directories
// unchanged for dir_grace_s (L91, L108), non-files at layout names (L95, a directory only when empty) and,
// with verify_data, blocks whose CRC32C does not match (L67) are removed; a
// torn or mismatched config.json (L77, L79) is moved to
// <ns>/.kvtier/quarantine/. Bad names (L94), stray files (L90) and, with a
// list of roots, blocks on a root other than their own (kWrongRoot, L101)
// are only reported. Each removal happens only if the name is still the inode
// scanned; a failed repair leaves the finding's action kNone.
// verify_data reads every block of the expected size (jobs threads) with
// O_NOATIME where allowed, and only its data: holes are checked as zeros
// without being read (L109, FsckReport::verify_read_bytes). Parts that cannot be read become kUnreadable
// findings (L97). Findings of the walk beyond 10^4 of a kind in a namespace
// are counted, not listed (FsckReport::findings_unlisted), nor repaired.
// Errors: those listed at the top of this file, no others.
KVTIER_API Result<FsckReport> Fsck(const FsckOptions& options);

struct GcOptions : ScanOptions {
  bool dry_run = false;
  std::optional<uint64_t> older_than_s;      // reclaim namespaces idle this long (>= kDurationNeverS: never)
  std::optional<uint64_t> max_bytes;         // keep block bytes under this
  std::optional<uint64_t> low_water_bytes;   // ... down to this (default max_bytes)
  // Namespace directory names (not paths) never touched; an empty name, ".",
  // "..", or one holding '/' or NUL matches nothing and is refused.
  std::vector<std::string> keep;
  uint64_t lease_ttl_s = 60;                 // leases refreshed within this are live (>= kDurationNeverS: forever)
  // A shard directory (<hhh>, <hh>_g<g>) that held nothing but blocks gc
  // removed is removed too (rmdir: only if still empty), but only if the
  // scan found it unchanged (its mtime) for at least this long: a writer may
  // have just created it (FORMAT.md L108). >= kDurationNeverS: never.
  uint64_t dir_grace_s = kDefaultDirGraceS;
  // At most this many entries in GcReport::reclaimed and ::failed each (the
  // counts say how many there were): a report's memory is bounded too.
  uint64_t list_max = kDefaultGcListMax;
  // A free-space floor (`gc --watch --min-free`): on root i of `root`,
  // besides max_bytes, remove least recently active blocks until at least
  // reclaim_bytes[i] bytes of blocks are gone (reason "min_free"). Empty:
  // none; otherwise one entry per root, in list order (kInvalidArgument
  // naming reclaim_bytes when the count differs). Counted in file sizes, as
  // max_bytes is; the caller turns a statvfs deficit into it.
  std::vector<uint64_t> reclaim_bytes;
  // Asked before each removal, from any of gc's threads (so thread-safe);
  // once it returns true gc removes nothing more, sets GcReport::stopped and
  // returns after the walk (the watch mode's SIGTERM, or a lost collector
  // lease, FORMAT.md L121). Empty: never stops. The removal under way is
  // finished: each is one unlink.
  std::function<bool()> stop;
  // The memory gc's first walk may hold for the least recently used blocks
  // (about 80 bytes each: 32 MiB holds ~400k). When the capacity bound asks
  // for no more than they hold, gc removes them in exact LRU order without
  // walking again (GcReport::walks 1); otherwise it walks again with the
  // histogram (see Gc). With a list of roots, each root gets its share.
  // Tests set it small; 0 always walks again.
  uint64_t candidates_bytes_max = uint64_t{32} << 20;
  // Asked on the calling thread once per root, after the walk and before the
  // first removal for capacity (max_bytes, reclaim_bytes), only when the
  // bound asks for one; it may wait. "": go on; otherwise why not: nothing is
  // removed for capacity on that root, and GcReport::capacity_skipped says
  // why (CollectOnce's collector lease, FORMAT.md L124). Empty: go on.
  std::function<std::string()> capacity_gate;
  // Told of each block file removed, whatever the reason (RemovedBlock,
  // OnBlockRemoved); never with dry_run. CollectOnce and the Collector's
  // passes keep it: only the run that unlinks a file tells of it.
  OnBlockRemoved on_block_removed;
};

struct Reclaimed {
  std::string path;  // relative to the root
  uint64_t bytes = 0;
  std::string reason;  // orphaned_namespace, capacity, min_free, stale_tmp, corrupt
};

// A file gc selected but could not remove (EACCES, EPERM, EROFS, EIO...).
struct FailedRemoval {
  std::string path;  // relative to the root
  uint64_t bytes = 0;
  std::string reason;  // why it was selected, as Reclaimed::reason
  int sys_errno = 0;   // why the removal failed
  std::string detail;  // strerror(sys_errno)
};

// What gc removed for one reason.
struct ReasonTotal {
  uint64_t files = 0, bytes = 0;
};

struct GcReport {
  bool dry_run = false;
  std::vector<Reclaimed> reclaimed;
  // The same, counted per Reclaimed::reason ("capacity", "min_free", ...):
  // what `gc --watch` exports, whatever the length of `reclaimed`.
  std::map<std::string, ReasonTotal> by_reason;
  // Selected but not removed: the bound (--max-bytes, --older-than) is not
  // enforced. A file replaced meanwhile (another writer) is not listed.
  std::vector<FailedRemoval> failed;
  uint64_t bytes_reclaimed = 0, files_scanned = 0;
  // How many files were reclaimed and how many removals failed: the lists
  // above hold at most GcOptions::list_max of each.
  uint64_t files_reclaimed = 0, files_failed = 0;
  uint64_t dirs_removed = 0;  // empty shard directories removed (L108)
  // With max_bytes, when the bound was over: the use time (unix seconds) at
  // and before which blocks were removed for capacity; those used within
  // capacity_tolerance_s before it were taken in walk order, not by exact
  // use time (see Gc). Both 0 when no capacity removal was needed. A cutoff
  // of 0 with a tolerance: only blocks dated far ahead went (FORMAT.md L155
  // counts their use time as the epoch).
  int64_t capacity_cutoff = 0;
  uint64_t capacity_tolerance_s = 0;
  // Blocks whose use time lies more than 300 s after this host's clock,
  // counted as used at the epoch (FORMAT.md L155): gc takes them first.
  uint64_t far_future_blocks = 0;
  // Full walks of the tree this run made (with a list of roots, the most any
  // root took): 1 when nothing had to go before the capacity trim and it fit
  // the candidate buffer (GcOptions::candidates_bytes_max), 2 or 3 otherwise.
  uint64_t walks = 0;
  // How many blocks the first walk's candidate buffer held (summed over roots):
  // never more than candidates_bytes_max allows, whatever the file count.
  uint64_t candidates_held = 0;
  // Why the capacity bound was not enforced ("": it was, or none was over):
  // GcOptions::capacity_gate said no (another collector holds the lease).
  std::string capacity_skipped;
  // The skip was a failure to take the collector lease (it could not be
  // made or read, or not within its deadline: CollectOnce), not another
  // collector's holding it: nobody enforced the bound. ExitCode has 4.
  bool capacity_lease_failed = false;
  std::vector<ScanProblem> unreadable;  // parts that could not be read
  uint64_t unreadable_unlisted = 0;     // more such parts, past 10^4 of a namespace: counted, not listed
  // Namespaces kept although --older-than would reclaim them by what could
  // be read, because a part (its leases above all) could not: gc fails closed.
  std::vector<ScanProblem> kept;
  // GcOptions::stop said stop: removals were skipped from then on (not
  // listed in `failed`); a later run finishes the job.
  bool stopped = false;
  // e2fsck's bits: 0 complete; 4: some selected files could not be removed
  // (`failed`), or capacity_lease_failed; 8 ("operational error"): parts
  // could not be read; 12: both.
  KVTIER_API int ExitCode() const;
};

// Reclaims space under options.root (`kvtier gc`), namespaces in `keep`
// excepted: always stale temp and probe files (older than tmp_grace_s) and
// blocks shorter than their namespace's most common size; with older_than_s,
// whole namespaces with no live lease (lease_ttl_s) and no activity for that
// long (FORMAT.md L92), kept instead (GcReport::kept) where a part or a lease
// could not be read; with max_bytes, the least recently active blocks until
// the total is at most low_water_bytes. Removes only layout files, each only
// if it is still the inode scanned; with dry_run it removes nothing and
// reports what it would. With a list of roots, a namespace is reclaimed only
// when it is orphaned on every root that holds it, and max_bytes applies to
// each root, as reclaim_bytes[i] does to root i. Errors: kInvalidArgument
// when low_water_bytes exceeds max_bytes or reclaim_bytes does not have one
// entry per root, and those listed at the top of this file.
//
// Memory is bounded whatever the number of files: gc never holds the list of
// blocks. Its first walk keeps, besides statistics, a histogram of use times
// and the least recently used blocks that fit candidates_bytes_max (32 MiB:
// ~400k blocks). When no block must go first (no namespace reclaimed whole,
// no short blocks) and the bound asks for no more than those oldest blocks
// hold, they go oldest first and that walk is all (GcReport::walks 1): exact
// LRU, use times in seconds, ties in one second taken in name order
// (capacity_tolerance_s 1). Otherwise gc walks again: once to remove orphaned
// namespaces' and short blocks (rebuilding the histogram), and once, when the
// bound is over, to remove the blocks beyond the histogram's cut-off. The
// histogram has one-second buckets for blocks used within the last 128 s and
// buckets 1/64 of their age wide beyond (e.g. 1 h wide at 64 h): every block
// removed for capacity was used before every block kept, except within the
// one bucket where the cut-off falls (capacity_tolerance_s, at most
// max(1 s, age / 64)), where blocks are taken in walk order until the bound
// is met. The bytes freed match the exact LRU order's: gc stops at the first
// block that brings the total to low_water_bytes or under. Either way a block
// used (or replaced) after the walk that selected it is kept.
KVTIER_API Result<GcReport> Gc(const GcOptions& options);

}  // namespace kvtier
