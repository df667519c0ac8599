// Proves the seal keys and cipher (FORMAT.md L161, L166-L169, L173):
//  * a key file of 32 raw bytes, or 64 hex digits with an optional "\n" or
//    "\r\n", loads, and both spellings of one key give one key id; an fd
//    (seekable or a pipe) gives the same key; anything else (missing,
//    a directory, 31 or 33 bytes, bad hex) fails with an error naming the
//    path and never holding a byte of the content (a recognisable key);
//  * a sealed row opens byte-exact with its key, path and trailer, from
//    several pieces and in place; each tamper (a ciphertext bit, the tag,
//    the salt, the nonce, the key id, the row size, another path, another
//    key) fails, and the output is all zeros after a failure;
//  * two seals of one row differ (a fresh nonce); a writer's blocks share
//    its salt, and a reader opens several writers' blocks in any order;
//  * the caller's input row is never changed by sealing.
// Seeded random rows; the seed is printed on failure.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "seal/seal_cipher.h"
#include "seal/seal_key.h"
#include "support/test_support.h"

namespace kvtier::internal {
namespace {

namespace fs = std::filesystem;
// Recognisable in any error text: the hex form and the raw bytes' prefix.
const std::string kHexKey = "c0ffee00deadbeef0123456789abcdef00112233445566778899aabbccddeeff";
const std::string kRawKey = "RAWKEY-0123456789-abcdefghijklmn";  // 32 bytes

std::shared_ptr<const SealKeyring> Ring(std::vector<std::string> contents) {
  auto ring = std::make_shared<SealKeyring>();
  for (const std::string& c : contents) {
    auto key = SealKey::FromContent(std::span(reinterpret_cast<const uint8_t*>(c.data()), c.size()), "test key");
    EXPECT_TRUE(key.ok()) << key.status().ToString();
    ring->keys.push_back(std::move(key).value());
  }
  return ring;
}

void ExpectKeyless(const Status& s, const std::string& path) {
  const std::string text = s.ToString();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(text.find(path), std::string::npos) << text;
  for (const std::string& secret : {kHexKey.substr(0, 16), kRawKey.substr(0, 12), std::string("c0ffee")}) {
    EXPECT_EQ(text.find(secret), std::string::npos) << "the key leaked into: " << text;
  }
}

TEST(SealKey, RawAndHexFilesGiveOneKeyIdAndBadFilesNameThePathOnly) {
  testing::TempDir dir;
  auto write = [&](const std::string& name, const std::string& bytes) {
    testing::WriteKeyFileOrDie(dir.path() / name, bytes);
    return (dir.path() / name).string();
  };
  std::string raw(32, '\0');
  for (size_t i = 0; i < 32; ++i) raw[i] = static_cast<char>(std::stoi(kHexKey.substr(2 * i, 2), nullptr, 16));
  auto a = SealKey::FromFile(write("raw", raw), false);
  auto b = SealKey::FromFile(write("hex", kHexKey), false);
  auto c = SealKey::FromFile(write("hexnl", kHexKey + "\n"), false);
  auto d = SealKey::FromFile(write("hexcrlf", kHexKey + "\r\n"), false);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && d.ok()) << a.status().ToString();
  EXPECT_EQ((*a)->key_id_hex().size(), 32u);
  EXPECT_EQ((*a)->key_id_hex(), (*b)->key_id_hex());
  EXPECT_EQ((*a)->key_id_hex(), (*c)->key_id_hex());
  EXPECT_EQ((*a)->key_id_hex(), (*d)->key_id_hex());
  EXPECT_EQ((*a)->key_id_hex().find("c0ffee"), std::string::npos);
  ExpectKeyless(SealKey::FromFile((dir.path() / "missing").string(), false).status(), "missing");
  fs::create_directory(dir.path() / "adir");
  ExpectKeyless(SealKey::FromFile((dir.path() / "adir").string(), false).status(), "adir");
  for (const std::string& bad : {kRawKey.substr(0, 31), kRawKey + "x", kHexKey.substr(0, 63) + "g",
                                 kHexKey + "\n\n", kHexKey + kHexKey, std::string()}) {
    const std::string path = write("bad", bad);
    const Status s = SealKey::FromFile(path, false).status();
    ExpectKeyless(s, path);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  }
  EXPECT_NE(SealKey::FromFile(write("short", kRawKey.substr(0, 31)), false).status().ToString().find("31 bytes"),
            std::string::npos);
}

TEST(SealKey, AnFdGivesTheSameKeyFromAFileOrAPipeAndIsLeftOpen) {
  testing::TempDir dir;
  testing::WriteKeyFileOrDie(dir.path() / "k", kHexKey + "\n");
  auto from_file = SealKey::FromFile((dir.path() / "k").string(), false);
  ASSERT_TRUE(from_file.ok());
  const int fd = open((dir.path() / "k").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(lseek(fd, 10, SEEK_SET), 10);  // read from offset 0 whatever the fd's position
  auto from_fd = SealKey::FromFd(fd);
  ASSERT_TRUE(from_fd.ok()) << from_fd.status().ToString();
  EXPECT_EQ((*from_fd)->key_id_hex(), (*from_file)->key_id_hex());
  EXPECT_EQ(fcntl(fd, F_GETFD), FD_CLOEXEC);  // still open: the caller's
  close(fd);
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  ASSERT_EQ(write(p[1], kHexKey.data(), kHexKey.size()), static_cast<ssize_t>(kHexKey.size()));
  close(p[1]);
  auto from_pipe = SealKey::FromFd(p[0]);
  close(p[0]);
  ASSERT_TRUE(from_pipe.ok()) << from_pipe.status().ToString();
  EXPECT_EQ((*from_pipe)->key_id_hex(), (*from_file)->key_id_hex());
  ExpectKeyless(SealKey::FromFd(987654).status(), "987654");
}

class SealCipherTest : public ::testing::Test {
 protected:
  static constexpr size_t kRow = 3 * 4096 + 100;  // not a multiple of the AES block: partial blocks
  void SetUp() override {
    std::mt19937_64 rng(seed_);
    row_.resize(kRow);
    for (uint8_t& b : row_) b = static_cast<uint8_t>(rng());
    auto c = SealCipher::Create(Ring({kHexKey, kRawKey}));
    ASSERT_TRUE(c.ok());
    cipher_ = std::move(c).value();
    page_.assign(format::kSealTrailerBytes, 0);
    cipher_text_.assign(kRow, 0);
    const SealPiece pieces[] = {{row_.data(), cipher_text_.data(), 1000}, {row_.data() + 1000, cipher_text_.data() + 1000, kRow - 1000}};
    ASSERT_OK(cipher_->Seal(kPath, pieces, kRow, page_.data()));
  }
  // Opens copies of the sealed bytes (after `tamper`) with key `key`; the output row.
  std::string_view OpenCopy(size_t key, std::string_view path, std::vector<uint8_t>* out,
                            void (*tamper)(std::vector<uint8_t>&, std::vector<uint8_t>&) = nullptr) {
    std::vector<uint8_t> text = cipher_text_, page = page_;
    if (tamper != nullptr) tamper(text, page);
    out->assign(kRow, 0x5A);
    const SealPiece pieces[] = {{text.data(), out->data(), kRow}};
    return cipher_->Open(key, path, page.data(), kRow + format::kSealTrailerBytes, pieces);
  }
  static constexpr std::string_view kPath = "m_0123456789ab_r0/abc/de_g0/abcdef.bin";
  uint64_t seed_ = testing::TestSeed();
  std::vector<uint8_t> row_, cipher_text_, page_;
  std::unique_ptr<SealCipher> cipher_;
};

TEST_F(SealCipherTest, ASealedRowOpensByteExactInPiecesOrInPlaceAndTheInputIsUnchanged) {
  const std::vector<uint8_t> before = row_;
  EXPECT_NE(cipher_text_, row_);
  std::vector<uint8_t> out;
  EXPECT_EQ(OpenCopy(0, kPath, &out), "");
  EXPECT_EQ(out, row_) << "seed " << seed_;
  std::vector<uint8_t> in_place = cipher_text_;
  const SealPiece pieces[] = {{in_place.data(), in_place.data(), 5}, {in_place.data() + 5, in_place.data() + 5, kRow - 5}};
  EXPECT_EQ(cipher_->Open(0, kPath, page_.data(), kRow + format::kSealTrailerBytes, pieces), "");
  EXPECT_EQ(in_place, row_) << "seed " << seed_;
  EXPECT_EQ(row_, before);
  std::vector<uint8_t> text2(kRow), page2(format::kSealTrailerBytes);
  const SealPiece again[] = {{row_.data(), text2.data(), kRow}};
  ASSERT_OK(cipher_->Seal(kPath, again, kRow, page2.data()));
  EXPECT_NE(text2, cipher_text_);  // a fresh salt and nonce
  EXPECT_NE(std::memcmp(page2.data() + format::kSealKeyIdAt + 16 + 24, page_.data() + format::kSealKeyIdAt + 16 + 24, 24), 0);
}

TEST_F(SealCipherTest, EveryTamperFailsAndLeavesTheOutputZeroed) {
  using Tamper = void (*)(std::vector<uint8_t>&, std::vector<uint8_t>&);
  const std::pair<const char*, Tamper> tampers[] = {
      {"ciphertext bit", [](std::vector<uint8_t>& t, std::vector<uint8_t>&) { t[777] ^= 0x04; }},
      {"last ciphertext byte", [](std::vector<uint8_t>& t, std::vector<uint8_t>&) { t.back() ^= 0x80; }},
      {"tag", [](std::vector<uint8_t>&, std::vector<uint8_t>& p) { p[format::kSealTagAt + 3] ^= 1; }},
      {"salt", [](std::vector<uint8_t>&, std::vector<uint8_t>& p) { p[format::kSealKeyIdAt + 16 + 24] ^= 1; }},
      {"nonce", [](std::vector<uint8_t>&, std::vector<uint8_t>& p) { p[format::kSealKeyIdAt + 16 + 36] ^= 1; }},
      {"key id", [](std::vector<uint8_t>&, std::vector<uint8_t>& p) { p[format::kSealKeyIdAt] ^= 1; }},
      {"row size", [](std::vector<uint8_t>&, std::vector<uint8_t>& p) { p[format::kSealKeyIdAt + 16 + 16] ^= 1; }},
      {"magic", [](std::vector<uint8_t>&, std::vector<uint8_t>& p) { p[format::kSealKeyIdAt + 16] ^= 1; }},
  };
  const std::vector<uint8_t> zeros(kRow, 0);
  for (const auto& [what, tamper] : tampers) {
    std::vector<uint8_t> out;
    EXPECT_NE(OpenCopy(0, kPath, &out, tamper), "") << what;
    EXPECT_EQ(out, zeros) << what;
  }
  std::vector<uint8_t> out;
  EXPECT_NE(OpenCopy(0, "m_0123456789ab_r0/abc/de_g1/abcdef.bin", &out), "");  // another group: another name
  EXPECT_EQ(out, zeros);
  EXPECT_EQ(OpenCopy(1, kPath, &out), "sealed with another key");
  EXPECT_EQ(out, zeros);
}

// Writers keep a salt for many blocks (L167): one reader opens blocks of
// several writers, in any order, each with its own salt.
TEST_F(SealCipherTest, BlocksOfSeveralWritersOpenInAnyOrder) {
  auto ring = Ring({kHexKey});
  std::vector<std::unique_ptr<SealCipher>> writers;
  std::vector<std::vector<uint8_t>> texts, pages;
  for (int w = 0; w < 3; ++w) {
    writers.push_back(std::move(SealCipher::Create(ring).value()));
    for (int b = 0; b < 2; ++b) {
      texts.emplace_back(kRow);
      pages.emplace_back(format::kSealTrailerBytes);
      const SealPiece p[] = {{row_.data(), texts.back().data(), kRow}};
      ASSERT_OK(writers.back()->Seal(kPath, p, kRow, pages.back().data()));
    }
  }
  EXPECT_EQ(std::memcmp(pages[0].data() + format::kSealKeyIdAt + 40, pages[1].data() + format::kSealKeyIdAt + 40, 12), 0)
      << "one writer's blocks share its salt";
  EXPECT_NE(std::memcmp(pages[0].data() + format::kSealKeyIdAt + 40, pages[2].data() + format::kSealKeyIdAt + 40, 12), 0);
  auto reader = std::move(SealCipher::Create(ring).value());
  for (size_t i : {0u, 2u, 4u, 1u, 3u, 5u, 5u, 0u}) {
    std::vector<uint8_t> out(kRow);
    const SealPiece p[] = {{texts[i].data(), out.data(), kRow}};
    EXPECT_EQ(reader->Open(0, kPath, pages[i].data(), kRow + format::kSealTrailerBytes, p), "") << i;
    EXPECT_EQ(out, row_) << i;
  }
}

TEST_F(SealCipherTest, AnotherKeyWithTheRecordsKeyIdForgedStillFailsItsTag) {
  auto other = SealCipher::Create(Ring({kRawKey}));
  ASSERT_TRUE(other.ok());
  std::vector<uint8_t> page = page_, text = cipher_text_, out(kRow, 1);
  std::memcpy(page.data() + format::kSealKeyIdAt, (*other)->ring().keys[0]->key_id(), format::kSealKeyIdBytes);
  const SealPiece pieces[] = {{text.data(), out.data(), kRow}};
  EXPECT_EQ((*other)->Open(0, kPath, page.data(), kRow + format::kSealTrailerBytes, pieces), "tag mismatch");
  EXPECT_EQ(out, std::vector<uint8_t>(kRow, 0));
}

}  // namespace
}  // namespace kvtier::internal
