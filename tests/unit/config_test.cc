// Proves that ParseOffloadConfig() turns vLLM's kv_connector_extra_config
// JSON into the documented typed options, and rejects every broken rule with
// kInvalidArgument naming the key path. Method: two full valid configs (one
// per spec) are checked field by field; each rule of docs/config.md gets a
// minimal config that breaks only that rule, and the test asserts the code,
// the key at the start of the message and the rule's wording; hostile text
// (malformed, empty, non-object, deeply nested, huge numbers) must fail
// cleanly; and OffloadConfigToJson() output must parse back to an equal
// config. The file loader is tested against real files in a TempDir.
// ParseFsTierConfig() (one tier's keys, as an out-of-tree vLLM tier gets
// them) is checked the same way: defaults, every key set off its default,
// the keys vLLM consumes and unknown keys rejected by name.
// KvtierDefaultNotes() names the values that are kvtier's defaults where
// vLLM's differ (checksum_blocks).
#include "kvtier/config.h"

#include <gtest/gtest.h>
#include <cerrno>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvtier {
namespace {

using ::testing::AssertionFailure;
using ::testing::AssertionResult;
using ::testing::AssertionSuccess;

Result<OffloadConfig> Parse(std::string_view text, uint32_t gpu_block_size_tokens = 16) {
  EngineContext engine;
  engine.gpu_block_size_tokens = gpu_block_size_tokens;
  return ParseOffloadConfig(text, engine);
}

// The result is kInvalidArgument, its message starts with
// "config key '<key>': " and contains `rule`.
AssertionResult IsKeyError(const Result<OffloadConfig>& result, std::string_view key,
                           std::string_view rule) {
  if (result.ok()) return AssertionFailure() << "parsed OK; expected an error for '" << key << "'";
  const Status status = result.status();
  if (status.code() != StatusCode::kInvalidArgument) {
    return AssertionFailure() << "code is not invalid_argument: " << status.ToString();
  }
  const std::string prefix = "config key '" + std::string(key) + "': ";
  if (status.message().rfind(prefix, 0) != 0) {
    return AssertionFailure() << "message does not start with [" << prefix << "]: " << status.message();
  }
  if (status.message().find(rule) == std::string::npos) {
    return AssertionFailure() << "message lacks [" << rule << "]: " << status.message();
  }
  return AssertionSuccess();
}

// An error that is not about one key (syntax, top level): code and wording.
AssertionResult IsTextError(const Result<OffloadConfig>& result, std::string_view wording) {
  if (result.ok()) return AssertionFailure() << "parsed OK; expected [" << wording << "]";
  const Status status = result.status();
  if (status.code() != StatusCode::kInvalidArgument) {
    return AssertionFailure() << "code is not invalid_argument: " << status.ToString();
  }
  if (status.message().find(wording) == std::string::npos) {
    return AssertionFailure() << "message lacks [" << wording << "]: " << status.message();
  }
  return AssertionSuccess();
}

// A tiering config whose only tier is `tier` (a JSON object's text).
std::string TieringWith(std::string_view tier, std::string_view extra_top_level = "") {
  return std::string(R"({"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1024, )") +
         std::string(extra_top_level) + R"("secondary_tiers": [)" + std::string(tier) + "]}";
}

// ---- Valid configs ------------------------------------------------------------

TEST(ConfigTest, MinimalConfigTakesEveryDefault) {
  ASSERT_OK_AND_ASSIGN(OffloadConfig c, Parse(R"({"cpu_bytes_to_use": 1})"));
  EXPECT_EQ(c.spec_name, SpecName::kCpuOffloading);
  EXPECT_EQ(c.cpu_bytes_to_use, 1u);
  EXPECT_EQ(c.blocks_per_chunk, 1u);
  EXPECT_FALSE(c.block_size_tokens.has_value());
  EXPECT_EQ(c.eviction_policy, EvictionPolicy::kLru);
  EXPECT_EQ(c.store_threshold, 0u);
  EXPECT_EQ(c.max_tracker_size, 64000u);
  EXPECT_TRUE(c.offload_prompt_only);
  EXPECT_FALSE(c.self_describing_kv_events);
  EXPECT_FALSE(c.canonical_layout);
  EXPECT_EQ(c.gpu_copy, GpuCopy::kAuto);
  EXPECT_TRUE(c.secondary_tiers.empty());
}

TEST(ConfigTest, CpuOffloadingSpecEveryField) {
  ASSERT_OK_AND_ASSIGN(OffloadConfig c, Parse(R"({
      "spec_name": "CPUOffloadingSpec",
      "cpu_bytes_to_use": 8589934592,
      "blocks_per_chunk": 4,
      "eviction_policy": "arc",
      "store_threshold": 2,
      "max_tracker_size": 1000,
      "offload_prompt_only": false,
      "self_describing_kv_events": true,
      "canonical_layout": true,
      "gpu_copy": "kernel",
      "secondary_tiers": []
  })"));
  EXPECT_EQ(c.gpu_copy, GpuCopy::kKernel);
  EXPECT_EQ(c.spec_name, SpecName::kCpuOffloading);
  EXPECT_EQ(c.cpu_bytes_to_use, 8589934592u);
  EXPECT_EQ(c.blocks_per_chunk, 4u);
  EXPECT_FALSE(c.block_size_tokens.has_value());
  EXPECT_EQ(c.eviction_policy, EvictionPolicy::kArc);
  EXPECT_EQ(c.store_threshold, 2u);
  EXPECT_EQ(c.max_tracker_size, 1000u);
  EXPECT_FALSE(c.offload_prompt_only);
  EXPECT_TRUE(c.self_describing_kv_events);
  EXPECT_TRUE(c.canonical_layout);
  EXPECT_TRUE(c.secondary_tiers.empty());
}

constexpr std::string_view kTwoTierConfig = R"({
    "spec_name": "TieringOffloadingSpec",
    "cpu_bytes_to_use": 34359738368,
    "block_size": 64,
    "eviction_policy": "lru",
    "store_threshold": 1,
    "offload_prompt_only": true,
    "backpressure": {"backpressure_cls": "EMABackpressureDetector"},
    "secondary_tiers": [
      {"type": "fs", "root_dir": "/mnt/nvme/kv", "n_read_threads": 8, "n_write_threads": 2,
       "enable_kv_events": true, "locality": "LOCAL",
       "backpressure": {"backpressure_cls": "EMABackpressureDetector", "policy_cls": "DropStorePolicy",
                        "high_water_s": 0.01, "low_water_s": 0.002, "alpha": 0.5, "warmup": 10}},
      {"type": "fs", "root_dir": "/mnt/nfs/kv", "locality": "REMOTE"}
    ]
})";

