// Proves the CLI's contract with operators: --help and --version exit 0,
// unknown subcommands and flags exit 2 with a message naming them, and
// `kvtier hash` in human mode prints each block's hash and file path
// (absolute and with presence when --root is given), honours
// PYTHONHASHSEED / --seed like vLLM, warns when xxhash hashes are random, and
// reads a namespace back from an existing config.json; `config check` prints
// the effective config and notes where a value is kvtier's default, not vLLM's;
// `bench fs --no-checksum` benchmarks the tier with checksum_blocks off.
#include <gtest/gtest.h>

#include <sys/xattr.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace kvtier {
namespace {

using testing::CliPath;
using testing::RunCommand;

TEST(Cli, HelpAndVersionExitZero) {
  auto help = RunCommand({CliPath(), "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("hash"), std::string::npos) << help.out;
  auto hash_help = RunCommand({CliPath(), "hash", "--help"});
  EXPECT_EQ(hash_help.exit_code, 0);
  EXPECT_NE(hash_help.out.find("--tokens-file"), std::string::npos);
  auto version = RunCommand({CliPath(), "--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_NE(version.out.find("kvtier "), std::string::npos);
}

TEST(Cli, UnknownCommandsAndFlagsExitTwo) {
  auto cmd = RunCommand({CliPath(), "frobnicate"});
  EXPECT_EQ(cmd.exit_code, 2);
  EXPECT_NE(cmd.err.find("frobnicate"), std::string::npos) << cmd.err;
  auto flag = RunCommand({CliPath(), "hash", "--tokenz", "1"});
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_NE(flag.err.find("--tokenz"), std::string::npos) << flag.err;
  auto none = RunCommand({CliPath()});
  EXPECT_EQ(none.exit_code, 2);
  auto algo = RunCommand({CliPath(), "hash", "--algo", "md5", "--tokens", "1"});
  EXPECT_EQ(algo.exit_code, 2);
  EXPECT_NE(algo.err.find("sha256_cbor"), std::string::npos) << algo.err;
  auto both = RunCommand({CliPath(), "hash", "--tokens", "1", "--tokens-file", "x.json"});
  EXPECT_EQ(both.exit_code, 2);
}

TEST(Cli, BadCaseFileIsAClearErrorNotACrash) {
  testing::TempDir dir;
  testing::WriteFileOrDie(dir.path() / "bad.json", "{\"algo\": \"sha256\", ");
  auto torn = RunCommand({CliPath(), "hash", "--input", dir.path() / "bad.json"});
  EXPECT_EQ(torn.exit_code, 2);
  EXPECT_NE(torn.err.find("malformed JSON"), std::string::npos) << torn.err;
  auto missing = RunCommand({CliPath(), "hash", "--input", dir.path() / "absent.json"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("absent.json"), std::string::npos) << missing.err;
  testing::WriteFileOrDie(dir.path() / "unknown.json", "{\"algo\": \"sha256\", \"tokenz\": []}");
  auto unknown = RunCommand({CliPath(), "hash", "--input", dir.path() / "unknown.json"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("tokenz"), std::string::npos) << unknown.err;
}

TEST(Cli, HumanModePrintsHashesPathsAndPresence) {
  testing::TempDir root;
  std::string tokens;
  for (int i = 0; i < 64; ++i) {
    if (i) tokens += ',';  // not `(i ? "," : "") + ...`: GCC 12 -Wrestrict false positive in Release
    tokens += std::to_string(i);
  }
  auto r = RunCommand({CliPath(), "hash", "--seed", "0", "--tokens", tokens, "--model",
                       "meta-llama/Llama-3.1-8B-Instruct", "--root", root.path()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Golden values from the range_sha256_0 compat case.
  EXPECT_NE(r.out.find("6358e31578a64b75ebe28cdb99d3beae65de82a2087321dc6ec84ae048faaaa6"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("meta-llama_Llama-3.1-8B-Instruct_c13170011f67"), std::string::npos);
  EXPECT_NE(r.out.find("[absent]"), std::string::npos);
  // Create the first chunk's file: the report must now say it is present.
  auto json_run = RunCommand({CliPath(), "hash", "--seed", "0", "--tokens", tokens, "--model",
                              "meta-llama/Llama-3.1-8B-Instruct", "--root", root.path(), "--json"});
  ASSERT_EQ(json_run.exit_code, 0) << json_run.err;
  auto report = nlohmann::json::parse(json_run.out);
  std::filesystem::path first = report["chunks"][0]["path"].get<std::string>();
  std::filesystem::create_directories(first.parent_path());
  testing::WriteFileOrDie(first, "x");
  auto again = RunCommand({CliPath(), "hash", "--seed", "0", "--tokens", tokens, "--model",
                           "meta-llama/Llama-3.1-8B-Instruct", "--root", root.path(), "--json"});
  EXPECT_TRUE(nlohmann::json::parse(again.out)["chunks"][0]["exists"].get<bool>());
  EXPECT_FALSE(nlohmann::json::parse(again.out)["chunks"][1]["exists"].get<bool>());
}

TEST(Cli, SeedComesFromPythonHashSeedLikeVllm) {
  setenv("PYTHONHASHSEED", "1234", 1);
  auto env_seed = RunCommand({CliPath(), "hash", "--tokens", "1,2", "--hash-block-size", "2", "--json"});
  unsetenv("PYTHONHASHSEED");
  auto flag_seed = RunCommand({CliPath(), "hash", "--seed", "1234", "--tokens", "1,2", "--hash-block-size", "2", "--json"});
  auto unset = RunCommand({CliPath(), "hash", "--tokens", "1,2", "--hash-block-size", "2", "--json"});
  ASSERT_EQ(env_seed.exit_code, 0) << env_seed.err;
  auto a = nlohmann::json::parse(env_seed.out), b = nlohmann::json::parse(flag_seed.out),
       c = nlohmann::json::parse(unset.out);
  EXPECT_EQ(a["none_hash_hex"], b["none_hash_hex"]);
  EXPECT_EQ(c["none_hash_seed"], "vllm-none-hash");
  EXPECT_NE(a["block_hashes_hex"], c["block_hashes_hex"]);
}

TEST(Cli, UnseededXxhashWarnsThatHashesAreRandom) {
  unsetenv("PYTHONHASHSEED");
  auto r = RunCommand({CliPath(), "hash", "--algo", "xxhash", "--tokens", "1,2", "--hash-block-size", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("warning"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("random"), std::string::npos) << r.out;
}

TEST(Cli, NamespaceFromAnExistingConfigJson) {
  testing::TempDir dir;
  // The exact config.json vLLM writes for the vllm_unit_test_like case.
  testing::WriteFileOrDie(dir.path() / "config.json",
      "{\n  \"blocks_per_file\": 1,\n  \"dcp_size\": 1,\n  \"dtype\": \"float16\",\n"
      "  \"inference_engine\": \"vllm\",\n  \"kv_cache_groups\": [],\n  \"model_name\": \"test-model\",\n"
      "  \"parallel_agnostic\": false,\n  \"pcp_size\": 1,\n  \"pp_size\": 1,\n"
      "  \"tokens_per_hash\": 16,\n  \"tp_size\": 1\n}");
  auto r = RunCommand({CliPath(), "hash", "--seed", "0", "--tokens", "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15",
                       "--namespace-config", dir.path() / "config.json", "--rank", "3", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["namespace_dir"], "test-model_de3bba26cf36");
  EXPECT_EQ(report["chunks"][0]["relpath"].get<std::string>().substr(0, 27), "test-model_de3bba26cf36_r3/");
}

TEST(Cli, NonUtf8SeedIsAnErrorNotACrash) {
  auto r = RunCommand({CliPath(), "hash", "--seed", "\xff", "--tokens", "1", "--json"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("UTF-8"), std::string::npos) << r.err;
}

TEST(Cli, AmbiguousConfigJsonIsRefused) {
  // Sizes > 1 without "parallel_agnostic": false: a pre-#49440 file whose
  // digest cannot be recomputed. Guessing would print wrong paths.
  testing::TempDir dir;
  testing::WriteFileOrDie(dir.path() / "config.json",
      "{\"blocks_per_file\": 1, \"dcp_size\": 1, \"dtype\": \"bfloat16\", \"inference_engine\": \"vllm\","
      " \"kv_cache_groups\": [], \"model_name\": \"m\", \"pcp_size\": 1, \"pp_size\": 1,"
      " \"tokens_per_hash\": 16, \"tp_size\": 2}");
  auto r = RunCommand({CliPath(), "hash", "--tokens", "1", "--namespace-config", dir.path() / "config.json"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("parallel_agnostic"), std::string::npos) << r.err;
}

TEST(Cli, ConfigCheckPrintsEffectiveConfigOrNamesTheBadKey) {
  auto good = RunCommand({CliPath(), "config", "check", testing::SourceDir() / "configs/default.json"});
  ASSERT_EQ(good.exit_code, 0) << good.err;
  auto effective = nlohmann::json::parse(good.out);
  EXPECT_EQ(effective["spec_name"], "TieringOffloadingSpec");
  EXPECT_EQ(effective["max_tracker_size"], 64000);  // a default filled in
  testing::TempDir dir;
  testing::WriteFileOrDie(dir.path() / "bad.json", "{\"cpu_bytes_to_use\": 1, \"block_size\": 24}");
  auto bad = RunCommand({CliPath(), "config", "check", dir.path() / "bad.json"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("block_size"), std::string::npos) << bad.err;
  auto missing = RunCommand({CliPath(), "config", "check", dir.path() / "absent.json"});
  EXPECT_EQ(missing.exit_code, 1) << missing.err;
}

// checksum_blocks: kvtier's default (true) is not vLLM's (false). `config
// check` prints the effective value in the JSON on stdout and says on stderr
// that it is kvtier's default; a tier that sets it false gets no note.
TEST(Cli, ConfigCheckSaysChecksumBlocksIsKvtiersDefault) {
  auto r = RunCommand({CliPath(), "config", "check", testing::SourceDir() / "configs/default.json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["secondary_tiers"][0]["checksum_blocks"], true) << r.out;
  EXPECT_NE(r.err.find("note: secondary_tiers[0].checksum_blocks: true (kvtier's default; vLLM's default is false)"),
            std::string::npos)
      << r.err;
  testing::TempDir dir;
  testing::WriteFileOrDie(dir.path() / "off.json", R"({"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1,
      "secondary_tiers": [{"type": "fs", "root_dir": "/kv", "checksum_blocks": false}]})");
  auto off = RunCommand({CliPath(), "config", "check", dir.path() / "off.json"});
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_EQ(nlohmann::json::parse(off.out)["secondary_tiers"][0]["checksum_blocks"], false) << off.out;
  EXPECT_EQ(off.err.find("checksum_blocks"), std::string::npos) << off.err;
}

// `kvtier bench tiers`: 300 rows go through a CPU tier of 32 rows to fs and
// come back byte-exact in a fresh process, whose empty CPU tier makes every
// hit an fs hit; the benchmark's namespace is removed afterwards.
TEST(Cli, BenchTiersLoadsEveryRowFromFsInAFreshProcess) {
  testing::TempDir root;
  auto r = RunCommand({CliPath(), "bench", "tiers", "--root", root.path(), "--rows", "300", "--cpu-bytes",
                       std::to_string(32 * 16384), "--row-bytes", "16384", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const auto report = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << r.out;
  EXPECT_EQ(report["rows_verified"], 300) << r.out;
  EXPECT_EQ(report["rows_corrupt"], 0);
  EXPECT_EQ(report["rows_missing"], 0);
  EXPECT_EQ(report["hits"]["fs0"], 300);
  EXPECT_EQ(report["hits"]["cpu"], 0);
  EXPECT_EQ(report["cpu_rows"], 32);
  ASSERT_TRUE(report["store"]["gbps"].is_number());
  ASSERT_TRUE(report["load"]["gbps"].is_number());
  EXPECT_GT(report["store"]["gbps"].get<double>(), 0);
  EXPECT_GT(report["load"]["gbps"].get<double>(), 0);
  EXPECT_TRUE(std::filesystem::is_empty(root.path()));
}

// `kvtier bench fs --no-checksum` runs the tier with checksum_blocks off
// (the figures the issue compares with the plain baseline): its blocks carry
// no CRC32C xattr, while a default run's blocks all do.
TEST(Cli, BenchFsNoChecksumWritesBlocksWithoutTheCrcXattr) {
  for (const bool off : {false, true}) {
    testing::TempDir root;
    std::vector<std::string> args = {CliPath(), "bench", "fs", "--root", root.path(), "--row-bytes", "4096",
                                     "--rows", "6", "--no-direct", "--keep", "--json"};
    if (off) args.push_back("--no-checksum");
    auto r = RunCommand(args);
    ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
    const auto report = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_TRUE(report.is_object()) << r.out;
    EXPECT_EQ(report["xattrs"], !off) << r.out;
    int blocks = 0, with_crc = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(root.path())) {
      if (e.path().extension() != ".bin") continue;
      ++blocks;
      char value[8];
      with_crc += getxattr(e.path().c_str(), "user.vllm.kv_crc32c", value, sizeof value) == 4 ? 1 : 0;
    }
    EXPECT_EQ(blocks, 6);
    EXPECT_EQ(with_crc, off ? 0 : 6) << (off ? "--no-checksum" : "default");
  }
}

TEST(Cli, BenchTiersRefusesRowBytesThatAreNotPageMultiples) {
  testing::TempDir root;
  auto r = RunCommand({CliPath(), "bench", "tiers", "--root", root.path(), "--rows", "10", "--cpu-bytes", "1MiB",
                       "--row-bytes", "5000"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--row-bytes"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("multiple of 4096"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_TRUE(std::filesystem::is_empty(root.path()));
}

}  // namespace
}  // namespace kvtier
