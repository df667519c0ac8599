// Proves `kvtier du --top N [--by bytes|age]` through the real binary on a
// root holding vLLM and SGLang namespaces of known sizes and ages: by bytes
// the N largest come first, by age the N whose newest block is oldest
// (across engines; one without blocks first of all), ties go by name, N
// beyond the count lists them all, the
// totals stay the whole volume's, JSON says {"top": {n, by, of}} and text
// "top n of m"; --by without --top, --top 0 and an unknown --by exit 2.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;

struct NsSpec {
  std::string dir, engine;
  int files;
  size_t file_bytes;
  int64_t age_s;  // of every file
};

// bytes: b 5000 > a 3000 > e 3000 (a before e by name) > c 200 > d 50.
// age (coldest first): f (no blocks) > d 30 d > b 10 d > a = e 1 d (a before e) > c 1 h.
const std::vector<NsSpec> kTree = {
    {"sg-a_0123456789ab", "sglang", 3, 1000, 86400},
    {"vl-b_0123456789ab", "vllm", 1, 5000, 10 * 86400},
    {"vl-c_0123456789ab", "vllm", 2, 100, 3600},
    {"sg-d_0123456789ab", "sglang", 5, 10, 30 * 86400},
    {"vl-e_0123456789ab", "vllm", 3, 1000, 86400},
    {"sg-f_0123456789ab", "sglang", 0, 0, 0},
};

class CliDuTopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const NsSpec& ns : kTree) {
      fs::create_directories(root_.path() / ns.dir);
      testing::WriteFileOrDie(root_.path() / ns.dir / "config.json",
                              nlohmann::json({{"inference_engine", ns.engine}, {"model_name", ns.dir}}).dump());
      for (int i = 0; i < ns.files; ++i) {
        const std::string hex = "abcde" + std::string(58, '0') + std::to_string(i);
        const fs::path file = root_.path() / (ns.dir + "_r0") / "abc" / "de_g0" / (hex + ".bin");
        fs::create_directories(file.parent_path());
        testing::WriteFileOrDie(file, std::string(ns.file_bytes, 'k'));
        const timespec ts{time(nullptr) - ns.age_s, 0};
        const timespec times[2] = {ts, ts};
        ASSERT_EQ(utimensat(AT_FDCWD, file.c_str(), times, 0), 0);
      }
    }
  }
  testing::CommandResult Du(std::vector<std::string> args) {
    args.insert(args.begin(), {testing::CliPath().string(), "du"});
    args.push_back(root_.path().string());
    return testing::RunCommand(args);
  }
  // The namespaces' dirs in the order of du --json, checking the totals and "top".
  std::vector<std::string> Order(const std::vector<std::string>& args, size_t n, const std::string& by) {
    std::vector<std::string> full = args;
    full.push_back("--json");
    const testing::CommandResult r = Du(full);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
    if (j.is_discarded()) return {};
    EXPECT_EQ(j["total_bytes"], 5000u + 3000 + 3000 + 200 + 50) << "the totals are the whole volume's";
    EXPECT_EQ(j["top"], nlohmann::json({{"n", n}, {"by", by}, {"of", kTree.size()}}));
    std::vector<std::string> dirs;
    for (const nlohmann::json& u : j["namespaces"]) dirs.push_back(u["dir"]);
    return dirs;
  }

  testing::TempDir root_;
};

TEST_F(CliDuTopTest, LargestFirstByDefault) {
  EXPECT_EQ(Order({"--top", "2"}, 2, "bytes"), (std::vector<std::string>{"vl-b_0123456789ab", "sg-a_0123456789ab"}));
  EXPECT_EQ(Order({"--top", "3", "--by", "bytes"}, 3, "bytes"),
            (std::vector<std::string>{"vl-b_0123456789ab", "sg-a_0123456789ab", "vl-e_0123456789ab"}));
}

TEST_F(CliDuTopTest, ColdestFirstByAge) {
  EXPECT_EQ(Order({"--top", "2", "--by", "age"}, 2, "age"),
            (std::vector<std::string>{"sg-f_0123456789ab", "sg-d_0123456789ab"}));
  EXPECT_EQ(Order({"--top", "99", "--by", "age"}, 99, "age"),
            (std::vector<std::string>{"sg-f_0123456789ab", "sg-d_0123456789ab", "vl-b_0123456789ab",
                                      "sg-a_0123456789ab", "vl-e_0123456789ab", "vl-c_0123456789ab"}));
}

TEST_F(CliDuTopTest, TextSaysWhichTop) {
  const testing::CommandResult r = Du({"--top", "2", "--by", "age"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("top 2 of 6 namespaces by age"), std::string::npos) << r.out;
  const size_t f = r.out.find("sg-f_0123456789ab"), d = r.out.find("sg-d_0123456789ab");
  EXPECT_NE(f, std::string::npos) << r.out;
  EXPECT_NE(d, std::string::npos) << r.out;
  EXPECT_LT(f, d) << "coldest first";
  EXPECT_EQ(r.out.find("vl-b_0123456789ab"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("total: 6 namespaces"), std::string::npos) << r.out;
  const testing::CommandResult all = Du({});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(all.out.find("top "), std::string::npos) << "no --top, no top line";
}

TEST_F(CliDuTopTest, BadFlagsExitTwo) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--by", "age"}, {"--top", "0"}, {"--top", "2", "--by", "size"}, {"--top", "-1"}}) {
    const testing::CommandResult r = Du(args);
    EXPECT_EQ(r.exit_code, 2) << args[0] << " " << args[1] << ": " << r.out;
  }
}

}  // namespace
}  // namespace kvtier
