// Proves that every flag of the real `kvtier` binary that takes a duration
// reads the one grammar docs/ops.md gives (tools/cli/duration.h):
//  * fractional seconds ("0.5", ".5", "1.5") and every unit (ms, s, m, h, d)
//    work for du/fsck/gc --io-timeout and --tmp-grace, gc --older-than,
//    --interval, --check-interval and --collector-ttl, hash --io-timeout
//    (both engines) and bench fs --io-timeout, on a real (empty) root;
//  * a bad value of each (negative, NaN, an exponent, empty, an unknown unit,
//    beyond the maximum) is refused: exit 2 (fsck: 8, its code for an
//    operational error), one message that names the flag and, for a value
//    that is no duration, lists every unit, ms included. Also where the flag
//    would go unused in that run (gc --interval without --watch, hash
//    --io-timeout without --root): a typo is never silently ignored.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using testing::CliPath;
using testing::CommandResult;

// Each run is under timeout(1): a hang fails as exit 124 instead of stalling CI.
CommandResult Kvtier(std::vector<std::string> args) {
  std::vector<std::string> argv = {"/usr/bin/timeout", "-k", "5", "60", CliPath().string()};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::RunCommand(argv);
}

std::string Show(const std::vector<std::string>& args, const CommandResult& r) {
  std::string line = "kvtier";
  for (const std::string& a : args) line += " '" + a + "'";
  return line + "\nexit " + std::to_string(r.exit_code) + "\nstdout: " + r.out + "\nstderr: " + r.err;
}

std::string Tokens16() { return "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16"; }

class CliDurationsTest : public ::testing::Test {
 protected:
  // One command that takes a duration flag, without the flag.
  struct Use {
    std::vector<std::string> args;
    std::string flag;
    int bad_exit = 2;
  };

  std::vector<Use> Uses() const {
    const std::string r = root_.path().string();
    const std::vector<std::string> sglang = {"hash", "--engine", "sglang", "--tokens", Tokens16(), "--page-size", "4",
                                             "--model", "m", "--mem-layout", "layer_first", "--k-bytes-per-token",
                                             "128", "--v-bytes-per-token", "128", "--layer-num", "2"};
    std::vector<std::string> sglang_root = sglang;
    sglang_root.insert(sglang_root.end(), {"--root", r});
    return {
        {{"du", r, "--force"}, "--io-timeout"},
        {{"fsck", r, "--force"}, "--io-timeout", 8},
        {{"fsck", r, "--force"}, "--tmp-grace", 8},
        {{"gc", r, "--force", "--dry-run"}, "--io-timeout"},
        {{"gc", r, "--force", "--dry-run"}, "--tmp-grace"},
        {{"gc", r, "--force", "--dry-run"}, "--older-than"},
        {{"gc", r, "--force", "--dry-run"}, "--interval"},
        {{"gc", r, "--force", "--dry-run"}, "--check-interval"},
        {{"gc", r, "--force", "--dry-run"}, "--collector-ttl"},
        {{"gc", r, "--force", "--max-bytes", "1G"}, "--collector-ttl"},
        {{"hash", "--tokens", Tokens16(), "--model", "m", "--root", r}, "--io-timeout"},
        {{"hash", "--tokens", Tokens16()}, "--io-timeout"},
        {sglang_root, "--io-timeout"},
        {sglang, "--io-timeout"},
        {{"bench", "fs", "--root", r, "--row-bytes", "4096", "--rows", "1"}, "--io-timeout"},
    };
  }

  CommandResult Run(const Use& use, const std::string& value, std::vector<std::string>* args) const {
    *args = use.args;
    args->insert(args->end(), {use.flag, value});
    return Kvtier(*args);
  }

  testing::TempDir root_;
};

TEST_F(CliDurationsTest, FractionalSecondsAndEveryUnitWork) {
  for (const Use& use : Uses()) {
    // bench fs runs a real benchmark: one value is enough there.
    const bool bench = use.args.front() == "bench";
    const std::vector<std::string> values = bench ? std::vector<std::string>{"1.5"}
                                                  : std::vector<std::string>{"0.5", ".5", "1.5", "250ms", "1.5m",
                                                                             "0.5h", "0.25d"};
    for (const std::string& value : values) {
      std::vector<std::string> args;
      const CommandResult r = Run(use, value, &args);
      EXPECT_EQ(r.exit_code, 0) << Show(args, r);
    }
  }
}

TEST_F(CliDurationsTest, BadValuesAreRefusedNamingTheFlagAndEveryUnit) {
  struct Bad {
    std::string value, says;
  };
  const std::string kUnits = "ms, s, m, h or d";
  const Bad kBad[] = {{"-1", "negative"}, {"nan", kUnits}, {"1e3", kUnits}, {"", "empty"},
                      {"5sec", kUnits},   {"0,5", kUnits}, {"36501d", "out of range"}};
  for (const Use& use : Uses()) {
    for (const Bad& bad : kBad) {
      std::vector<std::string> args;
      const CommandResult r = Run(use, bad.value, &args);
      EXPECT_EQ(r.exit_code, use.bad_exit) << Show(args, r);
      EXPECT_NE(r.err.find(use.flag + ": "), std::string::npos) << Show(args, r);
      EXPECT_NE(r.err.find(bad.says), std::string::npos) << Show(args, r);
      EXPECT_EQ(r.out, "") << Show(args, r);
    }
  }
}

TEST_F(CliDurationsTest, ZeroIsRefusedWhereItMeansNothing) {
  for (const std::string flag : {"--interval", "--check-interval", "--collector-ttl"}) {
    const std::vector<std::string> args = {"gc", root_.path().string(), "--force", "--dry-run", flag, "0"};
    const CommandResult r = Kvtier(args);
    EXPECT_EQ(r.exit_code, 2) << Show(args, r);
    EXPECT_NE(r.err.find(flag + ": must be more than 0"), std::string::npos) << Show(args, r);
  }
}

}  // namespace
}  // namespace kvtier
