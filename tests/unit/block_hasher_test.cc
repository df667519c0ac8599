// Proves the block hasher's behaviour beyond the golden vectors: chaining
// (incremental appends equal one call), vLLM's decode-time multimodal quirk
// (later calls scan from the last mm item only), cache salt on the first
// block only and only when non-empty, prompt-embeds keys, partial blocks not
// hashed, the int64 and BigInt paths agreeing on random tokens (seeded), and
// clear errors for bad inputs. Also chunk keys and offload keys.
#include <gtest/gtest.h>

#include <random>

#include "kvtier/hashing.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

BlockHasher Hasher(HashAlgo algo, uint32_t bs = 16) {
  return BlockHasher::Create(algo, ComputeNoneHash(algo, "0"), bs).value();
}

std::vector<BlockHash> HashAll(const BlockHasher& h, const std::vector<int64_t>& tokens,
                               const RequestExtras& extras = {}) {
  std::vector<BlockHash> out;
  EXPECT_OK(h.AppendBlockHashes(tokens, extras, &out));
  return out;
}

std::vector<int64_t> Range(int64_t n) {
  std::vector<int64_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = i;
  return t;
}

const HashAlgo kAlgos[] = {HashAlgo::kSha256, HashAlgo::kSha256Cbor, HashAlgo::kXxhash, HashAlgo::kXxhashCbor};

TEST(BlockHasher, IncrementalAppendEqualsOneCallAndSkipsPartialBlocks) {
  for (HashAlgo algo : kAlgos) {
    BlockHasher h = Hasher(algo);
    std::vector<int64_t> tokens = Range(100);  // 6 full blocks, 4 tokens left over
    std::vector<BlockHash> all = HashAll(h, tokens);
    ASSERT_EQ(all.size(), 6u);
    EXPECT_EQ(all[0].size(), HashAlgoDigestBytes(algo));
    std::vector<BlockHash> inc;
    for (size_t n : {10, 16, 40, 47, 48, 100}) {
      ASSERT_OK(h.AppendBlockHashes(std::span(tokens).first(n), {}, &inc));
      EXPECT_EQ(inc.size(), n / 16);
    }
    EXPECT_EQ(inc, all);
  }
}

TEST(BlockHasher, ChainDependsOnEveryEarlierToken) {
  BlockHasher h = Hasher(HashAlgo::kSha256);
  std::vector<int64_t> a = Range(64), b = Range(64);
  b[3] = 999;
  auto ha = HashAll(h, a), hb = HashAll(h, b);
  for (size_t i = 0; i < ha.size(); ++i) EXPECT_NE(ha[i], hb[i]) << i;
}

TEST(BlockHasher, DecodeTimeBlocksScanOnlyTheLastMmItem) {
  BlockHasher h = Hasher(HashAlgo::kSha256);
  RequestExtras extras;
  extras.mm_features = {{"img-a", 36, 4}, {"img-b", 50, 2}};
  std::vector<int64_t> tokens = Range(64);
  auto one_call = HashAll(h, tokens, extras);
  std::vector<BlockHash> inc;
  ASSERT_OK(h.AppendBlockHashes(std::span(tokens).first(32), extras, &inc));
  ASSERT_OK(h.AppendBlockHashes(tokens, extras, &inc));
  ASSERT_EQ(inc.size(), 4u);
  EXPECT_EQ(inc[1], one_call[1]);
  // vLLM starts the later call at the last item (img-b), so block 2 misses
  // img-a: it hashes as if img-a were absent.
  EXPECT_NE(inc[2], one_call[2]);
  RequestExtras only_b;
  only_b.mm_features = {{"img-b", 50, 2}};
  EXPECT_EQ(inc[2], HashAll(h, tokens, only_b)[2]);
}

