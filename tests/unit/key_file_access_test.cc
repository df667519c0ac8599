// Proves FORMAT.md L174 on real files, modes and owners: a seal key file is
// read only when it is this user's (or root's) and nobody else can write it
// or read it, its group reading it only where group_read allows (a
// Kubernetes secret with fsGroup); its directory, and through a symlink its
// target's directory, must be writable by nobody else and owned by this
// user or root. Each refusal is kPermissionDenied naming the path and the
// fix, never the key; the same holds through the tier's keyring (a read key
// refused by name, seal_key_group_read honoured) and fsck's keys; a key given
// by fd is not judged; write bits on a read-only mount (a Secret's tmpfs of
// mode 1777) write nothing. Foreign owners and mounts need root: skipped
// otherwise.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "ops/seal_check.h"
#include "seal/seal_key.h"
#include "support/test_support.h"

namespace kvtier::internal {
namespace {

namespace fs = std::filesystem;
const std::string kKey = "0123456789abcdef0123456789abcdef0123456789abcdefdeadbeefcafef00d\n";
constexpr uid_t kNobody = 65534;

class KeyFileAccessTest : public ::testing::Test {
 protected:
  // A key file at dir/name of `mode`, in a directory of `dir_mode`.
  std::string Key(const std::string& name, mode_t mode, const std::string& dir = "keys", mode_t dir_mode = 0700) {
    const fs::path d = dir_.path() / dir;
    fs::create_directories(d);
    EXPECT_EQ(chmod(d.c_str(), dir_mode), 0);
    testing::WriteFileOrDie(d / name, kKey);
    EXPECT_EQ(chmod((d / name).c_str(), mode), 0);
    return (d / name).string();
  }
  static Status Load(const std::string& path, bool group_read = false) {
    return SealKey::FromFile(path, group_read).status();
  }
  static void ExpectRefused(const Status& s, const std::string& path, const std::string& why) {
    EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
    EXPECT_NE(s.ToString().find(path), std::string::npos) << s.ToString();
    EXPECT_NE(s.ToString().find(why), std::string::npos) << s.ToString();
    EXPECT_NE(s.ToString().find("L174"), std::string::npos) << s.ToString();
    EXPECT_EQ(s.ToString().find("deadbeef"), std::string::npos) << "the key leaked: " << s.ToString();
  }
  testing::TempDir dir_;
};

TEST_F(KeyFileAccessTest, OnlyTheOwnerMayReadAndNobodyElseMayWrite) {
  EXPECT_TRUE(Load(Key("a", 0600)).ok());
  EXPECT_TRUE(Load(Key("b", 0400)).ok());
  for (mode_t writable : {0620, 0602, 0660, 0666, 0622}) {
    const std::string path = Key("w" + std::to_string(writable), writable);
    ExpectRefused(Load(path, /*group_read=*/true), path, "writable by its group or others");
  }
  const std::string world = Key("r", 0604);
  ExpectRefused(Load(world, true), world, "readable by others");
  const std::string k8s_default = Key("d", 0644);  // a Kubernetes secret's defaultMode
  ExpectRefused(Load(k8s_default, true), k8s_default, "readable by others");
  const std::string group = Key("g", 0640);
  ExpectRefused(Load(group), group, "seal_key_group_read");
  EXPECT_TRUE(Load(group, /*group_read=*/true).ok());
  EXPECT_TRUE(Load(Key("g2", 0440), true).ok());
}

TEST_F(KeyFileAccessTest, ADirectoryOthersCanWriteIsRefusedStickyOrNot) {
  for (mode_t dir_mode : {0770, 0777, 01777, 0707}) {
    const std::string path = Key("k", 0600, "d" + std::to_string(dir_mode), dir_mode);
    ExpectRefused(Load(path), path, "writable by its group or others");
  }
  EXPECT_TRUE(Load(Key("k", 0600, "fine", 0755)).ok());
}

// A Kubernetes secret: seal.key -> ..data/seal.key -> ..<stamp>/seal.key.
TEST_F(KeyFileAccessTest, ASecretsSymlinksAreFollowedAndTheTargetsDirectoryJudged) {
  const std::string target = Key("seal.key", 0440, "secret/..2026_12_03", 0755);
  const fs::path secret = dir_.path() / "secret";
  fs::create_directory_symlink("..2026_12_03", secret / "..data");
  fs::create_symlink("..data/seal.key", secret / "seal.key");
  const std::string link = (secret / "seal.key").string();
  ASSERT_EQ(chmod(secret.c_str(), 0755), 0);
  EXPECT_TRUE(Load(link, /*group_read=*/true).ok());
  ExpectRefused(Load(link), link, "readable by its group");
  ASSERT_EQ(chmod((secret / "..2026_12_03").c_str(), 0777), 0);  // the target's directory
  ExpectRefused(Load(link, true), link, "..2026_12_03");
  ASSERT_EQ(chmod((secret / "..2026_12_03").c_str(), 0755), 0);
  ASSERT_EQ(chmod(secret.c_str(), 0777), 0);  // the link's own directory
  ExpectRefused(Load(link, true), link, "writable by its group or others");
}

TEST_F(KeyFileAccessTest, AFileOrDirectoryOfAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "chown to another user needs root";
  const std::string path = Key("k", 0600);
  ASSERT_EQ(chown(path.c_str(), kNobody, kNobody), 0);
  ExpectRefused(Load(path), path, "owned by uid 65534");
  const std::string in_foreign_dir = Key("k", 0600, "theirs", 0700);
  ASSERT_EQ(chown((dir_.path() / "theirs").c_str(), kNobody, kNobody), 0);
  ExpectRefused(Load(in_foreign_dir), in_foreign_dir, "owned by uid 65534");
}

// A Secret's volume: a tmpfs of mode 1777, read-only once the kubelet wrote it.
TEST_F(KeyFileAccessTest, AReadOnlyMountsWriteBitsWriteNothing) {
  const fs::path secret = dir_.path() / "secret";
  fs::create_directory(secret);
  if (mount("tmpfs", secret.c_str(), "tmpfs", 0, "mode=1777,size=64k") != 0) {
    GTEST_SKIP() << "mounting a tmpfs needs root: " << std::strerror(errno);
  }
  testing::WriteFileOrDie(secret / "seal.key", kKey);
  ASSERT_EQ(chmod((secret / "seal.key").c_str(), 0440), 0);
  const std::string path = (secret / "seal.key").string();
  ExpectRefused(Load(path, true), path, "writable by its group or others");  // still writable
  ASSERT_EQ(mount(nullptr, secret.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, "mode=1777,size=64k"), 0)
      << std::strerror(errno);
  const Status s = Load(path, /*group_read=*/true);
  EXPECT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(umount2(secret.c_str(), MNT_DETACH), 0);
}

TEST_F(KeyFileAccessTest, TheTiersKeyringAndFsckKeysApplyItAndAnFdIsNotJudged) {
  FsTierOptions tier;
  tier.seal_key_file = Key("primary", 0600);
  tier.seal_read_key_files = {Key("old", 0640)};
  const auto refused = LoadSealKeyring(tier);
  ASSERT_FALSE(refused.ok());
  ExpectRefused(refused.status(), tier.seal_read_key_files[0], "readable by its group");
  tier.seal_key_group_read = true;
  EXPECT_TRUE(LoadSealKeyring(tier).ok());
  const std::string open_to_all = Key("all", 0666);
  ExpectRefused(SealKeys::Load({open_to_all}, /*group_read=*/true).status(), open_to_all, "writable");
  EXPECT_TRUE(SealKeys::Load({tier.seal_key_file}, /*group_read=*/false).ok());
  const int fd = open(open_to_all.c_str(), O_RDONLY | O_CLOEXEC);  // the launcher chose it
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(SealKey::FromFd(fd).ok());
  close(fd);
}

}  // namespace
}  // namespace kvtier::internal
