// Lease file creation, refresh and removal, all through directory fds that
// follow no symlink (tier_dirs.h): a symlinked .kvtier or leases directory fails
// the open, and the refresh and removal act in the directory that was checked.
#include "fs/lease.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>

#include "fs/tier_dirs.h"
#include "format/layout_names.h"

namespace kvtier::internal {

namespace {

std::string LeaseBody(const char* host) {
  return "{\"host\": \"" + std::string(host) + "\", \"pid\": " + std::to_string(getpid()) +
         ", \"started\": " + std::to_string(std::time(nullptr)) +
         ", \"refresh_s\": " + std::to_string(format::kLeaseRefreshS) + ", \"ttl_s\": " + std::to_string(format::kLeaseTtlS) +
         "}\n";
}

// Writes `body` to dir/name through dir/name.tmp and a rename, so a reader
// never sees half a lease. O_EXCL never opens what is already there; a temp
// file left by an earlier process with this pid and number is removed first.
Status WriteLeaseFile(int dir_fd, const std::string& dir, const std::string& name, const std::string& body) {
  const std::string tmp = format::LeaseTmpName(name);
  unlinkat(dir_fd, tmp.c_str(), 0);
  const int fd = openat(dir_fd, tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, "create " + dir + "/" + tmp);
  errno = 0;
  const bool written = write(fd, body.data(), body.size()) == static_cast<ssize_t>(body.size());
  int err = errno;
  close(fd);
  if (written && renameat(dir_fd, tmp.c_str(), dir_fd, name.c_str()) == 0) return Status::Ok();
  if (written) err = errno;
  unlinkat(dir_fd, tmp.c_str(), 0);
  return ErrnoToStatus(err == 0 ? EIO : err, "write " + dir + "/" + name);
}

}  // namespace

Result<std::unique_ptr<Lease>> Lease::Acquire(int ns_fd, const std::string& ns_dir, uint64_t unique, uint64_t refresh_ms) {
  const std::string meta_name(format::kMetaDirName), leases_name(format::kLeaseDirName);
  KVTIER_ASSIGN_OR_RETURN(UniqueFd meta, MakeTierDir(ns_fd, meta_name, ns_dir + "/" + meta_name, /*durable=*/false));
  const std::string dir = ns_dir + "/" + meta_name + "/" + leases_name;
  KVTIER_ASSIGN_OR_RETURN(UniqueFd leases, MakeTierDir(meta.get(), leases_name, dir, /*durable=*/false));
  char host[256] = "host";
  gethostname(host, sizeof host - 1);
  const std::string name = format::LeaseName(host, getpid(), unique % 100000);
  const std::string body = LeaseBody(host);
  KVTIER_RETURN_IF_ERROR(WriteLeaseFile(leases.get(), dir, name, body));
  auto state = std::make_shared<State>();
  state->dir = std::move(leases);
  state->name = name;
  state->dir_path = dir;
  state->body = body;
  state->refresh_ms = std::max<uint64_t>(refresh_ms, 1);
  std::unique_ptr<Lease> lease(new Lease(state, dir + "/" + name));
  lease->refresher_ = std::thread([state] { Refresh(state); });
  return lease;
}

// Refreshes until told to stop, then removes the file: the removal runs
// here, not in the destructor, so that a hung mount holds only this thread.
void Lease::Refresh(const std::shared_ptr<State>& state) {
  std::unique_lock lock(state->mu);
  while (!state->cv.wait_for(lock, std::chrono::milliseconds(state->refresh_ms), [&] { return state->stop; })) {
    // mtime = now, on the name in the checked directory, never through a
    // symlink swapped in for it. A lease gone, or replaced by what gc does
    // not count as one (not a regular file), is written anew: the rename
    // replaces a symlink or FIFO without following or opening it (a
    // directory stays, and the refresh tries again next time).
    lock.unlock();
    struct stat st {};
    const int dir = state->dir.get();
    if (fstatat(dir, state->name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
      utimensat(dir, state->name.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
    } else {
      WriteLeaseFile(dir, state->dir_path, state->name, state->body).IgnoreError();
    }
    lock.lock();
  }
  lock.unlock();
  unlinkat(state->dir.get(), state->name.c_str(), 0);
  lock.lock();
  state->removed = true;
  state->cv.notify_all();
}

Lease::~Lease() {
  std::unique_lock lock(state_->mu);
  state_->stop = true;
  state_->cv.notify_all();
  const bool removed =
      state_->cv.wait_for(lock, std::chrono::milliseconds(kLeaseCloseWaitMs), [&] { return state_->removed; });
  lock.unlock();
  if (removed) {
    refresher_.join();
  } else {
    refresher_.detach();  // stuck on the mount: it owns its state and ends with the process
  }
}

}  // namespace kvtier::internal