TEST(ConfigTest, TieringOffloadingSpecWithTwoFsTiersEveryField) {
  ASSERT_OK_AND_ASSIGN(OffloadConfig c, Parse(kTwoTierConfig));
  EXPECT_EQ(c.spec_name, SpecName::kTieringOffloading);
  EXPECT_EQ(c.cpu_bytes_to_use, 34359738368u);
  ASSERT_TRUE(c.block_size_tokens.has_value());
  EXPECT_EQ(*c.block_size_tokens, 64u);
  EXPECT_EQ(c.blocks_per_chunk, 4u);  // 64 tokens / 16-token GPU blocks
  EXPECT_EQ(c.eviction_policy, EvictionPolicy::kLru);
  EXPECT_EQ(c.store_threshold, 1u);
  EXPECT_TRUE(c.offload_prompt_only);
  ASSERT_EQ(c.secondary_tiers.size(), 2u);

  const SecondaryTierOptions& local = c.secondary_tiers[0];
  EXPECT_EQ(local.type, TierType::kFs);
  EXPECT_EQ(local.fs.root_dir, "/mnt/nvme/kv");
  EXPECT_EQ(local.fs.n_read_threads, 8);
  EXPECT_EQ(local.fs.n_write_threads, 2);
  EXPECT_TRUE(local.fs.enable_kv_events);
  EXPECT_EQ(local.fs.locality, Locality::kLocal);
  ASSERT_TRUE(local.fs.backpressure.has_value());
  EXPECT_EQ(local.fs.backpressure->detector, BackpressureDetector::kEma);
  EXPECT_EQ(local.fs.backpressure->policy, BackpressurePolicy::kDropStore);
  EXPECT_EQ(local.fs.backpressure->high_water_s_per_mib, 0.01);
  EXPECT_EQ(local.fs.backpressure->low_water_s_per_mib, 0.002);
  EXPECT_EQ(local.fs.backpressure->ema_alpha, 0.5);
  EXPECT_EQ(local.fs.backpressure->warmup_completions, 10u);

  // The second tier inherits the top-level default with REMOTE water marks.
  const SecondaryTierOptions& remote = c.secondary_tiers[1];
  EXPECT_EQ(remote.type, TierType::kFs);
  EXPECT_EQ(remote.fs.root_dir, "/mnt/nfs/kv");
  EXPECT_EQ(remote.fs.n_read_threads, 16);
  EXPECT_EQ(remote.fs.n_write_threads, 16);
  EXPECT_FALSE(remote.fs.enable_kv_events);
  EXPECT_EQ(remote.fs.locality, Locality::kRemote);
  ASSERT_TRUE(remote.fs.backpressure.has_value());
  EXPECT_EQ(remote.fs.backpressure->high_water_s_per_mib, 0.020);
  EXPECT_EQ(remote.fs.backpressure->low_water_s_per_mib, 0.005);
  EXPECT_EQ(remote.fs.backpressure->ema_alpha, 0.3);
  EXPECT_EQ(remote.fs.backpressure->warmup_completions, 3u);
}

TEST(ConfigTest, TierWithoutAnyBackpressureHasNone) {
  ASSERT_OK_AND_ASSIGN(OffloadConfig c, Parse(TieringWith(R"({"type": "fs", "root_dir": "/kv"})")));
  ASSERT_EQ(c.secondary_tiers.size(), 1u);
  EXPECT_FALSE(c.secondary_tiers[0].fs.backpressure.has_value());
  EXPECT_EQ(c.secondary_tiers[0].fs.locality, Locality::kUnspecified);
}

TEST(ConfigTest, BackpressureDefaultsDependOnLocality) {
  const char* kOwn = R"("backpressure": {"backpressure_cls": "EMABackpressureDetector"})";
  for (const auto& [locality, high, low] :
       {std::tuple{"", 0.005, 0.001}, std::tuple{R"(, "locality": "LOCAL")", 0.005, 0.001},
        std::tuple{R"(, "locality": "REMOTE")", 0.020, 0.005}}) {
    SCOPED_TRACE(locality);
    ASSERT_OK_AND_ASSIGN(OffloadConfig c,
                         Parse(TieringWith(std::string(R"({"type": "fs", "root_dir": "/kv", )") +
                                           kOwn + locality + "}")));
    ASSERT_TRUE(c.secondary_tiers[0].fs.backpressure.has_value());
    EXPECT_EQ(c.secondary_tiers[0].fs.backpressure->high_water_s_per_mib, high);
    EXPECT_EQ(c.secondary_tiers[0].fs.backpressure->low_water_s_per_mib, low);
  }
}

TEST(ConfigTest, NullLocalityIsUnspecified) {
  ASSERT_OK_AND_ASSIGN(OffloadConfig c,
                       Parse(TieringWith(R"({"type": "fs", "root_dir": "/kv", "locality": null})")));
  EXPECT_EQ(c.secondary_tiers[0].fs.locality, Locality::kUnspecified);
}

TEST(ConfigTest, BlockSizeIsDividedByTheEngineGpuBlockSize) {
  ASSERT_OK_AND_ASSIGN(OffloadConfig c, Parse(R"({"cpu_bytes_to_use": 1, "block_size": 96})", 32));
  EXPECT_EQ(c.blocks_per_chunk, 3u);
  EXPECT_EQ(c.block_size_tokens, std::optional<uint32_t>(96));
}

TEST(ConfigTest, LargestUint64IsAcceptedForCpuBytes) {
  ASSERT_OK_AND_ASSIGN(OffloadConfig c, Parse(R"({"cpu_bytes_to_use": 18446744073709551615})"));
  EXPECT_EQ(c.cpu_bytes_to_use, UINT64_MAX);
}

// ---- Required keys and types ------------------------------------------------------

TEST(ConfigTest, MissingRequiredKeys) {
  EXPECT_TRUE(IsKeyError(Parse(R"({"spec_name": "CPUOffloadingSpec"})"), "cpu_bytes_to_use",
                         "missing required key"));
  EXPECT_TRUE(IsKeyError(Parse(TieringWith(R"({"type": "fs"})")), "secondary_tiers[0].root_dir",
                         "missing required key"));
  EXPECT_TRUE(IsKeyError(Parse(TieringWith(R"({"root_dir": "/kv"})")), "secondary_tiers[0].type",
                         "missing required key"));
}

TEST(ConfigTest, StringWhereIntegerExpected) {
  EXPECT_TRUE(IsKeyError(Parse(TieringWith(R"({"type": "fs", "root_dir": "/kv", "n_read_threads": "16"})")),
                         "secondary_tiers[0].n_read_threads",
                         R"(expected a positive integer, got "16" (a string))"));
}

