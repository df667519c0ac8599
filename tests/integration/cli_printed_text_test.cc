// Proves that what the real `kvtier` binary prints stays one line per item
// and safe on a terminal whatever bytes the user or the volume gave it, by
// the rules of the operators' reports (tools/cli/cli_text.h):
//  * `hash` (both engines) prints a --model holding a newline and an escape
//    sequence, and the paths built from it, quoted in bash's $'...' form:
//    one line per page or chunk, no raw control byte;
//  * `hash --json` (both engines) with a --root that is not UTF-8 exits 0
//    with JSON a strict parser reads, "path_hex" giving back the exact bytes
//    (nlohmann's dump throws on such a string unless it is made UTF-8);
//  * `replay` and `bench fs` quote the trace path and the root in their
//    text reports;
//  * every error message (an unknown command, an unexpected argument, a bad
//    --engine, a config key, a duration, a missing trace file) and gc
//    --watch's log line about a root is one line: the user's newline or
//    escape sequence is escaped, not printed.
// The quoting's round trip through bash is proven in cli_names_test.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/test_support.h"
#include "util/hex.h"
#include "util/name_escape.h"
#include "util/utf8.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using internal::QuoteName;
using testing::CliPath;
using testing::CommandResult;

const std::string kOddModel = "a\nb\x1b[31m";

CommandResult Kvtier(std::vector<std::string> args) {
  std::vector<std::string> argv = {"/usr/bin/timeout", "-k", "5", "60", CliPath().string()};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::RunCommand(argv);
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  for (size_t at = 0, end; (end = text.find('\n', at)) != std::string::npos; at = end + 1) {
    out.push_back(text.substr(at, end - at));
  }
  return out;
}

// The exact bytes of member `key` of `o`: from "<key>_hex" when present.
std::string Bytes(const nlohmann::json& o, const std::string& key) {
  if (!o.contains(key + "_hex")) return o.at(key).get<std::string>();
  const auto bytes = internal::HexDecode(o.at(key + "_hex").get<std::string>());
  EXPECT_TRUE(bytes.has_value());
  return bytes ? std::string(bytes->begin(), bytes->end()) : "";
}

nlohmann::json ParseStrict(const CommandResult& r) {
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << "exit " << r.exit_code << ", output not JSON:\n" << r.out << r.err;
  return j.is_discarded() ? nlohmann::json::object() : j;
}

std::vector<std::string> SglangHash(const std::string& model, const std::string& root) {
  return {"hash", "--engine", "sglang", "--tokens", "1,2,3,4,5,6,7,8", "--page-size", "4", "--model", model,
          "--mem-layout", "layer_first", "--k-bytes-per-token", "128", "--v-bytes-per-token", "128", "--layer-num",
          "2", "--root", root};
}

std::vector<std::string> VllmHash(const std::string& model, const std::string& root) {
  return {"hash", "--tokens", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32",
          "--model", model, "--root", root};
}

std::vector<std::string> With(std::vector<std::string> args, const std::string& more) {
  args.push_back(more);
  return args;
}

TEST(CliPrintedText, SglangHashQuotesAModelWithControlCharacters) {
  testing::TempDir root;
  const CommandResult text = Kvtier(SglangHash(kOddModel, root.path().string()));
  const CommandResult json = Kvtier(With(SglangHash(kOddModel, root.path().string()), "--json"));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json pages = ParseStrict(json)["pages"];
  ASSERT_EQ(pages.size(), 2u) << json.out;
  EXPECT_EQ(testing::UnsafeToPrint(text.out), "") << text.out;
  const std::vector<std::string> lines = Lines(text.out);
  ASSERT_EQ(lines.size(), pages.size()) << "one line per page:\n" << text.out;
  for (size_t i = 0; i < pages.size(); ++i) {
    const std::string path = Bytes(pages[i], "path");
    EXPECT_NE(path.find(kOddModel), std::string::npos) << path;
    EXPECT_EQ(lines[i], pages[i]["key"].get<std::string>() + "  " + QuoteName(path) + "  [absent]");
  }
}

TEST(CliPrintedText, VllmHashQuotesTheNamespaceAndEveryPath) {
  testing::TempDir root;
  const CommandResult text = Kvtier(VllmHash(kOddModel, root.path().string()));
  const CommandResult json = Kvtier(With(VllmHash(kOddModel, root.path().string()), "--json"));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json report = ParseStrict(json);
  EXPECT_EQ(testing::UnsafeToPrint(text.out), "") << text.out;
  const std::string ns = Bytes(report, "namespace_dir");
  EXPECT_NE(text.out.find("\nnamespace      " + QuoteName(ns) + "\n"), std::string::npos) << text.out;
  ASSERT_EQ(report["chunks"].size(), 2u);
  for (const nlohmann::json& chunk : report["chunks"]) {
    EXPECT_NE(text.out.find(" " + QuoteName(Bytes(chunk, "path")) + "  [absent]\n"), std::string::npos) << text.out;
  }
}

