// The probes of `kvtier doctor`: small real calls in the scratch directory,
// each timed and watched (doctor_probes.h).
#include "ops/doctor_probes.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <vector>

#include "format/layout_names.h"
#include "io/io_watch.h"

namespace kvtier::internal {
namespace {

constexpr int kFileFlags = O_CLOEXEC | O_NOFOLLOW;

double NowUs() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

CallLatency Summary(std::vector<double> us) {
  CallLatency out;
  out.samples = static_cast<int>(us.size());
  if (us.empty()) return out;
  std::sort(us.begin(), us.end());
  out.median_us = us[us.size() / 2];
  out.max_us = us.back();
  return out;
}

Probe No(const std::string& what, int err) { return {Verdict::kNo, what + ": " + ErrnoName(err)}; }
Probe Unknown(const std::string& what, int err) { return {Verdict::kUnknown, what + ": " + ErrnoName(err)}; }

// Opens (creating with O_EXCL where `flags` says so) a file of the scratch
// directory; records a created name for the clean-up.
int OpenIn(Scratch* s, const std::string& name, int flags) {
  const int fd = Call(s->Rel(name), [&] { return openat(s->dir_fd, name.c_str(), flags | kFileFlags, 0644); });
  if (fd >= 0 && (flags & O_CREAT) != 0) s->names.insert(name);
  return fd;
}

int CloseIn(const Scratch& s, const std::string& name, int fd) {
  return Call(s.Rel(name), [&] { return close(fd); });
}

// Writes `text` to a new file `name`; 0 or the errno.
int WriteFile(Scratch* s, const std::string& name, const std::string& text) {
  const int fd = OpenIn(s, name, O_CREAT | O_EXCL | O_WRONLY);
  if (fd < 0) return errno;
  const ssize_t n = Call(s->Rel(name), [&] { return static_cast<int>(write(fd, text.data(), text.size())); });
  int err = n == static_cast<ssize_t>(text.size()) ? 0 : n < 0 ? errno : EIO;
  if (CloseIn(*s, name, fd) != 0 && err == 0) err = errno;
  return err;
}

// The file's first bytes ("" with errno set where it cannot be read).
std::string ReadFile(Scratch* s, const std::string& name) {
  const int fd = OpenIn(s, name, O_RDONLY);
  if (fd < 0) return "";
  char buf[64];
  const int n = Call(s->Rel(name), [&] { return static_cast<int>(read(fd, buf, sizeof buf)); });
  CloseIn(*s, name, fd);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

struct AlignedFree {
  void operator()(uint8_t* p) const { std::free(p); }
};
using AlignedBuf = std::unique_ptr<uint8_t, AlignedFree>;

AlignedBuf Aligned(size_t bytes, uint8_t fill) {
  AlignedBuf buf(static_cast<uint8_t*>(std::aligned_alloc(4096, bytes)));
  if (buf) std::memset(buf.get(), fill, bytes);
  return buf;
}

}  // namespace

int Call(const std::string& rel, const std::function<int()>& call) {
  IoScope io(rel);
  if (io.cancelled()) {
    errno = ECANCELED;
    return -1;
  }
  return call();
}

std::string ErrnoName(int err) {
  const char* name = strerrorname_np(err);
  return name != nullptr ? name : "errno " + std::to_string(err);
}

void OpenScratch(const std::string& scratch_name, Scratch* s, DoctorReport* report) {
  const std::string meta(format::kMetaDirName);
  s->rel = meta + "/" + scratch_name;
  report->writable = {Verdict::kNo, ""};
  if (Call(meta, [&] { return mkdirat(s->root_fd, meta.c_str(), 0755); }) == 0) {
    s->made_meta = true;
  } else if (errno != EEXIST) {
    report->writable.detail = "mkdir " + meta + ": " + ErrnoName(errno);
    return;
  }
  s->meta_fd = Call(meta, [&] { return openat(s->root_fd, meta.c_str(), O_RDONLY | O_DIRECTORY | kFileFlags); });
  if (s->meta_fd < 0) {
    report->writable.detail = "open " + meta + ": " + ErrnoName(errno);
    return;
  }
  if (Call(s->rel, [&] { return mkdirat(s->meta_fd, scratch_name.c_str(), 0700); }) != 0) {
    report->writable.detail = "mkdir " + s->rel + ": " + ErrnoName(errno);
    return;
  }
  s->dir_fd = Call(s->rel, [&] { return openat(s->meta_fd, scratch_name.c_str(), O_RDONLY | O_DIRECTORY | kFileFlags); });
  if (s->dir_fd < 0) {
    report->writable.detail = "open " + s->rel + ": " + ErrnoName(errno);
    Call(s->rel, [&] { return unlinkat(s->meta_fd, scratch_name.c_str(), AT_REMOVEDIR); });
    return;
  }
  report->writable = {Verdict::kYes, ""};
}

void RemoveScratch(Scratch* s, DoctorReport* report) {
  std::vector<std::string> left;
  for (const std::string& name : s->names) {
    if (Call(s->Rel(name), [&] { return unlinkat(s->dir_fd, name.c_str(), 0); }) != 0 && errno != ENOENT) {
      left.push_back(s->Rel(name) + " (" + ErrnoName(errno) + ")");
    }
  }
  const std::string scratch_name = s->rel.substr(s->rel.rfind('/') + 1);
  if (s->dir_fd >= 0) {
    Call(s->rel, [&] { return close(s->dir_fd); });
    if (Call(s->rel, [&] { return unlinkat(s->meta_fd, scratch_name.c_str(), AT_REMOVEDIR); }) != 0) {
      left.push_back(s->rel + " (" + ErrnoName(errno) + ")");
    }
  }
  if (s->meta_fd >= 0) Call(s->rel, [&] { return close(s->meta_fd); });
  // Where this run made .kvtier, it goes too, unless a collector has put
  // its lease there meanwhile (ENOTEMPTY: left, as it should be).
  const std::string meta(format::kMetaDirName);
  if (s->made_meta) Call(meta, [&] { return unlinkat(s->root_fd, meta.c_str(), AT_REMOVEDIR); });
  report->scratch_removed = left.empty();
  for (const std::string& what : left) report->warnings.push_back("could not remove doctor's " + what + ": remove it by hand");
}

bool CheckLatencies(int samples, Scratch* s, DoctorReport* report) {
  std::vector<double> create_us, stat_us, rename_us;
  for (int i = 0; i < samples; ++i) {
    const std::string name = "c" + std::to_string(i);
    const double t0 = NowUs();
    const int fd = OpenIn(s, name, O_CREAT | O_EXCL | O_WRONLY);
    if (fd < 0 || CloseIn(*s, name, fd) != 0) {
      report->writable = No("create " + s->Rel(name), errno);
      return false;
    }
    create_us.push_back(NowUs() - t0);
  }
  for (int i = 0; i < samples; ++i) {
    const std::string name = "c" + std::to_string(i);
    struct stat st;
    const double t0 = NowUs();
    if (Call(s->Rel(name), [&] { return fstatat(s->dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW); }) != 0) {
      report->writable = No("stat " + s->Rel(name), errno);
      return false;
    }
    stat_us.push_back(NowUs() - t0);
  }
  for (int i = 0; i < samples; ++i) {
    const std::string from = "c" + std::to_string(i), to = "r" + std::to_string(i);
    const double t0 = NowUs();
    if (Call(s->Rel(from), [&] { return renameat(s->dir_fd, from.c_str(), s->dir_fd, to.c_str()); }) != 0) {
      report->rename = No("rename " + s->Rel(from), errno);
      return false;
    }
    rename_us.push_back(NowUs() - t0);
    s->names.erase(from);
    s->names.insert(to);
  }
  report->stat = Summary(stat_us);
  report->create = Summary(create_us);
  report->rename_call = Summary(rename_us);
  return true;
}

// A store's commit: a temp file renamed over a name that may exist. The
// target must hold the new bytes after, and the temp name be gone.
void CheckRenameReplaces(Scratch* s, DoctorReport* report) {
  const std::string tmp = "new.tmp", target = "block";
  int err = WriteFile(s, target, "old bytes");
  if (err == 0) err = WriteFile(s, tmp, "new bytes");
  if (err != 0) {
    report->writable = No("write " + s->Rel(target), err);
    return;
  }
  if (Call(s->Rel(tmp), [&] { return renameat(s->dir_fd, tmp.c_str(), s->dir_fd, target.c_str()); }) != 0) {
    report->rename = No("rename over " + s->Rel(target), errno);
    return;
  }
  s->names.erase(tmp);
  const std::string now = ReadFile(s, target);
  struct stat st;
  const bool tmp_gone =
      Call(s->Rel(tmp), [&] { return fstatat(s->dir_fd, tmp.c_str(), &st, AT_SYMLINK_NOFOLLOW); }) != 0 && errno == ENOENT;
  if (now != "new bytes" || !tmp_gone) {
    report->rename = {Verdict::kNo, "rename over an existing name left " + std::string(tmp_gone ? "" : "the source and ") +
                                        "\"" + now + "\" at the target"};
    return;
  }
  report->rename = {Verdict::kYes, ""};
}

void CheckLink(Scratch* s, DoctorReport* report) {
  const std::string from = "block", to = "link";
  if (Call(s->Rel(to), [&] { return linkat(s->dir_fd, from.c_str(), s->dir_fd, to.c_str(), 0); }) == 0) {
    s->names.insert(to);
    report->link = {Verdict::kYes, ""};
    return;
  }
  const int err = errno;
  const bool refused = err == EPERM || err == EOPNOTSUPP || err == ENOSYS || err == EMLINK;
  report->link = refused ? No("link", err) : Unknown("link", err);
}

// As the tier's own start-up probe (FORMAT.md L102): the CRC attribute set
// on a file must read back unchanged.
void CheckUserXattrs(Scratch* s, DoctorReport* report) {
  const std::string name = "xattr";
  const int fd = OpenIn(s, name, O_CREAT | O_EXCL | O_WRONLY);
  if (fd < 0) {
    report->user_xattrs = Unknown("create " + s->Rel(name), errno);
    return;
  }
  const uint8_t crc[format::kCrcXattrBytes] = {0x6b, 0x76, 0x74, 0x72};
  uint8_t back[8] = {};
  int got = Call(s->Rel(name), [&] { return fsetxattr(fd, format::kCrcXattr, crc, sizeof crc, 0); });
  const int set_err = got != 0 ? errno : 0;
  if (got == 0) got = Call(s->Rel(name), [&] { return static_cast<int>(fgetxattr(fd, format::kCrcXattr, back, sizeof back)); });
  const int get_err = got < 0 && set_err == 0 ? errno : 0;
  CloseIn(*s, name, fd);
  const int err = set_err != 0 ? set_err : get_err;
  if (err == EOPNOTSUPP || err == ENOSYS) {
    report->user_xattrs = No(set_err != 0 ? "fsetxattr" : "fgetxattr", err);
  } else if (err != 0) {
    report->user_xattrs = Unknown(set_err != 0 ? "fsetxattr" : "fgetxattr", err);
  } else if (got != sizeof crc || std::memcmp(back, crc, sizeof crc) != 0) {
    report->user_xattrs = {Verdict::kNo, "the attribute read back other bytes than were set"};
  } else {
    report->user_xattrs = {Verdict::kYes, ""};
  }
}

namespace {

// statx's own account of O_DIRECT alignment (Linux 6.1+; 0 where none).
void StatxDioAlign(const Scratch& s, const std::string& name, int fd, DoctorReport* report) {
#ifdef STATX_DIOALIGN
  struct statx stx {};
  if (Call(s.Rel(name), [&] { return statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx); }) == 0 &&
      (stx.stx_mask & STATX_DIOALIGN) != 0) {
    report->statx_dio_mem_align = stx.stx_dio_mem_align;
    report->statx_dio_offset_align = stx.stx_dio_offset_align;
  }
#else
  (void)s, (void)name, (void)fd, (void)report;
#endif
}

// 512 when a 512-byte write at offset 512 from a buffer 512 bytes past a
// page boundary goes through, 4096 when only whole pages do, 0 unknown.
uint32_t MeasureDioAlign(const Scratch& s, const std::string& name, int fd, uint8_t* page2) {
  const int n = Call(s.Rel(name), [&] { return static_cast<int>(pwrite(fd, page2 + 512, 512, 512)); });
  if (n == 512) return 512;
  return n < 0 && errno == EINVAL ? 4096 : 0;
}

}  // namespace

// As FORMAT.md L63: only EINVAL (at open or on an aligned write) says the
// filesystem refuses O_DIRECT; anything else says nothing either way.
void CheckDirectIo(Scratch* s, DoctorReport* report) {
  const std::string name = "direct";
  const int fd = OpenIn(s, name, O_CREAT | O_EXCL | O_RDWR | O_DIRECT);
  if (fd < 0) {
    const int err = errno;
    if (err == EINVAL) s->names.insert(name);  // some kernels create the file before refusing
    report->o_direct = err == EINVAL ? No("open with O_DIRECT", err) : Unknown("open with O_DIRECT", err);
    return;
  }
  AlignedBuf page2 = Aligned(8192, 0x5a);
  if ((fcntl(fd, F_GETFL) & O_DIRECT) == 0) {
    report->o_direct = {Verdict::kNo, "the filesystem dropped the O_DIRECT flag"};
  } else if (const int n = Call(s->Rel(name), [&] { return static_cast<int>(pwrite(fd, page2.get(), 4096, 0)); }); n != 4096) {
    const int err = n < 0 ? errno : EIO;
    report->o_direct = err == EINVAL ? No("aligned O_DIRECT write", err) : Unknown("aligned O_DIRECT write", err);
  } else {
    report->o_direct = {Verdict::kYes, ""};
    StatxDioAlign(*s, name, fd, report);
    report->o_direct_align = MeasureDioAlign(*s, name, fd, page2.get());
  }
  CloseIn(*s, name, fd);
}

// kvtier's touch on load sets atime explicitly (FORMAT.md L75), since
// relatime and noatime mounts would not: this sets it to a day ago and
// reads it back.
void CheckAtime(Scratch* s, DoctorReport* report) {
  const std::string name = "block";
  const time_t want = std::time(nullptr) - 86400;
  const struct timespec times[2] = {{want, 0}, {0, UTIME_OMIT}};
  if (Call(s->Rel(name), [&] { return utimensat(s->dir_fd, name.c_str(), times, AT_SYMLINK_NOFOLLOW); }) != 0) {
    report->atime = Unknown("utimensat", errno);
    return;
  }
  struct stat st;
  if (Call(s->Rel(name), [&] { return fstatat(s->dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW); }) != 0) {
    report->atime = Unknown("stat", errno);
    return;
  }
  if (st.st_atim.tv_sec == want) {
    report->atime = {Verdict::kYes, ""};
  } else {
    report->atime = {Verdict::kNo, "set atime to " + std::to_string(want) + ", read back " + std::to_string(st.st_atim.tv_sec)};
  }
}

namespace {

constexpr size_t kChunk = size_t{1} << 20;

// Writes `bytes` (whole chunks of the pattern) and syncs; seconds, or < 0.
double TimedWrite(Scratch* s, const std::string& name, int fd, uint64_t bytes, const uint8_t* chunk) {
  const double t0 = NowUs();
  for (uint64_t at = 0; at < bytes; at += kChunk) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, bytes - at));
    if (Call(s->Rel(name), [&] { return static_cast<int>(pwrite(fd, chunk, n, static_cast<off_t>(at))); }) != static_cast<int>(n)) return -1;
  }
  if (Call(s->Rel(name), [&] { return fdatasync(fd); }) != 0) return -1;
  return (NowUs() - t0) / 1e6;
}