TEST(ConfigTest, BooleanIsNotAnInteger) {
  EXPECT_TRUE(IsKeyError(Parse(R"({"cpu_bytes_to_use": true})"), "cpu_bytes_to_use",
                         "expected a positive integer, got true (a boolean)"));
}

TEST(ConfigTest, IntegerIsNotABoolean) {
  EXPECT_TRUE(IsKeyError(Parse(R"({"cpu_bytes_to_use": 1, "canonical_layout": 1})"),
                         "canonical_layout", "expected true or false, got 1 (an integer)"));
  EXPECT_TRUE(IsKeyError(Parse(R"({"cpu_bytes_to_use": 1, "offload_prompt_only": "true"})"),
                         "offload_prompt_only", "expected true or false"));
}

TEST(ConfigTest, IntegerWrittenAsFloatIsRejected) {
  EXPECT_TRUE(IsKeyError(Parse(TieringWith(R"({"type": "fs", "root_dir": "/kv", "n_write_threads": 16.0})")),
                         "secondary_tiers[0].n_write_threads",
                         "got 16.0 (a float; write integers without a fraction or exponent)"));
  EXPECT_TRUE(IsKeyError(Parse(R"({"cpu_bytes_to_use": 1e9})"), "cpu_bytes_to_use", "a float"));
  EXPECT_TRUE(IsKeyError(Parse(R"({"cpu_bytes_to_use": 1.5})"), "cpu_bytes_to_use", "1.5 (a float)"));
}

TEST(ConfigTest, NegativeWhereUnsigned) {
  EXPECT_TRUE(IsKeyError(Parse(R"({"cpu_bytes_to_use": 1, "store_threshold": -1})"), "store_threshold",
                         "expected a non-negative integer, got -1 (negative)"));
  EXPECT_TRUE(IsKeyError(Parse(R"({"cpu_bytes_to_use": -4096})"), "cpu_bytes_to_use", "negative"));
}

TEST(ConfigTest, ZeroWherePositive) {
  EXPECT_TRUE(IsKeyError(Parse(R"({"cpu_bytes_to_use": 0})"), "cpu_bytes_to_use",
                         "expected a positive integer, got 0"));
  EXPECT_TRUE(IsKeyError(Parse(TieringWith(R"({"type": "fs", "root_dir": "/kv", "n_read_threads": 0})")),
                         "secondary_tiers[0].n_read_threads", "positive"));
}

TEST(ConfigTest, HugeIntegersAreOutOfRange) {
  // Beyond uint64: nlohmann reads it as a float; the message still says why.
  EXPECT_TRUE(IsKeyError(Parse(R"({"cpu_bytes_to_use": 18446744073709551616})"), "cpu_bytes_to_use",
                         "out of range"));
  EXPECT_TRUE(IsKeyError(Parse(R"({"cpu_bytes_to_use": 123456789012345678901234567890})"),
                         "cpu_bytes_to_use", "out of range"));
  EXPECT_TRUE(IsKeyError(Parse(R"({"cpu_bytes_to_use": 1, "max_tracker_size": 4294967296})"),
                         "max_tracker_size", "at most 4294967295, got 4294967296 (out of range)"));
  EXPECT_TRUE(IsKeyError(Parse(TieringWith(R"({"type": "fs", "root_dir": "/kv", "n_read_threads": 2147483648})")),
                         "secondary_tiers[0].n_read_threads", "at most 2147483647"));
  // Beyond a double: nlohmann's parser refuses it, with the position.
  EXPECT_TRUE(IsTextError(Parse(R"({"cpu_bytes_to_use": 1e400})"),
                          "invalid JSON at byte 26: number overflow"));
}

TEST(ConfigTest, WrongContainerTypes) {
  EXPECT_TRUE(IsKeyError(Parse(R"({"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1, "secondary_tiers": {}})"),
                         "secondary_tiers", "expected an array of tier objects, got an object"));
  EXPECT_TRUE(IsKeyError(Parse(TieringWith(R"("fs")")), "secondary_tiers[0]",
                         R"(expected a tier object, got "fs" (a string))"));
  EXPECT_TRUE(IsKeyError(Parse(TieringWith(R"({"type": "fs", "root_dir": 7})")),
                         "secondary_tiers[0].root_dir", "expected a string, got 7 (an integer)"));
  EXPECT_TRUE(IsKeyError(Parse(TieringWith(R"({"type": "fs", "root_dir": ""})")),
                         "secondary_tiers[0].root_dir", "non-empty"));
}

// ---- Unknown and unsupported keys ---------------------------------------------------

TEST(ConfigTest, UnknownTopLevelKeyListsTheValidKeys) {
  const auto result = Parse(R"({"cpu_bytes_to_use": 1, "cpu_bytes": 2})");
  ASSERT_TRUE(IsKeyError(result, "cpu_bytes",
                         "unknown key at the top level; valid keys are: backpressure, block_size, "));
  for (const char* key : {"spec_name", "cpu_bytes_to_use", "block_size", "blocks_per_chunk",
                          "eviction_policy", "store_threshold", "max_tracker_size",
                          "offload_prompt_only", "secondary_tiers", "self_describing_kv_events",
                          "canonical_layout", "backpressure", "gpu_copy"}) {
    EXPECT_NE(result.status().message().find(std::string(" ") + key), std::string::npos) << key;
  }
  // Always errors (out-of-tree classes), so never offered as valid.
  EXPECT_EQ(result.status().message().find("module_path"), std::string::npos);
}

TEST(ConfigTest, UnknownTierKeyListsTheFsKeys) {
  const auto result = Parse(TieringWith(R"({"type": "fs", "root_dir": "/kv", "io_threads": 4})"));
  ASSERT_TRUE(IsKeyError(result, "secondary_tiers[0].io_threads", "unknown key in an fs tier"));
  for (const char* key : {"type", "root_dir", "n_read_threads", "n_write_threads",
                          "enable_kv_events", "locality", "backpressure"}) {
    EXPECT_NE(result.status().message().find(key), std::string::npos) << key;
  }
  EXPECT_EQ(result.status().message().find("module_path"), std::string::npos);
  EXPECT_EQ(result.status().message().find("cpu_bytes_to_use"), std::string::npos);
}

