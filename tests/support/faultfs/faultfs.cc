// kvtier_faultfs: a FUSE passthrough of a backing directory whose calls can
// be made to hang, wait, fail or transfer short at run time, so that tests
// can give kvtier a sick volume on demand (docs/sick-volumes.md).
//
//   kvtier_faultfs --backing DIR --control SOCKET MOUNTPOINT
//
// Runs in the foreground until the mount goes away (umount) or SIGTERM.
// SOCKET is a unix stream socket; each command is one text line and gets one
// reply line: "ok", a number, or "err <why>". OP is one of lookup open read
// write xattr rename unlink mkdir readdir statfs flush utimens truncate chmod
// symlink readlink, or all. PATHSUBSTR matches the call's path relative to
// the mount (for calls on an open file: the path it was opened with; for
// rename and link: either path); absent or "*" matches every path.
//   hang OP [PATHSUBSTR]             matching calls block until "release"
//   delay OP MS [PATHSUBSTR]         matching calls sleep MS first (rules add up)
//   delay_us OP US [PATHSUBSTR]      the same in microseconds (a 0.5 ms network)
//   fail OP ERRNO [PATHSUBSTR] [COUNT]   ERRNO a name (EIO) or number;
//                                        COUNT calls, -1/absent: forever
//   short OP [PATHSUBSTR]            read/write move half of what was asked
//   clear        drop every rule (hung calls stay hung)
//   release      drop every rule and let hung calls proceed (passthrough)
//   hung         number of calls held by hang rules
//   calls OP     number of calls of OP seen
//   counters     every op's count in one line: "lookup=N open=N ... readlink=N"
//   ping         "ok" once the daemon serves commands
//   gone         abort the FUSE connection and exit: calls fail ENOTCONN
#include <fcntl.h>
#include <linux/fuse.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "faultfs/fault_rules.h"
#include "faultfs/faultfs_ops.h"
#include "faultfs/fuse_abort.h"

namespace kvtier::faultfs {
namespace {

struct Args {
  std::string backing;
  std::string control;
  std::string mountpoint;
};

bool ParseArgs(int argc, char** argv, Args* args) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--backing" && i + 1 < argc) {
      args->backing = argv[++i];
    } else if (arg == "--control" && i + 1 < argc) {
      args->control = argv[++i];
    } else if (args->mountpoint.empty() && arg[0] != '-') {
      args->mountpoint = arg;
    } else {
      return false;
    }
  }
  return !args->backing.empty() && !args->control.empty() && !args->mountpoint.empty();
}

std::string RealPath(const std::string& path) {
  char buf[PATH_MAX];
  return realpath(path.c_str(), buf) != nullptr ? std::string(buf) : std::string();
}

int ListenControl(const std::string& path) {
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return -1;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  unlink(path.c_str());
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 64) != 0) {
    return -1;
  }
  return fd;
}

void Reply(int fd, const std::string& reply) {
  const std::string line = reply + "\n";
  (void)!send(fd, line.data(), line.size(), MSG_NOSIGNAL);
}

// "Server gone": the connection is aborted before the reply, so a caller
// that sees "ok" sees ENOTCONN on its next call. The exit closes /dev/fuse,
// which aborts the connection too should fusectl be out of reach.
[[noreturn]] void Gone(int fd, const std::string& mountpoint) {
  const std::string why = AbortFuseConnection(FuseConnectionOf(mountpoint));
  if (!why.empty()) std::fprintf(stderr, "kvtier_faultfs: gone: %s (exiting anyway)\n", why.c_str());
  Reply(fd, "ok");
  _exit(0);
}

// One client at a time: commands are quick, and a client that sends
// nothing is dropped after the receive timeout.
void ServeConnection(int fd, FaultRules* rules, const std::string& mountpoint) {
  const timeval timeout = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  std::string pending;
  char buf[512];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) {
    pending.append(buf, static_cast<size_t>(n));
    size_t eol;
    while ((eol = pending.find('\n')) != std::string::npos) {
      const std::string line = pending.substr(0, eol);
      pending.erase(0, eol + 1);
      if (line == "gone" || line == "gone\r") Gone(fd, mountpoint);
      Reply(fd, rules->Command(line));
    }
  }
}

void ServeControl(int listen_fd, FaultRules* rules, std::string mountpoint) {
  while (true) {
    const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    ServeConnection(fd, rules, mountpoint);
    close(fd);
  }
}

// SIGTERM/SIGINT/SIGHUP: let hung calls go, detach the mount, exit. (libfuse's
// own handlers would end the loop, which then joins workers that a hang rule
// may hold.)
void WatchSignals(sigset_t signals, FaultRules* rules, std::string mountpoint) {
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  (void)rules->Command("release");
  umount2(mountpoint.c_str(), MNT_DETACH);
  _exit(0);
}

