// Proves that SglangPageKeys reproduces SGLang's page keys byte for byte:
// every case of ../shared/sglang/page_hash_vectors.json (made by SGLang's own
// get_hash_str, sgl-project/sglang python/sglang/srt/mem_cache/utils.py at
// commit df0dfbaa4529; skipped with one line where the kit is absent) and, so the
// test never passes without checking anything, two of those cases embedded
// below as literals (4-byte ids at the u32 edge; a prior hash that is itself
// the key of a partial page). It also proves the properties kvtier's
// namespace seed encoding promises (absent != empty, no aliasing between
// extra_key and cache_salt, no seed for the default namespace), pins that
// encoding with values computed independently in Python, and checks that
// every bad input is refused with an error naming it.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <nlohmann/json.hpp>

#include "kvtier/sglang_hash.h"
#include "support/test_json.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

using nlohmann::json;

std::vector<int64_t> Range(int64_t from, int64_t to) {
  std::vector<int64_t> out;
  for (int64_t t = from; t < to; ++t) out.push_back(t);
  return out;
}

TEST(SglangPageHash, EmbeddedCaseMaxU32Tokens) {
  const std::vector<int64_t> tokens = {0, 1, 4294967295, 2147483648};
  ASSERT_OK_AND_ASSIGN(auto keys, SglangPageKeys(tokens, 2));
  EXPECT_EQ(keys, (std::vector<std::string>{"01acecb507abfe1a354aa8064f4af5d3f1acd019e37db3c11c97523b71c76e9d",
                                            "094ce5715a79b3731b80504b7af98c8b7992cd962993c4d554f9182cda949a6e"}));
}

TEST(SglangPageHash, EmbeddedCaseTwoPagesWithPrior) {
  // The vectors' prior is get_hash_str([7, 8, 9]): one partial page.
  const std::vector<int64_t> head = {7, 8, 9};
  ASSERT_OK_AND_ASSIGN(auto prior, SglangPageKeys(head, 16));
  ASSERT_EQ(prior, std::vector<std::string>{"bcbc01a5036673e493422616677a83718edfe475d3e938b1a879903ffb2a05a0"});
  const std::vector<int64_t> tokens = Range(1000, 1128);
  ASSERT_OK_AND_ASSIGN(auto keys, SglangPageKeys(tokens, 64, prior[0]));
  EXPECT_EQ(keys, (std::vector<std::string>{"ea51cb4bdf517f8f8ea94cc46c7b9fc45c37e2daf5e64a245dc4db11284e459d",
                                            "f7cb1927802e67d5adb0e0212656ad28090aa3dba9f4f112ecc7697515a75f53"}));
}

// A case's token_ids flat, with 2 ids per token when they are bigram pairs.
std::pair<std::vector<int64_t>, uint32_t> Flatten(const json& token_ids) {
  std::vector<int64_t> flat;
  uint32_t per_token = 1;
  for (const json& t : token_ids) {
    if (t.is_array()) {
      per_token = static_cast<uint32_t>(t.size());
      for (const json& id : t) flat.push_back(id.get<int64_t>());
    } else {
      flat.push_back(t.get<int64_t>());
    }
  }
  return {flat, per_token};
}

