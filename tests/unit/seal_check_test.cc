// Proves fsck's tag check of a sealed block (FORMAT.md L183, SealTag) on
// real files of rows larger than its read chunk (kSealVerifyChunkBytes):
//  * a good block of several chunks (the last one partial) passes, and its
//    every byte is read once;
//  * a flipped bit in the first chunk, in the last chunk, at the last byte
//    of the row, or in the tag fails it, and so does a good block checked
//    under another path (the AAD);
//  * one thread checking block after block reuses one cipher and one
//    buffer, never larger than a chunk; threads checking at once hold a
//    checker each, their buffers at most a chunk each;
//  * checking a 48 MiB block raises the process's peak resident memory
//    (VmHWM, reset first through /proc/self/clear_refs) by far less than
//    the block: it is never held whole.
// Seeded random rows; the seed is printed on failure.
#include <fcntl.h>
#include <sys/mman.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ops/seal_check.h"
#include "seal/seal_cipher.h"
#include "seal/seal_key.h"
#include "support/test_support.h"

namespace kvtier::internal {
namespace {

namespace fs = std::filesystem;
const std::string kKey = "0d15ea5e0d15ea5e0123456789abcdef00112233445566778899aabbccddeeff\n";
const std::string kPath = "m_0123456789abcdef_r0/abc/de_g0/00000000000000000000000000000001.bin";
// Three whole chunks and a partial one.
constexpr uint64_t kRow = 3 * kSealVerifyChunkBytes + 12345;
constexpr uint64_t kFile = kRow + format::kSealTrailerBytes;

class SealCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteKeyFileOrDie(dir_.path() / "seal.key", kKey);
    auto keys = SealKeys::Load({(dir_.path() / "seal.key").string()}, /*group_read=*/false);
    ASSERT_TRUE(keys.ok()) << keys.status().ToString();
    keys_.emplace(std::move(keys).value());
    std::vector<uint8_t> block(kFile);
    std::mt19937_64 rng(seed_);
    for (uint64_t i = 0; i < kRow; i += 8) {
      const uint64_t v = rng();
      std::memcpy(block.data() + i, &v, std::min<uint64_t>(8, kRow - i));
    }
    auto cipher = SealCipher::Create(keys_->ring());
    ASSERT_TRUE(cipher.ok());
    const SealPiece piece{block.data(), block.data(), kRow};
    ASSERT_TRUE((*cipher)->Seal(kPath, {&piece, 1}, kRow, block.data() + kRow).ok());
    good_.assign(block.begin(), block.end());
  }

  // SealTag of `bytes` written to a file, checked as block `rel`.
  SealVerdict Check(const std::vector<uint8_t>& bytes, const std::string& rel = kPath, uint64_t* read = nullptr) {
    const fs::path file = dir_.path() / ("block" + std::to_string(files_++));
    testing::WriteFileOrDie(file, std::string(bytes.begin(), bytes.end()));
    const int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
    EXPECT_GE(fd, 0);
    IoScope io(file.string());
    std::string detail;
    uint64_t read_bytes = 0;
    const SealVerdict v = SealTag(fd, bytes.size(), rel, *keys_, 0, &io, &detail, &read_bytes);
    close(fd);
    if (v == SealVerdict::kBroken) {
      EXPECT_NE(detail.find("tag mismatch"), std::string::npos) << detail;
    }
    if (read != nullptr) *read = read_bytes;
    return v;
  }
  std::vector<uint8_t> Flipped(uint64_t at) const {
    std::vector<uint8_t> bad = good_;
    bad[at] ^= 0x04;
    return bad;
  }

  testing::TempDir dir_;
  uint64_t seed_ = testing::TestSeed();
  std::optional<SealKeys> keys_;
  std::vector<uint8_t> good_;
  int files_ = 0;
};

