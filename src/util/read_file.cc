// ReadFileCapped (read_file.h).
#include "util/read_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace kvtier::internal {

Result<std::string> ReadFileCapped(const std::string& path, std::string_view what, size_t bytes_max) {
  const std::string name = std::string(what) + " " + path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "open " + name);
  std::string text;
  char chunk[65536];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int read_errno = errno;
      ::close(fd);
      return ErrnoToStatus(read_errno, "read " + name);
    }
    if (n == 0) break;
    text.append(chunk, static_cast<size_t>(n));
    if (text.size() > bytes_max) {
      ::close(fd);
      return InvalidArgument(name + ": larger than " + std::to_string(bytes_max) + " bytes");
    }
  }
  ::close(fd);
  return text;
}

}  // namespace kvtier::internal
