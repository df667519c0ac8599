// What kind of filesystem a root lies on, and the settings "auto" picks for
// it. One home for these decisions: the tier's open, `kvtier doctor` and the
// benchmarks ask here, so what doctor prints is what the tier does.
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/options.h"
#include "kvtier/result.h"

namespace kvtier::internal {

struct VolumeKind {
  uint64_t fs_magic = 0;   // statfs(2) f_type
  std::string fs_name;     // from the magic: "ext4", "xfs", "nfs", "fuse", "lustre", ... or "0x..."
  std::string mount_type;  // /proc/self/mountinfo's type of the mount holding the dir ("fuse.bindfs", "nfs4"); "" if unknown
  std::string mount_point; // that mount's mount point; "" if unknown
  // A local disk or memory filesystem whose metadata calls never wait for a
  // network or a user-space daemon (ext4, XFS, btrfs, tmpfs, F2FS).
  bool local = false;
  // NFS, CIFS/SMB, Lustre, CephFS, GlusterFS, GPFS, 9p, or any FUSE mount:
  // every call may be a round trip.
  bool network_or_fuse = false;
};

// Mount types of network filesystems whose statfs magic is not in the
// table (WekaFS's is unpublished) or that a kernel reports under another
// magic, and every FUSE type: ClassifyVolume counts such a mount as network.
bool NetworkMountType(const std::string& type);

// The filesystem a FUSE mount serves, where its daemon is a known client of
// a network filesystem: "ceph" for ceph-fuse (CephFS), "glusterfs" for
// GlusterFS's client; else `fs_name` unchanged ("fuse").
std::string FuseServedName(const std::string& fs_name, const std::string& mount_type);

// statfs(dir) plus the mount table. Fails (naming `dir`) only when statfs does.
Result<VolumeKind> ClassifyVolume(const std::string& dir);

// ClassifyVolume(dir).local, from statfs alone (no mount table): whether
// metadata syscalls under `dir` never wait for a network or a user-space
// daemon (the "auto" of inline_metadata and bounce_loads, the atime touch).
// False when statfs fails.
bool LocalFilesystem(const std::string& dir);

// Where a block's CRC32C lives (FORMAT.md): the user xattr where user
// xattrs work (vLLM's place), else a trailer after the block's bytes.
enum class ChecksumPlace { kXattr, kTrailer };
ChecksumPlace PickChecksumPlace(bool user_xattrs_work);
const char* ChecksumPlaceName(ChecksumPlace place);

// What io_backend "auto" runs on this volume: io_uring on local disks, the
// syscall thread pool where each call may be a network or FUSE round trip
// (volume_kind.cc says why).
IoBackendKind PickBackend(const VolumeKind& volume);
const char* BackendName(IoBackendKind kind);

}  // namespace kvtier::internal