TEST_F(SealCheckTest, AGoodBlockOfSeveralChunksPassesAndAFlippedBitInAnyChunkFails) {
  uint64_t read = 0;
  EXPECT_EQ(Check(good_, kPath, &read), SealVerdict::kSound) << "seed " << seed_;
  EXPECT_EQ(read, kFile);
  EXPECT_EQ(Check(Flipped(17)), SealVerdict::kBroken) << "first chunk, seed " << seed_;
  EXPECT_EQ(Check(Flipped(3 * kSealVerifyChunkBytes + 100)), SealVerdict::kBroken) << "last chunk, seed " << seed_;
  EXPECT_EQ(Check(Flipped(kRow - 1)), SealVerdict::kBroken) << "the row's last byte, seed " << seed_;
  EXPECT_EQ(Check(Flipped(kFile - 1)), SealVerdict::kBroken) << "the tag, seed " << seed_;
  std::string moved = kPath;
  moved[moved.size() - 5] = '2';
  EXPECT_EQ(Check(good_, moved), SealVerdict::kBroken) << "another path, seed " << seed_;
  EXPECT_EQ(Check(good_), SealVerdict::kSound) << "a good block after failing ones, seed " << seed_;
}

TEST_F(SealCheckTest, CheckersAreReusedAndHoldAtMostAChunkEach) {
  for (int i = 0; i < 3; ++i) ASSERT_EQ(Check(good_), SealVerdict::kSound) << "seed " << seed_;
  EXPECT_EQ(keys_->checkers(), 1u) << "one thread, one cipher and buffer";
  EXPECT_LE(keys_->buffer_bytes(), kSealVerifyChunkBytes);
  EXPECT_GT(keys_->buffer_bytes(), 0u);
  const fs::path file = dir_.path() / "shared";
  testing::WriteFileOrDie(file, std::string(good_.begin(), good_.end()));
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::atomic<int> sound{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      const int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
      for (int i = 0; i < 2; ++i) {
        IoScope io(file.string());
        std::string detail;
        uint64_t read_bytes = 0;
        sound += SealTag(fd, kFile, kPath, *keys_, 0, &io, &detail, &read_bytes) == SealVerdict::kSound;
      }
      close(fd);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(sound.load(), 2 * kThreads) << "seed " << seed_;
  EXPECT_LE(keys_->checkers(), static_cast<size_t>(kThreads));
  EXPECT_LE(keys_->buffer_bytes(), keys_->checkers() * kSealVerifyChunkBytes);
}

// The process's peak resident memory (VmHWM), in bytes.
uint64_t PeakRss() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

TEST_F(SealCheckTest, ALargeBlockIsNeverHeldWhole) {
  constexpr uint64_t kBig = 48 << 20, kBigFile = kBig + format::kSealTrailerBytes;
  const fs::path file = dir_.path() / "big";
  // Sealed in place in a shared mapping of the file: never in this process's anonymous memory.
  const int fd = open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, kBigFile), 0);
  void* map = mmap(nullptr, kBigFile, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  auto* bytes = static_cast<uint8_t*>(map);
  for (uint64_t i = 0; i < kBig; i += 4096) bytes[i] = static_cast<uint8_t>(i >> 12);
  auto cipher = SealCipher::Create(keys_->ring());
  ASSERT_TRUE(cipher.ok());
  const SealPiece piece{bytes, bytes, kBig};
  ASSERT_TRUE((*cipher)->Seal(kPath, {&piece, 1}, kBig, bytes + kBig).ok());
  ASSERT_EQ(munmap(map, kBigFile), 0);
  std::ofstream("/proc/self/clear_refs") << "5";  // VmHWM from here on
  const uint64_t before = PeakRss();
  ASSERT_GT(before, 0u);
  IoScope io(file.string());
  std::string detail;
  uint64_t read_bytes = 0;
  EXPECT_EQ(SealTag(fd, kBigFile, kPath, *keys_, 0, &io, &detail, &read_bytes), SealVerdict::kSound) << detail;
  close(fd);
  EXPECT_EQ(read_bytes, kBigFile);
  const uint64_t grown = PeakRss() - before;
  EXPECT_LT(grown, uint64_t{16} << 20) << "peak resident memory grew by " << grown << " bytes checking a 48 MiB block";
}

}  // namespace
}  // namespace kvtier::internal
