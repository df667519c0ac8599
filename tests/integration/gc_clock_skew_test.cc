// Proves that a use time in the future cannot pin a block (FORMAT.md L155):
// - a block dated 72 years ahead (a writer's clock, or a co-tenant's utime)
//   goes before a block really used an hour ago, in gc's one-walk path (the
//   candidate buffer) and in its histogram path (a buffer of no entries); its
//   report counts it;
// - a block dated within the 300 s tolerance ahead counts as used now: the
//   hour-old block goes first;
// - `kvtier du --top N --by age` puts a namespace whose blocks are all dated
//   far ahead first among the coldest, and `kvtier du` prints such a time as
//   "in <n>d" with a note, never as a negative age.
// Method: blocks planted in vLLM's layout on a real directory with utimensat
// use times relative to now; gc through the library, du through the binary.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "kvtier/ops.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kRow = 4096;
constexpr int64_t kFarAheadS = 2275110190;  // the issue's: ~72 years

// A block of namespace `ns` numbered `i`, used at `used`; returns its path.
fs::path Plant(const fs::path& root, const std::string& ns, int i, int64_t used) {
  const std::string hex = "abcde" + std::string(57, '0') + (i < 10 ? "0" : "") + std::to_string(i);
  const fs::path file = root / (ns + "_r0") / "abc" / "de_g0" / (hex + ".bin");
  fs::create_directories(file.parent_path());
  testing::WriteFileOrDie(file, std::string(kRow, 'k'));
  const timespec times[2] = {{used, 0}, {used, 0}};
  EXPECT_EQ(utimensat(AT_FDCWD, file.c_str(), times, 0), 0);
  return file;
}

struct Tree {
  fs::path ahead, hour_ago;
};

// Six recent blocks, one used an hour ago, one dated `ahead_s` in the future.
Tree PlantTree(const fs::path& root, int64_t ahead_s) {
  const int64_t now = std::time(nullptr);
  for (int i = 0; i < 6; ++i) Plant(root, "m_0123456789ab", i, now - 10 - i);
  return {Plant(root, "m_0123456789ab", 10, now + ahead_s), Plant(root, "m_0123456789ab", 11, now - 3600)};
}

GcReport Trim(const fs::path& root, uint64_t candidates_bytes_max) {
  GcOptions o;
  o.root = root.string();
  o.max_bytes = 7 * kRow;  // one of the eight goes
  o.candidates_bytes_max = candidates_bytes_max;
  Result<GcReport> r = Gc(o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : GcReport{};
}

TEST(GcClockSkewTest, ABlockDatedFarAheadGoesFirstInTheOneWalkPath) {
  testing::TempDir root;
  const Tree t = PlantTree(root.path(), kFarAheadS);
  const GcReport r = Trim(root.path(), 1 << 20);
  EXPECT_EQ(r.walks, 1u);
  EXPECT_EQ(r.files_reclaimed, 1u);
  EXPECT_FALSE(fs::exists(t.ahead)) << "the block dated 72 years ahead is kept";
  EXPECT_TRUE(fs::exists(t.hour_ago));
  EXPECT_EQ(r.far_future_blocks, 1u);
}

TEST(GcClockSkewTest, ABlockDatedFarAheadGoesFirstInTheHistogramPath) {
  testing::TempDir root;
  const Tree t = PlantTree(root.path(), kFarAheadS);
  const GcReport r = Trim(root.path(), 0);  // a buffer of no entries: the histogram decides
  EXPECT_GT(r.walks, 1u);
  EXPECT_EQ(r.files_reclaimed, 1u);
  EXPECT_FALSE(fs::exists(t.ahead)) << "the block dated 72 years ahead is kept";
  EXPECT_TRUE(fs::exists(t.hour_ago));
}

TEST(GcClockSkewTest, ABlockDatedWithinTheToleranceCountsAsUsedNow) {
  for (uint64_t budget : {uint64_t{1} << 20, uint64_t{0}}) {
    testing::TempDir root;
    const Tree t = PlantTree(root.path(), 200);
    const GcReport r = Trim(root.path(), budget);
    EXPECT_TRUE(fs::exists(t.ahead)) << "budget " << budget;
    EXPECT_FALSE(fs::exists(t.hour_ago)) << "budget " << budget;
    EXPECT_EQ(r.far_future_blocks, 0u);
  }
}

testing::CommandResult Du(const fs::path& root, std::vector<std::string> args) {
  args.insert(args.begin(), {testing::CliPath().string(), "du", root.string()});
  return testing::RunCommand(args);
}

TEST(GcClockSkewTest, DuCountsAndPrintsFutureTimesSanely) {
  testing::TempDir root;
  const int64_t now = std::time(nullptr);
  Plant(root.path(), "ahead_0123456789ab", 0, now + kFarAheadS);  // only far-ahead blocks
  Plant(root.path(), "hour_0123456789ab", 0, now - 3600);
  Plant(root.path(), "recent_0123456789ab", 0, now - 10);
  const testing::CommandResult j = Du(root.path(), {"--top", "3", "--by", "age", "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const nlohmann::json report = nlohmann::json::parse(j.out, nullptr, false);
  ASSERT_FALSE(report.is_discarded()) << j.out;
  std::vector<std::string> order;
  for (const nlohmann::json& u : report["namespaces"]) order.push_back(u["dir"]);
  EXPECT_EQ(order, (std::vector<std::string>{"ahead_0123456789ab", "hour_0123456789ab", "recent_0123456789ab"}));
  EXPECT_EQ(report["namespaces"][0]["far_future_blocks"], 1u);
  EXPECT_EQ(report["namespaces"][0]["newest_activity"], now + kFarAheadS);  // the time itself, as found

  const testing::CommandResult text = Du(root.path(), {});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_FALSE(std::regex_search(text.out, std::regex(" -[0-9]+[smhd] ago"))) << text.out;
  EXPECT_NE(text.out.find("in 26332d"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("1 blocks have a use time more than 300 s after this host's clock"), std::string::npos)
      << text.out;
}

}  // namespace
}  // namespace kvtier