TEST(BlockHasher, CacheSaltOnlyOnFirstBlockAndOnlyWhenNonEmpty) {
  BlockHasher h = Hasher(HashAlgo::kSha256Cbor);
  std::vector<int64_t> tokens = Range(48);
  RequestExtras salted, empty_salt;
  salted.cache_salt = "tenant-1";
  empty_salt.cache_salt = "";
  auto plain = HashAll(h, tokens), with_salt = HashAll(h, tokens, salted);
  EXPECT_EQ(HashAll(h, tokens, empty_salt), plain);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_NE(with_salt[i], plain[i]);  // propagates
  BlockHashTrace trace;
  std::vector<BlockHash> out;
  ASSERT_OK(h.AppendBlockHashes(tokens, salted, &out, &trace));
  EXPECT_EQ(trace.extra_keys_repr[0], "('tenant-1',)");
  EXPECT_EQ(trace.extra_keys_repr[1], "None");
}

TEST(BlockHasher, PromptEmbedsKeyIsSha256OfEachBlocksBytes) {
  BlockHasher h = Hasher(HashAlgo::kSha256);
  std::vector<uint8_t> embeds(40 * 8);
  for (size_t i = 0; i < embeds.size(); ++i) embeds[i] = static_cast<uint8_t>(i * 7);
  RequestExtras extras;
  extras.has_prompt_embeds = true;
  extras.prompt_embeds = embeds;
  extras.prompt_embeds_bytes_per_token = 8;
  std::vector<int64_t> tokens(48, 0);  // embedded positions carry token id 0
  BlockHashTrace trace;
  std::vector<BlockHash> out;
  ASSERT_OK(h.AppendBlockHashes(tokens, extras, &out, &trace));
  ASSERT_EQ(out.size(), 3u);
  // Block 2 covers tokens 32..47 but embeddings stop at 40: the slice is clamped.
  for (const auto& repr : trace.extra_keys_repr) EXPECT_NE(repr.find("bytes.fromhex('"), std::string::npos);
  embeds[5] ^= 1;  // a change in block 0's embeddings changes every hash from block 0 on
  std::vector<BlockHash> changed;
  ASSERT_OK(h.AppendBlockHashes(tokens, extras, &changed));
  EXPECT_NE(changed[0], out[0]);
  extras.prompt_embeds_bytes_per_token = 7;  // 320 bytes are not whole tokens of 7
  EXPECT_EQ(h.AppendBlockHashes(tokens, extras, &changed).code(), StatusCode::kInvalidArgument);
}

// The int64 path has hand-written fast paths (direct pickle emission without
// extra keys, branch-free integer heads); the BigInt path goes through the
// general writers. They must agree on every width of token id.
TEST(BlockHasher, Int64AndBigIntPathsAgreeOnRandomTokens) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  for (HashAlgo algo : kAlgos) {
    for (bool with_extras : {false, true}) {
      BlockHasher h = Hasher(algo, 1 + static_cast<uint32_t>(rng() % 40));
      std::vector<int64_t> small;
      std::vector<BigInt> big;
      for (int i = 0; i < 2000; ++i) {
        // Mostly int32-sized ids (the fast path), sometimes up to 64 bits.
        int shift = (rng() % 8 == 0) ? static_cast<int>(rng() % 64) : 33 + static_cast<int>(rng() % 31);
        int64_t v = static_cast<int64_t>(rng() >> shift) * ((rng() % 4 == 0) ? -1 : 1);
        small.push_back(v);
        big.emplace_back(v);
      }
      RequestExtras extras;
      if (with_extras) {
        extras.lora_name = "a";  // a singleton string on every block
        extras.mm_features = {{"m", 5, 100}, {"m", 300, 1}};
      }
      std::vector<BlockHash> a, b;
      ASSERT_OK(h.AppendBlockHashes(small, extras, &a));
      ASSERT_OK(h.AppendBlockHashes(std::span<const BigInt>(big), extras, &b));
      EXPECT_EQ(a, b) << HashAlgoName(algo) << " extras=" << with_extras;
    }
  }
}

