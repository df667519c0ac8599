#include "support/faultfs_mount.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "faultfs/fuse_abort.h"

namespace kvtier::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::string BinaryPath() {
  const char* env = std::getenv("KVTIER_FAULTFS_BIN");
  return env != nullptr && env[0] != '\0' ? std::string(env) : std::string(KVTIER_FAULTFS_BIN);
}

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

bool HaveFusermount() {
  return access("/usr/bin/fusermount3", X_OK) == 0 || access("/bin/fusermount3", X_OK) == 0;
}

// As root, mount(2) of a FUSE file system can still be refused (a container
// without CAP_SYS_ADMIN): try one, served by no one, and drop it at once.
std::string ProbeRootMount() {
  char dir[] = "/tmp/kvtier_faultfs_probe.XXXXXX";
  if (mkdtemp(dir) == nullptr) return Errno("mkdtemp");
  std::string why;
  const int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
  const std::string options = "fd=" + std::to_string(fd) + ",rootmode=40000,user_id=0,group_id=0";
  if (fd < 0) {
    why = Errno("/dev/fuse");
  } else if (mount("kvtier_probe", dir, "fuse.kvtier_probe", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
    why = Errno("mount -t fuse");
  }
  if (fd >= 0) close(fd);  // aborts the probe's connection, so the unmount cannot wait
  if (why.empty()) umount2(dir, MNT_DETACH);
  rmdir(dir);
  return why;
}

std::string CheckAvailable() {
  const std::string binary = BinaryPath();
  if (binary.empty()) return "FUSE tests need kvtier_faultfs, not built here (no libfuse3-dev at configure time)";
  if (access(binary.c_str(), X_OK) != 0) return Errno("FUSE tests need kvtier_faultfs at " + binary);
  const int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
  if (fd < 0) return Errno("FUSE tests need /dev/fuse");
  close(fd);
  if (geteuid() != 0) return HaveFusermount() ? "" : "FUSE tests need root or fusermount3 (apt-get install fuse3)";
  const std::string why = ProbeRootMount();
  return why.empty() ? "" : "FUSE cannot be mounted here: " + why;
}

// Runs `argv` and waits at most `timeout_ms` for it (then kills it).
void RunBounded(std::vector<std::string> argv, int timeout_ms) {
  std::vector<char*> args;
  for (std::string& arg : argv) args.push_back(arg.data());
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    execvp(args[0], args.data());
    _exit(127);
  }
  if (pid < 0) return;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (waitpid(pid, nullptr, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

Status UnavailableStatus(std::string message) { return Status(StatusCode::kUnavailable, std::move(message)); }

// Connects to the control socket with send and receive timeouts, so that a
// stopped or hung daemon costs at most `timeout_ms` per step.
Result<int> ConnectControl(const std::string& path, int timeout_ms) {
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return InvalidArgument("control socket path too long: " + path);
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoToStatus(errno, "socket");
  const timeval timeout = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    close(fd);
    return UnavailableStatus("kvtier_faultfs control " + path + ": " + std::strerror(err));
  }
  return fd;
}

}  // namespace

std::string FaultFs::Unavailable() {
  static const std::string why = CheckAvailable();
  return why;
}

Result<std::string> FaultFs::Command(std::string_view line, int timeout_ms) {
  KVTIER_ASSIGN_OR_RETURN(const int fd, ConnectControl(socket_, timeout_ms));
  const std::string request = std::string(line) + "\n";
  std::string reply;
  // A socket with SO_RCVTIMEO returns EINTR (not a transparent restart) when
  // task work interrupts the wait, as io_uring's completions do for the
  // thread that owns a ring: retry those.
  ssize_t sent;
  do {
    sent = send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent == static_cast<ssize_t>(request.size())) {
    char c;
    for (;;) {
      const ssize_t got = recv(fd, &c, 1, 0);
      if (got < 0 && errno == EINTR) continue;
      if (got != 1 || c == '\n') break;
      reply += c;
    }
  }
  const int err = errno;
  close(fd);
  if (reply.empty()) {
    return Status(StatusCode::kTimedOut, "kvtier_faultfs: no reply to '" + std::string(line) + "'", err);
  }
  if (reply.rfind("err", 0) == 0) return InvalidArgument("kvtier_faultfs: " + std::string(line) + ": " + reply);
  return reply;
}

Status FaultFs::Expect(std::string_view line) {
  KVTIER_ASSIGN_OR_RETURN(const std::string reply, Command(line));
  if (reply != "ok") return Internal("kvtier_faultfs: " + std::string(line) + ": " + reply);
  return Status::Ok();
}

Result<uint64_t> FaultFs::Number(std::string_view line) {
  KVTIER_ASSIGN_OR_RETURN(const std::string reply, Command(line));
  char* end = nullptr;
  const unsigned long long value = std::strtoull(reply.c_str(), &end, 10);
  if (end == reply.c_str() || *end != '\0') return Internal("kvtier_faultfs: not a number: " + reply);
  return static_cast<uint64_t>(value);
}

namespace {
// "" becomes "*" (any path), so that a count can follow it.
std::string PathWord(std::string_view path_substr) {
  return path_substr.empty() ? std::string("*") : std::string(path_substr);
}
}  // namespace

Status FaultFs::Hang(std::string_view op, std::string_view path_substr) {
  return Expect("hang " + std::string(op) + " " + PathWord(path_substr));
}

Status FaultFs::Delay(std::string_view op, int ms, std::string_view path_substr) {
  return Expect("delay " + std::string(op) + " " + std::to_string(ms) + " " + PathWord(path_substr));
}

Status FaultFs::Fail(std::string_view op, int err, std::string_view path_substr, int count) {
  return Expect("fail " + std::string(op) + " " + std::to_string(err) + " " + PathWord(path_substr) +
                " " + std::to_string(count));
}

Status FaultFs::Short(std::string_view op, std::string_view path_substr) {
  return Expect("short " + std::string(op) + " " + PathWord(path_substr));
}

Status FaultFs::Clear() { return Expect("clear"); }
Status FaultFs::Release() { return Expect("release"); }

Result<size_t> FaultFs::Hung() {
  KVTIER_ASSIGN_OR_RETURN(const uint64_t n, Number("hung"));
  return static_cast<size_t>(n);
}

Result<uint64_t> FaultFs::Calls(std::string_view op) { return Number("calls " + std::string(op)); }

bool FaultFs::WaitHung(size_t n, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    Result<size_t> hung = Hung();
    if (hung.ok() && *hung >= n) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

Status FaultFs::Gone() {
  if (pid_ < 0) return UnavailableStatus("kvtier_faultfs is already gone");
  // The reply can be lost in the daemon's exit; its death is what counts:
  // once it is reaped, /dev/fuse is closed and the connection aborted.
  Command("gone", 2000).status().IgnoreError();
  Reap(5000);
  return Status::Ok();
}

// Waits up to `grace_ms` for the daemon to exit by itself, then SIGTERM,
// then SIGKILL; gives up (leaving a zombie) rather than hang.
void FaultFs::Reap(int grace_ms) {
  if (pid_ < 0) return;
  const auto start = Clock::now();
  int signals_sent = 0;
  while (waitpid(pid_, nullptr, WNOHANG) == 0) {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    if (signals_sent == 0 && waited > grace_ms) {
      kill(pid_, SIGTERM);
      ++signals_sent;
    } else if (signals_sent == 1 && waited > grace_ms + 1000) {
      kill(pid_, SIGKILL);
      ++signals_sent;
    } else if (waited > grace_ms + 4000) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  pid_ = -1;
}

namespace {

// The path as /proc/self/mountinfo will show it: absolute, symlinks in the
// parent resolved, no trailing '/'. The last component is not resolved: it
// may be a stale mount that answers ENOTCONN to every stat.
std::string MountinfoPath(const std::string& path) {
  std::error_code ec;
  std::filesystem::path absolute = std::filesystem::absolute(path, ec).lexically_normal();
  if (!absolute.has_filename()) absolute = absolute.parent_path();
  std::filesystem::create_directories(absolute.parent_path(), ec);
  const std::filesystem::path parent = std::filesystem::canonical(absolute.parent_path(), ec);
  return ec ? absolute.string() : (parent / absolute.filename()).string();
}

// A FUSE mount left at `mountpoint` by an earlier run that died (it answers
// ENOTCONN) is detached, so the directory can be mounted again.
void DetachStale(const std::string& mountpoint) {
  for (int i = 0; i < 4 && faultfs::FuseConnectionOf(mountpoint) >= 0; ++i) {
    if (geteuid() == 0) {
      umount2(mountpoint.c_str(), MNT_DETACH);
    } else {
      RunBounded({"fusermount3", "-u", "-z", "-q", mountpoint}, 5000);
    }
  }
}

std::string NewSocketPath() {
  static std::atomic<int> counter{0};
  return "/tmp/kvtier_faultfs." + std::to_string(getpid()) + "." + std::to_string(counter++) + ".sock";
}

}  // namespace

Result<std::unique_ptr<FaultFs>> FaultFs::Mount(std::string backing, std::string mountpoint) {
  if (const std::string why = Unavailable(); !why.empty()) return UnavailableStatus(why);
  backing = MountinfoPath(backing);
  mountpoint = MountinfoPath(mountpoint);
  DetachStale(mountpoint);
  std::error_code ec;
  std::filesystem::create_directories(backing, ec);
  std::filesystem::create_directories(mountpoint, ec);
  struct stat before;
  if (stat(mountpoint.c_str(), &before) != 0) return ErrnoToStatus(errno, "stat " + mountpoint);
  std::unique_ptr<FaultFs> fs(new FaultFs(backing, mountpoint, NewSocketPath()));
  KVTIER_RETURN_IF_ERROR(fs->Start(BinaryPath()));
  KVTIER_RETURN_IF_ERROR(fs->WaitLive(before.st_dev));  // on error ~FaultFs cleans up
  fs->connection_ = faultfs::FuseConnectionOf(mountpoint);
  return fs;
}

Status FaultFs::Start(const std::string& binary) {
  std::vector<std::string> argv = {binary, "--backing", backing_, "--control", socket_, mountpoint_};
  std::vector<char*> args;
  for (std::string& arg : argv) args.push_back(arg.data());
  args.push_back(nullptr);
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ == 0) {
    // Only async-signal-safe calls here: the test process has threads.
    // The daemon must not outlive a test that crashes.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    execv(args[0], args.data());
    _exit(127);
  }
  if (pid_ < 0) return ErrnoToStatus(errno, "fork kvtier_faultfs");
  return Status::Ok();
}

// Live: the mount point's device changed (the FUSE root answered a stat)
// and the daemon answers "ping".
Status FaultFs::WaitLive(dev_t unmounted_dev) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < deadline) {
    int wstatus = 0;
    if (waitpid(pid_, &wstatus, WNOHANG) == pid_) {
      pid_ = -1;
      return UnavailableStatus("kvtier_faultfs exited at start (status " + std::to_string(wstatus) + ")");
    }
    struct stat now;
    if (stat(mountpoint_.c_str(), &now) == 0 && now.st_dev != unmounted_dev) {
      Result<std::string> ping = Command("ping", 1000);
      if (ping.ok() && *ping == "ok") return Status::Ok();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return UnavailableStatus("kvtier_faultfs did not mount " + mountpoint_ + " within 10 s");
}

// Unmounts; when open files or calls hold the mount busy, detaches it and
// aborts the connection, so that those calls fail (ENOTCONN) at once rather
// than wait on a daemon that is about to die, and the daemon's loop ends.
void FaultFs::Unmount() {
  if (faultfs::FuseConnectionOf(mountpoint_) < 0) return;
  if (geteuid() != 0) {
    RunBounded({"fusermount3", "-u", "-z", "-q", mountpoint_}, 5000);
    return;
  }
  if (umount2(mountpoint_.c_str(), 0) == 0) return;
  const long connection = connection_ >= 0 ? connection_ : faultfs::FuseConnectionOf(mountpoint_);
  umount2(mountpoint_.c_str(), MNT_DETACH);
  faultfs::AbortFuseConnection(connection);
}

FaultFs::~FaultFs() {
  if (pid_ > 0) Command("release", 2000).status().IgnoreError();
  Unmount();
  Reap(1000);  // an unmounted daemon exits by itself (its /dev/fuse reads end)
  unlink(socket_.c_str());
}


namespace {
// Whether every thread of `pid` is in state T (stopped), by /proc.
bool AllThreadsStopped(int pid) {
  std::error_code ec;
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& task : std::filesystem::directory_iterator(tasks, ec)) {
    FILE* f = std::fopen((task.path() / "stat").c_str(), "r");
    if (f == nullptr) continue;  // the thread ended
    char line[512] = {};
    const bool read = std::fgets(line, sizeof line, f) != nullptr;
    std::fclose(f);
    const char* close = read ? std::strrchr(line, ')') : nullptr;  // comm may hold spaces
    if (close == nullptr || close[1] != ' ' || close[2] != 'T') return false;
  }
  return !ec;
}
}  // namespace

bool FaultFs::StopDaemon(int timeout_ms) {
  if (pid_ <= 0 || kill(pid_, SIGSTOP) != 0) return false;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!AllThreadsStopped(pid_)) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace kvtier::testing
