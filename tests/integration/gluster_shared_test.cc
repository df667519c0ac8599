// Proves the fs tier on a shared network volume, as two vLLM instances use
// one ReadWriteMany PVC: a single-node GlusterFS volume on loopback, mounted
// twice with FUSE (mount -t glusterfs). Instance A stores through mount 1 and
// instance B loads through mount 2 byte-exact; A and B then store
// overlapping keys with different content at the same time while a third
// instance loads those keys through both mounts, and every row a load
// returns as kOk must be one writer's complete row (each 4 KiB page carries
// the writer and key it belongs to, so a torn mix is told apart). Two
// effects of GlusterFS under these races are counted and printed, not
// failed: a load whose open file is replaced by the other mount's rename gets
// kError (ESTALE/ENOENT) instead of the old bytes, and a store whose shard
// directory the other mount created at the same moment gets kError
// (ENOENT/ESTALE from mkdir or open); afterwards every key either writer
// stored must load through both mounts, and one neither stored must miss.
//
// The fixture starts its own glusterd (-N, private working and run
// directories in a temp dir, listening on 127.0.0.2 only), creates and
// starts a one-brick volume in the temp dir, mounts it twice, and in
// TearDown unmounts, stops and deletes the volume and stops glusterd,
// whatever the test did. Where the gluster programs are not installed it
// skips, saying so on one line (Debian packages: glusterfs-server
// glusterfs-client). Where they are, a volume that cannot be set up (not
// root, no /dev/fuse, port 24007 taken, glusterd, the volume or a mount
// failing: the exact error) is a failure in CI (CI set, as CI systems and
// .ci/run's caller do), so that CI cannot silently stop running this test,
// and a one-line skip elsewhere. The GlusterPolicy tests at the end prove
// both through a child run whose gluster programs are stubs that cannot
// start (KVTIER_TEST_GLUSTER_BIN_DIR: the only place they are looked for).
//
// Where gluster forces things outside the temp dir: the brick listens on a
// port glusterd picks, its socket goes to /var/run/gluster and its log to
// /var/log/glusterfs/bricks (both removed in TearDown); the mount helper and
// the bricks reach glusterd only on its default port 24007, so runs of this
// test are serialised by an flock on $TMPDIR/kvtier-gluster-test.lock. The
// gluster CLI refuses 127.0.0.1 and "localhost" as brick hosts, hence
// 127.0.0.2 (still loopback; glusterd treats all of 127/8 as local).
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
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string_view>
#include <thread>

#include "kvtier/fs_tier.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr uint64_t kRow = 64 * 1024;  // 16 pages: a tear between pages is visible
constexpr uint64_t kPage = 4096;
constexpr const char* kHost = "127.0.0.2";
constexpr const char* kVolume = "kvtiertest";
constexpr uint16_t kGlusterdPort = 24007;  // fixed: bricks and mount.glusterfs fetch volfiles only there
constexpr long kFuseSuperMagic = 0x65735546;

// ---------------------------------------------------------------------------
// Processes: spawned with stdout+stderr to a file (daemons that keep the
// descriptors open can never block us), waited for with a deadline.

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