TEST(ConfigTest, OutOfTreePythonClassesAreNotSupported) {
  EXPECT_TRUE(IsKeyError(Parse(R"({"cpu_bytes_to_use": 1, "spec_name": "MySpec", "spec_module_path": "my.mod"})"),
                         "spec_module_path", "not supported by kvtier"));
  EXPECT_TRUE(IsKeyError(Parse(R"({"cpu_bytes_to_use": 1, "eviction_policy": "Mine", "cache_policy_module_path": "m"})"),
                         "cache_policy_module_path", "not supported by kvtier"));
  EXPECT_TRUE(IsKeyError(Parse(TieringWith(R"({"type": "MyTier", "module_path": "my.tier"})")),
                         "secondary_tiers[0].module_path", "not supported by kvtier"));
}

TEST(ConfigTest, NonFsTierTypesAreNotSupported) {
  for (const char* type : {"obj", "p2p", "example"}) {
    EXPECT_TRUE(IsKeyError(Parse(TieringWith(std::string(R"({"type": ")") + type + R"(", "bucket": "b"})")),
                           "secondary_tiers[0].type", "is not supported by kvtier; only \"fs\" is"))
        << type;
  }
  EXPECT_TRUE(IsKeyError(Parse(TieringWith(R"({"type": "nfs", "root_dir": "/kv"})")),
                         "secondary_tiers[0].type", R"(expected "fs")"));
  EXPECT_TRUE(IsKeyError(Parse(TieringWith(R"({"type": 1, "root_dir": "/kv"})")),
                         "secondary_tiers[0].type", "got 1 (an integer)"));
}

// ---- Value rules -------------------------------------------------------------------

TEST(ConfigTest, EnumValuesMustBeKnown) {
  EXPECT_TRUE(IsKeyError(Parse(R"({"cpu_bytes_to_use": 1, "spec_name": "DiskSpec"})"), "spec_name",
                         R"(expected one of "CPUOffloadingSpec", "TieringOffloadingSpec", got "DiskSpec")"));
  EXPECT_TRUE(IsKeyError(Parse(R"({"cpu_bytes_to_use": 1, "gpu_copy": "memcpy"})"), "gpu_copy",
                         R"(expected one of "auto", "dma", "kernel", "staged", got "memcpy")"));
  EXPECT_TRUE(IsKeyError(Parse(R"({"cpu_bytes_to_use": 1, "eviction_policy": "fifo"})"),
                         "eviction_policy", R"(expected one of "lru", "arc", got "fifo")"));
  EXPECT_TRUE(IsKeyError(Parse(R"({"cpu_bytes_to_use": 1, "eviction_policy": "LRU"})"),
                         "eviction_policy", "expected one of"));
  EXPECT_TRUE(IsKeyError(Parse(TieringWith(R"({"type": "fs", "root_dir": "/kv", "locality": "local"})")),
                         "secondary_tiers[0].locality", R"(expected one of "LOCAL", "REMOTE")"));
}

TEST(ConfigTest, BlockSizeMustBeAPositiveMultipleOfTheGpuBlockSize) {
  EXPECT_TRUE(IsKeyError(Parse(R"({"cpu_bytes_to_use": 1, "block_size": 40})"), "block_size",
                         "multiple of the GPU block size (16 tokens), got 40"));
  EXPECT_TRUE(IsKeyError(Parse(R"({"cpu_bytes_to_use": 1, "block_size": 48})", 32), "block_size",
                         "(32 tokens)"));
  EXPECT_TRUE(IsKeyError(Parse(R"({"cpu_bytes_to_use": 1, "block_size": 0})"), "block_size", "positive"));
  EXPECT_TRUE(IsKeyError(Parse(R"({"cpu_bytes_to_use": 1, "block_size": 8})"), "block_size", "got 8"));
}

TEST(ConfigTest, BlockSizeAndBlocksPerChunkExcludeEachOther) {
  EXPECT_TRUE(IsKeyError(Parse(R"({"cpu_bytes_to_use": 1, "block_size": 64, "blocks_per_chunk": 4})"),
                         "block_size", "cannot be combined with 'blocks_per_chunk'"));
}

TEST(ConfigTest, BlocksPerChunkMustBePositive) {
  EXPECT_TRUE(IsKeyError(Parse(R"({"cpu_bytes_to_use": 1, "blocks_per_chunk": 0})"), "blocks_per_chunk",
                         "expected a positive integer, got 0"));
}

TEST(ConfigTest, StoreThresholdOfTwoIsRejectedOnlyUnderTiering) {
  EXPECT_TRUE(IsKeyError(Parse(TieringWith(R"({"type": "fs", "root_dir": "/kv"})", R"("store_threshold": 2, )")),
                         "store_threshold", "must be 0 or 1 under TieringOffloadingSpec"));
  EXPECT_TRUE(Parse(TieringWith(R"({"type": "fs", "root_dir": "/kv"})", R"("store_threshold": 1, )")).ok());
  EXPECT_TRUE(Parse(R"({"cpu_bytes_to_use": 1, "store_threshold": 5})").ok());
}

TEST(ConfigTest, SecondaryTiersNeedTheTieringSpec) {
  EXPECT_TRUE(IsKeyError(Parse(R"({"cpu_bytes_to_use": 1, "secondary_tiers": [{"type": "fs", "root_dir": "/kv"}]})"),
                         "secondary_tiers", "needs spec_name \"TieringOffloadingSpec\""));
  EXPECT_TRUE(IsKeyError(Parse(R"({"spec_name": "CPUOffloadingSpec", "cpu_bytes_to_use": 1, "secondary_tiers": [{}]})"),
                         "secondary_tiers", "CPUOffloadingSpec has no secondary tiers"));
}

TEST(ConfigTest, TwoFsTiersMayNotShareARootDir) {
  const std::string same = R"({"type": "fs", "root_dir": "/mnt/kv"}, {"type": "fs", "root_dir": "/mnt/kv"})";
  EXPECT_TRUE(IsKeyError(Parse(TieringWith(same)), "secondary_tiers[1].root_dir",
                         "is the same directory as secondary_tiers[0].root_dir"));
  const std::string spelled_apart =
      R"({"type": "fs", "root_dir": "/a"}, {"type": "fs", "root_dir": "/mnt/kv"}, {"type": "fs", "root_dir": "/mnt/./kv/"})";
  EXPECT_TRUE(IsKeyError(Parse(TieringWith(spelled_apart)), "secondary_tiers[2].root_dir",
                         "same directory as secondary_tiers[1].root_dir"));
  EXPECT_TRUE(Parse(TieringWith(R"({"type": "fs", "root_dir": "/mnt/kv"}, {"type": "fs", "root_dir": "/mnt/kv2"})")).ok());
}

TEST(ConfigTest, BackpressureRules) {
  const auto with_bp = [](std::string_view bp) {
    return Parse(TieringWith(std::string(R"({"type": "fs", "root_dir": "/kv", "backpressure": )") +
                             std::string(bp) + "}"));
  };
  EXPECT_TRUE(IsKeyError(with_bp(R"({"policy_cls": "DropStorePolicy"})"),
                         "secondary_tiers[0].backpressure.backpressure_cls", "missing required key"));
  EXPECT_TRUE(IsKeyError(with_bp(R"({"backpressure_cls": "QueueDepthDetector"})"),
                         "secondary_tiers[0].backpressure.backpressure_cls",
                         R"(expected "EMABackpressureDetector", got "QueueDepthDetector")"));
  EXPECT_TRUE(IsKeyError(with_bp(R"({"backpressure_cls": "EMABackpressureDetector", "high_water_s": 0.001, "low_water_s": 0.002})"),
                         "secondary_tiers[0].backpressure.low_water_s", "must be below high_water_s"));
  // Equal is not below.
  EXPECT_TRUE(IsKeyError(with_bp(R"({"backpressure_cls": "EMABackpressureDetector", "high_water_s": 0.002, "low_water_s": 0.002})"),
                         "secondary_tiers[0].backpressure.low_water_s", "must be below"));
  // Only the high mark given: it must still clear the default low mark (0.001).
  EXPECT_TRUE(IsKeyError(with_bp(R"({"backpressure_cls": "EMABackpressureDetector", "high_water_s": 0.0005})"),
                         "secondary_tiers[0].backpressure.low_water_s", "low 0.001 and high 0.0005"));
  EXPECT_TRUE(IsKeyError(with_bp(R"({"backpressure_cls": "EMABackpressureDetector", "high_water_s": 0})"),
                         "secondary_tiers[0].backpressure.high_water_s", "expected a number greater than 0.0"));
  EXPECT_TRUE(IsKeyError(with_bp(R"({"backpressure_cls": "EMABackpressureDetector", "alpha": 1.5})"),
                         "secondary_tiers[0].backpressure.alpha", "at most 1.0, got 1.5"));
  EXPECT_TRUE(IsKeyError(with_bp(R"({"backpressure_cls": "EMABackpressureDetector", "warmup": 2.5})"),
                         "secondary_tiers[0].backpressure.warmup", "non-negative integer"));
  EXPECT_TRUE(IsKeyError(with_bp(R"({"backpressure_cls": "EMABackpressureDetector", "window": 4})"),
                         "secondary_tiers[0].backpressure.window",
                         "unknown key in a backpressure object; valid keys are: alpha, backpressure_cls, high_water_s"));
  EXPECT_TRUE(IsKeyError(with_bp(R"("EMABackpressureDetector")"), "secondary_tiers[0].backpressure",
                         "expected an object"));
}

TEST(ConfigTest, TopLevelBackpressureIsCheckedWithTheInheritingTiersLocality) {
  // 0.008 is below REMOTE's default high mark (0.020) but not LOCAL's (0.005).
  const std::string top = R"("backpressure": {"backpressure_cls": "EMABackpressureDetector", "low_water_s": 0.008}, )";
  EXPECT_TRUE(Parse(TieringWith(R"({"type": "fs", "root_dir": "/kv", "locality": "REMOTE"})", top)).ok());
  const auto local = Parse(TieringWith(R"({"type": "fs", "root_dir": "/kv", "locality": "LOCAL"})", top));
  EXPECT_TRUE(IsKeyError(local, "backpressure.low_water_s", "inherited by secondary_tiers[0] with locality LOCAL"));
  // A default no tier uses is still checked for typos.
  EXPECT_TRUE(IsKeyError(Parse(R"({"cpu_bytes_to_use": 1, "backpressure": {"backpressure_class": "x"}})"),
                         "backpressure.backpressure_class", "unknown key"));
}

TEST(ConfigTest, ZeroGpuBlockSizeIsAnEngineError) {
  const auto result = Parse(R"({"cpu_bytes_to_use": 1})", 0);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("gpu_block_size_tokens"), std::string::npos);
}

