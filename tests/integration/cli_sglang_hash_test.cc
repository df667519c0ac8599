// Proves that `kvtier hash --engine sglang` prints SGLang's page keys through
// the real binary: one key per line equal to SGLang's own (two cases embedded
// here, and every case of the vectors made by SGLang's get_hash_str,
// sgl-project/sglang python/sglang/srt/mem_cache/utils.py at df0dfbaa4529,
// read from ../shared/sglang/page_hash_vectors.json without bigram pairs
// where the kit is present); --json gives each page's token
// range and its file's path below the block directory (FORMAT.md L6-L8,
// group 0); --extra-key/--cache-salt seed the chain exactly as --prior-hash
// with the seed printed, absent and empty seeds differ, and the output says
// the seed encoding is unverified; bad input and flags of the other engine
// exit 2 with a message naming the flag or token. With a namespace (the
// SGLang geometry flags, or --namespace-config on the config.json they
// describe) each key is followed by its file's path, equal to
// SglangNamespace::PageRelPath's (L105, L106: the rank from TP/PP/CP ranks,
// TP rank 0's for MLA), and with --root by whether the file exists.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvtier/sglang.h"
#include "support/test_json.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

using testing::CliPath;
using testing::RunCommand;

testing::CommandResult Hash(std::vector<std::string> args) {
  args.insert(args.begin(), {CliPath().string(), "hash", "--engine", "sglang"});
  return RunCommand(args);
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    out.push_back(text.substr(start, nl - start));
  }
  EXPECT_EQ(start, text.size()) << "output does not end with a newline";
  return out;
}

std::string Join(const std::vector<int64_t>& ids) {
  std::string out;
  for (int64_t id : ids) out += (out.empty() ? "" : ",") + std::to_string(id);
  return out;
}

