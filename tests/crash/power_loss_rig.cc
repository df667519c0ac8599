// The power-loss rig: loop devices, mkfs, mounts and the FICLONE power cut
// (see power_loss_rig.h).
#include "power_loss_rig.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <linux/loop.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "support/test_support.h"

namespace kvtier::powerloss {
namespace fs = std::filesystem;

const char* InnerFsName(InnerFs type) { return type == InnerFs::kExt4 ? "ext4" : "xfs"; }

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
// The tmpfs holds the outer image, so it bounds the memory the rig can take.
// Images are sparse: the rig uses what the workload writes, not this.
constexpr uint64_t kTmpfsBytes = 1536 * kMiB;
constexpr uint64_t kOuterBytes = 1024 * kMiB;

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(Fd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Fd& operator=(Fd&& other) noexcept {
    Reset();
    fd_ = other.fd_;
    other.fd_ = -1;
    return *this;
  }
  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

Status Unavailable(std::string why) { return Status(StatusCode::kUnavailable, std::move(why)); }

// An mkfs binary on PATH, or in the sbin directories a non-login root shell
// may lack on its PATH. Empty when there is none.
std::string FindTool(const std::string& name) {
  std::string dirs = "/usr/sbin:/sbin";
  if (const char* path = std::getenv("PATH"); path != nullptr)
    dirs = std::string(path) + ":" + dirs;
  size_t at = 0;
  while (at <= dirs.size()) {
    const size_t colon = std::min(dirs.find(':', at), dirs.size());
    const std::string candidate = dirs.substr(at, colon - at) + "/" + name;
    if (colon > at && access(candidate.c_str(), X_OK) == 0) return candidate;
    at = colon + 1;
  }
  return {};
}

Status MakeSparse(const fs::path& path, uint64_t bytes) {
  Fd fd(::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600));
  if (!fd.ok()) return ErrnoToStatus(errno, "create " + path.string());
  if (ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0)
    return ErrnoToStatus(errno, "truncate " + path.string());
  return Status::Ok();
}

// Attaches `image` to a free loop device with LO_FLAGS_AUTOCLEAR, so the
// device detaches itself once nothing holds it open. *held keeps it open
// until the caller has mounted it. Another process may take the free device
// between LOOP_CTL_GET_FREE and LOOP_CONFIGURE (EBUSY): then the next one.
Result<std::string> AttachLoop(const fs::path& image, Fd* held) {
  Fd ctl(::open("/dev/loop-control", O_RDWR | O_CLOEXEC));
  if (!ctl.ok()) return ErrnoToStatus(errno, "open /dev/loop-control");
  Fd backing(::open(image.c_str(), O_RDWR | O_CLOEXEC));
  if (!backing.ok()) return ErrnoToStatus(errno, "open " + image.string());
  bool no_node = false;
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int n = ioctl(ctl.get(), LOOP_CTL_GET_FREE);
    if (n < 0) return ErrnoToStatus(errno, "LOOP_CTL_GET_FREE");
    const std::string dev = "/dev/loop" + std::to_string(n);
    Fd fd(::open(dev.c_str(), O_RDWR | O_CLOEXEC));
    if (!fd.ok() && errno != ENOENT) return ErrnoToStatus(errno, "open " + dev);
    no_node = !fd.ok();
    if (fd.ok()) {
      loop_config config{};
      config.fd = static_cast<uint32_t>(backing.get());
      config.info.lo_flags = LO_FLAGS_AUTOCLEAR;
      std::strncpy(reinterpret_cast<char*>(config.info.lo_file_name), image.c_str(),
                   LO_NAME_SIZE - 1);
      if (ioctl(fd.get(), LOOP_CONFIGURE, &config) == 0) {
        *held = std::move(fd);
        return dev;
      }
      if (errno != EBUSY) return ErrnoToStatus(errno, "LOOP_CONFIGURE " + dev);
    }
    // Taken meanwhile, or its node is not there yet (udev): try again.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // A container without devtmpfs never gets the nodes: no loop devices here.
  if (no_node) return Unavailable("no /dev/loopN node appeared for a free loop device");
  return Status(StatusCode::kBusy, "no free loop device after 100 tries");
}

Status RunTool(const std::vector<std::string>& argv) {
  const testing::CommandResult r = testing::RunCommand(argv);
  if (r.exit_code == 0) return Status::Ok();
  std::string line;
  for (const std::string& a : argv) line += a + " ";
  return Status(StatusCode::kIoError,
                line + "exited " + std::to_string(r.exit_code) + ": " + r.err + r.out);
}

// The mkfs command line for a fresh filesystem on `dev`: no discard (it would
// punch the sparse image for nothing), everything initialised now rather than
// by a background thread that would write while the test runs.
std::vector<std::string> MkfsArgv(const char* type, const std::string& dev, bool reflink) {
  if (std::strcmp(type, "ext4") == 0) {
    return {FindTool("mkfs.ext4"),
            "-q",
            "-F",
            "-b",
            "4096",
            "-I",
            "256",
            "-E",
            "nodiscard,lazy_itable_init=0,lazy_journal_init=0",
            dev};
  }
  std::vector<std::string> argv = {FindTool("mkfs.xfs"), "-q", "-f", "-K"};
  if (reflink) argv.insert(argv.end(), {"-m", "reflink=1"});
  argv.push_back(dev);
  return argv;
}

// Writes one page and clones it: the outer filesystem must support FICLONE.
Status ProbeReflink(const fs::path& dir) {
  const fs::path a = dir / "reflink_probe.a", b = dir / "reflink_probe.b";
  Fd src(::open(a.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600));
  if (!src.ok()) return ErrnoToStatus(errno, "create " + a.string());
  const std::string page(4096, 'r');
  if (::write(src.get(), page.data(), page.size()) != static_cast<ssize_t>(page.size()))
    return ErrnoToStatus(errno, "write " + a.string());
  Fd dst(::open(b.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600));
  if (!dst.ok()) return ErrnoToStatus(errno, "create " + b.string());
  const int rc = ioctl(dst.get(), FICLONE, src.get());
  const int err = errno;
  ::unlink(a.c_str());
  ::unlink(b.c_str());
  if (rc == 0) return Status::Ok();
  if (err == EOPNOTSUPP || err == EINVAL || err == EXDEV)
    return Unavailable(std::string("the outer XFS refuses FICLONE (no reflink): ") +
                       std::strerror(err));
  return ErrnoToStatus(err, "FICLONE probe");
}

}  // namespace

