// Proves the block-hash record (FORMAT.md L197-L200): a record of 2..64
// SHA-256 hashes (and of 16-byte ones) parses back to the same hashes in
// order, from the start of a page whatever follows; it is refused (nullopt)
// when any byte of it changed, when it ends with another key than the
// file's, when its hash length is not the key's, when it is cut short, or
// when it names fewer than 2 or more than 2048 bytes of hashes; random pages
// never pass. A store's list is checked against the file's block count, the
// key's length and the key itself. HashesPerFile follows the namespace
// (blocks_per_file x tokens_per_block / tokens_per_hash; SGLang: 1). Seeded;
// the seed is printed.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "format/block_hashes.h"
#include "support/test_support.h"

namespace kvtier::format {
namespace {

std::vector<BlockHash> RandomHashes(std::mt19937_64& rng, size_t n, size_t bytes) {
  std::vector<BlockHash> out;
  for (size_t i = 0; i < n; ++i) {
    std::vector<uint8_t> b(bytes);
    for (uint8_t& x : b) x = static_cast<uint8_t>(rng());
    out.push_back(*BlockHash::FromBytes(b));
  }
  return out;
}

std::span<const uint8_t> Bytes(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

TEST(BlockHashRecord, RoundTripsFromThePageStartWhateverFollows) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE("KVTIER_TEST_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (size_t bytes : {size_t{32}, size_t{16}}) {
    for (size_t n : {size_t{2}, size_t{4}, size_t{17}, kBlockHashesBytesMax / bytes}) {
      const std::vector<BlockHash> hashes = RandomHashes(rng, n, bytes);
      const std::string record = EncodeBlockHashRecord(hashes);
      ASSERT_EQ(record.size(), 8 + 4 + n * bytes + 4);
      EXPECT_EQ(record.substr(0, 8), "KVTBLKH1");
      std::string page = record + std::string(4096 - record.size(), '\x5a');  // a trailer's record, or a row, after it
      const auto parsed = ParseBlockHashRecord(Bytes(page), hashes.back());
      ASSERT_TRUE(parsed.has_value()) << n << " x " << bytes;
      EXPECT_EQ(*parsed, hashes);
    }
  }
}

TEST(BlockHashRecord, EverySingleByteChangeIsRefused) {
  std::mt19937_64 rng(7);
  const std::vector<BlockHash> hashes = RandomHashes(rng, 4, 32);
  const std::string good = EncodeBlockHashRecord(hashes);
  for (size_t at = 0; at < good.size(); ++at) {
    for (uint8_t flip : {uint8_t{0x01}, uint8_t{0x80}}) {
      std::string bad = good;
      bad[at] = static_cast<char>(bad[at] ^ flip);
      EXPECT_FALSE(ParseBlockHashRecord(Bytes(bad), hashes.back()).has_value()) << "byte " << at;
    }
  }
}

TEST(BlockHashRecord, AnotherFilesRecordAShortOneOrAnotherLengthIsRefused) {
  std::mt19937_64 rng(11);
  const std::vector<BlockHash> hashes = RandomHashes(rng, 4, 32);
  const std::string record = EncodeBlockHashRecord(hashes);
  EXPECT_FALSE(ParseBlockHashRecord(Bytes(record), hashes[0]).has_value());  // copied beside another key
  EXPECT_FALSE(ParseBlockHashRecord(Bytes(record), RandomHashes(rng, 1, 16)[0]).has_value());
  EXPECT_FALSE(ParseBlockHashRecord(Bytes(record.substr(0, record.size() - 1)), hashes.back()).has_value());
  EXPECT_FALSE(ParseBlockHashRecord(Bytes(record.substr(0, 10)), hashes.back()).has_value());
  EXPECT_FALSE(ParseBlockHashRecord({}, hashes.back()).has_value());
  // One hash is no record (a file of one block is named by its key), and
  // more than the limit is never written.
  const std::vector<BlockHash> one(hashes.end() - 1, hashes.end());
  EXPECT_FALSE(ParseBlockHashRecord(Bytes(EncodeBlockHashRecord(one)), hashes.back()).has_value());
  const std::vector<BlockHash> many = RandomHashes(rng, kBlockHashesBytesMax / 32 + 1, 32);
  EXPECT_FALSE(ParseBlockHashRecord(Bytes(EncodeBlockHashRecord(many)), many.back()).has_value());
}

TEST(BlockHashRecord, RandomPagesNeverPass) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE("KVTIER_TEST_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const BlockHash key = RandomHashes(rng, 1, 32)[0];
  for (int i = 0; i < 2000; ++i) {
    std::string page(4096, '\0');
    for (char& c : page) c = static_cast<char>(rng());
    if (i % 2 == 0) std::memcpy(page.data(), "KVTBLKH1\x04\x00\x20\x00", 12);  // the header right, the rest not
    EXPECT_FALSE(ParseBlockHashRecord(Bytes(page), key).has_value()) << i;
  }
}

TEST(BlockHashRecord, AStoresListIsCheckedAgainstTheFile) {
  std::mt19937_64 rng(3);
  std::vector<BlockHash> hashes = RandomHashes(rng, 4, 32);
  EXPECT_EQ(BlockHashListProblem(hashes, hashes.back(), 4), "");
  EXPECT_NE(BlockHashListProblem(hashes, hashes.back(), 2), "");
  EXPECT_NE(BlockHashListProblem(hashes, hashes[0], 4), "");
  EXPECT_NE(BlockHashListProblem({}, hashes[0], 4), "");
  std::vector<BlockHash> mixed = hashes;
  mixed[1] = RandomHashes(rng, 1, 16)[0];
  EXPECT_NE(BlockHashListProblem(mixed, mixed.back(), 4), "");
  const std::vector<BlockHash> many = RandomHashes(rng, kBlockHashesBytesMax / 32 + 1, 32);
  EXPECT_NE(BlockHashListProblem(many, many.back(), 0), "");
}

TEST(BlockHashRecord, HashesPerFileFollowsTheNamespace) {
  NamespaceSpec spec;
  spec.model_name = "m";
  EXPECT_EQ(HashesPerFile(spec, 0), 1u);
  EXPECT_FALSE(MayHoldSeveralBlocks(spec));
  spec.blocks_per_file = 4;
  EXPECT_EQ(HashesPerFile(spec, 0), 4u);
  EXPECT_TRUE(MayHoldSeveralBlocks(spec));
  spec.blocks_per_file = 1;
  spec.kv_cache_groups = {{16, {"a"}}, {32, {"b"}}};
  EXPECT_EQ(HashesPerFile(spec, 0), 1u);
  EXPECT_EQ(HashesPerFile(spec, 1), 2u);
  EXPECT_TRUE(MayHoldSeveralBlocks(spec));
  spec.inference_engine = "sglang";
  EXPECT_EQ(HashesPerFile(spec, 1), 1u);
  EXPECT_FALSE(MayHoldSeveralBlocks(spec));
}

}  // namespace
}  // namespace kvtier::format