TEST(SglangPageHash, EveryCaseOfTheSharedVectors) {
  const std::filesystem::path file = testing::SourceDir() / "../shared/sglang/page_hash_vectors.json";
  if (!std::filesystem::exists(file)) GTEST_SKIP() << "no " << file.string() << " (the SGLang kit is absent)";
  const json doc = testing::ReadJsonOrDie(file);
  ASSERT_EQ(doc["format"], "sglang-page-keys/1");
  ASSERT_GE(doc["cases"].size(), 7u);
  for (const json& c : doc["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const auto [ids, per_token] = Flatten(c["token_ids"]);
    std::optional<std::string> prior;
    if (!c["prior_hash"].is_null()) prior = c["prior_hash"].get<std::string>();
    ASSERT_OK_AND_ASSIGN(auto keys, SglangPageKeys(ids, c["page_size"].get<uint32_t>(), prior, per_token));
    EXPECT_EQ(keys, c["page_keys"].get<std::vector<std::string>>());
  }
}

TEST(SglangPageHash, TrailingPartialPageIsHashed) {
  const std::vector<int64_t> tokens = Range(0, 20);
  ASSERT_OK_AND_ASSIGN(auto all, SglangPageKeys(tokens, 16));
  ASSERT_EQ(all.size(), 2u);
  ASSERT_OK_AND_ASSIGN(auto rest, SglangPageKeys(std::span(tokens).subspan(16), 16, all[0]));
  EXPECT_EQ(rest, std::vector<std::string>{all[1]});
}

TEST(SglangPageHash, SeedIsAbsentForTheDefaultNamespace) {
  ASSERT_OK_AND_ASSIGN(auto seed, SglangNamespaceSeed(std::nullopt, std::nullopt));
  EXPECT_FALSE(seed.has_value());
}

TEST(SglangPageHash, SeedEncodingIsPinned) {
  // Computed with Python's hashlib from the encoding in sglang_hash.h.
  ASSERT_OK_AND_ASSIGN(auto lora, SglangNamespaceSeed("lora-7", std::nullopt));
  EXPECT_EQ(lora, "3dc7bfddf14f09a0571315dcd2a9cad1562584ec5fad459427dc77c75ae03068");
  ASSERT_OK_AND_ASSIGN(auto salt, SglangNamespaceSeed(std::nullopt, "salt"));
  EXPECT_EQ(salt, "6e2ee9c280b66edf98c26b75ccda705fb58380f1213ded7b6894b554925536a6");
  ASSERT_OK_AND_ASSIGN(auto both, SglangNamespaceSeed("lora-7", "salt"));
  ASSERT_EQ(both, "ac2584d2a0a5e9542240ba73ed5686d803fe7730def4bb1a2be87ed79c1089b7");
  const std::vector<int64_t> tokens = {1, 2, 3, 4};
  ASSERT_OK_AND_ASSIGN(auto keys, SglangPageKeys(tokens, 4, *both));
  EXPECT_EQ(keys, std::vector<std::string>{"599c2ae26bb20fa61c7b2f66e3f80ad237a44b8b0e819d405547337e8602e69b"});
}

TEST(SglangPageHash, SeedPartsNeverAlias) {
  using Opt = std::optional<std::string_view>;
  const std::vector<std::pair<Opt, Opt>> inputs = {
      {"", std::nullopt}, {std::nullopt, ""}, {"", ""},       // absent vs empty, in either place
      {"a", "bc"},       {"ab", "c"},                         // the boundary between the parts
      {"x", std::nullopt}, {std::nullopt, "x"}, {"abc", ""},  // which part holds the text
  };
  std::set<std::string> seen;
  for (const auto& [extra_key, cache_salt] : inputs) {
    ASSERT_OK_AND_ASSIGN(auto seed, SglangNamespaceSeed(extra_key, cache_salt));
    ASSERT_TRUE(seed.has_value());
    EXPECT_EQ(seed->size(), 64u);
    EXPECT_TRUE(seen.insert(*seed).second) << "alias for (" << extra_key.value_or("<absent>") << ", "
                                           << cache_salt.value_or("<absent>") << ")";
  }
}

TEST(SglangPageHash, BadInputIsRefusedNamingIt) {
  const std::vector<int64_t> too_big = {1, 4294967296};
  const std::vector<int64_t> negative = {-1};
  const std::vector<int64_t> odd = {1, 2, 3};
  const struct {
    Result<std::vector<std::string>> result;
    std::string names;
  } cases[] = {
      {SglangPageKeys(too_big, 16), "token_ids[1]: 4294967296"},
      {SglangPageKeys(negative, 16), "token_ids[0]: -1"},
      {SglangPageKeys(odd, 0), "page_size"},
      {SglangPageKeys(odd, 2, std::nullopt, 2), "whole pairs"},
      {SglangPageKeys(odd, 2, std::nullopt, 3), "ids_per_token"},
      {SglangPageKeys(odd, 2, "abc"), "prior_hash"},
      {SglangPageKeys(odd, 2, "zz"), "prior_hash"},
  };
  for (const auto& c : cases) {
    ASSERT_FALSE(c.result.ok()) << c.names;
    EXPECT_EQ(c.result.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(c.result.status().message().find(c.names), std::string::npos) << c.result.status().ToString();
  }
  auto bad_utf8 = SglangNamespaceSeed(std::string_view("\xff"), std::nullopt);
  ASSERT_FALSE(bad_utf8.ok());
  EXPECT_NE(bad_utf8.status().message().find("extra_key"), std::string::npos);
}

}  // namespace
}  // namespace kvtier
