// Proves that the CLI treats its input files as untrusted and its stores as
// fallible, through the real `kvtier` binary:
//  * a FIFO given as a config, trace, case or --kv-groups file is a clear
//    "not a regular file (fifo)" error (exit 2), not a hang (each run is under
//    timeout(1), so a hang fails as exit 124 instead of stalling CI);
//  * a config or case of 100,000 nested brackets is a clear "nested deeper
//    than" error, not a stack overflow;
//  * a config larger than the cap is a clear "larger than" error, also in
//    `kvtier replay`;
//  * a replay onto a full volume (a 1 MiB tmpfs, mounted when running as
//    root, else skipped) counts the failed stores in its text and JSON reports
//    and exits 3, and `--store-loss-max 1` accepts the same run;
//  * `kvtier bench tiers` on a volume out of inodes reports the write-through
//    rows fs0 failed.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using testing::CliPath;
using testing::CommandResult;
using testing::TempDir;

// Runs the CLI under timeout(1): a run that blocks ends as exit 124. The
// limit is generous for the runs that work (seconds at most); the FIFO runs,
// which answer at once, use a short one so the old code fails quickly.
CommandResult RunCli(std::vector<std::string> args, int timeout_s = 120) {
  std::vector<std::string> argv = {"/usr/bin/timeout", "-k", "5", std::to_string(timeout_s), CliPath().string()};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::RunCommand(argv);
}

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A small CPU tier keeps each replay quick (the default allocates 1 GiB).
constexpr const char* kSmallConfig = R"({
  "spec_name": "TieringOffloadingSpec",
  "cpu_bytes_to_use": 67108864,
  "block_size": 64,
  "secondary_tiers": [{"type": "fs", "root_dir": "./kvcache"}]
})";

std::vector<std::vector<std::string>> CommandsReading(const std::string& file, const fs::path& root) {
  return {{"config", "check", file},
          {"replay", "--config", file, "--root", root.string(), "--requests", "1"},
          {"replay", "--trace", file, "--root", root.string()},
          {"replay", "--kv-groups", file, "--root", root.string(), "--requests", "1"},
          {"hash", "--input", file},
          {"hash", "--tokens-file", file}};
}

TEST(CliInputs, FifoIsAClearErrorNotAHang) {
  TempDir dir;
  const fs::path fifo = dir.path() / "input.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  for (const std::vector<std::string>& args : CommandsReading(fifo.string(), dir.path() / "root")) {
    const CommandResult r = RunCli(args, /*timeout_s=*/10);
    EXPECT_EQ(r.exit_code, 2) << args[0] << " " << args[1] << " (124: it hung on the FIFO): " << r.err;
    EXPECT_TRUE(Has(r.err, fifo.string() + ": not a regular file (fifo)")) << r.err;
  }
}

TEST(CliInputs, DirectoryIsAClearError) {
  TempDir dir;
  const CommandResult r = RunCli({"config", "check", dir.path().string()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(Has(r.err, "not a regular file (directory)")) << r.err;
}

TEST(CliInputs, DeepNestingIsAClearErrorNotACrash) {
  TempDir dir;
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const fs::path config = dir.path() / "deep.json";
  testing::WriteFileOrDie(config, "{\"spec_name\": \"TieringOffloadingSpec\", \"x\": " + deep + "}");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"config", "check", config.string()},
        {"replay", "--config", config.string(), "--root", (dir.path() / "root").string(), "--requests", "1"},
        {"hash", "--input", config.string()}}) {
    const CommandResult r = RunCli(args);
    EXPECT_EQ(r.exit_code, 2) << args[0] << " (139: a stack overflow): " << r.err;
    EXPECT_TRUE(Has(r.err, "nested deeper than 32 levels")) << r.err;
  }
  const fs::path trace = dir.path() / "deep.jsonl";
  testing::WriteFileOrDie(trace, "{\"tokens\": " + deep + "}\n");
  const CommandResult r = RunCli({"replay", "--trace", trace.string(), "--root", (dir.path() / "root").string()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(Has(r.err, "nested deeper than")) << r.err;
}

TEST(CliInputs, OversizeConfigIsAClearError) {
  TempDir dir;
  // A valid config padded past the 1 MiB cap: only the cap refuses it.
  const fs::path config = dir.path() / "big.json";
  testing::WriteFileOrDie(config, std::string(kSmallConfig) + std::string((1 << 20) + 1, ' '));
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"config", "check", config.string()},
        {"replay", "--config", config.string(), "--root", (dir.path() / "root").string(), "--requests", "1"}}) {
    const CommandResult r = RunCli(args);
    EXPECT_EQ(r.exit_code, 2) << args[0] << ": " << r.err;
    EXPECT_TRUE(Has(r.err, config.string() + ": larger than 1048576 bytes")) << r.err;
  }
}

