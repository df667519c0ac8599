// Proves the fs tier on a shared network volume, as two vLLM instances use
// one ReadWriteMany PVC: on a single-node GlusterFS volume mounted twice
// (the GlusterShared fixture, gluster_volume.h), instance A stores through
// mount 1 and instance B loads through mount 2 byte-exact, the files are on
// the volume's brick, and B storing the same keys leaves A's blocks alone.
// gluster_overlap_test proves the concurrent, overlapping stores.
//
// The GlusterPolicy tests at the end prove the fixture's own policy through
// a child run of this binary whose gluster programs are stubs that cannot
// start: a failure in CI, a one-line skip elsewhere, and a one-line skip
// even in CI where the programs are not installed.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gluster_rows.h"
#include "gluster_volume.h"
#include "kvtier/fs_tier.h"
#include "support/test_support.h"

namespace kvtier::gluster {
namespace {

TEST_F(GlusterShared, StoredThroughOneMountLoadsByteExactThroughTheOther) {
  const uint64_t seed = testing::TestSeed();
  std::string error;
  auto a = OpenTier(mount_point(0), &error);
  ASSERT_TRUE(a) << "instance A on mount 1: " << error;
  auto b = OpenTier(mount_point(1), &error);
  ASSERT_TRUE(b) << "instance B on mount 2: " << error;
  std::printf("[ gluster  ] A: %s; B: %s\n", Describe(*a).c_str(), Describe(*b).c_str());

  constexpr size_t kN = 64;
  std::vector<OffloadKey> keys;
  for (size_t i = 0; i < kN; ++i) keys.push_back(Key(i, kKeyShape));
  AlignedRows rows(kN), back(kN);
  for (size_t i = 0; i < kN; ++i) FillRow(rows.row(i), seed, 1, i);

  const JobResult stored = WaitJobs(a.get(), {a->SubmitStore(keys, rows.Const()).value()})[0];
  ASSERT_EQ(stored.keys.size(), kN);
  ASSERT_EQ(stored.OkPrefix(), kN) << KeyOutcomeName(stored.keys[stored.OkPrefix()].outcome) << " "
                                   << stored.keys[stored.OkPrefix()].status.ToString();

  // The same namespace resolves to the same file on both mounts, and the
  // bytes are on the volume's brick, not in a local directory.
  for (size_t i = 0; i < kN; ++i) {
    const std::string rel = a->ns().BlockRelPath(keys[i]);
    EXPECT_EQ(b->BlockPath(keys[i]), (mount_point(1) / rel).string());
    std::error_code ec;
    EXPECT_EQ(fs::file_size(brick() / rel, ec), kRow) << rel << " on the brick: " << ec.message();
  }

  const JobResult found = WaitJobs(b.get(), {b->SubmitLookup(keys).value()})[0];
  EXPECT_EQ(found.OkPrefix(), kN);
  const JobResult loaded = WaitJobs(b.get(), {b->SubmitLoad(keys, back.Mut()).value()})[0];
  ASSERT_EQ(loaded.keys.size(), kN);
  ASSERT_EQ(loaded.OkPrefix(), kN) << KeyOutcomeName(loaded.keys[loaded.OkPrefix()].outcome) << " "
                                   << loaded.keys[loaded.OkPrefix()].status.ToString();
  for (size_t i = 0; i < kN; ++i) EXPECT_EQ(std::memcmp(back.row(i), rows.row(i), kRow), 0) << "row " << i;

  // B storing the same keys finds A's files and leaves them alone.
  AlignedRows others(kN);
  for (size_t i = 0; i < kN; ++i) FillRow(others.row(i), seed, 2, i);
  const JobResult again = WaitJobs(b.get(), {b->SubmitStore(keys, others.Const()).value()})[0];
  for (size_t i = 0; i < again.keys.size(); ++i) {
    EXPECT_EQ(again.keys[i].outcome, KeyOutcome::kSkippedExists) << "row " << i << ": " << again.keys[i].status.ToString();
  }
  const JobResult reloaded = WaitJobs(a.get(), {a->SubmitLoad(keys, back.Mut()).value()})[0];
  ASSERT_EQ(reloaded.OkPrefix(), kN);
  EXPECT_EQ(std::memcmp(back.data, rows.data, kN * kRow), 0) << "A's rows must stay as A wrote them";
}

// ---------------------------------------------------------------------------
// The fixture's own policy, through a child run of this binary whose gluster
// programs are stubs that exit at once: installed but unable to start is a
// failure in CI and a one-line skip elsewhere; not installed is a one-line
// skip even in CI.

struct FixtureRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
  bool skipped = false;
  std::string skip_message;  // from gtest's "Skipped" to the next line that starts with '['
};

FixtureRun RunFixture(const char* ci, const fs::path& bin_dir) {
  std::vector<std::string> argv = {"/usr/bin/env"};
  if (ci == nullptr) {
    argv.insert(argv.end(), {"-u", "CI"});
  } else {
    argv.push_back(std::string("CI=") + ci);
  }
  argv.push_back("KVTIER_TEST_GLUSTER_BIN_DIR=" + bin_dir.string());
  argv.push_back(fs::read_symlink("/proc/self/exe").string());
  argv.push_back("--gtest_filter=GlusterShared.StoredThroughOneMountLoadsByteExactThroughTheOther");
  const testing::CommandResult r = testing::RunCommand(argv);
  FixtureRun run;
  run.exit_code = r.exit_code;
  run.output = r.out + r.err;
  // gtest prints "<file>:<line>: Skipped", the message, then TearDown's and
  // its own "[ ...". lines.
  const size_t begin = r.out.find("Skipped\n");
  const size_t end = begin == std::string::npos ? begin : r.out.find("\n[", begin);
  run.skipped = end != std::string::npos && r.out.find("[  SKIPPED ]", end) != std::string::npos;
  if (run.skipped) run.skip_message = r.out.substr(begin + 8, end - begin - 8);
  return run;
}

class GlusterPolicy : public ::testing::Test {
 protected:
  // Stubs for the three gluster programs: each exits 3 at once.
  void WriteStubs() {
    for (const char* name : {"glusterd", "gluster", "mount.glusterfs"}) {
      const fs::path path = stubs_.path() / name;
      testing::WriteFileOrDie(path, "#!/bin/sh\necho \"stub $0: cannot start\" >&2\nexit 3\n");
      fs::permissions(path, fs::perms::owner_all | fs::perms::group_read | fs::perms::others_read);
    }
  }
  // The fixture checks root and /dev/fuse before it starts glusterd.
  static std::string WhyGlusterdIsNotReached() {
    if (geteuid() != 0) return "not root: the fixture stops before starting glusterd";
    if (access("/dev/fuse", R_OK | W_OK) != 0) return "no /dev/fuse: the fixture stops before starting glusterd";
    return "";
  }
  testing::TempDir stubs_;
};

TEST_F(GlusterPolicy, GlusterdThatCannotStartFailsInCi) {
  if (const std::string why = WhyGlusterdIsNotReached(); !why.empty()) GTEST_SKIP() << why;
  WriteStubs();
  const FixtureRun run = RunFixture("true", stubs_.path());
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_FALSE(run.skipped) << run.output;
  EXPECT_NE(run.output.find("glusterd exited with status 3"), std::string::npos) << run.output;
}

TEST_F(GlusterPolicy, GlusterdThatCannotStartIsAOneLineSkipOutsideCi) {
  if (const std::string why = WhyGlusterdIsNotReached(); !why.empty()) GTEST_SKIP() << why;
  WriteStubs();
  const FixtureRun run = RunFixture(nullptr, stubs_.path());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  ASSERT_TRUE(run.skipped) << run.output;
  EXPECT_EQ(run.skip_message.find('\n'), std::string::npos) << run.skip_message;
  EXPECT_NE(run.skip_message.find("glusterd exited with status 3"), std::string::npos) << run.skip_message;
}

TEST_F(GlusterPolicy, AbsentPackagesAreAOneLineSkipEvenInCi) {
  const FixtureRun run = RunFixture("true", stubs_.path());  // no stubs written: nothing installed
  EXPECT_EQ(run.exit_code, 0) << run.output;
  ASSERT_TRUE(run.skipped) << run.output;
  EXPECT_EQ(run.skip_message.find('\n'), std::string::npos) << run.skip_message;
  EXPECT_NE(run.skip_message.find("not found"), std::string::npos) << run.skip_message;
}

}  // namespace
}  // namespace kvtier::gluster
