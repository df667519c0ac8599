// Proves that the commands which write an fs namespace name it after the
// model's KV-cache groups, as vLLM's FileMapper does, and that
// `kvtier hash --namespace-config` follows the file's chunking.
//
// Method: run the real CLI on temporary roots. `bench fs` without flags must
// write a config.json with the default group (32 Llama layers, 16 tokens per
// block, parallel-agnostic); `replay --layers 4` one with those 4 layers and
// blocks_per_file 4; `bench tiers --kv-groups` with two groups a namespace
// that is not parallel-agnostic, and its load phase (a child process) must
// find every row there. Bad --kv-groups files must fail with exit 2 and a
// message naming the problem. `hash --namespace-config` on the namespace
// replay wrote (blocks_per_file 4) must list one path per 64-token chunk,
// each present, and refuse a --hash-block-size / --blocks-per-chunk that
// contradicts the file; on a hand-written vLLM config.json it must hash at
// the file's granularity and name each chunk after its last block hash.
// (vLLM's own code checks the exact bytes in
// tests/python/test_cli_vllm_namespace.py.)
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/test_json.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

using testing::CliPath;
using testing::RunCommand;
using testing::TempDir;
namespace fs = std::filesystem;

// The only namespace directory (the one holding config.json) under root.
fs::path OnlyNamespaceDir(const fs::path& root) {
  std::vector<fs::path> found;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (fs::exists(entry.path() / "config.json")) found.push_back(entry.path());
  }
  EXPECT_EQ(found.size(), 1u) << "namespaces under " << root;
  return found.empty() ? fs::path() : found.front();
}

nlohmann::json ConfigOf(const fs::path& root) {
  const fs::path dir = OnlyNamespaceDir(root);
  if (dir.empty()) return nlohmann::json();
  return testing::ReadJsonOrDie(dir / "config.json");
}

std::vector<std::string> LlamaLayers(int n) {
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) names.push_back("model.layers." + std::to_string(i) + ".self_attn.attn");
  return names;
}

// 256 literal tokens: 16 GPU blocks, 4 chunks of 64 tokens.
std::string PromptTokens() {
  std::string list;
  for (int i = 0; i < 256; ++i) {
    if (i) list += ',';  // not `(i ? "," : "") + ...`: GCC 12 -Wrestrict false positive in Release
    list += std::to_string((i * 7919 + 13) % 32000);
  }
  return list;
}

