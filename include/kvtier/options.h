// The enums of kvtier's options, shared by the config parser (config.h) and
// the components that the options tune (fs_tier_options.h, the stager), so
// that config.h needs no component's header and each option has one type.
// The JSON spelling of each value is in the config key tables (config.cc,
// docs/config.md). Nothing here but enums.
#pragma once

namespace kvtier {

// `durability` of an fs tier: what a store syncs before it is reported.
enum class Durability {
  kNone,  // as vLLM: no fsync (a crash can lose recent blocks, never tear a checked one)
  kFile,  // fdatasync the temp file before the rename
  kFull,  // kFile, plus fsync of the directory after the rename
};

// `io_backend` of an fs tier: what runs its I/O.
enum class IoBackendKind {
  kAuto,     // io_uring; the syscall pool (with a logged warning) if the kernel refuses a ring
  kUring,    // io_uring or fail
  kSyscall,  // the syscall thread pool
};

// `locality` of an fs tier. It is echoed in KV events and selects the
// backpressure defaults.
enum class Locality {
  kUnspecified,  // the key is absent (or null): treated as LOCAL for defaults
  kLocal,        // "LOCAL": assumed local SSD
  kRemote,       // "REMOTE": assumed network storage
};

// `backpressure.backpressure_cls`: how store pressure is detected.
enum class BackpressureDetector {
  kEma,  // "EMABackpressureDetector": EMA of store latency per MiB
};

// `backpressure.policy_cls`: what happens to cascade stores under pressure.
enum class BackpressurePolicy {
  kDropStore,  // "DropStorePolicy": stores to the tier are dropped (blocks stay CPU-only)
};

// `gpu_copy` (kvtier's own): how GPU pages move between device memory and
// CPU rows. The copy engines cost no SM time but move small scattered pages
// slowly; staging them in a device buffer (64 MiB per direction) or a copy
// kernel over the link moves them at close to the link's speed.
enum class GpuCopy {
  kAuto,    // "auto": pages averaging < 64 KiB: loads staged, stores by the kernel; else the copy engines
  kDma,     // "dma": the copy engines only, page by page
  kKernel,  // "kernel": the copy kernel over the link (no device memory)
  kStaged,  // "staged": through the device staging buffer
};

// `inline_metadata` of an fs tier (kvtier's own): where the io_uring backend
// runs a store's directory and xattr syscalls (mkdirat, renameat, unlinkat,
// fsetxattr). io_uring hands each of them to a kernel worker thread, at a
// wake-up and two context switches apiece; on a local filesystem the syscall
// itself is cheaper than that, so the I/O thread makes it directly. On a
// network filesystem one can wait a round trip or a hung server, which must
// not stall the I/O thread's other work, so there they stay in the kernel's workers.
enum class InlineMetadata {
  kAuto,  // "auto": on where root_dir is a local filesystem (ext4, XFS, btrfs, tmpfs, F2FS), off elsewhere
  kOn,    // "on": always on the I/O thread
  kOff,   // "off": always in io_uring's workers
};

// `bounce_loads` of an fs tier (kvtier's own): whether loads read into rows
// the tier owns and copy a block to the caller's row only once it is whole
// and verified. A read abandoned at its deadline (io_timeout_ms) may be
// answered by a sick server later, and the kernel then writes that data
// wherever the read pointed: with a bounce row, into memory kvtier keeps
// until the kernel lets go, never into a row the engine has reused. Costs a
// memcpy per loaded row; on a local filesystem abandoned reads do not
// happen, so "auto" leaves it off there.
enum class BounceLoads {
  kAuto,  // "auto": on where root_dir is not a local filesystem (ext4, XFS, btrfs, tmpfs, F2FS)
  kOn,    // "on": always
  kOff,   // "off": never (a read into the caller's row is then waited for, never abandoned)
};

// `checksum_place` of an fs tier (kvtier's own; FORMAT.md L130): where a
// block's CRC32C goes when checksum_blocks is on. Loads check whichever
// form a block carries, whatever this says.
enum class ChecksumPlaceKind {
  kAuto,     // "auto": the user xattr where the start-up probe shows user xattrs work, else the trailer
  kXattr,    // "xattr": the user xattr only (vLLM PR #57912's place); the open fails where xattrs do not work
  kTrailer,  // "trailer": 4096 bytes after the row, on any filesystem
};

// `startup_scan` of an fs tier (kvtier's own): whether the tier's open
// starts a background walk of its <model>_<digest>_r<rank> directory (every
// block's size and mtime). The walk costs about 20 filesystem calls per block
// already there, on a shared volume for every instance that starts, so by
// default only a `max_bytes` budget, whose least-recently-used index must
// know every block to keep its bound, asks for it.
enum class StartupScan {
  kAuto,  // "auto": walk only with max_bytes
  kOn,    // "on": always walk (exact namespace gauges from the start)
  kOff,   // "off": never walk (with max_bytes, the budget covers what the tier stored or found since it opened)
};

// `path_sharding` of an fs tier (vLLM PR #53133): how blocks spread over
// several roots.
enum class PathSharding {
  kNone,         // root_dir is one directory, used verbatim (FORMAT.md L1)
  kByBlockHash,  // "by_block_hash": root_dir is a comma-separated list; a block's root is its hash mod the count (L99)
};

}  // namespace kvtier
