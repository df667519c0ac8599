// The GlusterShared fixture of gluster_shared_test and gluster_overlap_test:
// a single-node GlusterFS volume on loopback, mounted twice with FUSE (mount
// -t glusterfs), as two vLLM instances share one ReadWriteMany PVC.
//
// The fixture starts its own glusterd (-N, private working and run
// directories in a temp dir, listening on 127.0.0.2 only), creates and
// starts a one-brick volume in the temp dir, mounts it twice, and in
// TearDown unmounts, stops and deletes the volume and stops glusterd,
// whatever the test did. Where the gluster programs are not installed it
// skips, saying so on one line (Debian packages: glusterfs-server
// glusterfs-client). Where they are, a volume that cannot be set up (not
// root, no /dev/fuse, port 24007 taken, glusterd, the volume or a mount
// failing: the exact error) is a failure in CI (CI set, as CI systems and
// .ci/run's caller do), so that CI cannot silently stop running these tests,
// and a one-line skip elsewhere. The GlusterPolicy tests of
// gluster_shared_test prove both through a child run whose gluster programs
// are stubs that cannot start (KVTIER_TEST_GLUSTER_BIN_DIR: the only place
// they are looked for).
//
// Where gluster forces things outside the temp dir: the brick listens on a
// port glusterd picks, its socket goes to /var/run/gluster and its log to
// /var/log/glusterfs/bricks (both removed in TearDown); the mount helper and
// the bricks reach glusterd only on its default port 24007, so runs of these
// tests are serialised by an flock on $TMPDIR/kvtier-gluster-test.lock. The
// gluster CLI refuses 127.0.0.1 and "localhost" as brick hosts, hence
// 127.0.0.2 (still loopback; glusterd treats all of 127/8 as local).
//
// In a named namespace, so both files' tests share one fixture type.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace kvtier::gluster {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// ---------------------------------------------------------------------------
// Processes: spawned with stdout+stderr to a file (daemons that keep the
// descriptors open can never block us), waited for with a deadline.

std::string ReadAll(const fs::path& path);
// The last `max` bytes of `text`, trailing blanks dropped.
std::string Tail(const std::string& text, size_t max = 1500);
std::string FindProgram(const std::string& name);
// glusterd, gluster and mount.glusterfs: from $KVTIER_TEST_GLUSTER_BIN_DIR
// alone when it is set (the policy tests' stubs).
std::string FindGlusterProgram(const std::string& name);
// CI systems set CI (CI=true); a volume that cannot start there is a failure.
bool InCi();
std::string OneLine(std::string text);
// fork+exec (not posix_spawn) so a daemon we own can get a parent-death
// signal: if the test binary is killed, glusterd goes with it.
pid_t Spawn(const std::vector<std::string>& argv, const fs::path& log, int parent_death_signal = 0);
// The exit status (128+signal when killed), or -1 if still running at the deadline.
int WaitFor(pid_t pid, milliseconds timeout);

struct Ran {
  int code = -1;  // exit status; -1: killed at the deadline
  std::string output;
  std::string Describe(const std::vector<std::string>& argv) const;
};

Ran RunProgram(const std::vector<std::string>& argv, const fs::path& log, milliseconds timeout);
std::vector<std::string> Cmdline(pid_t pid);
// Live processes (other than this one) with an argument containing `needle`
// (always a path inside this test's temp dir, so only ours match).
std::vector<pid_t> ProcessesMentioning(const std::string& needle);
bool WaitGone(const std::vector<pid_t>& pids, milliseconds timeout);
bool SomethingListensOn(const char* host, uint16_t port);

// ---------------------------------------------------------------------------
// The fixture: its own glusterd, one volume, two FUSE mounts.

class GlusterShared : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override { StopGluster(); }

  const fs::path& mount_point(int i) const { return mounts_[i]; }
  fs::path brick() const { return dir_.path() / "brick"; }

 private:
  fs::path Log(const std::string& name) const { return dir_.path() / "log" / name; }
  std::vector<std::string> Cli(std::vector<std::string> args) const;
  Ran RunCli(const std::vector<std::string>& args, milliseconds timeout = milliseconds(60000));

  // Each "" when done, else why not. StartGluster: the volume is mounted
  // twice (packages_absent_: not, because the gluster programs are not installed).
  std::string StartGluster();
  std::string CheckPrerequisites();
  std::string TakeLock();
  fs::path WriteGlusterdVol();
  std::string StartGlusterd();
  std::string CreateVolume();
  std::string MountTwice();
  std::string BrickLogGuess() const;

  void StopGluster();
  void PrintLogs() const;
  void Unmount();
  void StopVolumeAndGlusterd();
  void KillLeftovers();

  testing::TempDir dir_;
  fs::path mounts_[2];
  fs::path socket_;
  std::string glusterd_, gluster_, mount_;
  std::string brick_socket_, brick_log_;
  pid_t glusterd_pid_ = -1;
  int lock_fd_ = -1;
  int commands_ = 0;
  bool volume_created_ = false, volume_started_ = false;
  bool mounted_[2] = {false, false};
  bool packages_absent_ = false;
};

}  // namespace kvtier::gluster
