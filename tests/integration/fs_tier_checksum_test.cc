// Proves the fs tier's checksum_blocks option (vLLM PR #57912; FORMAT.md
// L60, L67, L68, L102) on real files, once per backend:
//  * on: the open probes user xattrs under vLLM's probe name
//    ".xattr_probe_<n>.tmp" (seen with inotify) and leaves nothing behind;
//    on a filesystem without user xattrs (a ramfs this test mounts when it
//    runs as root; skipped otherwise) the open fails with checksum_place
//    "xattr", naming root_dir and `"checksum_blocks": false`, while the
//    default ("auto") opens with checksums in a trailer (L130), and with the
//    option off the same directory works;
//  * off: stores write no xattr, no probe file is made, and loads neither
//    read nor check the attribute (a wrong one or a flipped byte is returned
//    as it is on disk, as vLLM with the option false); checksum_ns stays 0;
//  * blocks cross both ways between on and off, and a block written as vLLM
//    writes it without checksums (a plain file renamed into place, no xattr)
//    loads with checksums on;
//  * a CRC mismatch or an attribute of the wrong length removes the file and
//    fails that key with EBADMSG (kCorrupt), while the job's other keys load.
// Seeded random rows; the seed is printed on failure.
#include <gtest/gtest.h>
#include <sys/inotify.h>
#include <sys/mount.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "kvtier/fs_tier.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kRow = 16384;
constexpr const char* kCrcXattr = "user.vllm.kv_crc32c";

struct Rows : testing::AlignedRows {
  Rows(size_t n, uint64_t seed) : AlignedRows(n, kRow, seed) {}
};

std::vector<OffloadKey> Keys(size_t n, uint8_t salt) {
  std::vector<OffloadKey> keys;
  for (size_t i = 0; i < n; ++i) {
    std::vector<uint8_t> b(32, salt);
    b[0] = static_cast<uint8_t>(i);
    keys.push_back({BlockHash::FromBytes(b).value(), 0});
  }
  return keys;
}

FsTierOpenOptions Options(const fs::path& root, bool checksum, IoBackendKind backend = IoBackendKind::kAuto) {
  FsTierOpenOptions o;
  o.tier.root_dir = root.string();
  o.ns.model_name = "checksum/model";
  o.ns.kv_cache_groups.push_back({16, {"l0"}});
  o.row_bytes = kRow;
  o.tier.n_read_threads = 2;
  o.tier.n_write_threads = 2;
  o.tier.io_backend = backend;
  o.tier.checksum_blocks = checksum;
  return o;
}

// -1 with errno when the file has no CRC attribute (ENODATA) or cannot be read.
ssize_t CrcXattrBytes(const std::string& path) {
  uint8_t buf[16];
  return getxattr(path.c_str(), kCrcXattr, buf, sizeof buf);
}

void FlipByte(const std::string& path, long at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  const char c = static_cast<char>(f.get());
  f.seekp(at);
  f.put(static_cast<char>(c ^ 0x40));
}

std::vector<std::string> ProbeLeftovers(const fs::path& root) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (e.path().filename().string().find("_probe_") != std::string::npos) out.push_back(e.path());
  }
  return out;
}

class FsTierChecksumTest : public ::testing::TestWithParam<IoBackendKind> {
 protected:
  void SetUp() override { seed_ = testing::TestSeed(); }

  std::unique_ptr<FsTier> Open(bool checksum, Durability durability = Durability::kNone) {
    FsTierOpenOptions o = Options(root_.path(), checksum, GetParam());
    o.tier.durability = durability;
    auto tier = FsTier::Open(o);
    if (!tier.ok() && tier.status().code() == StatusCode::kUnavailable && GetParam() == IoBackendKind::kUring) {
      return nullptr;
    }
    EXPECT_TRUE(tier.ok()) << tier.status().ToString();
    return tier.ok() ? std::move(tier).value() : nullptr;
  }
  static JobResult Store(FsTier* tier, const std::vector<OffloadKey>& keys, const Rows& rows) {
    return testing::WaitForJob(tier, tier->SubmitStore(keys, rows.Const()).value());
  }
  static JobResult Load(FsTier* tier, const std::vector<OffloadKey>& keys, Rows& rows) {
    return testing::WaitForJob(tier, tier->SubmitLoad(keys, rows.Mut()).value());
  }