TEST(CliNamespace, BenchFsDefaultIsOneLlamaGroupOf32Layers) {
  TempDir root;
  auto r = RunCommand({CliPath(), "bench", "fs", "--root", root.path(), "--row-bytes", "4096", "--rows", "4",
                       "--no-direct", "--keep", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json config = ConfigOf(root.path());
  ASSERT_EQ(config["kv_cache_groups"].size(), 1u) << config.dump();
  EXPECT_EQ(config["kv_cache_groups"][0]["tokens_per_block"], 16);
  EXPECT_EQ(config["kv_cache_groups"][0]["layer_names"], LlamaLayers(32));
  EXPECT_EQ(config["tokens_per_hash"], 16);
  EXPECT_FALSE(config.contains("parallel_agnostic")) << config.dump();  // one group: agnostic
}

TEST(CliNamespace, ReplayLayersNamesTheNamespaceAndHashFollowsItsChunks) {
  TempDir dir;
  const fs::path root = dir.path() / "root";
  fs::create_directory(root);
  testing::WriteFileOrDie(dir.path() / "trace.jsonl",
                          "{\"arrival_s\": 0, \"session\": \"s\", \"tokens\": [" + PromptTokens() + "]}\n");
  auto r = RunCommand({CliPath(), "replay", "--trace", dir.path() / "trace.jsonl", "--root", root, "--layers", "4",
                       "--device", "-1", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path ns_dir = OnlyNamespaceDir(root);
  const nlohmann::json config = testing::ReadJsonOrDie(ns_dir / "config.json");
  ASSERT_EQ(config["kv_cache_groups"].size(), 1u) << config.dump();
  EXPECT_EQ(config["kv_cache_groups"][0]["layer_names"], LlamaLayers(4));
  EXPECT_EQ(config["blocks_per_file"], 4);  // configs/default.json: block_size 64

  // One path per 64-token chunk (the chunk's last block hash), all written.
  unsetenv("PYTHONHASHSEED");
  auto h = RunCommand({CliPath(), "hash", "--tokens", PromptTokens(), "--namespace-config", ns_dir / "config.json",
                       "--root", root, "--json"});
  ASSERT_EQ(h.exit_code, 0) << h.err;
  const nlohmann::json report = nlohmann::json::parse(h.out);
  EXPECT_EQ(report["namespace_dir"], ns_dir.filename().string());
  EXPECT_EQ(report["block_hashes_hex"].size(), 16u);
  ASSERT_EQ(report["chunks"].size(), 4u) << h.out;
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(report["chunks"][i]["exists"].get<bool>()) << report["chunks"][i].dump();
    EXPECT_EQ(report["chunks"][i]["offload_key_hex"].get<std::string>().substr(0, 64),
              report["block_hashes_hex"][4 * i + 3]);
  }
}

TEST(CliNamespace, HashRefusesFlagsThatContradictTheNamespaceFile) {
  TempDir dir;
  testing::WriteFileOrDie(dir.path() / "config.json",
                          "{\"blocks_per_file\": 4, \"dcp_size\": 1, \"dtype\": \"bfloat16\", \"inference_engine\": "
                          "\"vllm\", \"kv_cache_groups\": [{\"layer_names\": [\"a\"], \"tokens_per_block\": 16}], "
                          "\"model_name\": \"m\", \"pcp_size\": 1, \"pp_size\": 1, \"tokens_per_hash\": 16, "
                          "\"tp_size\": 1}");
  const std::string config = (dir.path() / "config.json").string();
  auto hbs = RunCommand({CliPath(), "hash", "--tokens", "1", "--namespace-config", config, "--hash-block-size", "32"});
  EXPECT_EQ(hbs.exit_code, 2);
  EXPECT_NE(hbs.err.find("--hash-block-size 32 contradicts tokens_per_hash 16"), std::string::npos) << hbs.err;
  auto bpc = RunCommand({CliPath(), "hash", "--tokens", "1", "--namespace-config", config, "--blocks-per-chunk", "1"});
  EXPECT_EQ(bpc.exit_code, 2);
  EXPECT_NE(bpc.err.find("--blocks-per-chunk 1 contradicts blocks_per_file 4"), std::string::npos) << bpc.err;
  // Flags that agree with the file are accepted.
  auto same = RunCommand({CliPath(), "hash", "--tokens", "1", "--namespace-config", config, "--blocks-per-chunk", "4",
                          "--hash-block-size", "16", "--json"});
  EXPECT_EQ(same.exit_code, 0) << same.err;
}

// vLLM's config.json for a 64-token chunk (block_size 64 over 16-token blocks).
constexpr const char* kChunk4Config =
    "{\n  \"blocks_per_file\": 4,\n  \"dcp_size\": 1,\n  \"dtype\": \"bfloat16\",\n"
    "  \"inference_engine\": \"vllm\",\n  \"kv_cache_groups\": [\n    {\n      \"layer_names\": [\n"
    "        \"model.layers.0.self_attn.attn\"\n      ],\n      \"tokens_per_block\": 16\n    }\n  ],\n"
    "  \"model_name\": \"m\",\n  \"pcp_size\": 1,\n  \"pp_size\": 1,\n  \"tokens_per_hash\": 16,\n"
    "  \"tp_size\": 1\n}";

TEST(CliNamespace, HashListsOnePathPerChunkOfTheFile) {
  TempDir dir;
  testing::WriteFileOrDie(dir.path() / "config.json", kChunk4Config);
  auto h = RunCommand({CliPath(), "hash", "--seed", "0", "--tokens", PromptTokens(), "--namespace-config",
                       dir.path() / "config.json", "--json"});
  ASSERT_EQ(h.exit_code, 0) << h.err;
  const nlohmann::json report = nlohmann::json::parse(h.out);
  EXPECT_EQ(report["hash_block_size"], 16);
  ASSERT_EQ(report["block_hashes_hex"].size(), 16u);
  ASSERT_EQ(report["chunks"].size(), 4u) << h.out;
  for (size_t i = 0; i < 4; ++i) {
    const std::string last = report["block_hashes_hex"][4 * i + 3];
    EXPECT_EQ(report["chunks"][i]["relpath"].get<std::string>().substr(report["namespace_dir"].get<std::string>().size() + 4),
              last.substr(0, 3) + "/" + last.substr(3, 2) + "_g0/" + last + ".bin");
  }
}

TEST(CliNamespace, BenchTiersTwoGroupsIsNotParallelAgnosticAndLoadsBack) {
  TempDir dir;
  const fs::path root = dir.path() / "root";
  fs::create_directory(root);
  testing::WriteFileOrDie(dir.path() / "groups.json",
                          "[{\"tokens_per_block\": 16, \"layer_names\": [\"model.layers.0.self_attn.attn\"]},"
                          " {\"tokens_per_block\": 16, \"layer_names\": [\"model.layers.1.self_attn.attn\"]}]");
  auto r = RunCommand({CliPath(), "bench", "tiers", "--root", root, "--rows", "16", "--cpu-bytes", "32KiB",
                       "--row-bytes", "4096", "--batch", "4", "--device", "-1", "--kv-groups",
                       dir.path() / "groups.json", "--keep", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const nlohmann::json config = ConfigOf(root);
  ASSERT_EQ(config["kv_cache_groups"].size(), 2u) << config.dump();
  EXPECT_EQ(config["kv_cache_groups"][1]["layer_names"][0], "model.layers.1.self_attn.attn");
  EXPECT_EQ(config["parallel_agnostic"], false);
  EXPECT_EQ(nlohmann::json::parse(r.out)["rows_verified"], 16);
}

TEST(CliNamespace, BadKvGroupsFilesAreClearErrors) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[{\"tokens_per_block\": 16", "malformed JSON"},
      {"{\"tokens_per_block\": 16}", "expected a non-empty JSON list"},
      {"[]", "expected a non-empty JSON list"},
      {"[{\"tokens_per_block\": 16}]", "[0]: missing key 'layer_names'"},
      {"[{\"layer_names\": [\"a\"]}]", "[0]: missing key 'tokens_per_block'"},
      {"[{\"tokens_per_block\": \"16\", \"layer_names\": [\"a\"]}]", "[0].tokens_per_block"},
      {"[{\"tokens_per_block\": 0, \"layer_names\": [\"a\"]}]", "must be at least 1"},
      {"[{\"tokens_per_block\": 32, \"layer_names\": [\"a\"]}]", "[0].tokens_per_block is 32"},
      {"[{\"tokens_per_block\": 16, \"layer_names\": []}]", "[0].layer_names: expected a non-empty list"},
      {"[{\"tokens_per_block\": 16, \"layer_names\": [\"a\", 3]}]", "[0].layer_names[1]: expected a non-empty string"},
      {"[{\"tokens_per_block\": 16, \"layer_names\": [\"a\"]}, {\"tokens_per_block\": 16, \"layer_names\": [\"a\"]}]",
       "[1].layer_names[0]: layer 'a' is already in a group"},
      {"[{\"tokens_per_block\": 16, \"layer_names\": [\"a\"], \"kind\": \"mamba\"}]", "[0]: unknown key 'kind'"},
      {"[" + std::string(1 << 20, ' ') + "]", "larger than 1048576 bytes"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const fs::path file = dir.path() / ("groups" + std::to_string(i) + ".json");
    testing::WriteFileOrDie(file, cases[i].first);
    auto r = RunCommand({CliPath(), "bench", "fs", "--root", dir.path(), "--row-bytes", "4096", "--rows", "1",
                         "--kv-groups", file});
    EXPECT_EQ(r.exit_code, 2) << "case " << i << ": " << r.err;
    EXPECT_NE(r.err.find(cases[i].second), std::string::npos) << "case " << i << ": " << r.err;
    EXPECT_NE(r.err.find(file.string()), std::string::npos) << "case " << i << ": " << r.err;
  }
  auto both = RunCommand({CliPath(), "replay", "--layers", "2", "--kv-groups", dir.path() / "groups0.json"});
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("--kv-groups"), std::string::npos) << both.err;
  EXPECT_NE(both.err.find("excludes"), std::string::npos) << both.err;
  auto bad_layers = RunCommand({CliPath(), "bench", "tiers", "--root", dir.path(), "--rows", "1", "--cpu-bytes",
                                "4096", "--row-bytes", "4096", "--layers", "0"});
  EXPECT_EQ(bad_layers.exit_code, 2);
  EXPECT_NE(bad_layers.err.find("--layers"), std::string::npos) << bad_layers.err;
}

}  // namespace
}  // namespace kvtier
