// Proves fsck --verify-data's work is bounded by the data a block holds, not
// its apparent size (FORMAT.md L109): a namespace whose
// every block is a 256 MiB sparse file (so 256 MiB is its "most common size"
// and every block is read) is verified with the right verdicts (a correct
// CRC attribute matches, whether the file holds no data, one extent in the
// middle or extents at both ends; a wrong one is a crc_mismatch), while the
// bytes read (FsckReport::verify_read_bytes) stay within the bytes allocated:
// the holes are checked as zeros without being read. No timing is asserted.
// A block written within the last minute whose mismatch was found through
// holes is not condemned (a file system may report unwritten-back data as a
// hole), and still not read in full.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <set>
#include <vector>

#include "kvtier/ops.h"
#include "support/test_support.h"
#include "util/crc32c.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kApparent = uint64_t{256} << 20;

struct Extent {
  uint64_t offset;
  uint64_t bytes;
};

// The CRC32C of a file of `size` bytes holding `extents` of 'd' bytes and
// zeros elsewhere, the slow way: every zero is fed to Crc32cExtend from a
// real buffer (the oracle does not use the zero extension under test).
uint32_t OracleCrc(uint64_t size, const std::vector<Extent>& extents) {
  static const std::vector<uint8_t> kZeros(1 << 20, 0);
  const std::vector<uint8_t> data(1 << 20, 'd');
  uint32_t crc = 0;
  uint64_t pos = 0;
  auto feed = [&](const std::vector<uint8_t>& buf, uint64_t n) {
    for (; n > 0; n -= std::min<uint64_t>(n, buf.size())) {
      crc = internal::Crc32cExtend(crc, {buf.data(), static_cast<size_t>(std::min<uint64_t>(n, buf.size()))});
    }
  };
  for (const Extent& e : extents) {
    feed(kZeros, e.offset - pos);
    feed(data, e.bytes);
    pos = e.offset + e.bytes;
  }
  feed(kZeros, size - pos);
  return crc;
}

class OpsSparseTest : public ::testing::Test {
 protected:
  // Whether this file system reports holes (SEEK_DATA of an all-hole file: ENXIO).
  bool ReportsHoles() {
    const fs::path probe = root_.path() / "probe";
    const int fd = open(probe.c_str(), O_CREAT | O_RDWR, 0644);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, 1 << 20), 0);
    const bool holes = lseek(fd, 0, SEEK_DATA) < 0 && errno == ENXIO;
    close(fd);
    fs::remove(probe);
    return holes;
  }
  // A block of kApparent bytes, data only in `extents`, with a CRC attribute
  // (the right one, or it xor 1). Returns its path relative to the root.
  // Its times are an hour old unless `fresh` (just written).
  std::string Block(char shard, const std::vector<Extent>& extents, bool wrong_crc, bool fresh = false) {
    const std::string hex = std::string(3, shard) + "00" + std::string(59, 'a');
    const std::string dir = std::string(kNs) + "_r0/" + hex.substr(0, 3) + "/" + hex.substr(3, 2) + "_g0";
    fs::create_directories(root_.path() / dir);
    const std::string rel = dir + "/" + hex + ".bin";
    const int fd = open((root_.path() / rel).c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    EXPECT_GE(fd, 0) << rel;
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(kApparent)), 0);
    for (const Extent& e : extents) {
      const std::string bytes(e.bytes, 'd');
      EXPECT_EQ(pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(e.offset)), static_cast<ssize_t>(e.bytes));
    }
    const uint32_t crc = OracleCrc(kApparent, extents) ^ (wrong_crc ? 1u : 0u);
    const uint8_t attr[4] = {static_cast<uint8_t>(crc >> 24), static_cast<uint8_t>(crc >> 16),
                             static_cast<uint8_t>(crc >> 8), static_cast<uint8_t>(crc)};
    EXPECT_EQ(fsetxattr(fd, "user.vllm.kv_crc32c", attr, sizeof attr, 0), 0) << std::strerror(errno);
    struct stat st;
    EXPECT_EQ(fstat(fd, &st), 0);
    allocated_ += std::min<uint64_t>(static_cast<uint64_t>(st.st_size), 512 * static_cast<uint64_t>(st.st_blocks));
    for (const Extent& e : extents) written_ += e.bytes;
    const timespec hour_ago[2] = {{std::time(nullptr) - 3600, 0}, {std::time(nullptr) - 3600, 0}};
    if (!fresh) {
      EXPECT_EQ(futimens(fd, hour_ago), 0);
    }
    close(fd);
    return rel;
  }

  static constexpr const char* kNs = "m_0123456789ab";
  testing::TempDir root_;
  uint64_t allocated_ = 0, written_ = 0;
};

TEST_F(OpsSparseTest, VerifyDataReadsOnlyAllocatedBytesAndJudgesHolesAsZeros) {
  if (!ReportsHoles()) GTEST_SKIP() << "this file system does not report holes (SEEK_DATA)";
  fs::create_directories(root_.path() / kNs);
  testing::WriteFileOrDie(root_.path() / kNs / "config.json", "{\"inference_engine\": \"vllm\"}");
  const uint64_t mid = (uint64_t{100} << 20) + 123;  // not page aligned
  Block('1', {}, false);
  Block('2', {{mid, 65536}}, false);
  Block('3', {{0, 4096}, {kApparent - 5000, 5000}}, false);
  const std::string bad = Block('4', {{mid, 65536}}, true);
  const std::string bad_empty = Block('5', {}, true);
  FsckOptions o;
  o.root = root_.path().string();
  o.verify_data = true;
  ASSERT_OK_AND_ASSIGN(FsckReport r, Fsck(o));
  EXPECT_EQ(r.blocks_verified, 5u) << "every block is of the namespace's row size, so each is verified";
  std::set<std::string> mismatched;
  for (const Finding& f : r.findings) {
    if (f.rule == "L79" || f.rule == "L77") continue;  // the planted config.json is not vLLM's
    EXPECT_EQ(FindingKindName(f.kind), "crc_mismatch") << f.path << ": " << f.detail;
    mismatched.insert(f.path);
  }
  EXPECT_EQ(mismatched, (std::set<std::string>{bad, bad_empty}));
  EXPECT_GE(r.verify_read_bytes, written_) << "the data extents are read";
  EXPECT_LE(r.verify_read_bytes, allocated_) << "a hole was read: " << 5 * kApparent << " bytes apparent";
}

TEST_F(OpsSparseTest, AFreshBlockIsNotCondemnedThroughHoles) {
  if (!ReportsHoles()) GTEST_SKIP() << "this file system does not report holes (SEEK_DATA)";
  fs::create_directories(root_.path() / kNs);
  testing::WriteFileOrDie(root_.path() / kNs / "config.json", "{\"inference_engine\": \"vllm\"}");
  Block('1', {{4096, 8192}}, /*wrong_crc=*/true, /*fresh=*/true);
  const std::string old = Block('2', {{4096, 8192}}, /*wrong_crc=*/true);
  FsckOptions o;
  o.root = root_.path().string();
  o.verify_data = true;
  o.repair = true;
  ASSERT_OK_AND_ASSIGN(FsckReport r, Fsck(o));
  std::set<std::string> mismatched;
  for (const Finding& f : r.findings) {
    if (FindingKindName(f.kind) == "crc_mismatch") mismatched.insert(f.path);
  }
  EXPECT_EQ(mismatched, std::set<std::string>{old}) << "only the hour-old block is judged";
  EXPECT_LE(r.verify_read_bytes, allocated_) << "the fresh one was not read in full either";
}

}  // namespace
}  // namespace kvtier
