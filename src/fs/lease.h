// The heartbeat lease a running fs tier holds in its namespace directory
// (FORMAT.md L74): <root>/<ns>/.kvtier/leases/<host>-<pid>-<n>.lease, whose
// mtime is refreshed every kLeaseRefreshS seconds by a small thread. gc never
// reclaims a namespace with a lease refreshed within its TTL (60 s by
// default). The file is removed when the tier closes; a crashed instance's
// lease simply expires.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "kvtier/result.h"
#include "util/dir_fd.h"

namespace kvtier::internal {

class Lease {
 public:
  // `ns_fd`: the namespace directory (checked: no symlink), `ns_dir` its path
  // for messages.
  static Result<std::unique_ptr<Lease>> Acquire(int ns_fd, const std::string& ns_dir, uint64_t unique);
  ~Lease();
  const std::string& path() const { return path_; }

 private:
  Lease(UniqueFd dir, std::string name, std::string path)
      : dir_(std::move(dir)), name_(std::move(name)), path_(std::move(path)) {}
  void Refresh();

  UniqueFd dir_;      // <NS>/.kvtier/leases, held for the refresh and the removal
  std::string name_;  // the lease file's name in dir_
  std::string path_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread refresher_;
};

}  // namespace kvtier::internal
