// Proves the multi-root rules of FORMAT.md L99-L100 (vLLM PR #53133) against
// Python's own answers: a block's root is int.from_bytes(hash, "big") % n on
// golden keys, root lists split and strip as vLLM's str.split/str.strip, two
// roots equal after posixpath.normpath are refused, and the config parser
// refuses a list without path_sharding (and accepts, strips and
// cross-checks one with it). The expected values were computed by
// /usr/bin/python3 (3.11), not by this code:
//   [int.from_bytes(bytes.fromhex(h), "big") % n for n in (1, 2, 3, 4, 5, 7, 10)]
// with h = sha256(f"kvtier-roots-{i}").hex() (i = 0..3), the first 16 bytes
// of sha256(f"kvtier-roots-x{i}") (xxhash-sized, i = 0, 1), all-zero,
// all-0xff and vLLM's unit-test hash 0001020304050607; posixpath.normpath
// for the paths below.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "format/root_list.h"
#include "kvtier/config.h"
#include "kvtier/hashing.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

struct Golden {
  const char* hex;
  size_t root[7];  // for n = 1, 2, 3, 4, 5, 7, 10
};
constexpr size_t kCounts[7] = {1, 2, 3, 4, 5, 7, 10};
constexpr Golden kGolden[] = {
    {"188de2eb9c684f0bfdc6f2274060852ace70722822778e223883808409ae6b64", {0, 0, 0, 0, 1, 0, 6}},
    {"02c7f73bcfca275a15f2695172840ea0aa7e8f55c2892712c88acb7219667944", {0, 0, 2, 0, 2, 3, 2}},
    {"d4d55840e832a24fa76a9dbbf252fd8b518ed5dc24170ccbcbb7ebbf2ae346a8", {0, 0, 2, 0, 2, 1, 2}},
    {"47d101802a20f269707e9ff619dd300595cd9d980c502843803fccd10f5ea9bd", {0, 1, 0, 1, 0, 3, 5}},
    {"71f167af3fc1feb4aae977aaa7cc20d7", {0, 1, 1, 3, 2, 4, 7}},
    {"d99c22789b68f44d7e68b8d9fbba612d", {0, 1, 1, 1, 2, 0, 7}},
    {"0000000000000000000000000000000000000000000000000000000000000000", {0, 0, 0, 0, 0, 0, 0}},
    {"ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff", {0, 1, 0, 3, 0, 1, 5}},
    {"0001020304050607", {0, 1, 1, 3, 3, 6, 3}},
};

TEST(RootListTest, PlacementMatchesPythonOnGoldenKeys) {
  for (const Golden& g : kGolden) {
    const BlockHash hash = BlockHash::FromHex(g.hex).value();
    for (size_t c = 0; c < 7; ++c) {
      EXPECT_EQ(format::RootIndexOf(hash.bytes(), kCounts[c]), g.root[c]) << g.hex << " mod " << kCounts[c];
    }
  }
}

