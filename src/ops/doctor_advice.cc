// What `kvtier doctor` tells the operator: the problems that keep kvtier
// from running on a root and the warnings that matter when instances share
// it. The per-filesystem facts are in docs/filesystems.md, each with its
// source (the Linux commits and the file systems' own documentation).
#include <string>
#include <string_view>

#include "ops/doctor.h"

namespace kvtier::internal {
namespace {

bool MountIs(const DoctorReport& r, std::string_view type) { return r.volume.mount_type == type; }

// From the probes: what the volume refused.
void ProbeAdvice(DoctorReport* r) {
  auto& w = r->warnings;
  auto& p = r->problems;
  if (r->writable.verdict != Verdict::kYes) {
    p.push_back("kvtier cannot write here (" + r->writable.detail + "): the tier creates directories and block files under the root");
  }
  if (r->rename.verdict == Verdict::kNo) {
    p.push_back("rename does not replace an existing name (" + r->rename.detail +
                "): a store writes a temp file and renames it over the block's name, so readers never see part of a block");
  }
  if (r->user_xattrs.verdict == Verdict::kNo) {
    w.push_back("no user xattrs (" + r->user_xattrs.detail +
                "): block checksums go in a trailer after each block's bytes instead of the user.vllm.kv_crc32c attribute "
                "(vLLM reads exactly a block's size, so it never sees the trailer)");
  } else if (r->user_xattrs.verdict == Verdict::kUnknown) {
    w.push_back("the user-xattr probe failed (" + r->user_xattrs.detail + "): the tier keeps checksums in the attribute");
  }
  if (r->o_direct.verdict == Verdict::kNo) {
    w.push_back("O_DIRECT is refused (" + r->o_direct.detail + "): blocks go through this host's page cache");
  } else if (r->o_direct.verdict == Verdict::kYes && r->o_direct_align == 4096) {
    w.push_back("O_DIRECT needs page-aligned buffers and offsets here: rows that are not whole pages are staged");
  }
  if (r->link.verdict == Verdict::kNo) {
    w.push_back("no hard links (" + r->link.detail + "): gc --watch creates its collector lease with O_EXCL instead (FORMAT.md L121)");
  }
  if (r->atime.verdict == Verdict::kNo) {
    w.push_back("an explicit atime update does not stick (" + r->atime.detail +
                "): gc's least-recently-used order falls back to when blocks were written (mtime)");
  }
}

void NfsAdvice(DoctorReport* r) {
  auto& w = r->warnings;
  w.push_back("NFS caches lookups: a block another instance has just written can be a miss here until this client's "
              "cached attributes of its directory expire (acdirmin 30 s to acdirmax 60 s by default, lookupcache=all); "
              "a miss costs a recompute, never wrong data");
  w.push_back("NFS caches file attributes for 3 to 60 s (acregmin, acregmax): sizes and times another instance "
              "changed show late here, so gc on another host may judge a block by an older atime");
  w.push_back("NFS: a block another instance removes while this one reads it fails with ESTALE (a failed load, never "
              "wrong data); AWS EFS and Azure NetApp Files do not update atime on reads, Azure Files and EFS have no "
              "delegations: every open is a round trip");
}

// Lustre, CephFS and Storage Scale: what their semantics mean for a tier.
void ParallelFsAdvice(DoctorReport* r) {
  auto& w = r->warnings;
  const std::string& fs = r->volume.fs_name;
  if (fs == "lustre") {
    w.push_back("Lustre before 2.16 refuses O_DIRECT at offsets or buffers that are not page-aligned; it keeps an "
                "atime only when it is more than 60 s newer (atime_diff); user xattrs need the user_xattr mount option");
  }
  if (fs == "ceph") {
    w.push_back("CephFS keeps no atime of its own; a directory fragment past mds_bal_fragment_size_max (100,000 "
                "entries) refuses new files with ENOSPC unless the MDS splits it");
    if (MountIs(*r, "fuse.ceph-fuse")) {
      w.push_back("CephFS through ceph-fuse (user space): each call the client's capabilities do not cover is a "
                  "round trip to the MDS, and a client the MDS evicts gets errors until it is remounted");
    }
  }
  if (fs == "gpfs") {
    w.push_back("Storage Scale transfers directly only in 512-byte multiples (4 KiB on 4K-sector disks), "
                "otherwise it runs the I/O buffered with O_SYNC");
  }
}

// From the filesystem's kind (statfs magic, mount type).
void KindAdvice(DoctorReport* r) {
  auto& w = r->warnings;
  const std::string& fs = r->volume.fs_name;
  if (fs == "nfs") NfsAdvice(r);
  ParallelFsAdvice(r);
  if (MountIs(*r, "wekafs")) {
    w.push_back("WekaFS's default writecache mount mode is not coherent across hosts: mount with -o coherent "
                "(or readcache) where instances on several hosts share this root");
  }
  if (MountIs(*r, "fuse.glusterfs")) {
    w.push_back("GlusterFS: a rename across DHT subvolumes is a link and an unlink inside the volume; with "
                "the nl-cache group a new block can be a miss on other clients for up to 10 minutes");
  }
  if (MountIs(*r, "fuse.juicefs")) {
    w.push_back("JuiceFS caches entries and attributes for 1 s by default; user xattrs need --enable-xattr");
  }
  if (MountIs(*r, "fuse.s3fs")) {
    r->problems.push_back("s3fs renames by copy and delete, not atomically: readers could see part of a block");
  }
  if (r->volume.local && fs != "tmpfs") {
    w.push_back(fs + " is a local filesystem: only instances on this machine can share this root");
  }
  if (fs == "tmpfs") w.push_back("tmpfs is memory: blocks are gone at reboot, and only this machine sees them");
  if (fs == "fuse" && r->volume.mount_type != "fuse.juicefs") {  // GlusterFS and ceph-fuse are named (FuseServedName)
    w.push_back("a FUSE filesystem (" + (r->volume.mount_type.empty() ? std::string("type unknown") : r->volume.mount_type) +
                "): every call goes through its daemon; how it caches and shares depends on that daemon");
  }
}

}  // namespace

void AddAdvice(DoctorReport* report) {
  ProbeAdvice(report);
  KindAdvice(report);
}

}  // namespace kvtier::internal
