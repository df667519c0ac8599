// FaultFs: mounts kvtier_faultfs (tests/support/faultfs/faultfs.cc) over a
// backing directory for one test and steers its faults: a sick volume on
// demand, whose calls hang, wait, fail or transfer short.
//
//   if (auto why = FaultFs::Unavailable(); !why.empty()) GTEST_SKIP() << why;
//   ASSERT_OK_AND_ASSIGN(auto fs, FaultFs::Mount(dir / "backing", dir / "mnt"));
//   ASSERT_OK(fs->Fail("read", EIO, "blocks/"));
//
// Operation names (`op`): lookup (lookup and getattr), open (open, create),
// read, write, xattr (set/get/list/remove), rename, unlink (unlink, rmdir),
// mkdir, readdir, statfs, flush (flush, release, fsync, fsyncdir), utimens,
// truncate, chmod (chmod, chown), symlink (symlink, link), readlink, or all.
// `path_substr` matches the call's path relative to the mount point (for a
// call on an open file, the path it was opened with; for rename, either
// path); "" matches every path. Paths with spaces cannot be matched.
//
// Every call reaches the daemon (no attribute, entry or negative caching;
// direct_io on every open file, so no page cache), which serves it from a
// pool of up to 512 threads, so a hung call does not stop the others.
//
// Thread-safety: the steering methods may be called from any thread,
// concurrently (each is one bounded round trip on the control socket).
// Mount() forks the daemon with PR_SET_PDEATHSIG: the daemon dies with the
// thread that called Mount(), so mount from a thread that outlives the FaultFs.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "kvtier/result.h"
#include "kvtier/status.h"

namespace kvtier::testing {

class FaultFs {
 public:
  // "" when FUSE can be mounted here (/dev/fuse openable; root, and a trial
  // mount worked, or else fusermount3 present; the daemon built), else one
  // line saying why: tests do GTEST_SKIP() << FaultFs::Unavailable().
  static std::string Unavailable();

  // Creates `backing` and `mountpoint` if missing (detaching a stale FUSE
  // mount left at `mountpoint`), starts the daemon ($KVTIER_FAULTFS_BIN, else
  // the one built with the tests) and waits, at most 10 s, until the mount is
  // live and the daemon answers. kUnavailable when it does not come up.
  static Result<std::unique_ptr<FaultFs>> Mount(std::string backing, std::string mountpoint);

  // Releases hung calls, unmounts (when busy: detaches the mount and aborts
  // the FUSE connection, so calls in flight or on files still open fail with
  // ENOTCONN), then reaps the daemon (killing it if need be). Bounded
  // (a few seconds at worst, even with the daemon stopped); never throws.
  ~FaultFs();
  FaultFs(const FaultFs&) = delete;
  FaultFs& operator=(const FaultFs&) = delete;

  // The steering commands. Each returns kInvalidArgument for a bad op or
  // argument, kUnavailable or kTimedOut when the daemon does not answer (5 s).
  // Matching calls block until Release(). The kernel adds its own waits
  // behind a hung call: a lookup of the same name in the same directory
  // waits for the hung lookup (d_alloc_parallel); calls that take the
  // inode's lock (write, truncate, rename/unlink/create in that directory)
  // wait for a hung call holding it; close(2) waits for a hung FLUSH.
  Status Hang(std::string_view op, std::string_view path_substr = "");
  // Matching calls wait `ms` milliseconds, then proceed.
  Status Delay(std::string_view op, int ms, std::string_view path_substr = "");
  // The next `count` matching calls (-1: all) fail with errno `err`. Avoid
  // ENOSYS: the kernel takes it as "never supported" for some operations.
  Status Fail(std::string_view op, int err, std::string_view path_substr = "", int count = -1);
  // Matching reads and writes transfer half of what was asked (at least 1 byte).
  Status Short(std::string_view op, std::string_view path_substr = "");
  // Removes every rule; calls already hung stay hung.
  Status Clear();
  // Removes every rule and lets every hung call proceed (passthrough).
  Status Release();
  // The number of calls held by hang rules now.
  Result<size_t> Hung();
  // The number of calls of `op` ("all": of every op) the daemon has seen.
  Result<uint64_t> Calls(std::string_view op);
  // Every op's number of calls, taken at one instant: "lookup=N open=N ...".
  Result<std::string> Counts() { return Command("counters"); }
  // Waits, at most `timeout_ms`, until at least `n` calls are held; false on timeout.
  bool WaitHung(size_t n, int timeout_ms);
  // "Server gone": aborts the FUSE connection and ends the daemon (reaped
  // here). Calls on the mount then fail with ENOTCONN until the destructor
  // unmounts it; later steering calls return kUnavailable.
  Status Gone();

  // Sends one raw protocol line (see faultfs.cc); returns the reply line.
  Result<std::string> Command(std::string_view line, int timeout_ms = 5000);

  const std::string& mountpoint() const { return mountpoint_; }
  const std::string& backing() const { return backing_; }
  const std::string& control_socket() const { return socket_; }
  // -1 once the daemon is gone and reaped.
  int daemon_pid() const { return pid_; }
  // SIGSTOPs the daemon and returns once every one of its threads is stopped
  // (kill only queues the signal: a thread may still answer a request it
  // already took). false when they did not all stop within timeout_ms.
  bool StopDaemon(int timeout_ms = 5000);

 private:
  FaultFs(std::string backing, std::string mountpoint, std::string socket)
      : backing_(std::move(backing)), mountpoint_(std::move(mountpoint)), socket_(std::move(socket)) {}
  Status Start(const std::string& binary);
  Status WaitLive(dev_t unmounted_dev);
  Status Expect(std::string_view line);
  Result<uint64_t> Number(std::string_view line);
  void Unmount();
  void Reap(int grace_ms);

  std::string backing_;
  std::string mountpoint_;
  std::string socket_;
  pid_t pid_ = -1;
  long connection_ = -1;  // the FUSE connection id, for aborting it
};

}  // namespace kvtier::testing