// Reads it back and compares; seconds, -1 on a failed call, -2 on other bytes.
double TimedRead(Scratch* s, const std::string& name, int fd, uint64_t bytes, const uint8_t* chunk, uint8_t* into) {
  const double t0 = NowUs();
  bool same = true;
  for (uint64_t at = 0; at < bytes; at += kChunk) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, bytes - at));
    if (Call(s->Rel(name), [&] { return static_cast<int>(pread(fd, into, n, static_cast<off_t>(at))); }) != static_cast<int>(n)) return -1;
    same = same && std::memcmp(into, chunk, n) == 0;
  }
  const double secs = (NowUs() - t0) / 1e6;
  return same ? secs : -2;
}

}  // namespace

void CheckThroughput(uint64_t bytes, Scratch* s, DoctorReport* report) {
  const std::string name = "throughput";
  report->io_direct = report->o_direct.verdict == Verdict::kYes && report->o_direct_align != 0;
  report->io_bytes = (bytes + 4095) / 4096 * 4096;
  const int direct = report->io_direct ? O_DIRECT : 0;
  AlignedBuf chunk = Aligned(kChunk, 0xa5), into = Aligned(kChunk, 0);
  int fd = OpenIn(s, name, O_CREAT | O_EXCL | O_WRONLY | direct);
  const double write_s = fd < 0 ? -1 : TimedWrite(s, name, fd, report->io_bytes, chunk.get());
  const int write_err = errno;
  if (fd >= 0) CloseIn(*s, name, fd);
  if (fd < 0 || write_s < 0) {
    report->writable = No("write " + s->Rel(name), write_err);
    return;
  }
  fd = OpenIn(s, name, O_RDONLY | direct);
  // The written pages are clean after the sync: drop them, so the read
  // comes from the volume (where the filesystem honours the advice).
  if (fd >= 0 && !report->io_direct) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  const double read_s = fd < 0 ? -1 : TimedRead(s, name, fd, report->io_bytes, chunk.get(), into.get());
  const int read_err = errno;
  if (fd >= 0) CloseIn(*s, name, fd);
  if (read_s < 0) {
    report->writable = read_s == -2 ? Probe{Verdict::kNo, "read back other bytes than were written to " + s->Rel(name)}
                                    : No("read " + s->Rel(name), read_err);
    return;
  }
  const double mib = static_cast<double>(report->io_bytes) / (1 << 20);
  report->write_mib_s = mib / std::max(write_s, 1e-9);
  report->read_mib_s = mib / std::max(read_s, 1e-9);
}

}  // namespace kvtier::internal
