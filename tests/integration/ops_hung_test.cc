// Proves that the operators' tools never hang on a hung mount: on a FUSE
// mount (tests/support/faultfs) whose calls are held,
// `kvtier du`, `fsck`, `gc` and `hash --root`, run as real processes, exit 8
// within --io-timeout plus a generous margin, naming the path that hung; once
// the mount is released a second run completes the job (a gc stopped half-way
// by a hung unlink finishes it). A slow but answering mount, whose calls each
// take a fraction of the deadline, never times out however long the run: the
// deadline is per call. Each CLI run is bounded here too (SIGKILL after 60 s),
// and the tests skip with one line where FUSE cannot be mounted.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "kvtier/fs_tier.h"
#include "support/faultfs_mount.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
constexpr uint64_t kRow = 4096;
constexpr size_t kBlocks = 6;

struct CliRun {
  int exit_code = -1;
  std::string out, err;
  double seconds = 0;
};

std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The CLI as a process whose output goes to files, killed if it outlives
// `limit_s` (a failing test must end too: SIGKILL frees a FUSE waiter).
CliRun Cli(const std::vector<std::string>& args, const fs::path& dir, int limit_s = 60) {
  std::vector<std::string> argv{testing::CliPath().string()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> raw;
  for (auto& a : argv) raw.push_back(a.data());
  raw.push_back(nullptr);
  const std::string out = (dir / "out").string(), err = (dir / "err").string();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CliRun r;
  const auto start = Clock::now();
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, raw[0], &actions, nullptr, raw.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    ADD_FAILURE() << "posix_spawn: " << rc;
    return r;
  }
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() - start > std::chrono::seconds(limit_s)) {
      ADD_FAILURE() << "kvtier " << args[0] << " still running after " << limit_s << " s: killed";
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = Slurp(out);
  r.err = Slurp(err);
  return r;
}

class OpsHungTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = testing::FaultFs::Unavailable(); !why.empty()) GTEST_SKIP() << why;
    Store(root_.path() / "backing");
    auto mounted = testing::FaultFs::Mount((root_.path() / "backing").string(), (root_.path() / "mnt").string());
    ASSERT_TRUE(mounted.ok()) << mounted.status().ToString();
    fault_ = std::move(*mounted);
    mnt_ = fault_->mountpoint();
  }

  // kBlocks blocks written straight to the backing directory (not through FUSE).
  void Store(const fs::path& dir) {
    fs::create_directories(dir);
    FsTierOpenOptions o;
    o.tier.root_dir = dir.string();
    o.ns.model_name = "org/hung";
    o.ns.kv_cache_groups.push_back({16, {"l0"}});
    o.row_bytes = kRow;
    auto tier = FsTier::Open(o).value();
    ns_ = tier->ns().dir_name();
    std::vector<std::vector<uint8_t>> rows(kBlocks, std::vector<uint8_t>(kRow, 0x42));
    std::vector<std::span<const uint8_t>> spans(rows.begin(), rows.end());
    for (size_t i = 0; i < kBlocks; ++i) {
      std::vector<uint8_t> b(32, static_cast<uint8_t>(0x10 + i));
      keys_.push_back({BlockHash::FromBytes(b).value(), 0});
    }
    ASSERT_TRUE(tier->SubmitStore(keys_, spans).ok());
    ASSERT_TRUE(tier->WaitIdle(10000).ok());
    for (auto& k : keys_) rel_.push_back(fs::relative(tier->BlockPath(k), dir).string());
  }

  size_t BlocksInBacking() const {
    size_t n = 0;
    for (const auto& r : rel_) n += fs::exists(root_.path() / "backing" / r);
    return n;
  }

  // Exit 8 within the 1 s deadline plus a generous margin, naming `path`.
  void ExpectHung(const CliRun& r, const std::string& path) {
    EXPECT_EQ(r.exit_code, 8) << r.out << r.err;
    EXPECT_NE(r.err.find(path), std::string::npos) << "the message names " << path << ": " << r.err;
    EXPECT_NE(r.err.find("hung"), std::string::npos) << r.err;
    EXPECT_LT(r.seconds, 1 + 20) << "bounded by --io-timeout plus a margin";
  }

  testing::TempDir root_;
  std::unique_ptr<testing::FaultFs> fault_;
  std::string mnt_, ns_;
  std::vector<OffloadKey> keys_;
  std::vector<std::string> rel_;  // the blocks' paths relative to the root
};