  testing::TempDir root_;
  uint64_t seed_ = 0;
};

// Reads the names of the IN_CREATE events queued on `fd`.
std::vector<std::string> CreatedNames(int fd) {
  std::vector<std::string> names;
  alignas(inotify_event) char buf[8192];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    for (ssize_t at = 0; at < n;) {
      const auto* ev = reinterpret_cast<const inotify_event*>(buf + at);
      if (ev->len > 0) names.emplace_back(ev->name);
      at += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
    }
  }
  return names;
}

bool IsXattrProbeName(const std::string& name) {
  const std::string prefix = ".xattr_probe_", suffix = ".tmp";
  if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  return digits.find_first_not_of("0123456789") == std::string::npos && (digits == "0" || digits[0] != '0');
}

TEST_P(FsTierChecksumTest, OpenProbesXattrsUnderVllmsProbeNameOnlyWhenOn) {
  for (bool checksum : {true, false}) {
    SCOPED_TRACE(checksum ? "checksum_blocks on" : "checksum_blocks off");
    auto first = Open(checksum);  // creates <NS>, which the second open is watched in
    if (!first) GTEST_SKIP() << "io_uring unavailable";
    const fs::path ns = root_.path() / first->ns().dir_name();
    first.reset();
    const int in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    ASSERT_GE(in, 0) << std::strerror(errno);
    ASSERT_GE(inotify_add_watch(in, ns.c_str(), IN_CREATE), 0) << std::strerror(errno);
    auto second = Open(checksum);
    ASSERT_TRUE(second);
    size_t xattr_probes = 0;
    for (const std::string& name : CreatedNames(in)) {
      if (name.find("xattr") != std::string::npos) {
        EXPECT_TRUE(IsXattrProbeName(name)) << name << " is not vLLM's .xattr_probe_<n>.tmp";
        ++xattr_probes;
      }
    }
    close(in);
    EXPECT_EQ(xattr_probes, checksum ? 1u : 0u);
    EXPECT_EQ(second->xattrs_supported(), checksum);
    EXPECT_EQ(ProbeLeftovers(root_.path()), std::vector<std::string>{}) << "probe files are removed";
  }
}

TEST_P(FsTierChecksumTest, OffWritesNoXattrAndChecksNothing) {
  auto tier = Open(/*checksum=*/false, Durability::kFile);  // kFile: the fdatasync path skips the xattr too
  if (!tier) GTEST_SKIP() << "io_uring unavailable";
  const auto keys = Keys(3, 0x31);
  Rows rows(3, seed_);
  ASSERT_EQ(Store(tier.get(), keys, rows).OkPrefix(), 3u);
  for (const auto& key : keys) {
    errno = 0;
    EXPECT_EQ(CrcXattrBytes(tier->BlockPath(key)), -1) << tier->BlockPath(key);
    EXPECT_EQ(errno, ENODATA) << "no CRC attribute with checksum_blocks off";
  }
  // Bytes that checksums would refuse: a wrong attribute, a flipped byte.
  const uint8_t wrong[4] = {1, 2, 3, 4};
  ASSERT_EQ(setxattr(tier->BlockPath(keys[0]).c_str(), kCrcXattr, wrong, 4, 0), 0) << std::strerror(errno);
  FlipByte(tier->BlockPath(keys[1]), 77);
  rows.Row(1)[77] ^= 0x40;
  Rows back(3, seed_ + 1);
  const JobResult loaded = Load(tier.get(), keys, back);
  ASSERT_EQ(loaded.OkPrefix(), 3u) << "off: loads check sizes only, as vLLM with checksum_blocks false";
  EXPECT_EQ(std::memcmp(back.data, rows.data, 3 * kRow), 0);
  for (const auto& key : keys) EXPECT_TRUE(fs::exists(tier->BlockPath(key)));
  EXPECT_EQ(tier->Metrics().checksum_ns, 0u) << "no CRC computed in either direction";
  EXPECT_EQ(tier->Metrics().rows_corrupt, 0u);
}