// A tmpfs mounted on a fresh directory for the test's lifetime.
class CliInputsTmpfs : public ::testing::Test {
 protected:
  void Mount(const std::string& options) {
    if (geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
    if (mount("tmpfs", dir_.path().c_str(), "tmpfs", 0, options.c_str()) != 0) {
      GTEST_SKIP() << "cannot mount tmpfs here: " << std::strerror(errno);
    }
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) umount2(dir_.path().c_str(), MNT_DETACH);
  }
  TempDir dir_, scratch_;
  bool mounted_ = false;
};

TEST_F(CliInputsTmpfs, ReplayOnAFullVolumeCountsFailedStoresAndExitsNonZero) {
  Mount("size=1m");
  if (!mounted_) return;
  const fs::path config = scratch_.path() / "config.json";
  testing::WriteFileOrDie(config, kSmallConfig);
  // About 60 requests store several MiB of chunks into 1 MiB.
  const std::vector<std::string> args = {"replay", "--config", config.string(), "--root", dir_.path().string(),
                                         "--synthetic", "agents", "--requests", "60"};
  std::vector<std::string> json_args = args;
  json_args.push_back("--json");
  const CommandResult r = RunCli(json_args);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_TRUE(Has(r.err, "lost")) << r.err;
  EXPECT_TRUE(Has(r.err, "--store-loss-max")) << r.err;
  const nlohmann::json report = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << r.out;
  const nlohmann::json& fs0 = report["phases"][0]["tiers"]["fs0"];
  EXPECT_GT(fs0.value("stores_failed", uint64_t{0}), 0u) << fs0.dump();
  EXPECT_EQ(fs0.value("stores_lost", uint64_t{0}),
            fs0.value("stores_failed", uint64_t{0}) + fs0.value("stores_dropped", uint64_t{0}));
  EXPECT_EQ(report["store_loss"].value("tier", ""), "fs0") << report["store_loss"].dump();
  EXPECT_TRUE(report["store_loss"].value("exceeded", false)) << report["store_loss"].dump();
  // The text report says it too, and a loss limit of 100 % accepts the run.
  std::vector<std::string> text_args = args;
  text_args.insert(text_args.end(), {"--store-loss-max", "1"});
  const CommandResult text = RunCli(text_args);
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(Has(text.out, "failed")) << text.out;
  EXPECT_TRUE(Has(text.out, "stores lost, worst tier fs0")) << text.out;
}

TEST_F(CliInputsTmpfs, BenchTiersReportsWriteThroughFailures) {
  // Room for the benchmark's free-space check, but almost no inodes: the
  // block files cannot be created.
  Mount("size=400m,nr_inodes=24");
  if (!mounted_) return;
  const CommandResult r = RunCli({"bench", "tiers", "--root", dir_.path().string(), "--rows", "64", "--cpu-bytes",
                                  "1MiB", "--row-bytes", "64KiB", "--device", "-1", "--json"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const nlohmann::json report = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << r.out;
  EXPECT_GT(report.value("fs0_stores_failed", uint64_t{0}), 0u) << r.out;
  EXPECT_TRUE(Has(r.err, "failed")) << r.err;
}

}  // namespace
}  // namespace kvtier