TEST(BlockHasher, BadInputsGetClearErrors) {
  EXPECT_EQ(BlockHasher::Create(HashAlgo::kSha256, ComputeNoneHash(HashAlgo::kSha256, "0"), 0).status().code(),
            StatusCode::kInvalidArgument);
  auto wrong = BlockHasher::Create(HashAlgo::kXxhash, ComputeNoneHash(HashAlgo::kSha256, "0"), 16);
  EXPECT_NE(wrong.status().message().find("needs 16"), std::string::npos) << wrong.status().ToString();
  RequestExtras extras;
  extras.mm_features = {{"x", -1, 4}};
  std::vector<BlockHash> out;
  EXPECT_EQ(Hasher(HashAlgo::kSha256).AppendBlockHashes(Range(32), extras, &out).code(),
            StatusCode::kInvalidArgument);
  extras.mm_features = {{"x", INT64_MAX - 5, 10}};  // offset + length overflows
  EXPECT_EQ(Hasher(HashAlgo::kSha256).AppendBlockHashes(Range(32), extras, &out).code(),
            StatusCode::kInvalidArgument);
  RequestExtras bad_utf8;
  bad_utf8.lora_name = "\xfe";  // no Python str has these bytes
  EXPECT_EQ(Hasher(HashAlgo::kSha256).AppendBlockHashes(Range(32), bad_utf8, &out).code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(ParseHashAlgo("sha1").ok());
  EXPECT_NE(ParseHashAlgo("md5").status().message().find("sha256_cbor"), std::string::npos);
}

TEST(NoneHash, SeedRules) {
  EXPECT_EQ(ResolveNoneHashSeed(HashAlgo::kSha256, std::nullopt).seed, "vllm-none-hash");
  EXPECT_EQ(ResolveNoneHashSeed(HashAlgo::kSha256Cbor, std::nullopt).seed, "vllm-none-hash");
  EXPECT_EQ(ResolveNoneHashSeed(HashAlgo::kXxhash, "0").seed, "0");
  EXPECT_EQ(ResolveNoneHashSeed(HashAlgo::kSha256, "").seed, "");  // set but empty is still set
  NoneHashSeed a = ResolveNoneHashSeed(HashAlgo::kXxhashCbor, std::nullopt);
  NoneHashSeed b = ResolveNoneHashSeed(HashAlgo::kXxhashCbor, std::nullopt);
  EXPECT_TRUE(a.random);
  EXPECT_EQ(a.seed.size(), 64u);
  EXPECT_NE(a.seed, b.seed);
  EXPECT_EQ(ComputeNoneHash(HashAlgo::kSha256, "0").Hex(),
            "1973e23848344dc43a988a9b478663803cfffe1243480253f9a3cf004b14aa7c");
}

TEST(OffloadKeys, ChunkKeysTakeTheLastHashOfEachCompleteChunk) {
  BlockHasher h = Hasher(HashAlgo::kSha256);
  auto hashes = HashAll(h, Range(16 * 11));
  ASSERT_OK_AND_ASSIGN(uint32_t per_chunk, HashesPerChunk(16, 4, 16));
  EXPECT_EQ(per_chunk, 4u);
  auto keys = ChunkOffloadKeys(hashes, per_chunk, 7);
  ASSERT_EQ(keys.size(), 2u);  // 11 hashes: two complete chunks
  EXPECT_EQ(keys[0].hash, hashes[3]);
  EXPECT_EQ(keys[1].hash, hashes[7]);
  EXPECT_EQ(keys[1].Hex(), hashes[7].Hex() + "00000007");
  EXPECT_EQ(keys[1].Bytes().size(), 36u);
  EXPECT_FALSE(HashesPerChunk(16, 1, 32).ok());  // half a hash block per chunk
  EXPECT_FALSE(HashesPerChunk(0, 1, 16).ok());
}

}  // namespace
}  // namespace kvtier