Result<std::unique_ptr<Rig>> Rig::Create(const fs::path& dir) {
  if (geteuid() != 0) return Unavailable("not root: loop devices and mounts need root");
  if (access("/dev/loop-control", R_OK | W_OK) != 0)
    return Unavailable(std::string("no loop devices (/dev/loop-control: ") + std::strerror(errno) +
                       ")");
  if (FindTool("mkfs.xfs").empty()) return Unavailable("no mkfs.xfs (Debian package xfsprogs)");
  if (FindTool("mkfs.ext4").empty()) return Unavailable("no mkfs.ext4 (Debian package e2fsprogs)");
  // A mount namespace of our own: the kernel unmounts all of it when this
  // process dies, however it dies, and nothing is visible to other processes.
  if (unshare(CLONE_NEWNS) != 0) {
    if (errno == EPERM) return Unavailable("unshare(CLONE_NEWNS) refused (no CAP_SYS_ADMIN)");
    return ErrnoToStatus(errno, "unshare(CLONE_NEWNS)");
  }
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return ErrnoToStatus(errno, "make / private in the test's mount namespace");
  std::unique_ptr<Rig> rig(new Rig(dir));
  KVTIER_RETURN_IF_ERROR(rig->Build());
  return rig;
}

Status Rig::Build() {
  const fs::path base = dir_ / "base";
  std::error_code ec;
  fs::create_directories(base, ec);
  if (ec) return Status(StatusCode::kIoError, "mkdir " + base.string() + ": " + ec.message());
  const std::string size = "size=" + std::to_string(kTmpfsBytes) + ",mode=0700";
  if (mount("tmpfs", base.c_str(), "tmpfs", 0, size.c_str()) != 0) {
    if (errno == EPERM) return Unavailable("mounting a tmpfs is refused here (EPERM)");
    return ErrnoToStatus(errno, "mount tmpfs on " + base.string());
  }
  mounted_.push_back(base);
  const fs::path outer_image = base / "outer.img";
  KVTIER_RETURN_IF_ERROR(MakeSparse(outer_image, kOuterBytes));
  const Status s = MountImage(outer_image, dir_ / "outer", "xfs", Make::kFsWithReflink, "");
  if (s.code() == StatusCode::kPermissionDenied || s.sys_errno() == ENXIO ||
      s.sys_errno() == ENODEV) {
    return Unavailable("cannot attach a loop device: " + s.ToString());
  }
  KVTIER_RETURN_IF_ERROR(s);
  return ProbeReflink(dir_ / "outer");
}