TEST(CliSglangHash, PrintsOneKeyPerLine) {
  const testing::CommandResult one = Hash({"--tokens", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16", "--page-size", "16"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(Lines(one.out), std::vector<std::string>{"77d735ce838418aa151bd96b5b1e78ee63860892e0a95c00fe34178442be9b07"});
  const testing::CommandResult five = Hash({"--tokens", "11,22,33,44,55", "--page-size", "1"});
  ASSERT_EQ(five.exit_code, 0) << five.err;
  EXPECT_EQ(Lines(five.out), (std::vector<std::string>{
                                 "cb30e91817239109ffd0a5870046e128f04619da80c7624d921162fdfe514f76",
                                 "6b991b550caaa0ae39d05dd3be81c1dad8fdf2d893215a531d657a80e250feb9",
                                 "da241ac97194a1203d0edf76fa44eb512bdae7bb9a231a77e4156b9ec33f3dba",
                                 "951719c7b85d9778c12534e45c6351a051b97639f3d24e70c39e57be5415f88b",
                                 "bbca5092e6b7cfca55e4e12909c596557877627909ea84ee5d47ea80ee4fca0c"}));
}

TEST(CliSglangHash, MatchesTheSharedVectors) {
  const std::filesystem::path file = testing::SourceDir() / "../shared/sglang/page_hash_vectors.json";
  if (!std::filesystem::exists(file)) GTEST_SKIP() << "no " << file.string() << " (the SGLang kit is absent)";
  const nlohmann::json doc = testing::ReadJsonOrDie(file);
  int checked = 0;
  for (const nlohmann::json& c : doc["cases"]) {
    if (c["token_ids"].empty() || c["token_ids"][0].is_array()) continue;  // the CLI takes flat ids only
    SCOPED_TRACE(c["name"].get<std::string>());
    std::vector<std::string> args = {"--tokens", Join(c["token_ids"].get<std::vector<int64_t>>()), "--page-size",
                                     std::to_string(c["page_size"].get<int>())};
    if (!c["prior_hash"].is_null()) args.insert(args.end(), {"--prior-hash", c["prior_hash"]});
    const testing::CommandResult r = Hash(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(Lines(r.out), c["page_keys"].get<std::vector<std::string>>());
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

TEST(CliSglangHash, JsonGivesRangesAndBlockDirPaths) {
  const testing::CommandResult r = Hash({"--tokens", "1,2,3,4,5", "--page-size", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["engine"], "sglang");
  EXPECT_TRUE(j["namespace_seed"].is_null());
  EXPECT_TRUE(j["prior_hash_hex"].is_null());
  ASSERT_EQ(j["pages"].size(), 3u);  // the trailing partial page too
  EXPECT_EQ(j["pages"][2]["first_token"], 4);
  EXPECT_EQ(j["pages"][2]["last_token"], 4);
  for (const nlohmann::json& p : j["pages"]) {
    const std::string key = p["key"];
    EXPECT_EQ(p["block_dir_relpath"], key.substr(0, 3) + "/" + key.substr(3, 2) + "_g0/" + key + ".bin");
  }
}

TEST(CliSglangHash, SeededChainEqualsThePriorHashChain) {
  const std::string tokens = "5,6,7,8,9,10";
  const testing::CommandResult seeded =
      Hash({"--tokens", tokens, "--page-size", "4", "--extra-key", "lora-7", "--cache-salt", "salt", "--json"});
  ASSERT_EQ(seeded.exit_code, 0) << seeded.err;
  const nlohmann::json j = nlohmann::json::parse(seeded.out);
  EXPECT_EQ(j["namespace_seed"]["verified"], false);
  const std::string seed = j["namespace_seed"]["seed_hex"];
  EXPECT_EQ(seed, "ac2584d2a0a5e9542240ba73ed5686d803fe7730def4bb1a2be87ed79c1089b7");  // sglang_page_hash_test
  const testing::CommandResult chained = Hash({"--tokens", tokens, "--page-size", "4", "--prior-hash", seed});
  ASSERT_EQ(chained.exit_code, 0) << chained.err;
  EXPECT_EQ(Lines(chained.out), j["page_keys"].get<std::vector<std::string>>());

  const testing::CommandResult plain = Hash({"--tokens", tokens, "--page-size", "4"});
  const testing::CommandResult empty_key = Hash({"--tokens", tokens, "--page-size", "4", "--extra-key", ""});
  const testing::CommandResult empty_salt = Hash({"--tokens", tokens, "--page-size", "4", "--cache-salt", ""});
  for (const auto* r : {&plain, &empty_key, &empty_salt}) ASSERT_EQ(r->exit_code, 0) << r->err;
  EXPECT_NE(plain.out, empty_key.out);
  EXPECT_NE(plain.out, empty_salt.out);
  EXPECT_NE(empty_key.out, empty_salt.out);
  EXPECT_NE(plain.out, chained.out);
}

const std::vector<std::string> kGeometry = {"--model",     "org/M", "--mem-layout", "page_first",
                                            "--k-bytes-per-token", "8", "--v-bytes-per-token", "8",
                                            "--layer-num", "2", "--tp", "4", "--tp-rank", "3",
                                            "--pp", "2", "--pp-rank", "1"};

SglangPageSpec GeometrySpec() {
  SglangPageSpec s;
  s.model_name = "org/M", s.page_size = 4, s.mem_layout = "page_first", s.dtype = "bfloat16";
  s.k_bytes_per_token = 8, s.v_bytes_per_token = 8, s.layer_num = 2;
  s.tp_size = 4, s.tp_rank = 3, s.pp_size = 2, s.pp_rank = 1;
  return s;
}

std::vector<std::string> With(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(CliSglangHash, NamespaceFlagsGivePaths) {
  const SglangNamespace ns = SglangNamespace::Create(GeometrySpec()).value();
  ASSERT_EQ(ns.rank(), 7);  // (pp_rank 1 * cp 1 + 0) * tp 4 + tp_rank 3
  testing::TempDir root;
  const testing::CommandResult r = Hash(With({"--tokens", "1,2,3,4,5,6,7,8,9", "--page-size", "4", "--json"}, kGeometry));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["namespace_dir"], ns.dir_name());
  EXPECT_EQ(j["block_dir"], ns.block_dir_name());
  EXPECT_EQ(j["config_json"], ns.config_json());
  EXPECT_EQ(j["page_bytes"], 128);
  ASSERT_EQ(j["pages"].size(), 3u);
  for (const nlohmann::json& p : j["pages"]) EXPECT_EQ(p["relpath"], ns.PageRelPath(p["key"].get<std::string>()));

  // With --root: each existing page is [present], the others [absent].
  const std::string first = j["pages"][0]["relpath"];
  std::filesystem::create_directories((root.path() / first).parent_path());
  testing::WriteFileOrDie(root.path() / first, std::string(128, 'p'));
  const testing::CommandResult text =
      Hash(With({"--tokens", "1,2,3,4,5,6,7,8,9", "--page-size", "4", "--root", root.path().string()}, kGeometry));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  const std::vector<std::string> lines = Lines(text.out);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], j["pages"][0]["key"].get<std::string>() + "  " + root.path().string() + "/" + first + "  [present]");
  EXPECT_TRUE(lines[1].ends_with("  [absent]")) << lines[1];
}

TEST(CliSglangHash, NamespaceConfigGivesTheSamePaths) {
  const SglangNamespace ns = SglangNamespace::Create(GeometrySpec()).value();
  testing::TempDir dir;
  testing::WriteFileOrDie(dir.path() / "config.json", ns.config_json());
  const std::string config = (dir.path() / "config.json").string();
  const testing::CommandResult flags = Hash(With({"--tokens", "1,2,3,4,5"}, With(kGeometry, {"--page-size", "4"})));
  const testing::CommandResult file =
      Hash({"--tokens", "1,2,3,4,5", "--namespace-config", config, "--tp-rank", "3", "--pp-rank", "1"});
  ASSERT_EQ(flags.exit_code, 0) << flags.err;
  ASSERT_EQ(file.exit_code, 0) << file.err;
  EXPECT_EQ(file.out, flags.out);  // page_size from the file
  EXPECT_NE(file.out.find(ns.block_dir_name() + "/"), std::string::npos) << file.out;

  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"--namespace-config", config, "--page-size", "8"}, "--page-size 8 contradicts"},
      {{"--namespace-config", config, "--layer-num", "3"}, "--layer-num contradicts --namespace-config"},
      {{"--page-size", "4", "--model", "m", "--mem-layout", "page_first"}, "--k-bytes-per-token"},
      {{"--page-size", "4", "--layer-num", "3"}, "--layer-num needs --model"},
      {{"--page-size", "4", "--root", dir.path().string()}, "--root needs the namespace"},
  };
  for (const auto& [args, names] : refused) {
    const testing::CommandResult r = Hash(With({"--tokens", "1,2"}, args));
    EXPECT_EQ(r.exit_code, 2) << names << ": " << r.out;
    EXPECT_NE(r.err.find(names), std::string::npos) << r.err;
  }
  // vLLM's mode names the engine an SGLang config.json needs.
  const testing::CommandResult vllm = RunCommand({CliPath().string(), "hash", "--tokens", "1", "--namespace-config", config});
  EXPECT_EQ(vllm.exit_code, 2);
  EXPECT_NE(vllm.err.find("--engine sglang"), std::string::npos) << vllm.err;
}

TEST(CliSglangHash, MlaPagesLieInTpRankZerosDirectory) {
  const std::vector<std::string> mla = {"--tokens", "1,2,3,4", "--page-size", "4", "--model", "m", "--mla",
                                        "--mem-layout", "page_first", "--k-bytes-per-token", "576",
                                        "--layer-num", "4", "--tp", "8", "--json"};
  const testing::CommandResult r0 = Hash(With(mla, {"--tp-rank", "0"}));
  const testing::CommandResult r5 = Hash(With(mla, {"--tp-rank", "5"}));
  ASSERT_EQ(r0.exit_code, 0) << r0.err;
  ASSERT_EQ(r5.exit_code, 0) << r5.err;
  const nlohmann::json j0 = nlohmann::json::parse(r0.out), j5 = nlohmann::json::parse(r5.out);
  EXPECT_EQ(j5["block_dir"], j0["block_dir"]);
  EXPECT_TRUE(j0["block_dir"].get<std::string>().ends_with("_r0")) << j0["block_dir"];
}

TEST(CliSglangHash, HelpSaysTheSeedEncodingIsUnverified) {
  const testing::CommandResult r = RunCommand({CliPath().string(), "hash", "--help"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("NOT verified against SGLang's code"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--prior-hash"), std::string::npos);
}

TEST(CliSglangHash, BadInputExitsTwoNamingIt) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--tokens", "1,4294967296", "--page-size", "2"}, "tokens[1]: 4294967296"},
      {{"--tokens", "-1", "--page-size", "2"}, "tokens[0]: -1"},
      {{"--tokens", "1,99999999999999999999999", "--page-size", "2"}, "tokens[1]"},
      {{"--tokens", "1,2"}, "--page-size"},
      {{"--page-size", "2"}, "--tokens"},
      {{"--tokens", "1,2", "--page-size", "2", "--prior-hash", "abc"}, "--prior-hash"},
      {{"--tokens", "1,2", "--page-size", "2", "--prior-hash", "ab", "--extra-key", "x"}, "--prior-hash"},
      {{"--tokens", "1,2", "--page-size", "2", "--rank", "1"}, "--rank does not apply to --engine sglang"},
      {{"--tokens", "1,2", "--page-size", "2", "--algo", "xxhash"}, "--algo does not apply"},
      {{"--tokens", "1,2", "--page-size", "2", "--extra-key", "\xff"}, "extra_key"},
  };
  for (const auto& [args, names] : cases) {
    const testing::CommandResult r = Hash(args);
    EXPECT_EQ(r.exit_code, 2) << names << ": " << r.err;
    EXPECT_NE(r.err.find(names), std::string::npos) << r.err;
  }
  const testing::CommandResult vllm = RunCommand({CliPath().string(), "hash", "--tokens", "1,2", "--page-size", "2"});
  EXPECT_EQ(vllm.exit_code, 2);
  EXPECT_NE(vllm.err.find("--page-size does not apply to --engine vllm"), std::string::npos) << vllm.err;
  const testing::CommandResult engine = RunCommand({CliPath().string(), "hash", "--engine", "tgi", "--tokens", "1"});
  EXPECT_EQ(engine.exit_code, 2);
  EXPECT_NE(engine.err.find("--engine"), std::string::npos) << engine.err;
}

}  // namespace
}  // namespace kvtier