TEST(CliPrintedText, HashJsonWithARootThatIsNotUtf8) {
  testing::TempDir dir;
  const std::string root = (dir.path() / "r\xff").string();
  for (const auto& args : {VllmHash("m", root), SglangHash("m", root)}) {
    const CommandResult r = Kvtier(With(args, "--json"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = ParseStrict(r);
    const nlohmann::json& items = j.contains("chunks") ? j["chunks"] : j["pages"];
    ASSERT_FALSE(items.empty()) << r.out;
    for (const nlohmann::json& item : items) {
      EXPECT_EQ(Bytes(item, "path").rfind(root + "/", 0), 0u) << item.dump();
    }
  }
}

TEST(CliPrintedText, ReplayAndBenchQuoteTheirPaths) {
  testing::TempDir dir;
  const fs::path trace = dir.path() / ("t" + kOddModel + ".jsonl");
  const fs::path config = dir.path() / "config.json";
  testing::WriteFileOrDie(trace, R"({"arrival_s": 0, "session": "s", "segments": [{"ref": "a", "len": 128}]})" "\n");
  testing::WriteFileOrDie(config, R"({"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 67108864,
    "block_size": 64, "secondary_tiers": [{"type": "fs", "root_dir": "./kvcache"}]})");
  const CommandResult replay = Kvtier({"replay", "--trace", trace.string(), "--config", config.string(), "--root",
                                       (dir.path() / "kv").string(), "--device", "-1"});
  ASSERT_EQ(replay.exit_code, 0) << replay.err;
  EXPECT_EQ(testing::UnsafeToPrint(replay.out), "") << replay.out;
  EXPECT_EQ(replay.out.rfind("kvtier replay: " + QuoteName(trace.string()) + ", 1 instance(s)", 0), 0u) << replay.out;

  const fs::path bench_root = dir.path() / ("b" + kOddModel);
  fs::create_directories(bench_root);
  const CommandResult bench =
      Kvtier({"bench", "fs", "--root", bench_root.string(), "--row-bytes", "4096", "--rows", "1"});
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_EQ(testing::UnsafeToPrint(bench.out), "") << bench.out;
  EXPECT_NE(bench.out.find(" under " + QuoteName(bench_root.string()) + "\n"), std::string::npos) << bench.out;
}

TEST(CliPrintedText, ErrorMessagesAreOneLineEach) {
  testing::TempDir dir;
  const fs::path config = dir.path() / "config.json";
  testing::WriteFileOrDie(config, "{\"spec_name\": \"TieringOffloadingSpec\", \"cpu_bytes_to_use\": 1048576, "
                                  "\"a\\nb\\u001b[31m\": 1}");
  const std::string root = dir.path().string();
  const std::vector<std::vector<std::string>> runs = {
      {kOddModel},
      {"du", root, "--force", "--bogus", kOddModel},
      {"hash", "--engine", kOddModel, "--tokens", "1"},
      {"config", "check", config.string()},
      {"gc", root, "--force", "--older-than", "1" + kOddModel},
      {"replay", "--trace", (dir.path() / ("missing" + kOddModel)).string()},
  };
  for (const std::vector<std::string>& args : runs) {
    const CommandResult r = Kvtier(args);
    EXPECT_EQ(r.exit_code, 2) << args.front() << ": " << r.err;
    EXPECT_EQ(testing::UnsafeToPrint(r.err), "") << r.err;
    const std::vector<std::string> lines = Lines(r.err);
    ASSERT_FALSE(lines.empty()) << args.front();
    for (const std::string& line : lines) {
      const bool ours = line.rfind("kvtier", 0) == 0 || line == "Run 'kvtier --help' for usage.";
      EXPECT_TRUE(ours) << "a message split over lines:\n" << r.err;
    }
    EXPECT_NE(r.err.find("a\\nb\\x1b[31m"), std::string::npos) << "the value, escaped:\n" << r.err;
  }
}

// gc --watch logs with a timestamp first; a root it refuses is named in one line.
TEST(CliPrintedText, WatchLogLinesAreOneLineEach) {
  testing::TempDir dir;
  const fs::path root = dir.path() / ("w" + kOddModel);
  fs::create_directories(root);
  testing::WriteFileOrDie(root / "notes.txt", "not a root");  // so the watch refuses it at once
  const CommandResult r = Kvtier({"gc", root.string(), "--watch"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(testing::UnsafeToPrint(r.err), "") << r.err;
  EXPECT_EQ(Lines(r.err).size(), 1u) << r.err;
  EXPECT_NE(r.err.find("/wa\\nb\\x1b[31m does not look like"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvtier
