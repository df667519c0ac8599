// The heartbeat lease a running fs tier holds in its namespace directory
// (FORMAT.md L74): <root>/<ns>/.kvtier/leases/<host>-<pid>-<n>.lease, whose
// mtime is refreshed every kLeaseRefreshS seconds by a small thread. gc never
// reclaims a namespace with a lease refreshed within its TTL (60 s by
// default). The file is removed when the tier closes; a crashed instance's
// lease simply expires. On a hung mount the refresh and the removal may
// never return: closing waits for them at most kLeaseCloseWaitMs and then
// leaves the thread (and its state) to finish or die with the process; the
// lease then expires like a crashed instance's.
//
// Each refresh checks what is at the lease's name (lstat, no symlink
// followed): a lease removed, or replaced by something that is not a regular
// file (a symlink, a FIFO: gc counts only regular files as leases, L74), is
// written anew through a temp file and a rename, so a running tier never
// goes without a live lease for longer than one refresh period.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <memory>

#include "format/layout_names.h"
#include "kvtier/result.h"
#include "util/dir_fd.h"

namespace kvtier::internal {

inline constexpr int kLeaseCloseWaitMs = 1000;

class Lease {
 public:
  // `ns_fd`: the namespace directory (checked: no symlink), `ns_dir` its path
  // for messages.
  // refresh_ms: the refresh period (kLeaseRefreshS; tests pass less).
  static Result<std::unique_ptr<Lease>> Acquire(int ns_fd, const std::string& ns_dir, uint64_t unique,
                                                uint64_t refresh_ms = format::kLeaseRefreshS * 1000);
  ~Lease();
  const std::string& path() const { return path_; }

 private:
  // What the refresher thread uses: shared, so that a thread stuck in the
  // kernel past the close keeps it alive.
  struct State {
    UniqueFd dir;      // <NS>/.kvtier/leases, held for the refresh and the removal
    std::string name;  // the lease file's name in dir
    std::string dir_path, body;  // for a rewrite: dir's path (messages) and the lease's body
    uint64_t refresh_ms = 0;
    std::mutex mu;
    std::condition_variable cv;
    bool stop = false;
    bool removed = false;  // the thread removed the file and is about to return
  };
  Lease(std::shared_ptr<State> state, std::string path) : state_(std::move(state)), path_(std::move(path)) {}
  static void Refresh(const std::shared_ptr<State>& state);

  std::shared_ptr<State> state_;
  std::string path_;
  std::thread refresher_;
};

}  // namespace kvtier::internal