TEST_F(OpsHungTest, EveryToolExitsEightOnAMountHungWhole) {
  ASSERT_TRUE(fault_->Hang("all").ok());
  const fs::path d = root_.path();
  ExpectHung(Cli({"du", mnt_, "--io-timeout", "1s"}, d), mnt_);
  ExpectHung(Cli({"fsck", mnt_, "--io-timeout", "1000ms"}, d), mnt_);
  ExpectHung(Cli({"gc", mnt_, "--max-bytes", "0", "--io-timeout", "1"}, d), mnt_);
  ExpectHung(Cli({"hash", "--tokens", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16", "--model", "org/hung", "--num-layers",
                  "1", "--root", mnt_, "--io-timeout", "1s"}, d),
             mnt_);
  EXPECT_EQ(BlocksInBacking(), kBlocks);
  ASSERT_TRUE(fault_->Release().ok());
  EXPECT_EQ(Cli({"du", mnt_}, d).exit_code, 0);
  EXPECT_EQ(Cli({"fsck", mnt_}, d).exit_code, 0);
  const CliRun gc = Cli({"gc", mnt_, "--max-bytes", "0"}, d);
  EXPECT_EQ(gc.exit_code, 0) << gc.out << gc.err;
  EXPECT_EQ(BlocksInBacking(), 0u) << "after release the job completes";
}

TEST_F(OpsHungTest, TheMessageNamesTheDirectoryWhoseListingHung) {
  const std::string shard = fs::path(rel_[0]).parent_path().string();  // <ns>_r0/<hhh>/<hh>_g0
  ASSERT_TRUE(fault_->Hang("readdir", shard).ok());
  const CliRun r = Cli({"du", mnt_, "--io-timeout", "1s", "--jobs", "2"}, root_.path());
  ExpectHung(r, mnt_ + "/" + shard);
}

TEST_F(OpsHungTest, AGcStoppedByAHungUnlinkIsFinishedByTheNextRun) {
  const std::string name = fs::path(rel_[3]).filename().string();
  ASSERT_TRUE(fault_->Hang("unlink", name).ok());
  const CliRun first = Cli({"gc", mnt_, "--max-bytes", "0", "--io-timeout", "1s", "--jobs", "1"}, root_.path());
  ExpectHung(first, name);
  ASSERT_TRUE(fault_->Release().ok());
  const CliRun second = Cli({"gc", mnt_, "--max-bytes", "0"}, root_.path());
  EXPECT_EQ(second.exit_code, 0) << second.out << second.err;
  EXPECT_EQ(BlocksInBacking(), 0u);
  const CliRun third = Cli({"gc", mnt_, "--max-bytes", "0"}, root_.path());
  EXPECT_NE(third.out.find("gc: 0 files"), std::string::npos) << "nothing half-done is left: " << third.out;
}

// Every listing waits 200 ms, each under the 1 s deadline; the run as a
// whole takes longer than the deadline and must still succeed.
TEST_F(OpsHungTest, ASlowButAnsweringMountNeverTimesOut) {
  ASSERT_TRUE(fault_->Delay("readdir", 200).ok());
  const CliRun r = Cli({"du", mnt_, "--io-timeout", "1s", "--jobs", "1"}, root_.path());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_GT(r.seconds, 1.0) << "the run outlasted the deadline: the deadline is per call";
  EXPECT_NE(r.out.find(std::to_string(kBlocks) + " blocks"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kvtier
