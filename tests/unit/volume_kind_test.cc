// Proves ClassifyVolume and the "auto" picks: a temp dir (ext4 or tmpfs
// here) is a local filesystem that gets io_uring; procfs is neither local
// nor a network filesystem and is found as its own mount; a missing path is
// an error naming it; the checksum place follows whether user xattrs work.
#include <gtest/gtest.h>

#include "fs/volume_kind.h"
#include "util/mountinfo.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

using internal::ClassifyVolume;

TEST(VolumeKind, ALocalTempDirGetsIoUring) {
  testing::TempDir dir;
  auto kind = ClassifyVolume(dir.path());
  ASSERT_TRUE(kind.ok()) << kind.status().ToString();
  EXPECT_TRUE(kind->local) << kind->fs_name;
  EXPECT_FALSE(kind->network_or_fuse);
  EXPECT_FALSE(kind->mount_point.empty());
  EXPECT_EQ(internal::PickBackend(*kind), IoBackendKind::kUring);
}

TEST(VolumeKind, ProcIsItsOwnMountAndNotLocal) {
  auto kind = ClassifyVolume("/proc/self");
  ASSERT_TRUE(kind.ok()) << kind.status().ToString();
  EXPECT_FALSE(kind->local);
  EXPECT_EQ(kind->mount_point, "/proc");
  EXPECT_EQ(kind->mount_type, "proc");
  EXPECT_EQ(kind->fs_name.rfind("0x", 0), 0u) << "procfs has no name in the table: " << kind->fs_name;
}

TEST(VolumeKind, AMissingPathIsAnErrorNamingIt) {
  auto kind = ClassifyVolume("/nonexistent/kvtier-volume-kind");
  ASSERT_FALSE(kind.ok());
  EXPECT_NE(kind.status().ToString().find("/nonexistent/kvtier-volume-kind"), std::string::npos);
}

TEST(VolumeKind, NetworkMountTypesWithoutAKnownMagic) {
  for (const char* type : {"wekafs", "nfs4", "fuse.juicefs", "fuseblk", "fuse", "ceph"}) {
    EXPECT_TRUE(internal::NetworkMountType(type)) << type;
  }
  for (const char* type : {"ext4", "xfs", "tmpfs", "overlay", "proc", ""}) {
    EXPECT_FALSE(internal::NetworkMountType(type)) << type;
  }
}

// A FUSE mount's magic says only "fuse": a known network client's mount
// type names the filesystem it serves (doctor's CephFS advice, issue 42).
TEST(VolumeKind, AKnownFuseClientNamesTheFilesystemItServes) {
  EXPECT_EQ(internal::FuseServedName("fuse", "fuse.ceph-fuse"), "ceph");
  EXPECT_EQ(internal::FuseServedName("fuse", "fuse.glusterfs"), "glusterfs");
  EXPECT_EQ(internal::FuseServedName("fuse", "fuse.bindfs"), "fuse");
  EXPECT_EQ(internal::FuseServedName("fuse", ""), "fuse");
  EXPECT_EQ(internal::FuseServedName("ext4", "fuse.ceph-fuse"), "ext4") << "only a FUSE magic is refined";
}

TEST(VolumeKind, MountinfoFieldsAreUnescapedOnlyWhereOctal) {
  EXPECT_EQ(internal::UnescapeMountField("/mnt/a\\040b\\011c"), "/mnt/a b\tc");
  EXPECT_EQ(internal::UnescapeMountField("/mnt/back\\134slash"), "/mnt/back\\slash");
  EXPECT_EQ(internal::UnescapeMountField("/mnt/x\\9yz"), "/mnt/x\\9yz") << "not three octal digits: kept";
  EXPECT_EQ(internal::UnescapeMountField("/mnt/end\\04"), "/mnt/end\\04") << "cut short: kept";
}

TEST(VolumeKind, TheChecksumPlaceFollowsUserXattrs) {
  EXPECT_EQ(internal::PickChecksumPlace(true), internal::ChecksumPlace::kXattr);
  EXPECT_EQ(internal::PickChecksumPlace(false), internal::ChecksumPlace::kTrailer);
  EXPECT_STREQ(internal::ChecksumPlaceName(internal::ChecksumPlace::kTrailer), "trailer");
}

}  // namespace
}  // namespace kvtier
