// Proves the `kvtier hash --input` contract of tests/data/compat/README.md: every
// case of vllm_cases.json (computed by vLLM's own code) is fed to the real
// CLI binary, and its output must equal the case's "expected" member by
// member. The same cases also go through the library entry point, so a
// failure says whether the CLI or the library is at fault.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/hash_command.h"
#include "support/test_json.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

using nlohmann::json;

const json& Cases() {
  static const json doc = testing::ReadJsonOrDie(testing::CompatDir() / "vllm_cases.json");
  return doc;
}

void ExpectMembersEqual(const json& expected, const json& actual) {
  ASSERT_TRUE(actual.is_object()) << actual.dump();
  for (auto it = expected.begin(); it != expected.end(); ++it) {
    ASSERT_TRUE(actual.contains(it.key())) << "missing member " << it.key();
    EXPECT_EQ(actual[it.key()], it.value()) << "member " << it.key();
  }
  EXPECT_EQ(actual.size(), expected.size()) << "extra members in " << actual.dump();
}

class CompatCase : public ::testing::TestWithParam<size_t> {};

TEST_P(CompatCase, CliOutputEqualsExpected) {
  const json& c = Cases()["cases"][GetParam()];
  testing::TempDir dir;
  const auto path = dir.path() / "case.json";
  testing::WriteFileOrDie(path, c.dump());
  testing::CommandResult r = testing::RunCommand({testing::CliPath(), "hash", "--input", path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json out = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(out.is_discarded()) << r.out;
  ExpectMembersEqual(c["expected"], out);
}

TEST_P(CompatCase, LibraryOutputEqualsExpected) {
  const json& c = Cases()["cases"][GetParam()];
  ASSERT_OK_AND_ASSIGN(auto query, internal::HashQueryFromCase(c.dump()));
  ASSERT_OK_AND_ASSIGN(json report, internal::RunHashQuery(query));
  ExpectMembersEqual(c["expected"], internal::CaseOutput(report));
}

INSTANTIATE_TEST_SUITE_P(Vllm, CompatCase, ::testing::Range<size_t>(0, Cases()["cases"].size()),
                         [](const ::testing::TestParamInfo<size_t>& param) {
                           return Cases()["cases"][param.param]["name"].get<std::string>();
                         });

TEST(CompatCases, FileHasTheDocumentedFormat) {
  EXPECT_EQ(Cases()["format"], "kvtier-compat-cases/1");
  EXPECT_GE(Cases()["cases"].size(), 44u);
}

TEST(CompatCases, StdinInputAndExpectedIsIgnored) {
  json c = Cases()["cases"][0];
  const json expected = c["expected"];
  c["expected"] = {{"none_hash_hex", "not-used"}};  // the CLI must not read it
  testing::CommandResult r = testing::RunCommand({testing::CliPath(), "hash", "--input", "-"}, c.dump());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectMembersEqual(expected, json::parse(r.out));
}

TEST(CompatCases, BigTokenIdsBeyond64BitsHashLikePythonInts) {
  // 2**64 and -(2**64)-1 are legal Python ints; vLLM hashes them, so must we:
  // the case must run, and differ from a case with those tokens clamped.
  json c = Cases()["cases"][0];
  auto with_tokens = [&](const std::string& tokens) {
    json copy = c;
    copy.erase("token_ids");
    std::string t = copy.dump();
    t.insert(1, "\"token_ids\":" + tokens + ",");
    return internal::HashQueryFromCase(t);
  };
  std::string big = "[18446744073709551616,-18446744073709551617";
  for (int i = 0; i < 14; ++i) big += ",1";
  big += "]";
  ASSERT_OK_AND_ASSIGN(auto q_big, with_tokens(big));
  ASSERT_OK_AND_ASSIGN(auto r_big, internal::RunHashQuery(q_big));
  ASSERT_EQ(r_big["block_hashes_hex"].size(), 1u);
  ASSERT_OK_AND_ASSIGN(auto q_small, with_tokens("[9223372036854775807,-9223372036854775808,1,1,1,1,1,1,1,1,1,1,1,1,1,1]"));
  ASSERT_OK_AND_ASSIGN(auto r_small, internal::RunHashQuery(q_small));
  EXPECT_NE(r_big["block_hashes_hex"], r_small["block_hashes_hex"]);
}

}  // namespace
}  // namespace kvtier