std::string Tail(const std::string& text, size_t max = 1500) {
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
pid_t Spawn(const std::vector<std::string>& argv, const fs::path& log, int parent_death_signal = 0) {
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

struct Ran {
  int code = -1;  // exit status; -1: killed at the deadline
  std::string output;
  std::string Describe(const std::vector<std::string>& argv) const {
    std::string cmd;
    for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
    return "`" + cmd + "` " + (code == -1 ? "timed out" : "exited " + std::to_string(code)) +
           (output.empty() ? "" : ": " + Tail(output));
  }
};

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

bool IsLiveProcess(pid_t pid) {
  const std::string stat = ReadAll("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

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
// The fixture: its own glusterd, one volume, two FUSE mounts.

class GlusterShared : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = StartGluster();
    if (why.empty()) return;
    if (packages_absent_) GTEST_SKIP() << "no shared GlusterFS volume here: " << why;
    if (!InCi()) {
      GTEST_SKIP() << "no shared GlusterFS volume here (outside CI; with CI=true this fails): " << OneLine(why);
    }
    FAIL() << "CI is set and GlusterFS is installed, but its volume could not be set up, so this test "
              "would not run: " << why;
  }
  void TearDown() override { StopGluster(); }

  const fs::path& mount_point(int i) const { return mounts_[i]; }
  fs::path brick() const { return dir_.path() / "brick"; }

 private:
  fs::path Log(const std::string& name) const { return dir_.path() / "log" / name; }
  std::vector<std::string> Cli(std::vector<std::string> args) const {
    std::vector<std::string> argv = {gluster_, "--mode=script", "--glusterd-sock=" + socket_.string(),
                                     "--log-file=" + Log("cli.log").string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
  Ran RunCli(const std::vector<std::string>& args, milliseconds timeout = milliseconds(60000)) {
    return RunProgram(Cli(args), Log("cmd-" + std::to_string(++commands_) + ".out"), timeout);
  }

  // "" when the volume is mounted twice, else why not (packages_absent_:
  // because the gluster programs are not installed).
  std::string StartGluster() {
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

    // One gluster test at a time on this machine: glusterd's port is fixed.
    const fs::path lock_path = fs::temp_directory_path() / "kvtier-gluster-test.lock";
    lock_fd_ = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (lock_fd_ < 0) return "cannot open " + lock_path.string() + ": " + std::strerror(errno);
    const auto t0 = Clock::now();
    const auto lock_deadline = t0 + seconds(180);
    while (flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
      if (Clock::now() >= lock_deadline) return "another gluster test held " + lock_path.string() + " for 180 s";
      std::this_thread::sleep_for(milliseconds(200));
    }
    const auto t_locked = Clock::now();
    if (SomethingListensOn(kHost, kGlusterdPort)) {
      return std::string("something already listens on ") + kHost + ":" + std::to_string(kGlusterdPort) +
             " (a glusterd not started by this test?); gluster's bricks and mount helper reach glusterd only there";
    }

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

    const std::vector<std::string> glusterd_argv = {glusterd_, "-N", "-f", vol.string(), "-l",
                                                    Log("glusterd.log").string(), "-p",
                                                    (dir_.path() / "run" / "glusterd.pid").string()};
    glusterd_pid_ = Spawn(glusterd_argv, Log("glusterd.out"), SIGTERM);
    if (glusterd_pid_ < 0) return "cannot start " + glusterd_ + ": " + std::strerror(errno);
    // Ready when the CLI gets an answer over the private socket.
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

    const auto t_glusterd = Clock::now();
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

    const auto t_volume = Clock::now();
    for (int i = 0; i < 2; ++i) {
      const std::vector<std::string> argv = {mount_, "-t", "glusterfs", "-o",
                                             "log-file=" + Log("m" + std::to_string(i + 1) + ".log").string(),
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
    auto secs = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
    std::printf("[ gluster  ] set up in %.1f s: lock %.1f s, glusterd %.1f s, volume %.1f s, mounts %.1f s\n",
                secs(Clock::now() - t0), secs(t_locked - t0), secs(t_glusterd - t_locked),
                secs(t_volume - t_glusterd), secs(Clock::now() - t_volume));
    return "";
  }

  std::string BrickLogGuess() const {
    std::string name = brick().string().substr(1);
    std::replace(name.begin(), name.end(), '/', '-');
    return ReadAll("/var/log/glusterfs/bricks/" + name + ".log");
  }

  void StopGluster() {
    const auto t0 = Clock::now();
    if (HasFailure()) {
      std::fprintf(stderr, "--- glusterd.log ---\n%s\n--- m1.log ---\n%s\n--- m2.log ---\n%s\n--- brick log ---\n%s\n",
                   Tail(ReadAll(Log("glusterd.log")), 4000).c_str(), Tail(ReadAll(Log("m1.log")), 4000).c_str(),
                   Tail(ReadAll(Log("m2.log")), 4000).c_str(), Tail(BrickLogGuess(), 4000).c_str());
    }
    // umount -l: detach at once; each FUSE client then exits.
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
    // Anything still running from this test's directories (a brick that
    // ignored the stop, a client that outlived its mount) is killed, and
    // that is a failure: nothing may outlive the test.
    if (!dir_.path().empty()) {
      const auto left = ProcessesMentioning(dir_.path().string());
      for (pid_t pid : left) {
        std::string cmd;
        for (const auto& a : Cmdline(pid)) cmd += a + " ";
        ADD_FAILURE() << "left running after teardown, killed: pid " << pid << ": " << cmd;
        kill(pid, SIGKILL);
      }
      WaitGone(left, milliseconds(5000));
    }
    std::error_code ec;
    if (!brick_socket_.empty()) fs::remove(brick_socket_, ec);
    if (!brick_log_.empty()) fs::remove(brick_log_, ec);
    if (lock_fd_ >= 0) {
      close(lock_fd_);  // releases the flock
      lock_fd_ = -1;
    }
    std::printf("[ gluster  ] torn down in %.1f s\n", std::chrono::duration<double>(Clock::now() - t0).count());
  }

  testing::TempDir dir_;
  fs::path mounts_[2];
  fs::path socket_;
  std::string glusterd_, gluster_, mount_;
  std::string brick_socket_, brick_log_;
  pid_t glusterd_pid_ = -1;
  int lock_fd_ = -1;
  int commands_ = 0;
  bool volume_created_ = false, volume_started_ = false;
  bool mounted_[2] = {false, false};
  bool packages_absent_ = false;
};

// ---------------------------------------------------------------------------
// Rows that say whose they are. Every 4 KiB page starts with (magic, writer,
// key, page) and continues with bytes drawn from (seed, writer, key, page),
// so a row is checkable on its own and a page from another row shows.

constexpr uint64_t kMagic = 0x4b56544753484152;  // "KVTGSHAR"

struct AlignedRows {
  explicit AlignedRows(size_t n) : data(static_cast<uint8_t*>(std::aligned_alloc(4096, n * kRow))), count(n) {
    std::memset(data, 0, n * kRow);
  }
  ~AlignedRows() { std::free(data); }
  AlignedRows(const AlignedRows&) = delete;
  AlignedRows& operator=(const AlignedRows&) = delete;
  uint8_t* row(size_t i) const { return data + i * kRow; }
  std::vector<std::span<const uint8_t>> Const() const {
    std::vector<std::span<const uint8_t>> out;
    for (size_t i = 0; i < count; ++i) out.emplace_back(row(i), kRow);
    return out;
  }
  std::vector<std::span<uint8_t>> Mut() const {
    std::vector<std::span<uint8_t>> out;
    for (size_t i = 0; i < count; ++i) out.emplace_back(row(i), kRow);
    return out;
  }
  uint8_t* data;
  size_t count;
};

uint64_t SplitMix(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
  z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
  return z ^ (z >> 31);
}

void FillRow(uint8_t* row, uint64_t seed, uint64_t writer, uint64_t key) {
  for (uint64_t p = 0; p < kRow / kPage; ++p) {
    uint64_t* words = reinterpret_cast<uint64_t*>(row + p * kPage);
    words[0] = kMagic;
    words[1] = writer;
    words[2] = key;
    words[3] = p;
    uint64_t state = seed ^ (writer << 56) ^ (key << 16) ^ p;
    for (uint64_t w = 4; w < kPage / 8; ++w) words[w] = SplitMix(&state);
  }
}

// "" when `row` is writer 1's or writer 2's complete row for `key`; else
// what it is made of, page by page.
std::string CheckRow(const uint8_t* row, uint64_t seed, uint64_t key, uint64_t* writer_out) {
  const uint64_t* head = reinterpret_cast<const uint64_t*>(row);
  const uint64_t writer = head[1];
  if (head[0] == kMagic && head[2] == key && (writer == 1 || writer == 2)) {
    std::vector<uint8_t> want(kRow);
    FillRow(want.data(), seed, writer, key);
    if (std::memcmp(want.data(), row, kRow) == 0) {
      *writer_out = writer;
      return "";
    }
  }
  std::ostringstream what;
  what << "key " << key << " is not one writer's row; pages (writer/key/page):";
  for (uint64_t p = 0; p < kRow / kPage; ++p) {
    const uint64_t* w = reinterpret_cast<const uint64_t*>(row + p * kPage);
    if (w[0] != kMagic) {
      what << " [" << p << ": no header]";
      continue;
    }
    std::vector<uint8_t> page(kRow);
    FillRow(page.data(), seed, w[1], w[2]);
    const bool body_ok = w[3] < kRow / kPage && std::memcmp(page.data() + w[3] * kPage, row + p * kPage, kPage) == 0;
    what << " [" << p << ": " << w[1] << "/" << w[2] << "/" << w[3] << (body_ok ? "" : " bad body") << "]";
  }
  return what.str();
}

constexpr char kModel[] = "shared/gluster-model";
using testing::Key;
using testing::Spec;
// The key bytes this file's tests use.
constexpr testing::KeyShape kKeyShape = testing::KeyShape::Fill(0x5a);

std::unique_ptr<FsTier> OpenTier(const fs::path& root, std::string* error, int threads = 4) {
  FsTierOpenOptions o;
  o.tier.root_dir = root.string();
  o.ns = Spec(kModel, {"l0", "l1"});
  o.row_bytes = kRow;
  o.tier.n_read_threads = threads;
  o.tier.n_write_threads = threads;
  auto tier = FsTier::Open(o);
  if (!tier.ok()) {
    *error = tier.status().ToString();
    return nullptr;
  }
  return std::move(tier).value();
}

// The results of `ids`, in that order; a job missing at the deadline fails the test.
std::vector<JobResult> WaitJobs(FsTier* tier, const std::vector<uint64_t>& ids, seconds timeout = seconds(60)) {
  std::vector<JobResult> out(ids.size());
  size_t got = 0;
  std::vector<JobResult> done;
  const auto deadline = Clock::now() + timeout;
  while (got < ids.size()) {
    done.clear();
    tier->PollFinished(&done);
    for (auto& r : done) {
      const auto it = std::find(ids.begin(), ids.end(), r.job_id);
      if (it == ids.end()) continue;
      out[static_cast<size_t>(it - ids.begin())] = std::move(r);
      ++got;
    }
    if (got == ids.size()) break;
    if (Clock::now() >= deadline) {
      ADD_FAILURE() << ids.size() - got << " jobs did not finish within " << timeout.count() << " s";
      break;
    }
    std::this_thread::sleep_for(milliseconds(1));
  }
  return out;
}

std::string Describe(const FsTier& tier) {
  return std::string(tier.backend_name()) + ", O_DIRECT " + (tier.o_direct() ? "on" : "off") + ", CRC xattrs " +
         (tier.xattrs_supported() ? "on" : "off");
}

// ---------------------------------------------------------------------------

TEST_F(GlusterShared, StoredThroughOneMountLoadsByteExactThroughTheOther) {
  const uint64_t seed = testing::TestSeed();
  std::string error;
  auto a = OpenTier(mount_point(0), &error);
  ASSERT_TRUE(a) << "instance A on mount 1: " << error;
  auto b = OpenTier(mount_point(1), &error);
  ASSERT_TRUE(b) << "instance B on mount 2: " << error;
  std::printf("[ gluster  ] A: %s; B: %s\n", Describe(*a).c_str(), Describe(*b).c_str());

  constexpr size_t kN = 64;
  std::vector<OffloadKey> keys;
  for (size_t i = 0; i < kN; ++i) keys.push_back(Key(i, kKeyShape));
  AlignedRows rows(kN), back(kN);
  for (size_t i = 0; i < kN; ++i) FillRow(rows.row(i), seed, 1, i);

  const JobResult stored = WaitJobs(a.get(), {a->SubmitStore(keys, rows.Const()).value()})[0];
  ASSERT_EQ(stored.keys.size(), kN);
  ASSERT_EQ(stored.OkPrefix(), kN) << KeyOutcomeName(stored.keys[stored.OkPrefix()].outcome) << " "
                                   << stored.keys[stored.OkPrefix()].status.ToString();

  // The same namespace resolves to the same file on both mounts, and the
  // bytes are on the volume's brick, not in a local directory.
  for (size_t i = 0; i < kN; ++i) {
    const std::string rel = a->ns().BlockRelPath(keys[i]);
    EXPECT_EQ(b->BlockPath(keys[i]), (mount_point(1) / rel).string());
    std::error_code ec;
    EXPECT_EQ(fs::file_size(brick() / rel, ec), kRow) << rel << " on the brick: " << ec.message();
  }

  const JobResult found = WaitJobs(b.get(), {b->SubmitLookup(keys).value()})[0];
  EXPECT_EQ(found.OkPrefix(), kN);
  const JobResult loaded = WaitJobs(b.get(), {b->SubmitLoad(keys, back.Mut()).value()})[0];
  ASSERT_EQ(loaded.keys.size(), kN);
  ASSERT_EQ(loaded.OkPrefix(), kN) << KeyOutcomeName(loaded.keys[loaded.OkPrefix()].outcome) << " "
                                   << loaded.keys[loaded.OkPrefix()].status.ToString();
  for (size_t i = 0; i < kN; ++i) EXPECT_EQ(std::memcmp(back.row(i), rows.row(i), kRow), 0) << "row " << i;

  // B storing the same keys finds A's files and leaves them alone.
  AlignedRows others(kN);
  for (size_t i = 0; i < kN; ++i) FillRow(others.row(i), seed, 2, i);
  const JobResult again = WaitJobs(b.get(), {b->SubmitStore(keys, others.Const()).value()})[0];
  for (size_t i = 0; i < again.keys.size(); ++i) {
    EXPECT_EQ(again.keys[i].outcome, KeyOutcome::kSkippedExists) << "row " << i << ": " << again.keys[i].status.ToString();
  }
  const JobResult reloaded = WaitJobs(a.get(), {a->SubmitLoad(keys, back.Mut()).value()})[0];
  ASSERT_EQ(reloaded.OkPrefix(), kN);
  EXPECT_EQ(std::memcmp(back.data, rows.data, kN * kRow), 0) << "A's rows must stay as A wrote them";
}

// Outcomes that the volume itself causes under these races, allowed but
// counted and printed (see the notes at the tests that allow them).
bool IsStaleOrVanished(const Status& status) {
  return status.sys_errno() == ESTALE || status.sys_errno() == ENOENT;
}

struct StoreTally {
  uint64_t ok = 0, skipped = 0, raced = 0, failed = 0;
  std::vector<std::string> messages;  // the first few raced or failed stores
};
struct LoadTally {
  uint64_t passes = 0, ok = 0, miss = 0, corrupt = 0, stale = 0, failed = 0, torn = 0, from[3] = {0, 0, 0};
  std::vector<std::string> torn_rows, messages, stale_messages;  // the first few of each
  void Note(std::vector<std::string>* list, std::string line) {
    if (list->size() < 8) list->push_back(std::move(line));
  }
};

TEST_F(GlusterShared, ConcurrentOverlappingStoresNeverTearALoad) {
  const uint64_t seed = testing::TestSeed();
  {  // the check itself must tell a mix of two writers' pages
    AlignedRows mix(2);
    FillRow(mix.row(0), seed, 1, 7);
    FillRow(mix.row(1), seed, 2, 7);
    std::memcpy(mix.row(0) + kRow / 2, mix.row(1) + kRow / 2, kRow / 2);
    uint64_t w = 0;
    ASSERT_NE(CheckRow(mix.row(0), seed, 7, &w), "");
    ASSERT_EQ(CheckRow(mix.row(1), seed, 7, &w), "");
    ASSERT_EQ(w, 2u);
  }
  std::string error;
  std::unique_ptr<FsTier> writers[2], readers[2];
  for (int i = 0; i < 2; ++i) {
    writers[i] = OpenTier(mount_point(i), &error);
    ASSERT_TRUE(writers[i]) << "writer on mount " << i + 1 << ": " << error;
    readers[i] = OpenTier(mount_point(i), &error, /*threads=*/16);
    ASSERT_TRUE(readers[i]) << "reader on mount " << i + 1 << ": " << error;
  }
  std::printf("[ gluster  ] writer A (mount 1): %s; writer B (mount 2): %s\n", Describe(*writers[0]).c_str(),
              Describe(*writers[1]).c_str());

  // Rounds of K fresh keys: A stores [0, 3K/4), B stores [K/4, K), each in
  // its own seeded order, four keys a job, both starting together; the
  // middle half is stored by both. A third instance loads the round's keys
  // through mount 1 and mount 2 in turn until both writers are done.
  constexpr uint64_t kK = 32, kBatch = 4, kMaxRounds = 30;
  const auto time_budget = seconds(12);
  const auto start = Clock::now();
  std::atomic<uint64_t> round{0};
  std::atomic<bool> stop{false}, writers_done{false};
  uint64_t rounds_run = 0;
  std::barrier sync(2, [&]() noexcept {
    if (rounds_run == kMaxRounds || Clock::now() - start >= time_budget) {
      stop = true;
    } else {
      round = rounds_run++;
    }
  });
  StoreTally store_tally[2];
  std::vector<std::vector<KeyOutcome>> outcomes[2];  // [writer][round][key in round]

  auto writer = [&](int w) {
    std::mt19937_64 rng(seed + static_cast<uint64_t>(w));
    StoreTally& tally = store_tally[w];
    for (;;) {
      sync.arrive_and_wait();
      if (stop) return;
      const uint64_t r = round;
      std::vector<uint64_t> mine;
      for (uint64_t i = (w == 0 ? 0 : kK / 4); i < (w == 0 ? 3 * kK / 4 : kK); ++i) mine.push_back(i);
      std::shuffle(mine.begin(), mine.end(), rng);
      AlignedRows rows(mine.size());
      std::vector<OffloadKey> keys;
      for (size_t j = 0; j < mine.size(); ++j) {
        keys.push_back(Key(r * kK + mine[j], kKeyShape));
        FillRow(rows.row(j), seed, static_cast<uint64_t>(w + 1), r * kK + mine[j]);
      }
      const auto spans = rows.Const();
      std::vector<uint64_t> ids;
      for (size_t j = 0; j < keys.size(); j += kBatch) {
        auto id = writers[w]->SubmitStore(std::span(keys).subspan(j, kBatch), std::span(spans).subspan(j, kBatch));
        if (!id.ok()) {
          ADD_FAILURE() << "SubmitStore: " << id.status().ToString();
          continue;
        }
        ids.push_back(id.value());
      }
      std::vector<KeyOutcome> by_key(kK, KeyOutcome::kMiss);  // kMiss: not this writer's key
      const auto results = WaitJobs(writers[w].get(), ids);
      for (size_t job = 0; job < results.size(); ++job) {
        for (size_t k = 0; k < results[job].keys.size(); ++k) {
          const KeyResult& kr = results[job].keys[k];
          by_key[mine[job * kBatch + k]] = kr.outcome;
          if (kr.outcome == KeyOutcome::kOk) {
            ++tally.ok;
            continue;
          }
          if (kr.outcome == KeyOutcome::kSkippedExists) {
            ++tally.skipped;
            continue;
          }
          ++(kr.outcome == KeyOutcome::kError && IsStaleOrVanished(kr.status) ? tally.raced : tally.failed);
          if (tally.messages.size() < 8) {
            tally.messages.push_back(std::string(KeyOutcomeName(kr.outcome)) + " " + kr.status.ToString());
          }
        }
      }
      outcomes[w].push_back(std::move(by_key));
    }
  };

  // Loads round r's keys through mount m; returns each key's outcome.
  auto load_pass = [&](int m, uint64_t r, LoadTally* tally) {
    std::vector<OffloadKey> keys;
    for (uint64_t i = 0; i < kK; ++i) keys.push_back(Key(r * kK + i, kKeyShape));
    AlignedRows rows(kK);
    JobResult res = WaitJobs(readers[m].get(), {readers[m]->SubmitLoad(keys, rows.Mut()).value()})[0];
    ++tally->passes;
    for (size_t i = 0; i < res.keys.size(); ++i) {
      const KeyResult& kr = res.keys[i];
      const std::string where = "mount " + std::to_string(m + 1) + " key " + std::to_string(r * kK + i) + ": ";
      if (kr.outcome == KeyOutcome::kOk) {
        ++tally->ok;
        uint64_t w = 0;
        const std::string bad = CheckRow(rows.row(i), seed, r * kK + i, &w);
        if (bad.empty()) {
          ++tally->from[w];
        } else {
          ++tally->torn;
          res.keys[i].outcome = KeyOutcome::kCorrupt;  // for the caller: not a usable row
          tally->Note(&tally->torn_rows, where + bad);
        }
      } else if (kr.outcome == KeyOutcome::kMiss) {
        ++tally->miss;
      } else {
        const bool stale = kr.outcome == KeyOutcome::kError && IsStaleOrVanished(kr.status);
        ++(stale ? tally->stale : kr.outcome == KeyOutcome::kCorrupt ? tally->corrupt : tally->failed);
        tally->Note(stale ? &tally->stale_messages : &tally->messages,
                    where + std::string(KeyOutcomeName(kr.outcome)) + " " + kr.status.ToString());
      }
    }
    std::vector<KeyOutcome> out;
    for (const auto& kr : res.keys) out.push_back(kr.outcome);
    return out;
  };

  LoadTally during[2];
  {
    std::jthread reader([&]() {
      while (!writers_done) {
        for (int m = 0; m < 2 && !writers_done; ++m) load_pass(m, round, &during[m]);
      }
    });
    std::jthread a(writer, 0), b(writer, 1);
    a.join();
    b.join();
    writers_done = true;
  }
  const double concurrent_s = std::chrono::duration<double>(Clock::now() - start).count();

  // Once both are done, every key that either writer stored loads through
  // both mounts as one writer's row, and a key that neither stored (both
  // stores lost a race, below) is a plain miss.
  LoadTally after[2];
  uint64_t unstored = 0, both_stored = 0, overlap = 0;
  std::vector<std::string> after_wrong;
  for (uint64_t r = 0; r < rounds_run; ++r) {
    for (int m = 0; m < 2; ++m) {
      const std::vector<KeyOutcome> got = load_pass(m, r, &after[m]);
      ASSERT_EQ(got.size(), kK);
      for (uint64_t i = 0; i < kK; ++i) {
        const bool stored = outcomes[0][r][i] == KeyOutcome::kOk || outcomes[1][r][i] == KeyOutcome::kOk ||
                            outcomes[0][r][i] == KeyOutcome::kSkippedExists ||
                            outcomes[1][r][i] == KeyOutcome::kSkippedExists;
        const KeyOutcome want = stored ? KeyOutcome::kOk : KeyOutcome::kMiss;
        if (got[i] != want && after_wrong.size() < 8) {
          after_wrong.push_back("mount " + std::to_string(m + 1) + " key " + std::to_string(r * kK + i) + ": " +
                                std::string(KeyOutcomeName(got[i])) + ", want " + std::string(KeyOutcomeName(want)));
        }
        if (m == 0) {
          unstored += stored ? 0 : 1;
          if (i >= kK / 4 && i < 3 * kK / 4) {
            ++overlap;
            both_stored += outcomes[0][r][i] == KeyOutcome::kOk && outcomes[1][r][i] == KeyOutcome::kOk;
          }
        }
      }
    }
  }
  const double total_s = std::chrono::duration<double>(Clock::now() - start).count();

  std::printf("[ gluster  ] %llu rounds of %llu keys: %.1f s concurrent, %.1f s after; %llu overlapping keys, %llu "
              "stored by both writers (a rename replaced the other's block), %llu stored by neither\n",
              static_cast<unsigned long long>(rounds_run), static_cast<unsigned long long>(kK), concurrent_s,
              total_s - concurrent_s, static_cast<unsigned long long>(overlap),
              static_cast<unsigned long long>(both_stored), static_cast<unsigned long long>(unstored));
  for (int w = 0; w < 2; ++w) {
    const StoreTally& t = store_tally[w];
    std::printf("[ gluster  ] writer %c stores: %llu ok, %llu skipped (the other had it), %llu lost to a "
                "stale/vanished directory, %llu failed\n",
                "AB"[w], static_cast<unsigned long long>(t.ok), static_cast<unsigned long long>(t.skipped),
                static_cast<unsigned long long>(t.raced), static_cast<unsigned long long>(t.failed));
    for (const auto& line : t.messages) std::printf("[ gluster  ]   %s\n", line.c_str());
  }
  for (int phase = 0; phase < 2; ++phase) {
    const LoadTally* t = phase == 0 ? during : after;
    for (int m = 0; m < 2; ++m) {
      std::printf("[ gluster  ] loads %s, mount %d: %llu passes, %llu ok (%llu A's, %llu B's, %llu torn), %llu miss, "
                  "%llu corrupt, %llu replaced under an open fd (ESTALE/ENOENT), %llu failed\n",
                  phase == 0 ? "during the stores" : "afterwards", m + 1, static_cast<unsigned long long>(t[m].passes),
                  static_cast<unsigned long long>(t[m].ok), static_cast<unsigned long long>(t[m].from[1]),
                  static_cast<unsigned long long>(t[m].from[2]), static_cast<unsigned long long>(t[m].torn),
                  static_cast<unsigned long long>(t[m].miss), static_cast<unsigned long long>(t[m].corrupt),
                  static_cast<unsigned long long>(t[m].stale), static_cast<unsigned long long>(t[m].failed));
      for (const auto& line : t[m].messages) std::printf("[ gluster  ]   %s\n", line.c_str());
      for (size_t i = 0; i < t[m].stale_messages.size() && i < 2; ++i) {
        std::printf("[ gluster  ]   %s\n", t[m].stale_messages[i].c_str());
      }
    }
  }

  EXPECT_GT(rounds_run, 0u);
  for (int m = 0; m < 2; ++m) {
    for (const LoadTally* t : {&during[m], &after[m]}) {
      // The property under test: a load that says kOk returned one writer's whole row.
      EXPECT_EQ(t->torn, 0u) << ::testing::PrintToString(t->torn_rows);
      // Blocks only ever appear whole (temp file + rename), so no load may
      // see a short or mismatched one either (it would also delete it).
      EXPECT_EQ(t->corrupt, 0u) << ::testing::PrintToString(t->messages);
      // kError with ESTALE or ENOENT: the load opened a block that the
      // other mount's rename then replaced; GlusterFS (open-behind) fails
      // the open fd's statx, fgetxattr or read where a local filesystem
      // would keep reading the old file. Allowed (counted above): no torn
      // read, though a retry of the open would find the new block.
      EXPECT_EQ(t->failed, 0u) << ::testing::PrintToString(t->messages);
      // The load reopens the path when the file is replaced under its fd,
      // so those races end as kOk (the new block) or kMiss, never kError.
      EXPECT_EQ(t->stale, 0u) << ::testing::PrintToString(t->stale_messages);
    }
  }
  for (int w = 0; w < 2; ++w) {
    // ENOENT/ESTALE from mkdir or open(tmp): both instances created the
    // same new shard directory at once through different mounts, and
    // gluster gave one of them a directory handle that went stale. Allowed
    // (counted above): the store is lost, never half-written.
    EXPECT_EQ(store_tally[w].failed, 0u) << "writer " << "AB"[w] << ": "
                                         << ::testing::PrintToString(store_tally[w].messages);
    // A store retries the directory creation when it loses that race.
    EXPECT_EQ(store_tally[w].raced, 0u) << "writer " << "AB"[w] << ": "
                                        << ::testing::PrintToString(store_tally[w].messages);
  }
  EXPECT_TRUE(after_wrong.empty()) << ::testing::PrintToString(after_wrong);
}

// ---------------------------------------------------------------------------
// The fixture's own policy, through a child run of this binary whose gluster
// programs are stubs that exit at once: installed but unable to start is a
// failure in CI and a one-line skip elsewhere; not installed is a one-line
// skip even in CI.

struct FixtureRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
  bool skipped = false;
  std::string skip_message;  // from gtest's "Skipped" to the next line that starts with '['
};

FixtureRun RunFixture(const char* ci, const fs::path& bin_dir) {
  std::vector<std::string> argv = {"/usr/bin/env"};
  if (ci == nullptr) {
    argv.insert(argv.end(), {"-u", "CI"});
  } else {
    argv.push_back(std::string("CI=") + ci);
  }
  argv.push_back("KVTIER_TEST_GLUSTER_BIN_DIR=" + bin_dir.string());
  argv.push_back(fs::read_symlink("/proc/self/exe").string());
  argv.push_back("--gtest_filter=GlusterShared.StoredThroughOneMountLoadsByteExactThroughTheOther");
  const testing::CommandResult r = testing::RunCommand(argv);
  FixtureRun run;
  run.exit_code = r.exit_code;
  run.output = r.out + r.err;
  // gtest prints "<file>:<line>: Skipped", the message, then TearDown's and
  // its own "[ ...". lines.
  const size_t begin = r.out.find("Skipped\n");
  const size_t end = begin == std::string::npos ? begin : r.out.find("\n[", begin);
  run.skipped = end != std::string::npos && r.out.find("[  SKIPPED ]", end) != std::string::npos;
  if (run.skipped) run.skip_message = r.out.substr(begin + 8, end - begin - 8);
  return run;
}

class GlusterPolicy : public ::testing::Test {
 protected:
  // Stubs for the three gluster programs: each exits 3 at once.
  void WriteStubs() {
    for (const char* name : {"glusterd", "gluster", "mount.glusterfs"}) {
      const fs::path path = stubs_.path() / name;
      testing::WriteFileOrDie(path, "#!/bin/sh\necho \"stub $0: cannot start\" >&2\nexit 3\n");
      fs::permissions(path, fs::perms::owner_all | fs::perms::group_read | fs::perms::others_read);
    }
  }
  // The fixture checks root and /dev/fuse before it starts glusterd.
  static std::string WhyGlusterdIsNotReached() {
    if (geteuid() != 0) return "not root: the fixture stops before starting glusterd";
    if (access("/dev/fuse", R_OK | W_OK) != 0) return "no /dev/fuse: the fixture stops before starting glusterd";
    return "";
  }
  testing::TempDir stubs_;
};

TEST_F(GlusterPolicy, GlusterdThatCannotStartFailsInCi) {
  if (const std::string why = WhyGlusterdIsNotReached(); !why.empty()) GTEST_SKIP() << why;
  WriteStubs();
  const FixtureRun run = RunFixture("true", stubs_.path());
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_FALSE(run.skipped) << run.output;
  EXPECT_NE(run.output.find("glusterd exited with status 3"), std::string::npos) << run.output;
}

TEST_F(GlusterPolicy, GlusterdThatCannotStartIsAOneLineSkipOutsideCi) {
  if (const std::string why = WhyGlusterdIsNotReached(); !why.empty()) GTEST_SKIP() << why;
  WriteStubs();
  const FixtureRun run = RunFixture(nullptr, stubs_.path());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  ASSERT_TRUE(run.skipped) << run.output;
  EXPECT_EQ(run.skip_message.find('\n'), std::string::npos) << run.skip_message;
  EXPECT_NE(run.skip_message.find("glusterd exited with status 3"), std::string::npos) << run.skip_message;
}

TEST_F(GlusterPolicy, AbsentPackagesAreAOneLineSkipEvenInCi) {
  const FixtureRun run = RunFixture("true", stubs_.path());  // no stubs written: nothing installed
  EXPECT_EQ(run.exit_code, 0) << run.output;
  ASSERT_TRUE(run.skipped) << run.output;
  EXPECT_EQ(run.skip_message.find('\n'), std::string::npos) << run.skip_message;
  EXPECT_NE(run.skip_message.find("not found"), std::string::npos) << run.skip_message;
}

}  // namespace
}  // namespace kvtier
