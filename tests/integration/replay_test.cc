// Proves `kvtier replay` end to end through the real CLI: the synthetic
// agents trace served by two instance processes that restart halfway; the
// report says what came from where, the warm-restart phase loads repeated
// prefixes from the fs tier, every loaded row verifies, the SVG is written,
// and `kvtier fsck` finds the tree clean afterwards. Also: the JSON report
// survives the worker-to-parent round trip, the documented example trace
// replays, and bad flags exit 2.
#include <gtest/gtest.h>

#include <filesystem>

#include "replay/replay.h"
#include <nlohmann/json.hpp>  // not through test_support.h (compile time)
#include "support/test_support.h"

namespace kvtier {
namespace {

using testing::CliPath;
using testing::RunCommand;
using testing::TempDir;

TEST(Replay, WarmRestartServesRepeatedPrefixesFromFs) {
  TempDir dir;
  const std::string svg = (dir.path() / "replay.svg").string();
  const std::string root = (dir.path() / "root").string();
  std::filesystem::create_directory(root);
  testing::CommandResult r = RunCommand({CliPath().string(), "replay", "--synthetic", "agents", "--scale", "0.1",
                                         "--restart", "--instances", "2", "--root", root, "--json", "--plot", svg});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json report = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(report.is_discarded()) << r.out;
  ASSERT_EQ(report["phases"].size(), 2u) << r.out;
  const nlohmann::json& before = report["phases"][0];
  const nlohmann::json& after = report["phases"][1];
  EXPECT_EQ(before["name"], "before_restart");
  EXPECT_EQ(after["name"], "after_restart");
  for (const nlohmann::json* p : {&before, &after}) {
    EXPECT_EQ((*p)["rows_corrupt"], 0u) << p->dump();
    EXPECT_EQ((*p)["rows_verified"], (*p)["rows_loaded"]) << p->dump();
    EXPECT_GT((*p)["requests"].get<uint64_t>(), 0u);
  }
  // After the restart the GPU and CPU caches are empty: the repeated
  // prefixes (system prompts, tool schemas, earlier turns) that the GPU cache
  // does not hold come from fs0, not from recomputation.
  EXPECT_GT(after["tiers"]["fs0"]["hits"].get<uint64_t>(), 0u) << after.dump();
  EXPECT_EQ(after["tiers"]["cpu"]["hits"].get<uint64_t>() + after["tiers"]["fs0"]["hits"].get<uint64_t>(),
            after["rows_loaded"].get<uint64_t>()) << after.dump();
  EXPECT_GT(after["repeated_tokens_kvtier"].get<uint64_t>(), 0u) << after.dump();
  EXPECT_GT(after["first_touch_tokens"].get<uint64_t>(), 0u) << after.dump();
  EXPECT_GT(after["first_touch_fs_share"].get<double>(), 0.9) << after.dump();
  EXPECT_EQ(before["first_touch_tokens"].get<uint64_t>(), 0u) << before.dump();
  EXPECT_GT(after["repeated_kvtier_share"].get<double>(), 0.9) << after.dump();
  EXPECT_EQ(after["repeated_tokens"].get<uint64_t>(),
            after["repeated_tokens_gpu"].get<uint64_t>() + after["repeated_tokens_kvtier"].get<uint64_t>() +
                after["repeated_tokens_recomputed"].get<uint64_t>()) << after.dump();
  EXPECT_LT(after["ttft_s_with"].get<double>(), after["ttft_s_without"].get<double>()) << after.dump();
  EXPECT_NE(testing::ReadFileOrDie(svg).find("<svg"), std::string::npos);
  testing::CommandResult fsck = RunCommand({CliPath().string(), "fsck", root});
  EXPECT_EQ(fsck.exit_code, 0) << fsck.out << fsck.err;
}

// The documented example trace (segments, a LoRA adapter, a cache salt)
// replays with a restart: what came before is loaded back from fs0.
TEST(Replay, ExampleTraceWarmRestarts) {
  TempDir dir;
  const std::string trace = (testing::SourceDir() / "examples" / "trace-small.jsonl").string();
  testing::CommandResult r = RunCommand({CliPath().string(), "replay", "--trace", trace, "--restart", "--root",
                                         dir.path().string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json report = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(report.is_discarded()) << r.out;
  ASSERT_EQ(report["phases"].size(), 2u) << r.out;
  const nlohmann::json& after = report["phases"][1];
  EXPECT_EQ(report["phases"][0]["requests"].get<uint64_t>() + after["requests"].get<uint64_t>(), 8u);
  EXPECT_EQ(after["rows_corrupt"], 0u) << after.dump();
  EXPECT_GT(after["rows_verified"].get<uint64_t>(), 0u) << after.dump();
  EXPECT_GT(after["first_touch_fs_share"].get<double>(), 0.9) << after.dump();
}

TEST(Replay, ReportSurvivesTheWorkerRoundTrip) {
  internal::PhaseReport p;
  p.name = "after_restart";
  p.requests = 3, p.prompt_tokens = 300, p.tokens_gpu = 100, p.tokens_kvtier = 150, p.tokens_recomputed = 50;
  p.repeated_tokens = 240, p.repeated_gpu = 96, p.repeated_kvtier = 128, p.repeated_recomputed = 16;
  p.first_touch_tokens = 64, p.first_touch_fs = 48, p.first_touch_recomputed = 16;
  p.tiers["cpu"] = {1, 2, 4096};
  p.tiers["fs0"] = {2, 0, 8192};
  p.rows_loaded = p.rows_verified = 3, p.load_bytes = 12288, p.load_busy_s = 0.5;
  p.load_ms = {1.5, 2.5};
  p.ttft_with_s = 1, p.ttft_without_s = 2;
  p.points = {{0.5, 0.25, 1.5, 1}};
  Result<internal::PhaseReport> back = internal::PhaseFromJson(internal::PhaseToJson(p, true));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  internal::PhaseReport merged;
  internal::MergePhase(&merged, *back);
  internal::MergePhase(&merged, *back);
  EXPECT_EQ(merged.requests, 6u);
  EXPECT_EQ(merged.tiers["fs0"].bytes, 16384u);
  EXPECT_EQ(merged.load_ms.size(), 4u);
  EXPECT_EQ(merged.points.size(), 2u);
  EXPECT_EQ(internal::PhaseToJson(merged, false)["hit_rate"].get<double>(), 250.0 / 300.0);
  EXPECT_EQ(merged.repeated_kvtier, 256u);
  EXPECT_EQ(merged.first_touch_fs, 96u);
  EXPECT_EQ(internal::PhaseToJson(merged, false)["repeated_kvtier_share"].get<double>(), 128.0 / 144.0);
  EXPECT_FALSE(internal::PhaseFromJson(nlohmann::json::parse(R"({"name": "x"})")).ok());
}

TEST(Replay, BadFlagsExit2) {
  testing::CommandResult r = RunCommand({CliPath().string(), "replay", "--synthetic", "nosuch"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  r = RunCommand({CliPath().string(), "replay", "--trace", "/nonexistent/trace.jsonl"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("nonexistent"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvtier
