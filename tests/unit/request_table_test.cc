// Proves the tiered store's request table on its own: ids 0, duplicate and
// unknown ids are refused with the documented codes; the offloadable range
// follows offload_prompt_only, prompt_tokens and max_offload_tokens; chunk
// ranges are checked at their edges; each tier is asked about a key once
// until a failed promotion makes every live request forget its hits; a
// verdict for a finished request is dropped; metrics count a chunk once,
// appended chunks included; a request's block hashes are sliced into its
// chunks by the hashes a chunk file of the keys' group holds, appended chunks
// have the hashes given with them (an incomplete chunk's give way), or none,
// and hashes that did not make the chunk keys, or follow a chunk without
// any, are refused before anything starts or is appended; pins are shared
// between requests, capped, and a key's row is released only when the last
// request pinning it finishes (a seeded random run checks this against a
// model).
#include "tiered_store/request_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "support/test_support.h"

namespace kvtier::internal {
namespace {

constexpr uint64_t kChunkTokens = 32;

using testing::Key;

std::vector<OffloadKey> Keys(uint8_t from, uint8_t to) {
  std::vector<OffloadKey> keys;
  for (uint8_t n = from; n < to; ++n) keys.push_back(Key(n));
  return keys;
}

RequestSpec Request(std::vector<OffloadKey> keys, uint64_t pin_tokens = 0) {
  RequestSpec spec;
  spec.chunk_keys = std::move(keys);
  spec.pin_tokens = pin_tokens;
  return spec;
}

RequestTable Table(size_t tiers = 2, bool prompt_only = true) {
  return RequestTable(RequestTable::Options{kChunkTokens, prompt_only, tiers, {}});
}

// A table whose chunk files hold 2 blocks: group 0 (16-token blocks) 2
// hashes a chunk, group 1 (32-token blocks) 4.
RequestTable ChunkFileTable() {
  NamespaceSpec files;
  files.model_name = "m";
  files.blocks_per_file = 2;
  files.kv_cache_groups = {{16, {"a"}}, {32, {"b"}}};
  return RequestTable(RequestTable::Options{kChunkTokens, true, 0, files});
}

std::vector<BlockHash> HashesOf(uint8_t from, uint8_t to) {
  std::vector<BlockHash> hashes;
  for (const OffloadKey& key : Keys(from, to)) hashes.push_back(key.hash);
  return hashes;
}

// A request whose chunk keys are made from `hashes` (hpc a chunk, of
// `group`), given with them (RequestSpec::block_hashes).
RequestSpec HashedRequest(const std::vector<BlockHash>& hashes, uint32_t hpc, uint32_t group) {
  RequestSpec spec = Request(ChunkOffloadKeys(hashes, hpc, group));
  spec.block_hashes = hashes;
  return spec;
}

TEST(RequestTableTest, IdsAreCheckedWithTheDocumentedCodes) {
  RequestTable table = Table();
  EXPECT_EQ(table.Start(0, Request(Keys(0, 2))).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(table.Start(5, Request(Keys(0, 2))).ok());
  EXPECT_EQ(table.Start(5, Request(Keys(0, 3))).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(table.Find(5).value()->chunk_keys().size(), 2u)
      << "a refused Start must not replace the request";
  EXPECT_EQ(table.Find(6).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(table.FindOrNull(6), nullptr);
  EXPECT_EQ(table.Append(6, Keys(0, 1)).code(), StatusCode::kNotFound);
  EXPECT_EQ(table.Finish(6).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(table.Finish(5).ok());
  EXPECT_EQ(table.Finish(5).status().code(), StatusCode::kNotFound) << "finishing twice";
  EXPECT_EQ(table.size(), 0u);
  EXPECT_TRUE(table.Start(5, Request(Keys(0, 1))).ok()) << "an id may be reused once finished";
}

TEST(RequestTableTest, OffloadableRangeFollowsPromptAndMaxOffloadTokens) {
  RequestTable table = Table(0, /*prompt_only=*/true);
  RequestSpec spec = Request(Keys(0, 4));
  spec.prompt_tokens = 2 * kChunkTokens + 1;  // chunk 2 ends beyond the prompt
  ASSERT_TRUE(table.Start(1, spec).ok());
  const RequestState& a = *table.Find(1).value();
  EXPECT_TRUE(table.Offloadable(a, 0));
  EXPECT_TRUE(table.Offloadable(a, 1));
  EXPECT_FALSE(table.Offloadable(a, 2));

  spec.max_offload_tokens = kChunkTokens;  // the smaller limit wins
  ASSERT_TRUE(table.Start(2, spec).ok());
  EXPECT_TRUE(table.Offloadable(*table.Find(2).value(), 0));
  EXPECT_FALSE(table.Offloadable(*table.Find(2).value(), 1));

  spec.max_offload_tokens = 0;  // storing off for the request
  ASSERT_TRUE(table.Start(3, spec).ok());
  EXPECT_FALSE(table.Offloadable(*table.Find(3).value(), 0));

  RequestTable all = Table(0, /*prompt_only=*/false);
  spec.max_offload_tokens.reset();
  ASSERT_TRUE(all.Start(1, spec).ok());
  EXPECT_TRUE(all.Offloadable(*all.Find(1).value(), 3))
      << "prompt_tokens matter only with offload_prompt_only";
}

TEST(RequestTableTest, BlockHashesAreSlicedByTheChunkFilesOfTheKeysGroup) {
  RequestTable table = ChunkFileTable();
  const std::vector<BlockHash> hashes = HashesOf(0, 10);
  RequestSpec spec = HashedRequest(hashes, 4, 1);  // 2 chunks of 4, 2 hashes over
  ASSERT_OK(table.Start(1, spec));
  RequestState& req = *table.Find(1).value();
  ASSERT_TRUE(req.has_block_hashes());
  EXPECT_TRUE(std::ranges::equal(req.ChunkBlockHashes(0), std::span(hashes).subspan(0, 4)));
  EXPECT_TRUE(std::ranges::equal(req.ChunkBlockHashes(1), std::span(hashes).subspan(4, 4)));

  spec.chunk_keys = ChunkOffloadKeys(hashes, 2, 0);  // group 0: 5 chunks of 2
  ASSERT_OK(table.Start(2, spec));
  EXPECT_TRUE(std::ranges::equal(table.Find(2).value()->ChunkBlockHashes(4), std::span(hashes).subspan(8, 2)));
  spec.chunk_keys = ChunkOffloadKeys(hashes, 4, 0);  // keys of 4 hashes a chunk, in a group of 2
  EXPECT_EQ(table.Start(3, spec).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(table.FindOrNull(3), nullptr);
  ASSERT_OK(table.Start(4, Request(Keys(0, 2))));
  EXPECT_FALSE(table.Find(4).value()->has_block_hashes()) << "a request without hashes has none";
}

TEST(RequestTableTest, ChunksAppendedWithTheirHashesHaveThem) {
  RequestTable table = ChunkFileTable();
  const std::vector<BlockHash> hashes = HashesOf(0, 10);
  ASSERT_OK(table.Start(1, HashedRequest(hashes, 4, 1)));  // 2 chunks of 4, 2 hashes over
  RequestState& req = *table.Find(1).value();

  // Decoding: the request's hashes grow to 16, chunks 2 and 3 are appended with theirs.
  const std::vector<BlockHash> grown = HashesOf(0, 16);
  const std::span<const BlockHash> appended = std::span(grown).subspan(8);
  const std::vector<OffloadKey> more = ChunkOffloadKeys(appended, 4, 1);
  EXPECT_EQ(table.Append(1, more, appended.subspan(1)).code(), StatusCode::kInvalidArgument)
      << "hashes that did not make the keys";
  EXPECT_EQ(table.Append(1, ChunkOffloadKeys(appended, 4, 0), appended).code(),
            StatusCode::kInvalidArgument)
      << "keys of another group than the request's";
  EXPECT_EQ(req.chunk_keys().size(), 2u) << "a refused append appends nothing";
  EXPECT_TRUE(std::ranges::equal(req.ChunkBlockHashes(1), std::span(hashes).subspan(4, 4)));
  EXPECT_TRUE(req.ChunkBlockHashes(2).empty()) << "nor any hashes";
  ASSERT_OK(table.Append(1, more, appended));
  EXPECT_TRUE(std::ranges::equal(req.ChunkBlockHashes(2), appended.subspan(0, 4)))
      << "the incomplete chunk's hashes given at the start gave way to its own";
  EXPECT_TRUE(std::ranges::equal(req.ChunkBlockHashes(3), appended.subspan(4, 4)));
  ASSERT_OK(table.Append(1, Keys(20, 21)));
  EXPECT_TRUE(req.ChunkBlockHashes(4).empty()) << "a chunk appended without hashes has none";
  const std::vector<BlockHash> later = HashesOf(30, 34);
  EXPECT_EQ(table.Append(1, ChunkOffloadKeys(later, 4, 1), later).code(),
            StatusCode::kInvalidArgument)
      << "after a chunk without hashes, none are taken";
  EXPECT_EQ(req.chunk_keys().size(), 5u);

  RequestSpec empty = Request({});  // no chunks yet: the appended keys' group decides
  empty.block_hashes =
      HashesOf(40, 41);  // an incomplete chunk's, of group 0 (2 a chunk) at the start
  ASSERT_OK(table.Start(2, empty));
  ASSERT_OK(table.Append(2, more, appended));
  EXPECT_TRUE(
      std::ranges::equal(table.Find(2).value()->ChunkBlockHashes(1), appended.subspan(4, 4)));
}

TEST(RequestTableTest, ChunkRangesAreCheckedAtTheirEdges) {
  RequestTable table = Table();
  ASSERT_TRUE(table.Start(1, Request(Keys(0, 3))).ok());
  const RequestState& req = *table.Find(1).value();
  EXPECT_TRUE(table.CheckChunkRange(req, 0, 6, 2).ok());
  EXPECT_TRUE(table.CheckChunkRange(req, 2, 2, 2).ok());
  EXPECT_EQ(table.CheckChunkRange(req, 0, 0, 2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(table.CheckChunkRange(req, 0, 3, 2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(table.CheckChunkRange(req, 1, 6, 2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(table.CheckChunkRange(req, 3, 2, 2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(table.CheckChunkRange(req, SIZE_MAX, 2, 2).code(), StatusCode::kInvalidArgument)
      << "no overflow";
}

TEST(RequestTableTest, EachTierIsAskedOnceUntilHitsAreForgotten) {
  RequestTable table = Table(2);
  ASSERT_TRUE(table.Start(1, Request(Keys(0, 2))).ok());
  ASSERT_TRUE(table.Start(2, Request(Keys(0, 2))).ok());
  RequestState& req = *table.Find(1).value();
  std::vector<std::vector<OffloadKey>> to_lookup(2);
  std::span<const TierVerdict> v = table.AskTiers(req, Key(0), &to_lookup);
  EXPECT_EQ(std::vector<TierVerdict>(v.begin(), v.end()),
            (std::vector<TierVerdict>{TierVerdict::kInFlight, TierVerdict::kInFlight}));
  EXPECT_EQ(to_lookup[0].size(), 1u);
  EXPECT_EQ(to_lookup[1].size(), 1u);
  table.AskTiers(req, Key(0), &to_lookup);
  EXPECT_EQ(to_lookup[0].size(), 1u) << "a key in flight is not asked for again";

  EXPECT_TRUE(table.SetVerdict(1, Key(0), 0, TierVerdict::kMiss));
  EXPECT_TRUE(table.SetVerdict(1, Key(0), 1, TierVerdict::kHit));
  EXPECT_TRUE(table.SetVerdict(2, Key(0), 1, TierVerdict::kHit));
  EXPECT_FALSE(table.SetVerdict(1, Key(0), 2, TierVerdict::kHit)) << "no tier 2";
  table.ForgetHits(Key(0));
  to_lookup.assign(2, {});
  v = table.AskTiers(req, Key(0), &to_lookup);
  EXPECT_EQ(v[0], TierVerdict::kMiss) << "misses are kept";
  EXPECT_EQ(v[1], TierVerdict::kInFlight) << "the forgotten hit is asked again";
  EXPECT_TRUE(to_lookup[0].empty());
  EXPECT_EQ(to_lookup[1].size(), 1u);
  to_lookup.assign(2, {});
  v = table.AskTiers(*table.Find(2).value(), Key(0), &to_lookup);
  EXPECT_EQ(v[1], TierVerdict::kInFlight) << "every live request forgets its hits";
}

TEST(RequestTableTest, VerdictsForAFinishedRequestAreDropped) {
  RequestTable table = Table(1);
  ASSERT_TRUE(table.Start(1, Request(Keys(0, 1))).ok());
  std::vector<std::vector<OffloadKey>> to_lookup(1);
  table.AskTiers(*table.Find(1).value(), Key(0), &to_lookup);
  ASSERT_TRUE(table.Finish(1).ok());
  EXPECT_FALSE(table.SetVerdict(1, Key(0), 0, TierVerdict::kHit));
  ASSERT_TRUE(table.Start(1, Request(Keys(0, 1))).ok());
  to_lookup.assign(1, {});
  std::span<const TierVerdict> v = table.AskTiers(*table.Find(1).value(), Key(0), &to_lookup);
  EXPECT_EQ(v[0], TierVerdict::kInFlight) << "a restarted id starts without the old verdicts";
  EXPECT_EQ(to_lookup[0].size(), 1u);
}

TEST(RequestTableTest, NoSecondaryTiersMeansNoVerdicts) {
  RequestTable table = Table(0);
  ASSERT_TRUE(table.Start(1, Request(Keys(0, 1))).ok());
  std::vector<std::vector<OffloadKey>> to_lookup;
  EXPECT_TRUE(table.AskTiers(*table.Find(1).value(), Key(0), &to_lookup).empty());
  EXPECT_FALSE(table.SetVerdict(1, Key(0), 0, TierVerdict::kHit));
}

TEST(RequestTableTest, ChunksAreCountedOnceAppendedOnesToo) {
  RequestTable table = Table();
  ASSERT_TRUE(table.Start(1, Request(Keys(0, 2))).ok());
  RequestState& req = *table.Find(1).value();
  EXPECT_TRUE(table.FirstCount(req, 1));
  EXPECT_FALSE(table.FirstCount(req, 1));
  EXPECT_FALSE(table.FirstCount(req, 2)) << "beyond the chunk keys";
  ASSERT_TRUE(table.Append(1, Keys(2, 4)).ok());
  EXPECT_EQ(req.chunk_keys(), Keys(0, 4));
  EXPECT_TRUE(table.FirstCount(req, 3));
  EXPECT_FALSE(table.FirstCount(req, 1)) << "appending keeps what was counted";
}

TEST(RequestTableTest, PromotionSourceLivesWithTheRequest) {
  RequestTable table = Table();
  ASSERT_TRUE(table.Start(1, Request(Keys(0, 1))).ok());
  EXPECT_EQ(table.PromotedFrom(*table.Find(1).value(), Key(0)), 0);
  table.NotePromotion(*table.Find(1).value(), Key(0), 2);
  EXPECT_EQ(table.PromotedFrom(*table.Find(1).value(), Key(0)), 2);
  ASSERT_TRUE(table.Finish(1).ok());
  ASSERT_TRUE(table.Start(1, Request(Keys(0, 1))).ok());
  EXPECT_EQ(table.PromotedFrom(*table.Find(1).value(), Key(0)), 0);
}

TEST(RequestTableTest, PinsAreSharedCappedAndReleasedByTheLastRequest) {
  RequestTable table = Table();
  table.set_pin_rows_max(2);
  ASSERT_TRUE(table.Start(1, Request(Keys(0, 3), 2 * kChunkTokens)).ok());
  ASSERT_TRUE(table.Start(2, Request(Keys(0, 3), 3 * kChunkTokens)).ok());
  RequestState& a = *table.Find(1).value();
  RequestState& b = *table.Find(2).value();
  EXPECT_EQ(table.Pin(a, 0, Key(0)), PinResult::kFirst);
  EXPECT_EQ(table.Pin(a, 0, Key(0)), PinResult::kNotWanted) << "already pinned by this request";
  EXPECT_EQ(table.Pin(a, 2, Key(2)), PinResult::kNotWanted) << "beyond pin_tokens";
  EXPECT_EQ(table.Pin(b, 0, Key(0)), PinResult::kShared);
  EXPECT_EQ(table.Pin(b, 1, Key(1)), PinResult::kFirst);
  EXPECT_EQ(table.Pin(b, 2, Key(2)), PinResult::kRefused) << "cap of 2 keys";
  EXPECT_EQ(table.pins_refused(), 1u);
  EXPECT_EQ(table.pinned_keys(), 2u);
  EXPECT_EQ(table.Finish(1).value(), std::vector<OffloadKey>{}) << "request 2 still pins key 0";
  std::vector<OffloadKey> released = table.Finish(2).value();
  EXPECT_EQ(OffloadKeySet(released.begin(), released.end()), (OffloadKeySet{Key(0), Key(1)}));
  EXPECT_EQ(table.pinned_keys(), 0u);
}

TEST(RequestTableTest, PinningIsOffByDefault) {
  RequestTable table = Table();
  ASSERT_TRUE(table.Start(1, Request(Keys(0, 1), kChunkTokens)).ok());
  EXPECT_EQ(table.Pin(*table.Find(1).value(), 0, Key(0)), PinResult::kRefused);
  EXPECT_EQ(table.Finish(1).value(), std::vector<OffloadKey>{});
}

// Random starts, pins and finishes; a model of who pins what says which keys
// each Finish must release and how many keys are pinned.
TEST(RequestTableTest, RandomPinsMatchAModel) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  RequestTable table = Table();
  constexpr size_t kCap = 6;
  table.set_pin_rows_max(kCap);
  std::map<uint64_t, std::set<uint8_t>> model;  // live request -> keys it pins
  auto pin_count = [&](uint8_t k) {
    size_t n = 0;
    for (const auto& [id, keys] : model) n += keys.count(k);
    return n;
  };
  auto pinned_keys = [&] {
    std::set<uint8_t> all;
    for (const auto& [id, keys] : model) all.insert(keys.begin(), keys.end());
    return all;
  };
  for (int step = 0; step < 3000; ++step) {
    const uint64_t id = 1 + rng() % 8;
    const uint8_t k = static_cast<uint8_t>(rng() % 10);
    if (!model.contains(id)) {
      ASSERT_TRUE(table.Start(id, Request(Keys(0, 10), 10 * kChunkTokens)).ok());
      model[id];
    } else if (rng() % 4 == 0) {
      std::vector<OffloadKey> released = table.Finish(id).value();
      const std::set<uint8_t> mine = model[id];
      model.erase(id);
      OffloadKeySet want;
      for (uint8_t m : mine) {
        if (pin_count(m) == 0) want.insert(Key(m));
      }
      ASSERT_EQ(OffloadKeySet(released.begin(), released.end()), want)
          << "seed " << seed << " step " << step;
    } else {
      const PinResult r = table.Pin(*table.Find(id).value(), k, Key(k));
      PinResult expect = PinResult::kShared;
      if (model[id].contains(k)) {
        expect = PinResult::kNotWanted;
      } else if (pin_count(k) == 0) {
        expect = pinned_keys().size() >= kCap ? PinResult::kRefused : PinResult::kFirst;
      }
      ASSERT_EQ(r, expect) << "seed " << seed << " step " << step;
      if (r == PinResult::kFirst || r == PinResult::kShared) model[id].insert(k);
    }
    ASSERT_EQ(table.pinned_keys(), pinned_keys().size()) << "seed " << seed << " step " << step;
  }
}

}  // namespace
}  // namespace kvtier::internal
