// Filesystem classification from statfs magic and /proc/self/mountinfo.
#include "fs/volume_kind.h"

#include <linux/magic.h>
#include <sys/statfs.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "kvtier/status.h"
#include "util/mountinfo.h"

namespace kvtier::internal {
namespace {

// Magics <linux/magic.h> lacks (values from the filesystems' own sources).
constexpr uint64_t kNfsMagic = 0x6969;
constexpr uint64_t kFuseMagic = 0x65735546;
constexpr uint64_t kLustreMagic = 0x0BD00BD0;
constexpr uint64_t kCephMagic = 0x00C36400;
constexpr uint64_t kCifsMagic = 0xFF534D42;
constexpr uint64_t kSmb2Magic = 0xFE534D42;
constexpr uint64_t kGpfsMagic = 0x47504653;
constexpr uint64_t kV9fsMagic = 0x01021997;
constexpr uint64_t kXfsMagic = 0x58465342;
constexpr uint64_t kF2fsMagic = 0xF2F52010;

struct Known {
  uint64_t magic;
  const char* name;
  bool local;
};

constexpr Known kKnown[] = {
    {EXT4_SUPER_MAGIC, "ext4", true}, {kXfsMagic, "xfs", true},     {BTRFS_SUPER_MAGIC, "btrfs", true},
    {TMPFS_MAGIC, "tmpfs", true},     {kF2fsMagic, "f2fs", true},   {kNfsMagic, "nfs", false},
    {kFuseMagic, "fuse", false},      {kLustreMagic, "lustre", false}, {kCephMagic, "ceph", false},
    {kCifsMagic, "cifs", false},      {kSmb2Magic, "smb2", false},  {kGpfsMagic, "gpfs", false},
    {kV9fsMagic, "9p", false},        {OVERLAYFS_SUPER_MAGIC, "overlay", false},
};

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

bool Under(const std::string& path, const std::string& point) {
  if (point == "/") return true;
  return path.compare(0, point.size(), point) == 0 && (path.size() == point.size() || path[point.size()] == '/');
}

// The mount whose mount point is the longest prefix of the real path of `dir`.
void FindMount(const std::string& dir, VolumeKind* kind) {
  char* real = realpath(dir.c_str(), nullptr);
  if (real == nullptr) return;
  const std::string path(real);
  std::free(real);
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, devno, root, point, word;
    fields >> id >> parent >> devno >> root >> point;
    while (fields >> word && word != "-") {}
    std::string type;
    fields >> type;
    point = UnescapeMountField(point);
    if (Under(path, point) && point.size() >= kind->mount_point.size()) {
      kind->mount_point = point;
      kind->mount_type = type;
    }
  }
}

// The statfs part of the classification (no mount table).
Result<VolumeKind> ClassifyMagic(const std::string& dir) {
  struct statfs st {};
  if (statfs(dir.c_str(), &st) != 0) return ErrnoToStatus(errno, "statfs " + dir);
  VolumeKind kind;
  kind.fs_magic = static_cast<uint64_t>(static_cast<unsigned long>(st.f_type));
  kind.fs_name = Hex(kind.fs_magic);
  for (const Known& k : kKnown) {
    if (k.magic == kind.fs_magic) {
      kind.fs_name = k.name;
      kind.local = k.local;
      kind.network_or_fuse = !k.local && k.magic != OVERLAYFS_SUPER_MAGIC;
    }
  }
  return kind;
}

}  // namespace

bool NetworkMountType(const std::string& type) {
  static constexpr const char* kTypes[] = {"wekafs", "nfs", "nfs4", "lustre", "ceph", "glusterfs",
                                           "gpfs", "cifs", "smb3", "9p", "beegfs", "orangefs"};
  for (const char* t : kTypes) {
    if (type == t) return true;
  }
  return type.rfind("fuse", 0) == 0;  // fuse, fuse.bindfs, fuseblk, fuse.juicefs, ...
}

std::string FuseServedName(const std::string& fs_name, const std::string& mount_type) {
  if (fs_name != "fuse") return fs_name;
  if (mount_type == "fuse.ceph-fuse" || mount_type == "fuse.ceph") return "ceph";
  if (mount_type == "fuse.glusterfs") return "glusterfs";
  return fs_name;
}

Result<VolumeKind> ClassifyVolume(const std::string& dir) {
  Result<VolumeKind> kind = ClassifyMagic(dir);
  if (!kind.ok()) return kind;
  FindMount(dir, &*kind);
  kind->fs_name = FuseServedName(kind->fs_name, kind->mount_type);  // the magic says only "fuse"
  if (!kind->local && !kind->network_or_fuse && NetworkMountType(kind->mount_type)) kind->network_or_fuse = true;
  return kind;
}

bool LocalFilesystem(const std::string& dir) {
  const Result<VolumeKind> kind = ClassifyMagic(dir);
  return kind.ok() && kind->local;
}

ChecksumPlace PickChecksumPlace(bool user_xattrs_work) {
  return user_xattrs_work ? ChecksumPlace::kXattr : ChecksumPlace::kTrailer;
}

const char* ChecksumPlaceName(ChecksumPlace place) {
  return place == ChecksumPlace::kXattr ? "xattr" : "trailer";
}

// The syscall pool where every call may be a round trip. There each
// request waits in a kernel worker either way; io_uring's workers for file
// I/O and path calls are bounded at 4 per CPU by default (8 on 2 CPUs), which
// the tier lifts to its threads (fs_tier_open.cc): with that, on a FUSE
// mount at 2 ms a call, io_uring stored, looked up and loaded 256 blocks of
// 256 KiB as fast as the pool (0.50 s, 0.09 s, 0.20 s; 1.50 s, 0.35 s, 0.59 s
// without it), not faster, and FUSE also holds io_uring's reads and writes
// (asynchronous direct I/O) to the daemon's max_background, 12 by default,
// where the pool's synchronous calls have no such cap.
IoBackendKind PickBackend(const VolumeKind& volume) {
  return volume.network_or_fuse ? IoBackendKind::kSyscall : IoBackendKind::kUring;
}

const char* BackendName(IoBackendKind kind) {
  switch (kind) {
    case IoBackendKind::kAuto: return "auto";
    case IoBackendKind::kUring: return "io_uring";
    case IoBackendKind::kSyscall: return "syscall";
  }
  return "?";
}

}  // namespace kvtier::internal
