// ReadFileCapped (read_file.h).
#include "util/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace kvtier::internal {
namespace {

// What a non-regular file is, for the error message.
const char* FileKind(mode_t mode) {
  if (S_ISFIFO(mode)) return "fifo";
  if (S_ISDIR(mode)) return "directory";
  if (S_ISCHR(mode)) return "character device";
  if (S_ISBLK(mode)) return "block device";
  if (S_ISSOCK(mode)) return "socket";
  return "unknown type";
}

std::string TooLarge(const std::string& name, size_t bytes_max) {
  return name + ": larger than " + std::to_string(bytes_max) + " bytes";
}

// Reads fd to its end; fails once more than bytes_max bytes arrive (files
// in /proc report size 0, so st_size alone cannot be trusted).
Result<std::string> ReadAllCapped(int fd, const std::string& name, size_t bytes_max) {
  std::string text;
  char chunk[65536];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int read_errno = errno;  // before the message allocates
      return ErrnoToStatus(read_errno, "read " + name);
    }
    if (n == 0) return text;
    text.append(chunk, static_cast<size_t>(n));
    if (text.size() > bytes_max) return InvalidArgument(TooLarge(name, bytes_max));
  }
}

Result<std::string> ReadRegularFd(int fd, const std::string& name, size_t bytes_max) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int stat_errno = errno;
    return ErrnoToStatus(stat_errno, "stat " + name);
  }
  if (!S_ISREG(st.st_mode)) return InvalidArgument(name + ": not a regular file (" + FileKind(st.st_mode) + ")");
  if (static_cast<uint64_t>(st.st_size) > bytes_max) return InvalidArgument(TooLarge(name, bytes_max));
  return ReadAllCapped(fd, name, bytes_max);
}

}  // namespace

Result<std::string> ReadFileCapped(const std::string& path, std::string_view what, size_t bytes_max) {
  const std::string name = std::string(what) + " " + path;
  // O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer.
  // On a regular file it changes nothing.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int open_errno = errno;
    return ErrnoToStatus(open_errno, "open " + name);
  }
  Result<std::string> text = ReadRegularFd(fd, name, bytes_max);
  ::close(fd);
  return text;
}

Result<std::string> ReadStdinCapped(std::string_view what, size_t bytes_max) {
  return ReadAllCapped(STDIN_FILENO, std::string(what) + " (stdin)", bytes_max);
}

}  // namespace kvtier::internal