TEST(RootListTest, OneRootWithoutShardingIsVerbatimAndRefusesAComma) {
  EXPECT_EQ(format::SplitRootDirs(" /mnt/kv/ ", false).value(), std::vector<std::string>{" /mnt/kv/ "});
  const auto comma = format::SplitRootDirs("/mnt/a,/mnt/b", false);
  ASSERT_FALSE(comma.ok());
  EXPECT_EQ(comma.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(comma.status().message().find("path_sharding"), std::string::npos) << comma.status().message();
}

TEST(RootListTest, ListIsSplitAndStrippedAsPython) {
  EXPECT_EQ(format::SplitRootDirs(" /a , /b\t,\n/c ", true).value(), (std::vector<std::string>{"/a", "/b", "/c"}));
  // str.strip() also removes U+00A0, U+3000 and \x1f; a single root is stripped too.
  EXPECT_EQ(format::SplitRootDirs("\u00a0 /mnt/a\x1f\u3000", true).value(), std::vector<std::string>{"/mnt/a"});
  // Bytes that are not UTF-8 (never in a Python str) are kept; an overlong space is not a space.
  EXPECT_EQ(format::SplitRootDirs("/a\xc0\xa0", true).value(), std::vector<std::string>{"/a\xc0\xa0"});
}

TEST(RootListTest, EmptyOrDuplicateRootsAreRefused) {
  for (const char* bad : {"/a,,/b", "/a,/b,", " , /a", "/mnt/a,/mnt/a/", "/mnt/a,/mnt/./a", "/x/../a,/a"}) {
    const auto r = format::SplitRootDirs(bad, true);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  // posixpath.normpath keeps exactly two leading slashes: "//a" and "/a" are distinct to vLLM.
  EXPECT_TRUE(format::SplitRootDirs("//a,/a", true).ok());
}

TEST(RootListTest, NormPathIsPosixpathNormpath) {
  const std::pair<const char*, const char*> cases[] = {
      {"/a/b/", "/a/b"}, {"//a//b", "//a/b"}, {"///a/./b/..", "/a"}, {"a/../../b", "../b"}, {"", "."},
      {".", "."},        {"/..", "/"},        {"a/./b/", "a/b"},      {"../a/..", ".."},    {"/mnt/a/../b", "/mnt/b"},
      {"//", "//"},
  };
  for (const auto& [in, want] : cases) EXPECT_EQ(format::PyNormPath(in), want) << "'" << in << "'";
}

TEST(RootListTest, MarkerRoundTripsAndRejectsNonsense) {
  const format::RootSlot slot{2, 3};
  EXPECT_EQ(format::ParseRootMarker(format::RootMarkerBody(slot)), slot);
  for (const char* bad : {"", "{}", "[1]", "{\"root_index\": 3, \"root_count\": 3}", "{\"root_index\": -1, \"root_count\": 3}",
                          "{\"root_index\": 0, \"root_count\": 0}", "{\"root_index\": 0.0, \"root_count\": 2}", "not json"}) {
    EXPECT_FALSE(format::ParseRootMarker(bad).has_value()) << bad;
  }
  EXPECT_TRUE(format::IsRootMarkerTmpName(format::RootMarkerTmpName(12)));
  EXPECT_FALSE(format::IsRootMarkerTmpName("root_slot.json_012.tmp"));
}

TEST(RootListConfigTest, ListWithoutPathShardingIsAnError) {
  const auto r = ParseFsTierConfig(R"({"root_dir": "/mnt/a,/mnt/b"})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("root_dir"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("path_sharding"), std::string::npos) << r.status().message();
}

TEST(RootListConfigTest, PathShardingIsParsedAndPrinted) {
  const auto r = ParseFsTierConfig(R"({"root_dir": " /mnt/a , /mnt/b ", "path_sharding": "by_block_hash"})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->path_sharding, PathSharding::kByBlockHash);
  EXPECT_EQ(r->root_dir, " /mnt/a , /mnt/b ");  // kept raw, as vLLM keeps it; split at open
  EXPECT_EQ(ParseFsTierConfig(R"({"root_dir": "/a", "path_sharding": null})")->path_sharding, PathSharding::kNone);
  EXPECT_FALSE(ParseFsTierConfig(R"({"root_dir": "/a", "path_sharding": "by_hash"})").ok());
}

TEST(RootListConfigTest, DuplicateRootsAfterNormpathAreAnError) {
  const auto r = ParseFsTierConfig(R"({"root_dir": "/mnt/a,/mnt/b/../a", "path_sharding": "by_block_hash"})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("distinct"), std::string::npos) << r.status().message();
  EXPECT_FALSE(ParseFsTierConfig(R"({"root_dir": "/mnt/a,,/mnt/b", "path_sharding": "by_block_hash"})").ok());
}

TEST(RootListConfigTest, TiersMayNotShareOneRootOfAList) {
  const auto r = ParseOffloadConfig(R"({"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1048576,
      "secondary_tiers": [{"type": "fs", "root_dir": "/mnt/a,/mnt/b", "path_sharding": "by_block_hash"},
                          {"type": "fs", "root_dir": "/mnt/b/"}]})",
                                    EngineContext{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("secondary_tiers[1].root_dir"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace kvtier
