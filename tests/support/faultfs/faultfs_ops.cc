#include "faultfs/faultfs_ops.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace kvtier::faultfs {
namespace {

Backing* g_backing = nullptr;
FaultRules* g_rules = nullptr;

// An open file or directory remembers the path it was opened with: rules on
// calls through it match that path, whatever renames happened since.
struct OpenFile {
  int fd;
  std::string path;
};
struct OpenDir {
  DIR* dir;
  std::string path;
};

OpenFile* File(fuse_file_info* fi) { return reinterpret_cast<OpenFile*>(fi->fh); }
OpenDir* Dir(fuse_file_info* fi) { return reinterpret_cast<OpenDir*>(fi->fh); }

// FUSE paths start with '/'; the rules and the *at() calls want them relative.
const char* Rel(const char* path) {
  if (path[0] != '/') return path;
  return path[1] == '\0' ? "." : path + 1;
}
std::string MatchPath(const char* path) { return path[0] == '/' ? std::string(path + 1) : std::string(path); }
std::string Full(const char* path) { return g_backing->path + path; }

int Err(int result) { return result < 0 ? -errno : result; }

// 0 to go on, else the negative errno a fail rule chose.
int Gate(Op op, const std::string& path, const std::string& other = {}) {
  return -g_rules->Gate(op, path, other).error;
}

#define FAULTFS_GATE(...)                    \
  do {                                       \
    const int gate_ = Gate(__VA_ARGS__);     \
    if (gate_ != 0) return gate_;            \
  } while (0)

void* Init(fuse_conn_info* /*conn*/, fuse_config* cfg) {
  // Every call must reach the daemon: nothing cached in the kernel, and
  // reads and writes never served from (or absorbed by) the page cache.
  cfg->attr_timeout = 0;
  cfg->entry_timeout = 0;
  cfg->negative_timeout = 0;
  cfg->direct_io = 1;
  cfg->kernel_cache = 0;
  cfg->hard_remove = 1;  // open files live on as fds; no .fuse_hidden renames
  cfg->use_ino = 1;      // callers compare inode numbers to spot replaced files
  return nullptr;
}

int GetAttr(const char* path, struct stat* st, fuse_file_info* fi) {
  if (fi != nullptr && fi->fh != 0) {
    FAULTFS_GATE(Op::kLookup, File(fi)->path);
    return Err(fstat(File(fi)->fd, st));
  }
  FAULTFS_GATE(Op::kLookup, MatchPath(path));
  return Err(fstatat(g_backing->dir_fd, Rel(path), st, AT_SYMLINK_NOFOLLOW));
}

int ReadLink(const char* path, char* buf, size_t size) {
  FAULTFS_GATE(Op::kReadlink, MatchPath(path));
  const ssize_t n = readlinkat(g_backing->dir_fd, Rel(path), buf, size - 1);
  if (n < 0) return -errno;
  buf[n] = '\0';
  return 0;
}

int MkDir(const char* path, mode_t mode) {
  FAULTFS_GATE(Op::kMkdir, MatchPath(path));
  return Err(mkdirat(g_backing->dir_fd, Rel(path), mode));
}

int Unlink(const char* path) {
  FAULTFS_GATE(Op::kUnlink, MatchPath(path));
  return Err(unlinkat(g_backing->dir_fd, Rel(path), 0));
}

int RmDir(const char* path) {
  FAULTFS_GATE(Op::kUnlink, MatchPath(path));
  return Err(unlinkat(g_backing->dir_fd, Rel(path), AT_REMOVEDIR));
}

int SymLink(const char* target, const char* path) {
  FAULTFS_GATE(Op::kSymlink, MatchPath(path));
  return Err(symlinkat(target, g_backing->dir_fd, Rel(path)));
}

int Link(const char* source, const char* target) {
  FAULTFS_GATE(Op::kSymlink, MatchPath(source), MatchPath(target));
  return Err(linkat(g_backing->dir_fd, Rel(source), g_backing->dir_fd, Rel(target), 0));
}

int Rename(const char* source, const char* target, unsigned int flags) {
  FAULTFS_GATE(Op::kRename, MatchPath(source), MatchPath(target));
  return Err(renameat2(g_backing->dir_fd, Rel(source), g_backing->dir_fd, Rel(target), flags));
}

int ChMod(const char* path, mode_t mode, fuse_file_info* fi) {
  FAULTFS_GATE(Op::kChmod, fi != nullptr ? File(fi)->path : MatchPath(path));
  if (fi != nullptr) return Err(fchmod(File(fi)->fd, mode));
  return Err(fchmodat(g_backing->dir_fd, Rel(path), mode, 0));
}

int ChOwn(const char* path, uid_t uid, gid_t gid, fuse_file_info* fi) {
  FAULTFS_GATE(Op::kChmod, fi != nullptr ? File(fi)->path : MatchPath(path));
  if (fi != nullptr) return Err(fchown(File(fi)->fd, uid, gid));
  return Err(fchownat(g_backing->dir_fd, Rel(path), uid, gid, AT_SYMLINK_NOFOLLOW));
}

int Truncate(const char* path, off_t size, fuse_file_info* fi) {
  FAULTFS_GATE(Op::kTruncate, fi != nullptr ? File(fi)->path : MatchPath(path));
  if (fi != nullptr) return Err(ftruncate(File(fi)->fd, size));
  return Err(truncate(Full(path).c_str(), size));
}

int UTimens(const char* path, const struct timespec ts[2], fuse_file_info* fi) {
  FAULTFS_GATE(Op::kUtimens, fi != nullptr ? File(fi)->path : MatchPath(path));
  if (fi != nullptr) return Err(futimens(File(fi)->fd, ts));
  return Err(utimensat(g_backing->dir_fd, Rel(path), ts, AT_SYMLINK_NOFOLLOW));
}

// O_DIRECT is the caller's contract with this mount (direct_io already keeps
// the page cache out); the backing fd does not need it, and FUSE's buffers
// are not aligned for it.
int OpenBacking(const char* path, int flags, mode_t mode, fuse_file_info* fi) {
  const int fd = openat(g_backing->dir_fd, Rel(path), (flags & ~O_DIRECT) | O_CLOEXEC, mode);
  if (fd < 0) return -errno;
  fi->fh = reinterpret_cast<uint64_t>(new OpenFile{fd, MatchPath(path)});
  fi->direct_io = 1;
  fi->keep_cache = 0;
  return 0;
}

int Open(const char* path, fuse_file_info* fi) {
  FAULTFS_GATE(Op::kOpen, MatchPath(path));
  return OpenBacking(path, fi->flags, 0, fi);
}

int Create(const char* path, mode_t mode, fuse_file_info* fi) {
  FAULTFS_GATE(Op::kOpen, MatchPath(path));
  return OpenBacking(path, fi->flags | O_CREAT, mode, fi);
}

// A short transfer moves half of what was asked, at least one byte.
size_t ShortSize(size_t size, bool short_io) { return short_io && size > 1 ? size / 2 : size; }

int Read(const char* /*path*/, char* buf, size_t size, off_t offset, fuse_file_info* fi) {
  const Verdict verdict = g_rules->Gate(Op::kRead, File(fi)->path);
  if (verdict.error != 0) return -verdict.error;
  const ssize_t n = pread(File(fi)->fd, buf, ShortSize(size, verdict.short_io), offset);
  return n < 0 ? -errno : static_cast<int>(n);
}

int Write(const char* /*path*/, const char* buf, size_t size, off_t offset, fuse_file_info* fi) {
  const Verdict verdict = g_rules->Gate(Op::kWrite, File(fi)->path);
  if (verdict.error != 0) return -verdict.error;
  const ssize_t n = pwrite(File(fi)->fd, buf, ShortSize(size, verdict.short_io), offset);
  return n < 0 ? -errno : static_cast<int>(n);
}

int StatFs(const char* path, struct statvfs* st) {
  FAULTFS_GATE(Op::kStatfs, MatchPath(path));
  return Err(fstatvfs(g_backing->dir_fd, st));
}

int Flush(const char* /*path*/, fuse_file_info* fi) {
  FAULTFS_GATE(Op::kFlush, File(fi)->path);
  // Closing a duplicate reports the backing file system's close-time errors.
  return Err(close(dup(File(fi)->fd)));
}

int Release(const char* /*path*/, fuse_file_info* fi) {
  // The kernel ignores release's result; the fd is closed even when a rule
  // fails the call, so that no fd leaks.
  const int gate = Gate(Op::kFlush, File(fi)->path);
  close(File(fi)->fd);
  delete File(fi);
  return gate;
}

int FSync(const char* /*path*/, int datasync, fuse_file_info* fi) {
  FAULTFS_GATE(Op::kFlush, File(fi)->path);
  return Err(datasync != 0 ? fdatasync(File(fi)->fd) : fsync(File(fi)->fd));
}

int SetXattr(const char* path, const char* name, const char* value, size_t size, int flags) {
  FAULTFS_GATE(Op::kXattr, MatchPath(path));
  return Err(lsetxattr(Full(path).c_str(), name, value, size, flags));
}

int GetXattr(const char* path, const char* name, char* value, size_t size) {
  FAULTFS_GATE(Op::kXattr, MatchPath(path));
  const ssize_t n = lgetxattr(Full(path).c_str(), name, value, size);
  return n < 0 ? -errno : static_cast<int>(n);
}

int ListXattr(const char* path, char* list, size_t size) {
  FAULTFS_GATE(Op::kXattr, MatchPath(path));
  const ssize_t n = llistxattr(Full(path).c_str(), list, size);
  return n < 0 ? -errno : static_cast<int>(n);
}

int RemoveXattr(const char* path, const char* name) {
  FAULTFS_GATE(Op::kXattr, MatchPath(path));
  return Err(lremovexattr(Full(path).c_str(), name));
}

int OpenDirectory(const char* path, fuse_file_info* fi) {
  FAULTFS_GATE(Op::kReaddir, MatchPath(path));
  const int fd = openat(g_backing->dir_fd, Rel(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -errno;
  DIR* dir = fdopendir(fd);
  if (dir == nullptr) {
    const int err = errno;
    close(fd);
    return -err;
  }
  fi->fh = reinterpret_cast<uint64_t>(new OpenDir{dir, MatchPath(path)});
  return 0;
}

// Offsets are not tracked (offset 0 for each entry): libfuse then asks once
// and buffers the whole listing.
int ReadDirectory(const char* /*path*/, void* buf, fuse_fill_dir_t filler, off_t /*offset*/,
                  fuse_file_info* fi, fuse_readdir_flags /*flags*/) {
  FAULTFS_GATE(Op::kReaddir, Dir(fi)->path);
  rewinddir(Dir(fi)->dir);
  errno = 0;
  while (const dirent* entry = readdir(Dir(fi)->dir)) {
    struct stat st = {};
    st.st_ino = entry->d_ino;
    st.st_mode = static_cast<mode_t>(DTTOIF(entry->d_type));
    if (filler(buf, entry->d_name, &st, 0, static_cast<fuse_fill_dir_flags>(0)) != 0) break;
  }
  return -errno;
}

int ReleaseDirectory(const char* /*path*/, fuse_file_info* fi) {
  const int gate = Gate(Op::kFlush, Dir(fi)->path);
  closedir(Dir(fi)->dir);
  delete Dir(fi);
  return gate;
}

int FSyncDirectory(const char* /*path*/, int datasync, fuse_file_info* fi) {
  FAULTFS_GATE(Op::kFlush, Dir(fi)->path);
  const int fd = dirfd(Dir(fi)->dir);
  return Err(datasync != 0 ? fdatasync(fd) : fsync(fd));
}

}  // namespace

fuse_operations MakeOperations(Backing* backing, FaultRules* rules) {
  g_backing = backing;
  g_rules = rules;
  fuse_operations ops = {};
  ops.init = Init;
  ops.getattr = GetAttr;
  ops.readlink = ReadLink;
  ops.mkdir = MkDir;
  ops.unlink = Unlink;
  ops.rmdir = RmDir;
  ops.symlink = SymLink;
  ops.link = Link;
  ops.rename = Rename;
  ops.chmod = ChMod;
  ops.chown = ChOwn;
  ops.truncate = Truncate;
  ops.utimens = UTimens;
  ops.open = Open;
  ops.create = Create;
  ops.read = Read;
  ops.write = Write;
  ops.statfs = StatFs;
  ops.flush = Flush;
  ops.release = Release;
  ops.fsync = FSync;
  ops.setxattr = SetXattr;
  ops.getxattr = GetXattr;
  ops.listxattr = ListXattr;
  ops.removexattr = RemoveXattr;
  ops.opendir = OpenDirectory;
  ops.readdir = ReadDirectory;
  ops.releasedir = ReleaseDirectory;
  ops.fsyncdir = FSyncDirectory;
  return ops;
}

}  // namespace kvtier::faultfs