// libfuse 3.14 wants FUSE_CAP_PARALLEL_DIROPS (the kernel offers it) but
// never sets the flag in its INIT reply, so the kernel would serialize
// lookups and readdirs per directory: one hung lookup would stall every
// other lookup in its directory. The first reply on a connection is INIT's,
// so this sets the flag there.
ssize_t WritevWithParallelDirops(int fd, struct iovec* iov, int count, void* /*userdata*/) {
  static std::atomic<bool> init_seen{false};
  if (!init_seen.exchange(true) && count >= 2 &&
      iov[1].iov_len >= offsetof(fuse_init_out, flags) + sizeof(uint32_t)) {
    static_cast<fuse_init_out*>(iov[1].iov_base)->flags |= FUSE_PARALLEL_DIROPS;
  }
  return writev(fd, iov, count);
}

ssize_t ReadDevice(int fd, void* buf, size_t len, void* /*userdata*/) { return read(fd, buf, len); }

// As root, mounts with mount(2) directly and serves /dev/fuse through
// WritevWithParallelDirops; otherwise through fusermount3 (serialized
// directory operations then).
bool Mount(fuse* fs, const std::string& mountpoint) {
  if (geteuid() != 0) return fuse_mount(fs, mountpoint.c_str()) == 0;
  struct stat st;
  if (stat(mountpoint.c_str(), &st) != 0) return false;
  const int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  char options[128];
  std::snprintf(options, sizeof(options), "fd=%d,rootmode=%o,user_id=0,group_id=0,allow_other", fd,
                st.st_mode & S_IFMT);
  if (mount("kvtier_faultfs", mountpoint.c_str(), "fuse.kvtier_faultfs", MS_NOSUID | MS_NODEV,
            options) != 0) {
    std::fprintf(stderr, "kvtier_faultfs: mount %s: %s\n", mountpoint.c_str(), std::strerror(errno));
    close(fd);
    return false;
  }
  static const fuse_custom_io io = {WritevWithParallelDirops, ReadDevice, nullptr, nullptr};
  return fuse_session_custom_io(fuse_get_session(fs), &io, fd) == 0;
}

// A multi-threaded loop with room for many held calls, so that hung calls
// never starve the others (libfuse starts a worker whenever none is idle).
int MountAndLoop(const std::string& mountpoint, Backing* backing, FaultRules* rules, int listen_fd) {
  std::string options = "fsname=kvtier_faultfs,subtype=kvtier_faultfs";
  std::string argv0 = "kvtier_faultfs";
  std::string dash_o = "-o";
  char* fuse_argv[] = {argv0.data(), dash_o.data(), options.data(), nullptr};
  fuse_args fargs = FUSE_ARGS_INIT(3, fuse_argv);
  const fuse_operations ops = MakeOperations(backing, rules);
  fuse* fs = fuse_new(&fargs, &ops, sizeof(ops), nullptr);
  // fuse_new's option parsing may have copied the arguments: free them with
  // the filesystem (a leak checker in the tests' sanitizer builds reports them).
  struct FreeArgs {
    fuse_args* args;
    ~FreeArgs() { fuse_opt_free_args(args); }
  } free_args{&fargs};
  if (fs == nullptr) return 1;
  if (!Mount(fs, mountpoint)) {
    fuse_destroy(fs);
    return 1;
  }
  fuse_session* session = fuse_get_session(fs);
  rules->SetStopCheck([session] { return fuse_session_exited(session) != 0; });
  std::thread(ServeControl, listen_fd, rules, mountpoint).detach();
  fuse_loop_config* config = fuse_loop_cfg_create();
  fuse_loop_cfg_set_max_threads(config, 512);
  const int result = fuse_loop_mt(fs, config);
  fuse_loop_cfg_destroy(config);
  fuse_unmount(fs);
  fuse_destroy(fs);
  return result == 0 ? 0 : 1;
}

int Run(const Args& args) {
  static Backing backing;
  // Never destroyed: the detached control and signal threads may still use
  // it while the process exits.
  static FaultRules& rules = *new FaultRules;
  backing.path = RealPath(args.backing);
  backing.dir_fd = open(args.backing.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const std::string mountpoint = RealPath(args.mountpoint);
  if (backing.dir_fd < 0 || backing.path.empty() || mountpoint.empty()) {
    std::fprintf(stderr, "kvtier_faultfs: %s or %s: %s\n", args.backing.c_str(),
                 args.mountpoint.c_str(), std::strerror(errno));
    return 1;
  }
  const int listen_fd = ListenControl(args.control);
  if (listen_fd < 0) {
    std::fprintf(stderr, "kvtier_faultfs: control socket %s: %s\n", args.control.c_str(),
                 std::strerror(errno));
    return 1;
  }
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // every thread inherits the mask
  std::thread(WatchSignals, signals, &rules, mountpoint).detach();
  return MountAndLoop(mountpoint, &backing, &rules, listen_fd);
}

}  // namespace
}  // namespace kvtier::faultfs

int main(int argc, char** argv) {
  kvtier::faultfs::Args args;
  if (!kvtier::faultfs::ParseArgs(argc, argv, &args)) {
    std::fprintf(stderr, "usage: %s --backing DIR --control SOCKET MOUNTPOINT\n", argv[0]);
    return 2;
  }
  return kvtier::faultfs::Run(args);
}
