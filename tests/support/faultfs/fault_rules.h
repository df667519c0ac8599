// The fault table of the kvtier_faultfs daemon: which FUSE calls hang, wait,
// fail or transfer short, steered at run time by text commands (see
// faultfs.cc for the protocol). Thread-safe: every FUSE worker thread calls
// Gate() and the control thread calls Command() concurrently.
#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::faultfs {

// The operation groups a rule can name. Each FUSE callback belongs to one.
enum class Op : int {
  kLookup,    // getattr (the kernel's LOOKUP and GETATTR)
  kOpen,      // open, create
  kRead,
  kWrite,
  kXattr,     // setxattr, getxattr, listxattr, removexattr
  kRename,
  kUnlink,    // unlink, rmdir
  kMkdir,
  kReaddir,   // opendir, readdir
  kStatfs,
  kFlush,     // flush, release, fsync, releasedir, fsyncdir
  kUtimens,
  kTruncate,  // truncate, ftruncate
  kChmod,     // chmod, chown
  kSymlink,   // symlink, link
  kReadlink,
  kCount,
};

// What a call must do after Gate() returns.
struct Verdict {
  int error = 0;        // > 0: fail the call with this errno
  bool short_io = false;  // read/write: transfer half of what was asked
};

class FaultRules {
 public:
  // Applies the rules to one call of `op` on `path` (relative to the mount;
  // `other_path` is a rename's target, also matched). Counts the call, then
  // blocks while a hang rule holds it and sleeps for delay rules.
  Verdict Gate(Op op, std::string_view path, std::string_view other_path = {});

  // Runs one control command line; returns the reply line (without '\n').
  // "gone" is not handled here (the daemon owns the connection).
  std::string Command(std::string_view line);

  // Hung calls poll `stop` (every 100 ms) and give up with ENOTCONN once it
  // returns true, so the daemon can exit while calls are held (libfuse joins
  // its workers, and cannot cancel one that is inside a callback).
  void SetStopCheck(std::function<bool()> stop);

 private:
  enum class Kind { kHang, kDelay, kFail, kShort };
  struct Rule {
    Kind kind;
    int op;  // an Op, or -1 for "all"
    std::string path_substr;
    int value = 0;   // errno for kFail, microseconds for kDelay
    int count = -1;  // kFail: calls left to fail, -1 = forever
  };

  bool Matches(const Rule& rule, Op op, std::string_view path, std::string_view other_path) const;
  // Blocks until "release"; false when the daemon is stopping instead.
  bool WaitForRelease(std::unique_lock<std::mutex>& lock);
  // us_per_unit: kDelay's argument unit (1000: "delay" in ms, 1: "delay_us").
  std::string AddRule(Kind kind, const std::vector<std::string>& words, int us_per_unit = 1000);
  // "lookup=N open=N ...": every op's count, in Op order.
  std::string Counters() const;

  std::function<bool()> stop_;
  std::mutex mu_;
  std::condition_variable released_;
  std::vector<Rule> rules_;
  uint64_t release_generation_ = 0;  // bumped by "release": wakes hung calls
  size_t hung_ = 0;
  std::array<uint64_t, static_cast<size_t>(Op::kCount)> calls_{};
};

// "lookup" -> Op::kLookup, "all" -> -1; -2 when unknown.
int ParseOp(std::string_view name);
// "EIO" or "5" -> 5; 0 when unknown.
int ParseErrno(std::string_view name);

}  // namespace kvtier::faultfs
