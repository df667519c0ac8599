// The GlusterShared fixture and its process helpers: see gluster_volume.h.
#include "gluster_volume.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>
#include <thread>

namespace kvtier::gluster {
namespace {

constexpr const char* kHost = "127.0.0.2";
constexpr const char* kVolume = "kvtiertest";
constexpr uint16_t kGlusterdPort = 24007;  // fixed: bricks and mount.glusterfs fetch volfiles only there
constexpr long kFuseSuperMagic = 0x65735546;

}  // namespace

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

std::string Tail(const std::string& text, size_t max) {
  std::string t = text.size() > max ? "..." + text.substr(text.size() - max) : text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  return t;
}

std::string FindProgram(const std::string& name) {
  for (const char* dir : {"/usr/sbin", "/sbin", "/usr/bin", "/bin", "/usr/local/sbin", "/usr/local/bin"}) {
    const std::string path = std::string(dir) + "/" + name;
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

// glusterd, gluster and mount.glusterfs: from $KVTIER_TEST_GLUSTER_BIN_DIR
// alone when it is set (the policy tests' stubs).
std::string FindGlusterProgram(const std::string& name) {
  const char* dir = std::getenv("KVTIER_TEST_GLUSTER_BIN_DIR");
  if (dir == nullptr || *dir == '\0') return FindProgram(name);
  const std::string path = std::string(dir) + "/" + name;
  return access(path.c_str(), X_OK) == 0 ? path : "";
}

// CI systems set CI (CI=true); a volume that cannot start there is a failure.
bool InCi() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && *ci != '\0' && std::string_view(ci) != "false" && std::string_view(ci) != "0";
}

std::string OneLine(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

// fork+exec (not posix_spawn) so a daemon we own can get a parent-death
// signal: if the test binary is killed, glusterd goes with it. Only
// async-signal-safe calls between fork and exec.
pid_t Spawn(const std::vector<std::string>& argv, const fs::path& log, int parent_death_signal) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const int out = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (out < 0 || in < 0) {
    if (out >= 0) close(out);
    if (in >= 0) close(in);
    return -1;
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    if (parent_death_signal != 0) {
      prctl(PR_SET_PDEATHSIG, parent_death_signal);
      if (getppid() != parent) _exit(127);
    }
    dup2(in, 0);
    dup2(out, 1);
    dup2(out, 2);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out);
  close(in);
  return pid;
}

// The exit status (128+signal when killed), or -1 if still running at the deadline.
int WaitFor(pid_t pid, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0) return -2;
    if (Clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(milliseconds(20));
  }
}

std::string Ran::Describe(const std::vector<std::string>& argv) const {
  std::string cmd;
  for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
  return "`" + cmd + "` " + (code == -1 ? "timed out" : "exited " + std::to_string(code)) +
         (output.empty() ? "" : ": " + Tail(output));
}

Ran RunProgram(const std::vector<std::string>& argv, const fs::path& log, milliseconds timeout) {
  std::error_code ec;
  fs::remove(log, ec);
  Ran ran;
  const pid_t pid = Spawn(argv, log);
  if (pid < 0) {
    ran.output = std::string("cannot start: ") + std::strerror(errno);
    return ran;
  }
  ran.code = WaitFor(pid, timeout);
  if (ran.code == -1) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  ran.output = ReadAll(log);
  return ran;
}

std::vector<std::string> Cmdline(pid_t pid) {
  std::string raw = ReadAll("/proc/" + std::to_string(pid) + "/cmdline");
  std::vector<std::string> args;
  std::string cur;
  for (char c : raw) {
    if (c == '\0') {
      args.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  return args;
}

namespace {

bool IsLiveProcess(pid_t pid) {
  const std::string stat = ReadAll("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

}  // namespace

// Live processes (other than this one) with an argument containing `needle`
// (always a path inside this test's temp dir, so only ours match).
std::vector<pid_t> ProcessesMentioning(const std::string& needle) {
  std::vector<pid_t> pids;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    if (pid == getpid() || !IsLiveProcess(pid)) continue;
    for (const auto& arg : Cmdline(pid)) {
      if (arg.find(needle) != std::string::npos) {
        pids.push_back(pid);
        break;
      }
    }
  }
  return pids;
}

bool WaitGone(const std::vector<pid_t>& pids, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (std::none_of(pids.begin(), pids.end(), IsLiveProcess)) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(50));
  }
}

bool SomethingListensOn(const char* host, uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  inet_pton(AF_INET, host, &addr.sin_addr);
  const bool connected = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return connected;
}

// ---------------------------------------------------------------------------
// The fixture.

void GlusterShared::SetUp() {
  const std::string why = StartGluster();
  if (why.empty()) return;
  if (packages_absent_) GTEST_SKIP() << "no shared GlusterFS volume here: " << why;
  if (!InCi()) {
    GTEST_SKIP() << "no shared GlusterFS volume here (outside CI; with CI=true this fails): " << OneLine(why);
  }
  FAIL() << "CI is set and GlusterFS is installed, but its volume could not be set up, so this test "
            "would not run: " << why;
}

std::vector<std::string> GlusterShared::Cli(std::vector<std::string> args) const {
  std::vector<std::string> argv = {gluster_, "--mode=script", "--glusterd-sock=" + socket_.string(),
                                   "--log-file=" + Log("cli.log").string()};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

Ran GlusterShared::RunCli(const std::vector<std::string>& args, milliseconds timeout) {
  return RunProgram(Cli(args), Log("cmd-" + std::to_string(++commands_) + ".out"), timeout);
}

std::string GlusterShared::StartGluster() {
  if (std::string why = CheckPrerequisites(); !why.empty()) return why;
  const auto t0 = Clock::now();
  if (std::string why = TakeLock(); !why.empty()) return why;
  const auto t_locked = Clock::now();
  if (SomethingListensOn(kHost, kGlusterdPort)) {
    return std::string("something already listens on ") + kHost + ":" + std::to_string(kGlusterdPort) +
           " (a glusterd not started by this test?); gluster's bricks and mount helper reach glusterd only there";
  }
  if (std::string why = StartGlusterd(); !why.empty()) return why;
  const auto t_glusterd = Clock::now();
  if (std::string why = CreateVolume(); !why.empty()) return why;
  const auto t_volume = Clock::now();
  if (std::string why = MountTwice(); !why.empty()) return why;
  auto secs = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  std::printf("[ gluster  ] set up in %.1f s: lock %.1f s, glusterd %.1f s, volume %.1f s, mounts %.1f s\n",
              secs(Clock::now() - t0), secs(t_locked - t0), secs(t_glusterd - t_locked),
              secs(t_volume - t_glusterd), secs(Clock::now() - t_volume));
  return "";
}

// The programs, root and /dev/fuse (packages_absent_: the programs are missing).
std::string GlusterShared::CheckPrerequisites() {
  glusterd_ = FindGlusterProgram("glusterd");
  gluster_ = FindGlusterProgram("gluster");
  mount_ = FindProgram("mount");
  packages_absent_ = true;
  if (glusterd_.empty() || gluster_.empty()) return "glusterd or gluster not found (Debian: apt-get install glusterfs-server)";
  if (FindGlusterProgram("mount.glusterfs").empty()) return "mount.glusterfs not found (Debian: apt-get install glusterfs-client)";
  packages_absent_ = false;
  if (geteuid() != 0) return "needs root (it runs glusterd and FUSE mounts); running as uid " + std::to_string(geteuid());
  if (mount_.empty()) return "mount not found";
  if (const int fuse = open("/dev/fuse", O_RDWR | O_CLOEXEC); fuse < 0) {
    return std::string("cannot open /dev/fuse: ") + std::strerror(errno);
  } else {
    close(fuse);
  }
  return "";
}

// One gluster test at a time on this machine: glusterd's port is fixed.
std::string GlusterShared::TakeLock() {
  const fs::path lock_path = fs::temp_directory_path() / "kvtier-gluster-test.lock";
  lock_fd_ = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (lock_fd_ < 0) return "cannot open " + lock_path.string() + ": " + std::strerror(errno);
  const auto lock_deadline = Clock::now() + seconds(180);
  while (flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    if (Clock::now() >= lock_deadline) return "another gluster test held " + lock_path.string() + " for 180 s";
    std::this_thread::sleep_for(milliseconds(200));
  }
  return "";
}

// The temp dir's layout and glusterd's volfile in it (private directories, socket and address).
fs::path GlusterShared::WriteGlusterdVol() {
  std::error_code ec;
  for (const char* sub : {"lib", "run", "log", "brick", "m1", "m2"}) fs::create_directories(dir_.path() / sub, ec);
  mounts_[0] = dir_.path() / "m1";
  mounts_[1] = dir_.path() / "m2";
  socket_ = dir_.path() / "run" / "glusterd.socket";
  // Gluster puts brick sockets and logs there whatever glusterd.vol says.
  fs::create_directories("/var/run/gluster", ec);
  fs::create_directories("/var/log/glusterfs/bricks", ec);
  const fs::path vol = dir_.path() / "glusterd.vol";
  testing::WriteFileOrDie(vol, "volume management\n"
                               "    type mgmt/glusterd\n"
                               "    option working-directory " + (dir_.path() / "lib").string() + "\n"
                               "    option run-directory " + (dir_.path() / "run").string() + "\n"
                               "    option glusterd-sockfile " + socket_.string() + "\n"
                               "    option transport-type socket\n"
                               "    option transport.address-family inet\n"
                               "    option transport.socket.bind-address " + kHost + "\n"
                               "    option ping-timeout 0\n"
                               "    option event-threads 1\n"
                               "end-volume\n");
  return vol;
}

// glusterd, ready when the CLI gets an answer over the private socket.
std::string GlusterShared::StartGlusterd() {
  const fs::path vol = WriteGlusterdVol();
  const std::vector<std::string> glusterd_argv = {glusterd_, "-N", "-f", vol.string(), "-l",
                                                  Log("glusterd.log").string(), "-p",
                                                  (dir_.path() / "run" / "glusterd.pid").string()};
  glusterd_pid_ = Spawn(glusterd_argv, Log("glusterd.out"), SIGTERM);
  if (glusterd_pid_ < 0) return "cannot start " + glusterd_ + ": " + std::strerror(errno);
  const auto ready_deadline = Clock::now() + seconds(30);
  for (;;) {
    if (int code = WaitFor(glusterd_pid_, milliseconds(0)); code != -1) {
      glusterd_pid_ = -1;
      return "glusterd exited with status " + std::to_string(code) + ": " +
             Tail(ReadAll(Log("glusterd.out")) + ReadAll(Log("glusterd.log")));
    }
    if (fs::exists(socket_)) {
      Ran list = RunCli({"volume", "list"}, milliseconds(10000));
      if (list.code == 0) break;
      if (Clock::now() >= ready_deadline) return "glusterd did not answer within 30 s: " + list.output;
    } else if (Clock::now() >= ready_deadline) {
      return "glusterd made no socket within 30 s: " + Tail(ReadAll(Log("glusterd.log")));
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
  return "";
}

// The one-brick volume, created and started; its brick's socket and log noted for TearDown.
std::string GlusterShared::CreateVolume() {
  const std::vector<std::string> create = {"volume", "create", kVolume,
                                           std::string(kHost) + ":" + brick().string(), "force"};
  if (Ran r = RunCli(create); r.code != 0) return r.Describe(Cli(create));
  volume_created_ = true;
  const std::vector<std::string> start = {"volume", "start", kVolume};
  if (Ran r = RunCli(start); r.code != 0) {
    return r.Describe(Cli(start)) + "; brick log: " + Tail(BrickLogGuess());
  }
  volume_started_ = true;
  // The brick's own socket and log paths, to remove afterwards.
  for (pid_t pid : ProcessesMentioning(brick().string())) {
    const auto args = Cmdline(pid);
    for (size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == "-S") brick_socket_ = args[i + 1];
      if (args[i] == "-l") brick_log_ = args[i + 1];
    }
  }
  return "";
}

std::string GlusterShared::MountTwice() {
  for (int i = 0; i < 2; ++i) {
    // Not `"m" + std::to_string(..)`: GCC 12 -Wrestrict false positive in Release.
    const std::vector<std::string> argv = {mount_, "-t", "glusterfs", "-o",
                                           "log-file=" + Log(std::string("m") + std::to_string(i + 1) + ".log").string(),
                                           std::string(kHost) + ":/" + kVolume, mounts_[i].string()};
    Ran r = RunProgram(argv, Log("mount" + std::to_string(i + 1) + ".out"), milliseconds(60000));
    if (r.code != 0) {
      return r.Describe(argv) + "; client log: " + Tail(ReadAll(Log("m" + std::to_string(i + 1) + ".log")));
    }
    mounted_[i] = true;
    struct statfs st {};
    if (statfs(mounts_[i].c_str(), &st) != 0 || st.f_type != kFuseSuperMagic) {
      return "mount -t glusterfs returned 0 but " + mounts_[i].string() + " is not a FUSE mount";
    }
  }
  return "";
}

std::string GlusterShared::BrickLogGuess() const {
  std::string name = brick().string().substr(1);
  std::replace(name.begin(), name.end(), '/', '-');
  return ReadAll("/var/log/glusterfs/bricks/" + name + ".log");
}

void GlusterShared::StopGluster() {
  const auto t0 = Clock::now();
  if (HasFailure()) PrintLogs();
  Unmount();
  StopVolumeAndGlusterd();
  KillLeftovers();
  std::error_code ec;
  if (!brick_socket_.empty()) fs::remove(brick_socket_, ec);
  if (!brick_log_.empty()) fs::remove(brick_log_, ec);
  if (lock_fd_ >= 0) {
    close(lock_fd_);  // releases the flock
    lock_fd_ = -1;
  }
  std::printf("[ gluster  ] torn down in %.1f s\n", std::chrono::duration<double>(Clock::now() - t0).count());
}

void GlusterShared::PrintLogs() const {
  std::fprintf(stderr, "--- glusterd.log ---\n%s\n--- m1.log ---\n%s\n--- m2.log ---\n%s\n--- brick log ---\n%s\n",
               Tail(ReadAll(Log("glusterd.log")), 4000).c_str(), Tail(ReadAll(Log("m1.log")), 4000).c_str(),
               Tail(ReadAll(Log("m2.log")), 4000).c_str(), Tail(BrickLogGuess(), 4000).c_str());
}

// umount -l: detach at once; each FUSE client then exits.
void GlusterShared::Unmount() {
  for (int i = 0; i < 2; ++i) {
    if (!mounted_[i]) continue;
    if (umount2(mounts_[i].c_str(), MNT_DETACH) != 0) {
      ADD_FAILURE() << "umount -l " << mounts_[i] << ": " << std::strerror(errno);
    }
    mounted_[i] = false;
    const auto clients = ProcessesMentioning(mounts_[i].string());
    if (!WaitGone(clients, milliseconds(10000))) {
      for (pid_t pid : clients) kill(pid, SIGKILL);
    }
  }
}

void GlusterShared::StopVolumeAndGlusterd() {
  if (volume_started_) {
    Ran r = RunCli({"volume", "stop", kVolume, "force"});
    if (r.code != 0) ADD_FAILURE() << "gluster volume stop: " << r.output;
    volume_started_ = false;
  }
  if (volume_created_) {
    Ran r = RunCli({"volume", "delete", kVolume});
    if (r.code != 0) ADD_FAILURE() << "gluster volume delete: " << r.output;
    volume_created_ = false;
  }
  if (glusterd_pid_ > 0) {
    kill(glusterd_pid_, SIGTERM);
    if (WaitFor(glusterd_pid_, milliseconds(10000)) == -1) {
      kill(glusterd_pid_, SIGKILL);
      waitpid(glusterd_pid_, nullptr, 0);
    }
    glusterd_pid_ = -1;
  }
}

// Anything still running from this test's directories (a brick that
// ignored the stop, a client that outlived its mount) is killed, and
// that is a failure: nothing may outlive the test.
void GlusterShared::KillLeftovers() {
  if (dir_.path().empty()) return;
  const auto left = ProcessesMentioning(dir_.path().string());
  for (pid_t pid : left) {
    std::string cmd;
    for (const auto& a : Cmdline(pid)) cmd += a + " ";
    ADD_FAILURE() << "left running after teardown, killed: pid " << pid << ": " << cmd;
    kill(pid, SIGKILL);
  }
  WaitGone(left, milliseconds(5000));
}

}  // namespace kvtier::gluster