TEST_P(FsTierChecksumTest, BlocksCrossBetweenOnAndOff) {
  const auto on_keys = Keys(3, 0x41), off_keys = Keys(3, 0x42);
  Rows on_rows(3, seed_), off_rows(3, seed_ + 1);
  {
    auto on = Open(true);
    if (!on) GTEST_SKIP() << "io_uring unavailable";
    ASSERT_EQ(Store(on.get(), on_keys, on_rows).OkPrefix(), 3u);
    EXPECT_EQ(CrcXattrBytes(on->BlockPath(on_keys[0])), 4);
    auto off = Open(false);
    ASSERT_EQ(Store(off.get(), off_keys, off_rows).OkPrefix(), 3u);
  }
  for (bool checksum : {false, true}) {
    SCOPED_TRACE(checksum ? "read with checksum_blocks on" : "read with checksum_blocks off");
    auto tier = Open(checksum);
    Rows back_on(3, 7), back_off(3, 8);
    EXPECT_EQ(Load(tier.get(), on_keys, back_on).OkPrefix(), 3u);
    EXPECT_EQ(Load(tier.get(), off_keys, back_off).OkPrefix(), 3u);
    EXPECT_EQ(std::memcmp(back_on.data, on_rows.data, 3 * kRow), 0);
    EXPECT_EQ(std::memcmp(back_off.data, off_rows.data, 3 * kRow), 0);
    EXPECT_EQ(tier->Metrics().checksum_ns > 0, checksum) << "only the checksummed blocks are verified, only when on";
  }
}

// vLLM's store without checksums: the row into "<h>.bin_<n>.tmp", then a
// rename; no attribute (L54-L59, L62).
void WriteAsVllm(const std::string& path, std::span<const uint8_t> row) {
  fs::create_directories(fs::path(path).parent_path());
  const std::string tmp = path + "_12345.tmp";
  testing::WriteFileOrDie(tmp, std::string(reinterpret_cast<const char*>(row.data()), row.size()));
  fs::rename(tmp, path);
}

TEST_P(FsTierChecksumTest, VllmBlockWithoutXattrLoadsEitherWay) {
  for (bool checksum : {true, false}) {
    SCOPED_TRACE(checksum ? "checksum_blocks on" : "checksum_blocks off");
    auto tier = Open(checksum);
    if (!tier) GTEST_SKIP() << "io_uring unavailable";
    const auto keys = Keys(2, checksum ? 0x51 : 0x52);
    Rows rows(2, seed_ + (checksum ? 1 : 2)), back(2, 9);
    for (size_t i = 0; i < keys.size(); ++i) WriteAsVllm(tier->BlockPath(keys[i]), rows.Row(i));
    errno = 0;
    ASSERT_EQ(CrcXattrBytes(tier->BlockPath(keys[0])), -1);
    ASSERT_EQ(errno, ENODATA);
    const JobResult loaded = Load(tier.get(), keys, back);
    ASSERT_EQ(loaded.OkPrefix(), 2u) << loaded.keys[0].status.ToString();
    EXPECT_EQ(std::memcmp(back.data, rows.data, 2 * kRow), 0);
  }
}

TEST_P(FsTierChecksumTest, MismatchRemovesTheFileAndFailsTheKeyWithEbadmsg) {
  auto tier = Open(true);
  if (!tier) GTEST_SKIP() << "io_uring unavailable";
  const auto keys = Keys(4, 0x61);
  Rows rows(4, seed_), back(4, 3);
  ASSERT_EQ(Store(tier.get(), keys, rows).OkPrefix(), 4u);
  FlipByte(tier->BlockPath(keys[1]), 4000);  // size and attribute kept, bytes not
  const uint8_t three[3] = {};
  ASSERT_EQ(setxattr(tier->BlockPath(keys[2]).c_str(), kCrcXattr, three, 3, 0), 0) << std::strerror(errno);
  const JobResult loaded = Load(tier.get(), keys, back);
  ASSERT_EQ(loaded.keys.size(), 4u);
  for (size_t i : {size_t{0}, size_t{3}}) {
    EXPECT_EQ(loaded.keys[i].outcome, KeyOutcome::kOk) << i << ": the job's other keys still load";
    EXPECT_EQ(std::memcmp(back.Row(i).data(), rows.Row(i).data(), kRow), 0) << i;
    EXPECT_TRUE(fs::exists(tier->BlockPath(keys[i]))) << i;
  }
  for (size_t i : {size_t{1}, size_t{2}}) {
    const KeyResult& k = loaded.keys[i];
    EXPECT_EQ(k.outcome, KeyOutcome::kCorrupt) << i;
    EXPECT_EQ(k.status.sys_errno(), EBADMSG) << i << ": vLLM fails the key with OSError(EBADMSG); "
                                             << k.status.ToString();
    EXPECT_EQ(k.status.code(), StatusCode::kCorruption) << i;
    EXPECT_NE(k.status.message().find(tier->BlockPath(keys[i])), std::string::npos) << k.status.ToString();
    EXPECT_FALSE(fs::exists(tier->BlockPath(keys[i]))) << i << ": the corrupt file is removed";
  }
  EXPECT_EQ(loaded.OkPrefix(), 1u);
  EXPECT_EQ(tier->Metrics().rows_corrupt, 2u);
}