// ---- Hostile text ------------------------------------------------------------------

TEST(ConfigTest, MalformedJsonReportsWhere) {
  const auto result = Parse("{\n  \"cpu_bytes_to_use\": 1,\n}");
  EXPECT_TRUE(IsTextError(result, "config: invalid JSON at byte "));
  EXPECT_TRUE(IsTextError(result, "line 3, column 1"));
  EXPECT_TRUE(IsTextError(Parse(R"({"cpu_bytes_to_use": 1} trailing)"),
                          "invalid JSON at byte 27: parse error at line 1, column 27"));
  EXPECT_TRUE(IsTextError(Parse(R"({"cpu_bytes_to_use": 1 // comment
  })"), "invalid JSON"));
  EXPECT_TRUE(IsTextError(Parse("{\"root_dir\": \"\xff\xfe\"}"), "invalid JSON"));
  EXPECT_TRUE(IsTextError(Parse(std::string_view("{\"a\0\": 1}", 9)), "invalid JSON"));
}

TEST(ConfigTest, EmptyInput) {
  EXPECT_TRUE(IsTextError(Parse(""), "config: the text is empty"));
  EXPECT_TRUE(IsTextError(Parse(" \n\t "), "config: the text is empty"));
}

TEST(ConfigTest, NonObjectTopLevel) {
  EXPECT_TRUE(IsTextError(Parse("[]"), "the top level must be a JSON object, got an array"));
  EXPECT_TRUE(IsTextError(Parse("42"), "the top level must be a JSON object, got 42 (an integer)"));
  EXPECT_TRUE(IsTextError(Parse(R"("cfg")"), "got \"cfg\" (a string)"));
  EXPECT_TRUE(IsTextError(Parse("null"), "got null"));
}

TEST(ConfigTest, DeeplyNestedGarbageIsRejectedBeforeParsing) {
  EXPECT_TRUE(IsTextError(Parse(std::string(1000000, '[')), "nested deeper than 32 levels at byte 32"));
  std::string nested = R"({"cpu_bytes_to_use": 1, "x": )" + std::string(40, '{') + std::string(40, '}') + "}";
  EXPECT_TRUE(IsTextError(Parse(nested), "nested deeper than 32 levels"));
  // Brackets inside strings do not count.
  EXPECT_TRUE(IsKeyError(Parse(R"({"cpu_bytes_to_use": 1, "x": ")" + std::string(100, '[') + "\"}"), "x",
                         "unknown key"));
  // Nested garbage within the limit fails on the key, not on depth.
  EXPECT_TRUE(IsKeyError(Parse(R"({"cpu_bytes_to_use": {"a": [[{"b": [1, {"c": null}]}]]}})"),
                         "cpu_bytes_to_use", "got an object"));
}

