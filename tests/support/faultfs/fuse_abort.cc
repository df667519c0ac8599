#include "faultfs/fuse_abort.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "util/mountinfo.h"

namespace kvtier::faultfs {
namespace {

constexpr const char* kFuseCtl = "/sys/fs/fuse/connections";

}  // namespace

long FuseConnectionOf(const std::string& mountpoint) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  long found = -1;
  while (std::getline(in, line)) {
    // "36 25 0:45 / /mnt rw,relatime - fuse.kvtier_faultfs src rw,..."
    std::istringstream fields(line);
    std::string id, parent, dev, root, point, skip;
    fields >> id >> parent >> dev >> root >> point;
    while (fields >> skip && skip != "-") {
    }
    std::string fstype;
    fields >> fstype;
    if (internal::UnescapeMountField(point) != mountpoint || fstype.rfind("fuse", 0) != 0) continue;
    // For an anonymous device (major 0) the kernel's dev_t is the minor.
    const size_t colon = dev.find(':');
    if (colon != std::string::npos && dev.substr(0, colon) == "0") {
      found = std::stol(dev.substr(colon + 1));  // the last (topmost) mount wins
    }
  }
  return found;
}

std::string AbortFuseConnection(long connection) {
  if (connection < 0) return "no FUSE connection";
  const std::string abort_path = std::string(kFuseCtl) + "/" + std::to_string(connection) + "/abort";
  if (access(abort_path.c_str(), F_OK) != 0 &&
      mount("fusectl", kFuseCtl, "fusectl", 0, nullptr) != 0 && errno != EBUSY) {
    return std::string("mount fusectl: ") + strerror(errno);
  }
  const int fd = open(abort_path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return "open " + abort_path + ": " + strerror(errno);
  const bool written = write(fd, "1", 1) == 1;
  const int err = errno;
  close(fd);
  return written ? "" : "write " + abort_path + ": " + strerror(err);
}

}  // namespace kvtier::faultfs
