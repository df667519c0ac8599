// Lease file creation, refresh and removal.
#include "fs/lease.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

#include "ops/ops_internal.h"

namespace kvtier::internal {

Result<std::unique_ptr<Lease>> Lease::Acquire(const std::string& ns_dir, uint64_t unique) {
  const std::string dir = ns_dir + "/.kvtier/leases";
  for (const std::string& d : {ns_dir + "/.kvtier", dir}) {
    if (mkdir(d.c_str(), 0777) != 0 && errno != EEXIST) return ErrnoToStatus(errno, "mkdir " + d);
  }
  char host[256] = "host";
  gethostname(host, sizeof host - 1);
  const std::string path = dir + "/" + host + "-" + std::to_string(getpid()) + "-" + std::to_string(unique % 100000) + ".lease";
  // Written through a temp name and renamed, so a reader never sees half a lease.
  const std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, "create " + tmp);
  const std::string body = "{\"host\": \"" + std::string(host) + "\", \"pid\": " + std::to_string(getpid()) +
                           ", \"started\": " + std::to_string(std::time(nullptr)) +
                           ", \"refresh_s\": " + std::to_string(kLeaseRefreshS) +
                           ", \"ttl_s\": " + std::to_string(kDefaultLeaseTtlS) + "}\n";
  const bool written = write(fd, body.data(), body.size()) == static_cast<ssize_t>(body.size());
  close(fd);
  if (!written || rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno == 0 ? EIO : errno;
    unlink(tmp.c_str());
    return ErrnoToStatus(err, "write " + path);
  }
  std::unique_ptr<Lease> lease(new Lease(path));
  lease->refresher_ = std::thread([l = lease.get()] { l->Refresh(); });
  return lease;
}

void Lease::Refresh() {
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, std::chrono::seconds(kLeaseRefreshS), [&] { return stop_; })) {
    utimensat(AT_FDCWD, path_.c_str(), nullptr, 0);  // mtime = now; a lost file is recreated by the next start
  }
}

Lease::~Lease() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (refresher_.joinable()) refresher_.join();
  unlink(path_.c_str());
}

}  // namespace kvtier::internal