// ---- Round trip ---------------------------------------------------------------------

TEST(ConfigTest, RoundTripThroughNormalizedJson) {
  for (const std::string_view text :
       {std::string_view(R"({"cpu_bytes_to_use": 1})"), kTwoTierConfig,
        std::string_view(R"({"cpu_bytes_to_use": 7, "blocks_per_chunk": 3, "eviction_policy": "arc",
                             "store_threshold": 9, "max_tracker_size": 0, "offload_prompt_only": false,
                             "self_describing_kv_events": true, "canonical_layout": true})"),
        std::string_view(R"({"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 18446744073709551615,
                             "secondary_tiers": [{"type": "fs", "root_dir": "/d\u00e9j\u00e0 \"q\"",
                             "backpressure": {"backpressure_cls": "EMABackpressureDetector",
                             "high_water_s": 0.1, "low_water_s": 0.030000000000000002, "alpha": 1}}]})")}) {
    SCOPED_TRACE(text);
    ASSERT_OK_AND_ASSIGN(OffloadConfig first, Parse(text));
    const std::string json = OffloadConfigToJson(first);
    ASSERT_OK_AND_ASSIGN(OffloadConfig second, Parse(json));
    EXPECT_TRUE(first == second) << json;
    EXPECT_EQ(OffloadConfigToJson(second), json);
  }
}

TEST(ConfigTest, NormalizedJsonWritesBlockSizeOrBlocksPerChunk) {
  ASSERT_OK_AND_ASSIGN(OffloadConfig c, Parse(kTwoTierConfig));
  const std::string json = OffloadConfigToJson(c);
  EXPECT_NE(json.find("\"block_size\": 64"), std::string::npos) << json;
  EXPECT_EQ(json.find("blocks_per_chunk"), std::string::npos) << json;
  EXPECT_NE(json.find("\"high_water_s\": 0.02"), std::string::npos) << json;  // inherited, REMOTE
  c.block_size_tokens.reset();
  EXPECT_NE(OffloadConfigToJson(c).find("\"blocks_per_chunk\": 4"), std::string::npos);
}

TEST(ConfigTest, EqualitySeesEveryNestedField) {
  ASSERT_OK_AND_ASSIGN(const OffloadConfig base, Parse(kTwoTierConfig));
  OffloadConfig changed = base;
  changed.secondary_tiers[1].fs.backpressure->warmup_completions = 4;
  EXPECT_FALSE(changed == base);
  changed = base;
  changed.secondary_tiers[0].fs.locality = Locality::kUnspecified;
  EXPECT_FALSE(changed == base);
  EXPECT_NE(OffloadConfigToJson(changed), OffloadConfigToJson(base));
}

TEST(ConfigTest, EnumSpellings) {
  EXPECT_EQ(SpecNameToString(SpecName::kTieringOffloading), "TieringOffloadingSpec");
  EXPECT_EQ(SpecNameToString(SpecName::kCpuOffloading), "CPUOffloadingSpec");
  EXPECT_EQ(EvictionPolicyToString(EvictionPolicy::kArc), "arc");
  EXPECT_EQ(LocalityToString(Locality::kRemote), "REMOTE");
  EXPECT_EQ(LocalityToString(Locality::kUnspecified), "");
  EXPECT_EQ(TierTypeToString(TierType::kFs), "fs");
}

// ---- File loading -------------------------------------------------------------------

TEST(ConfigTest, LoadsAFile) {
  testing::TempDir dir;
  const auto path = dir.path() / "extra_config.json";
  testing::WriteFileOrDie(path, std::string(kTwoTierConfig));
  ASSERT_OK_AND_ASSIGN(OffloadConfig loaded, LoadOffloadConfigFile(path.string(), EngineContext{}));
  ASSERT_OK_AND_ASSIGN(OffloadConfig parsed, Parse(kTwoTierConfig));
  EXPECT_TRUE(loaded == parsed);
}

TEST(ConfigTest, LoadFileErrors) {
  testing::TempDir dir;
  const auto missing = LoadOffloadConfigFile((dir.path() / "nope.json").string(), EngineContext{});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().sys_errno(), ENOENT);

  const auto bad_path = dir.path() / "bad.json";
  testing::WriteFileOrDie(bad_path, R"({"cpu_bytes_to_use": "lots"})");
  const auto bad = LoadOffloadConfigFile(bad_path.string(), EngineContext{});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message().rfind("config file " + bad_path.string() +
                                             ": config key 'cpu_bytes_to_use'", 0),
            0u)
      << bad.status().message();

  const auto big_path = dir.path() / "big.json";
  testing::WriteFileOrDie(big_path, std::string(kOffloadConfigBytesMax + 1, ' '));
  const auto big = LoadOffloadConfigFile(big_path.string(), EngineContext{});
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("larger than"), std::string::npos);
}

TEST(ConfigKvtierKeys, FsTierKeysParseRoundTripAndValidate) {
  const std::string text = R"({"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 4096,
    "secondary_tiers": [{"type": "fs", "root_dir": "/r", "io_timeout_ms": 0, "durability": "file",
                         "store_queue_bytes_max": 8192, "io_backend": "uring", "o_direct": false,
                         "stores_while_loading_max": 0}]})";
  ASSERT_OK_AND_ASSIGN(OffloadConfig c, ParseOffloadConfig(text, EngineContext{}));
  const FsTierOptions& fs = c.secondary_tiers.at(0).fs;
  EXPECT_EQ(fs.io_timeout_ms, 0u);
  EXPECT_EQ(fs.durability, Durability::kFile);
  EXPECT_EQ(fs.store_queue_bytes_max, 8192u);
  EXPECT_EQ(fs.io_backend, IoBackendKind::kUring);
  EXPECT_FALSE(fs.o_direct);
  EXPECT_EQ(fs.stores_while_loading_max, 0);
  ASSERT_OK_AND_ASSIGN(OffloadConfig again, ParseOffloadConfig(OffloadConfigToJson(c), EngineContext{}));
  EXPECT_EQ(again, c);
  auto bad = ParseOffloadConfig(R"({"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1,
    "secondary_tiers": [{"type": "fs", "root_dir": "/r", "store_queue_bytes_max": 0}]})", EngineContext{});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("secondary_tiers[0].store_queue_bytes_max"), std::string::npos)
      << bad.status().ToString();
  auto negative = ParseOffloadConfig(R"({"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1,
    "secondary_tiers": [{"type": "fs", "root_dir": "/r", "stores_while_loading_max": -1}]})", EngineContext{});
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("secondary_tiers[0].stores_while_loading_max"), std::string::npos)
      << negative.status().ToString();
  FsTierOptions defaults;
  EXPECT_EQ(defaults.stores_while_loading_max, 2);
  EXPECT_EQ(defaults.io_timeout_ms, 30000u);
  EXPECT_EQ(defaults.durability, Durability::kNone);
}