// Attaches `image`, makes a filesystem of `fs_type` on it (unless `make` is
// kNothing: a crash clone is mounted as it is) and mounts it at `at`.
Status Rig::MountImage(const fs::path& image, const fs::path& at, const char* fs_type, Make make,
                       const std::string& options) {
  std::error_code ec;
  fs::create_directories(at, ec);
  if (ec) return Status(StatusCode::kIoError, "mkdir " + at.string() + ": " + ec.message());
  Fd held;
  auto dev = AttachLoop(image, &held);
  if (!dev.ok()) return dev.status();
  if (make != Make::kNothing) {
    KVTIER_RETURN_IF_ERROR(RunTool(MkfsArgv(fs_type, dev.value(), make == Make::kFsWithReflink)));
  }
  if (mount(dev.value().c_str(), at.c_str(), fs_type, 0, options.c_str()) != 0)
    return ErrnoToStatus(errno,
                         "mount " + dev.value() + " (" + image.string() + ") on " + at.string());
  mounted_.push_back(at);
  return Status::Ok();  // `held` closes: from now on the mount holds the device
}

Result<size_t> Rig::AddInner(InnerFs type, uint64_t bytes) {
  const size_t index = inners_.size();
  Inner inner{type, dir_ / "outer" / ("inner" + std::to_string(index) + ".img"),
              dir_ / ("inner" + std::to_string(index))};
  KVTIER_RETURN_IF_ERROR(MakeSparse(inner.image, bytes));
  KVTIER_RETURN_IF_ERROR(MountImage(inner.image, inner.mount, InnerFsName(type), Make::kFs, ""));
  inners_.push_back(inner);
  return index;
}

Status Rig::Checkpoint(size_t index) {
  const fs::path& at = inners_[index].mount;
  Fd dir(::open(at.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.ok()) return ErrnoToStatus(errno, "open " + at.string());
  if (ioctl(dir.get(), FIFREEZE, 0) != 0) return ErrnoToStatus(errno, "FIFREEZE " + at.string());
  if (ioctl(dir.get(), FITHAW, 0) != 0) return ErrnoToStatus(errno, "FITHAW " + at.string());
  return Status::Ok();
}

Status Rig::CutPower(size_t index) {
  if (crash_cloned_) return Internal("CutPower twice without DropCrash");
  const fs::path clone = dir_ / "outer" / "crash.img";
  Fd src(::open(inners_[index].image.c_str(), O_RDONLY | O_CLOEXEC));
  if (!src.ok()) return ErrnoToStatus(errno, "open " + inners_[index].image.string());
  Fd dst(::open(clone.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600));
  if (!dst.ok()) return ErrnoToStatus(errno, "create " + clone.string());
  if (ioctl(dst.get(), FICLONE, src.get()) != 0) {
    const Status s = ErrnoToStatus(errno, "FICLONE " + clone.string());
    ::unlink(clone.c_str());
    return s;
  }
  crash_type_ = inners_[index].type;
  crash_cloned_ = true;
  return Status::Ok();
}

Result<fs::path> Rig::MountCrash() {
  if (!crash_cloned_) return Internal("MountCrash before CutPower");
  const fs::path at = dir_ / "crash";
  // The clone has the live inner filesystem's UUID, which XFS refuses twice.
  const std::string options = crash_type_ == InnerFs::kXfs ? "nouuid" : "";
  // Mounted as the next boot would: the journal replays.
  KVTIER_RETURN_IF_ERROR(MountImage(dir_ / "outer" / "crash.img", at, InnerFsName(crash_type_),
                                    Make::kNothing, options));
  return at;
}

Status Rig::DropCrash() {
  Status s;
  const fs::path at = dir_ / "crash";
  if (!mounted_.empty() && mounted_.back() == at) {
    s = Unmount(at);
    mounted_.pop_back();
  }
  const fs::path clone = dir_ / "outer" / "crash.img";
  if (::unlink(clone.c_str()) != 0 && errno != ENOENT && s.ok())
    s = ErrnoToStatus(errno, "unlink " + clone.string());
  crash_cloned_ = false;
  return s;
}

// A loop device detaches itself shortly after its filesystem is unmounted;
// until then the filesystem under its image is busy. So: retry, then detach
// lazily (the kernel finishes when the last user goes).
Status Rig::Unmount(const fs::path& at) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    if (umount2(at.c_str(), 0) == 0) return Status::Ok();
    if (errno != EBUSY) return ErrnoToStatus(errno, "umount " + at.string());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (umount2(at.c_str(), MNT_DETACH) != 0) return ErrnoToStatus(errno, "umount -l " + at.string());
  return Status(StatusCode::kBusy, at.string() + " stayed busy for 2 s: detached lazily");
}

Rig::~Rig() {
  DropCrash().IgnoreError();
  while (!mounted_.empty()) {
    const Status s = Unmount(mounted_.back());
    if (!s.ok()) std::fprintf(stderr, "power loss rig: %s\n", s.ToString().c_str());
    mounted_.pop_back();
  }
}

}  // namespace kvtier::powerloss
