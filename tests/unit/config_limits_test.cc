// Proves that the config parser enforces the limits it documents:
// n_read_threads + n_write_threads is capped at
// kFsTierIoSlotsMax (8192: four io_uring entries per slot within the
// kernel's 32768, or one syscall thread per slot) at parse time, through both
// ParseOffloadConfig and ParseFsTierConfig, naming the key (a larger sum would
// spin or crash in FsTier::Open); that an unknown-key
// message offers only keys that can be valid there (never an out-of-tree
// class key, nor `type` where vLLM's factory consumes it); and that a
// root_dir that is not UTF-8 can be configured as raw bytes beside the JSON
// text, under the same root_dir rules. Method: parse small configs and check
// the status code and the message's key path and wording.
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "kvtier/config.h"
#include "kvtier/fs_tier_options.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

Result<OffloadConfig> ParseTier(std::string_view tier_keys) {
  EngineContext engine;
  engine.gpu_block_size_tokens = 16;
  return ParseOffloadConfig(std::string(R"({"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1024, )"
                                        R"("secondary_tiers": [{"type": "fs", "root_dir": "/kv", )") +
                                std::string(tier_keys) + "}]}",
                            engine);
}

// kInvalidArgument whose message starts with "config key '<key>': " and holds `rule`.
::testing::AssertionResult IsKeyError(const Status& status, std::string_view key, std::string_view rule) {
  if (status.ok()) return ::testing::AssertionFailure() << "parsed OK; expected an error for " << key;
  const std::string prefix = "config key '" + std::string(key) + "': ";
  if (status.code() != StatusCode::kInvalidArgument || status.message().rfind(prefix, 0) != 0 ||
      status.message().find(rule) == std::string::npos) {
    return ::testing::AssertionFailure() << "wanted [" << prefix << "...]" << rule << "], got " << status.ToString();
  }
  return ::testing::AssertionSuccess();
}

// ---- the I/O slot limit --------------------------------------------------------------

TEST(ConfigLimits, IoSlotLimitIsTheRingLimitOverFour) {
  EXPECT_EQ(kFsTierIoSlotsMax * 4, 32768);  // IORING_MAX_ENTRIES
}

TEST(ConfigLimits, SlotSumAtTheLimitParses) {
  ASSERT_OK_AND_ASSIGN(OffloadConfig c, ParseTier(R"("n_read_threads": 4096, "n_write_threads": 4096)"));
  EXPECT_EQ(c.secondary_tiers[0].fs.n_read_threads + c.secondary_tiers[0].fs.n_write_threads, kFsTierIoSlotsMax);
  ASSERT_OK(ParseFsTierConfig(R"({"root_dir": "/kv", "n_read_threads": 8191, "n_write_threads": 1})").status());
}

TEST(ConfigLimits, SlotSumAboveTheLimitNamesTheLargerKey) {
  EXPECT_TRUE(IsKeyError(ParseTier(R"("n_read_threads": 8192, "n_write_threads": 1)").status(),
                         "secondary_tiers[0].n_read_threads", "must be at most 8192"));
  EXPECT_TRUE(IsKeyError(ParseTier(R"("n_write_threads": 100000)").status(), "secondary_tiers[0].n_write_threads",
                         "got 16 + 100000"));
  EXPECT_TRUE(IsKeyError(ParseFsTierConfig(R"({"root_dir": "/kv", "n_write_threads": 8200})").status(),
                         "n_write_threads", "n_read_threads + n_write_threads must be at most 8192"));
}

// The documented per-key maximum (2^31-1) on both keys: the sum wraps an int.
TEST(ConfigLimits, SlotSumBeyondAnIntIsRefusedNotWrapped) {
  EXPECT_TRUE(IsKeyError(ParseTier(R"("n_read_threads": 2147483647, "n_write_threads": 2147483647)").status(),
                         "secondary_tiers[0].n_read_threads", "got 2147483647 + 2147483647"));
  EXPECT_TRUE(IsKeyError(ParseTier(R"("n_read_threads": 536870912, "n_write_threads": 536870912)").status(),
                         "secondary_tiers[0].n_read_threads", "at most 8192"));
}

// ---- unknown-key messages offer only keys that can be valid --------------------

TEST(ConfigLimits, UnknownTierKeyUnderVllmOffersNeitherTypeNorModulePath) {
  const Status s = ParseFsTierConfig(R"({"root_dir": "/kv", "io_threads": 4})").status();
  ASSERT_TRUE(IsKeyError(s, "io_threads", "valid keys are: "));
  EXPECT_NE(s.message().find("n_read_threads"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("type"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("module_path"), std::string::npos) << s.message();
}

TEST(ConfigLimits, UnknownKeysNeverOfferAnOutOfTreeClassKey) {
  const Status tier = ParseTier(R"("io_threads": 4)").status();
  ASSERT_TRUE(IsKeyError(tier, "secondary_tiers[0].io_threads", "valid keys are: "));
  EXPECT_NE(tier.message().find(" type"), std::string::npos) << tier.message();  // required in the full config
  EXPECT_EQ(tier.message().find("module_path"), std::string::npos) << tier.message();
  EngineContext engine;
  const Status top = ParseOffloadConfig(R"({"cpu_bytes_to_use": 1, "cpu_bytes": 2})", engine).status();
  ASSERT_TRUE(IsKeyError(top, "cpu_bytes", "valid keys are: "));
  EXPECT_EQ(top.message().find("module_path"), std::string::npos) << top.message();
}

// ---- a root_dir that is not UTF-8 -------------------------------------------------

TEST(ConfigLimits, RawRootDirBytesNeedNotBeUtf8) {
  const std::string raw = "/tmp/kv-\xff\xfe";
  ASSERT_OK_AND_ASSIGN(FsTierOptions t, ParseFsTierConfig(R"({"n_read_threads": 4})", raw));
  EXPECT_EQ(t.root_dir, raw);
  EXPECT_EQ(t.n_read_threads, 4);
  // Text cannot carry it: invalid UTF-8 is a syntax error there.
  EXPECT_FALSE(ParseFsTierConfig("{\"root_dir\": \"" + raw + "\"}").ok());
}

TEST(ConfigLimits, RawRootDirKeepsTheRootDirRules) {
  EXPECT_TRUE(IsKeyError(ParseFsTierConfig("{}", std::string("/a\0b", 4)).status(), "root_dir", "NUL"));
  EXPECT_TRUE(IsKeyError(ParseFsTierConfig("{}", "").status(), "root_dir", "non-empty"));
  EXPECT_TRUE(IsKeyError(ParseFsTierConfig("{}", "/a\xff,/b").status(), "root_dir", "path_sharding"));
  ASSERT_OK(ParseFsTierConfig(R"({"path_sharding": "by_block_hash"})", "/a\xff,/b").status());
  EXPECT_TRUE(IsKeyError(ParseFsTierConfig(R"({"root_dir": "/x"})", "/y").status(), "root_dir", "beside the text"));
}

}  // namespace
}  // namespace kvtier