// ---- One fs tier's keys (ParseFsTierConfig) and its FsTier options -----------------

// The result is kInvalidArgument and its message starts with
// "config key '<key>': " (no "secondary_tiers[i]." prefix) and contains `rule`.
AssertionResult IsTierKeyError(const Result<FsTierOptions>& result, std::string_view key,
                               std::string_view rule) {
  if (result.ok()) return AssertionFailure() << "parsed OK; expected an error for '" << key << "'";
  return IsKeyError(Result<OffloadConfig>(result.status()), key, rule);
}

TEST(ConfigSingleTier, MinimalTierTakesTheDocumentedDefaults) {
  ASSERT_OK_AND_ASSIGN(FsTierOptions t, ParseFsTierConfig(R"({"root_dir": "/x"})"));
  EXPECT_EQ(t.root_dir, "/x");
  EXPECT_EQ(t.n_read_threads, 16);
  EXPECT_EQ(t.n_write_threads, 16);
  EXPECT_FALSE(t.enable_kv_events);
  EXPECT_EQ(t.locality, Locality::kUnspecified);
  EXPECT_FALSE(t.backpressure.has_value());
  EXPECT_EQ(t.io_timeout_ms, 30000u);
  EXPECT_EQ(t.durability, Durability::kNone);
  EXPECT_EQ(t.store_queue_bytes_max, uint64_t{1} << 30);
  EXPECT_EQ(t.io_backend, IoBackendKind::kAuto);
  EXPECT_TRUE(t.o_direct);
  EXPECT_TRUE(t.checksum_blocks) << "kvtier's default, where vLLM's is false";
  EXPECT_EQ(t.stores_while_loading_max, 2);
  EXPECT_EQ(t.inline_metadata, InlineMetadata::kAuto);
}

// Every key set to a value other than its default, so a key that is read
// into the wrong field (or not at all) fails the comparison.
constexpr std::string_view kEveryFsTierKey = R"({
    "root_dir": "/mnt/kv", "n_read_threads": 3, "n_write_threads": 5, "enable_kv_events": true,
    "locality": "LOCAL",
    "backpressure": {"backpressure_cls": "EMABackpressureDetector", "policy_cls": "DropStorePolicy",
                     "high_water_s": 0.5, "low_water_s": 0.25, "alpha": 0.75, "warmup": 7},
    "io_timeout_ms": 1234, "stores_while_loading_max": 9, "durability": "full",
    "store_queue_bytes_max": 65536, "io_backend": "syscall", "o_direct": false, "checksum_blocks": false,
    "inline_metadata": "off"})";

FsTierOptions EveryFsTierKeyExpected() {
  FsTierOptions t;
  t.root_dir = "/mnt/kv";
  t.n_read_threads = 3;
  t.n_write_threads = 5;
  t.enable_kv_events = true;
  t.locality = Locality::kLocal;
  t.backpressure = BackpressureOptions{BackpressureDetector::kEma, BackpressurePolicy::kDropStore, 0.5, 0.25,
                                       0.75, 7};
  t.io_timeout_ms = 1234;
  t.stores_while_loading_max = 9;
  t.durability = Durability::kFull;
  t.store_queue_bytes_max = 65536;
  t.io_backend = IoBackendKind::kSyscall;
  t.o_direct = false;
  t.checksum_blocks = false;
  t.inline_metadata = InlineMetadata::kOff;
  return t;
}

TEST(ConfigSingleTier, EveryVllmAndKvtierKeyReachesItsField) {
  ASSERT_OK_AND_ASSIGN(FsTierOptions t, ParseFsTierConfig(kEveryFsTierKey));
  const FsTierOptions want = EveryFsTierKeyExpected();
  EXPECT_EQ(t, want);
  // Field by field too, so a failure names the field.
  EXPECT_EQ(t.n_read_threads, 3);
  EXPECT_EQ(t.n_write_threads, 5);
  EXPECT_EQ(t.io_timeout_ms, 1234u);
  EXPECT_EQ(t.stores_while_loading_max, 9);
  EXPECT_EQ(t.durability, Durability::kFull);
  EXPECT_EQ(t.store_queue_bytes_max, 65536u);
  EXPECT_EQ(t.io_backend, IoBackendKind::kSyscall);
  EXPECT_FALSE(t.o_direct);
  EXPECT_FALSE(t.checksum_blocks);
  EXPECT_EQ(t.inline_metadata, InlineMetadata::kOff);
  ASSERT_TRUE(t.backpressure.has_value());
  EXPECT_EQ(t.backpressure->high_water_s_per_mib, 0.5);
  EXPECT_EQ(t.backpressure->low_water_s_per_mib, 0.25);
  EXPECT_EQ(t.backpressure->ema_alpha, 0.75);
  EXPECT_EQ(t.backpressure->warmup_completions, 7u);
}

TEST(ConfigSingleTier, TierParsesLikeTheSameTierInsideAFullConfig) {
  std::string tier(kEveryFsTierKey);
  tier.insert(tier.find('{') + 1, R"("type": "fs", )");
  ASSERT_OK_AND_ASSIGN(OffloadConfig c, Parse(TieringWith(tier)));
  ASSERT_OK_AND_ASSIGN(FsTierOptions alone, ParseFsTierConfig(kEveryFsTierKey));
  EXPECT_EQ(c.secondary_tiers.at(0).fs, alone);
}

TEST(ConfigSingleTier, BackpressureTakesTheLocalitysDefaults) {
  constexpr std::string_view kBp = R"("backpressure": {"backpressure_cls": "EMABackpressureDetector"})";
  ASSERT_OK_AND_ASSIGN(FsTierOptions remote,
                       ParseFsTierConfig(R"({"root_dir": "/x", "locality": "REMOTE", )" + std::string(kBp) + "}"));
  ASSERT_TRUE(remote.backpressure.has_value());
  EXPECT_EQ(remote.backpressure->high_water_s_per_mib, 0.020);
  EXPECT_EQ(remote.backpressure->low_water_s_per_mib, 0.005);
  EXPECT_EQ(remote.backpressure->ema_alpha, 0.3);
  EXPECT_EQ(remote.backpressure->warmup_completions, 3u);
  EXPECT_EQ(remote.backpressure->policy, BackpressurePolicy::kDropStore);
  ASSERT_OK_AND_ASSIGN(FsTierOptions local, ParseFsTierConfig(R"({"root_dir": "/x", )" + std::string(kBp) + "}"));
  ASSERT_TRUE(local.backpressure.has_value());
  EXPECT_EQ(local.backpressure->high_water_s_per_mib, 0.005);
  EXPECT_EQ(local.backpressure->low_water_s_per_mib, 0.001);
}