INSTANTIATE_TEST_SUITE_P(Backends, FsTierChecksumTest,
                         ::testing::Values(IoBackendKind::kUring, IoBackendKind::kSyscall),
                         [](const auto& param) { return param.param == IoBackendKind::kUring ? "uring" : "syscall"; });

// A filesystem without user xattrs. ramfs has none on every kernel (tmpfs has
// had them since Linux 6.6), and mounting it needs no device.
class FsTierChecksumNoXattrs : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "mounting a ramfs needs root";
    if (mount("ramfs", dir_.path().c_str(), "ramfs", 0, nullptr) != 0) {
      GTEST_SKIP() << "cannot mount ramfs here: " << std::strerror(errno);
    }
    mounted_ = true;
    const std::string probe = (dir_.path() / "xattr-check").string();
    testing::WriteFileOrDie(probe, "x");
    const uint8_t zero[4] = {};
    if (setxattr(probe.c_str(), kCrcXattr, zero, 4, 0) == 0) GTEST_SKIP() << "this kernel's ramfs takes user xattrs";
    ASSERT_TRUE(errno == EOPNOTSUPP || errno == ENOTSUP) << std::strerror(errno);
    fs::remove(probe);
  }
  void TearDown() override {
    if (mounted_) umount2(dir_.path().c_str(), MNT_DETACH);
  }
  testing::TempDir dir_;
  bool mounted_ = false;
};

TEST_F(FsTierChecksumNoXattrs, XattrPlaceFailsTheOpenNamingTheWayOutAutoTrailsAndOffWorks) {
  const fs::path root = dir_.path() / "root";
  FsTierOpenOptions xattr_only = Options(root, true);
  xattr_only.tier.checksum_place = ChecksumPlaceKind::kXattr;
  auto on = FsTier::Open(xattr_only);
  ASSERT_FALSE(on.ok()) << "vLLM's tier with checksum_blocks fails at startup here; so must kvtier's xattr place";
  const std::string text = on.status().ToString();
  EXPECT_EQ(on.status().code(), StatusCode::kUnavailable) << text;
  EXPECT_NE(text.find(root.string()), std::string::npos) << text;
  EXPECT_NE(text.find("\"checksum_blocks\": false"), std::string::npos) << text;
  EXPECT_NE(text.find(".xattr_probe_"), std::string::npos) << text;
  EXPECT_EQ(ProbeLeftovers(root), std::vector<std::string>{});

  auto trailed = FsTier::Open(Options(root, true));  // checksum_place "auto": a trailer here (L130)
  ASSERT_TRUE(trailed.ok()) << trailed.status().ToString();
  EXPECT_EQ((*trailed)->checksum_place(), "trailer");
  EXPECT_EQ(ProbeLeftovers(root), std::vector<std::string>{});
  trailed->reset();

  auto off = FsTier::Open(Options(root, false));
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_FALSE((*off)->xattrs_supported());
  const auto keys = Keys(4, 0x71);
  Rows rows(4, testing::TestSeed()), back(4, 5);
  FsTier* tier = off->get();
  ASSERT_EQ(testing::WaitForJob(tier, tier->SubmitStore(keys, rows.Const()).value()).OkPrefix(), 4u);
  ASSERT_EQ(testing::WaitForJob(tier, tier->SubmitLoad(keys, back.Mut()).value()).OkPrefix(), 4u);
  EXPECT_EQ(std::memcmp(back.data, rows.data, 4 * kRow), 0);
  EXPECT_EQ(tier->Metrics().checksum_ns, 0u);
}

}  // namespace
}  // namespace kvtier