TEST(ConfigSingleTier, KeysThatVllmConsumesAreRejectedByName) {
  EXPECT_TRUE(IsTierKeyError(ParseFsTierConfig(R"({"root_dir": "/x", "type": "fs"})"), "type",
                             "SecondaryTierFactory"));
  EXPECT_TRUE(IsTierKeyError(ParseFsTierConfig(R"({"root_dir": "/x", "module_path": "a.b.C"})"), "module_path",
                             "SecondaryTierFactory"));
}

TEST(ConfigSingleTier, UnknownKeysAndBrokenRulesNameTheKeyWithoutATierPrefix) {
  EXPECT_TRUE(IsTierKeyError(ParseFsTierConfig(R"({"root_dir": "/x", "n_read_thread": 4})"), "n_read_thread",
                             "unknown key"));
  EXPECT_TRUE(IsTierKeyError(ParseFsTierConfig(R"({"n_read_threads": 4})"), "root_dir", "missing required key"));
  EXPECT_TRUE(IsTierKeyError(ParseFsTierConfig(R"({"root_dir": "/x", "n_write_threads": 0})"), "n_write_threads",
                             "expected a positive integer"));
  EXPECT_TRUE(IsTierKeyError(ParseFsTierConfig(R"({"root_dir": "/x", "durability": "always"})"), "durability",
                             "\"always\""));
  EXPECT_TRUE(IsTierKeyError(ParseFsTierConfig(R"({"root_dir": "/x", "inline_metadata": true})"),
                             "inline_metadata", "\"auto\""));
  EXPECT_TRUE(IsTierKeyError(
      ParseFsTierConfig(R"({"root_dir": "/x", "backpressure": {"backpressure_cls": "EMABackpressureDetector",
                                                             "low_water_s": 0.5, "high_water_s": 0.1}})"),
      "backpressure.low_water_s", "must be below high_water_s"));
}

TEST(ConfigSingleTier, MalformedTextAndNonObjectsAreRejected) {
  for (std::string_view text : {R"({"root_dir": "/x",)", R"(["root_dir", "/x"])", "\"/x\"", "42", ""}) {
    const Result<FsTierOptions> r = ParseFsTierConfig(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << text << ": " << r.status().ToString();
  }
}

// checksum_blocks is vLLM's key (PR #57912), listed without "(kvtier)", and a
// boolean; kvtier's default (true) differs from vLLM's (false), and
// KvtierDefaultNotes (printed by `kvtier config check`) says so for each tier
// that takes it, and only those.
TEST(ConfigSingleTier, ChecksumBlocksIsVllmsKeyWithKvtiersOwnDefault) {
  ASSERT_OK_AND_ASSIGN(FsTierOptions on, ParseFsTierConfig(R"({"root_dir": "/x", "checksum_blocks": true})"));
  EXPECT_TRUE(on.checksum_blocks);
  EXPECT_TRUE(IsTierKeyError(ParseFsTierConfig(R"({"root_dir": "/x", "checksum_blocks": 1})"), "checksum_blocks",
                             "expected true or false"));
  const auto unknown = Parse(TieringWith(R"({"type": "fs", "root_dir": "/kv", "checksums": true})"));
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("checksum_blocks,"), std::string::npos) << unknown.status().ToString();
  EXPECT_EQ(unknown.status().message().find("checksum_blocks (kvtier)"), std::string::npos);

  ASSERT_OK_AND_ASSIGN(OffloadConfig c, Parse(R"({"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1,
      "secondary_tiers": [{"type": "fs", "root_dir": "/a"}, {"type": "fs", "root_dir": "/b", "checksum_blocks": false},
                          {"type": "fs", "root_dir": "/c", "checksum_blocks": true}]})"));
  EXPECT_EQ(KvtierDefaultNotes(c),
            (std::vector<std::string>{
                "secondary_tiers[0].checksum_blocks: true (kvtier's default; vLLM's default is false)",
                "secondary_tiers[2].checksum_blocks: true (kvtier's default; vLLM's default is false)"}));
  ASSERT_OK_AND_ASSIGN(OffloadConfig none, Parse(R"({"cpu_bytes_to_use": 1})"));
  EXPECT_TRUE(KvtierDefaultNotes(none).empty());
  EXPECT_NE(OffloadConfigToJson(c).find("\"checksum_blocks\": false"), std::string::npos);
}

}  // namespace
// checksum_place (kvtier's own, FORMAT.md L130): "auto" by default, the
// three spellings parse, anything else is refused naming the key and the
// values it takes, and the key is listed as kvtier's.
TEST(ConfigSingleTier, ChecksumPlaceTakesAutoXattrOrTrailerOnly) {
  ASSERT_OK_AND_ASSIGN(FsTierOptions def, ParseFsTierConfig(R"({"root_dir": "/x"})"));
  EXPECT_EQ(def.checksum_place, ChecksumPlaceKind::kAuto);
  for (const auto& [text, want] : {std::pair{"auto", ChecksumPlaceKind::kAuto}, {"xattr", ChecksumPlaceKind::kXattr},
                                   {"trailer", ChecksumPlaceKind::kTrailer}}) {
    ASSERT_OK_AND_ASSIGN(FsTierOptions t, ParseFsTierConfig(std::string(R"({"root_dir": "/x", "checksum_place": ")") +
                                                            text + "\"}"));
    EXPECT_EQ(t.checksum_place, want) << text;
  }
  EXPECT_TRUE(IsTierKeyError(ParseFsTierConfig(R"({"root_dir": "/x", "checksum_place": "footer"})"), "checksum_place",
                             R"(expected one of "auto", "xattr", "trailer", got "footer")"));
  EXPECT_TRUE(IsTierKeyError(ParseFsTierConfig(R"({"root_dir": "/x", "checksum_place": true})"), "checksum_place",
                             "expected one of"));
  const auto unknown = Parse(TieringWith(R"({"type": "fs", "root_dir": "/kv", "checksum_places": "auto"})"));
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("checksum_place (kvtier)"), std::string::npos) << unknown.status().ToString();
}

}  // namespace kvtier
