#include "seal/key_file_access.h"

#include <limits.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

namespace kvtier::internal {
namespace {

std::string Mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

Status Refused(std::string_view what, const std::string& why) {
  return Status(StatusCode::kPermissionDenied, std::string(what) + " " + why + " (FORMAT.md L174)");
}

// Owned by this user or root: anyone else could chmod it, or replace it.
bool OwnerOk(uid_t owner) { return owner == geteuid() || owner == 0; }

// Write bits that matter: on a read-only mount nobody here can write (a
// Kubernetes Secret is a tmpfs of mode 1777, mounted read-only).
bool WritableByOthers(mode_t mode, const std::string& path) {
  if ((mode & (S_IWGRP | S_IWOTH)) == 0) return false;
  struct statvfs vfs;
  return statvfs(path.c_str(), &vfs) != 0 || (vfs.f_flag & ST_RDONLY) == 0;
}

std::string DirOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

Status CheckDir(const std::string& dir, std::string_view what) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) return Status::Ok();  // the file opened: its directory's own check is moot
  if (!OwnerOk(st.st_uid)) {
    return Refused(what, "sits in " + dir + ", owned by uid " + std::to_string(st.st_uid) +
                             ": its owner can replace the key; keep key files in a directory of this user (uid " +
                             std::to_string(geteuid()) + ") or root");
  }
  if (WritableByOthers(st.st_mode, dir)) {
    return Refused(what, "sits in " + dir + ", writable by its group or others (mode " + Mode(st.st_mode) +
                             "): they can replace the key; chmod go-w " + dir + ", or move the key");
  }
  return Status::Ok();
}

// The directories to check: the one holding `path` and, through symlinks
// (a Kubernetes secret's ..data), the one holding the file itself.
std::vector<std::string> Dirs(const std::string& path) {
  std::vector<std::string> dirs{DirOf(path)};
  std::unique_ptr<char, decltype(&std::free)> real(realpath(path.c_str(), nullptr), &std::free);
  if (real != nullptr && DirOf(real.get()) != dirs[0]) dirs.push_back(DirOf(real.get()));
  return dirs;
}

}  // namespace

Status CheckKeyFileAccess(const struct stat& st, const std::string& path, bool group_read, std::string_view what) {
  if (!OwnerOk(st.st_uid)) {
    return Refused(what, "is owned by uid " + std::to_string(st.st_uid) + ", not by this process's user (uid " +
                             std::to_string(geteuid()) + ") or root: its owner chooses the key");
  }
  if (WritableByOthers(st.st_mode, path)) {
    return Refused(what, "is writable by its group or others (mode " + Mode(st.st_mode) +
                             "): they choose the key; chmod go-w it");
  }
  if ((st.st_mode & S_IROTH) != 0) {
    return Refused(what, "is readable by others (mode " + Mode(st.st_mode) + "): chmod o-r it (0600 or 0400)");
  }
  if ((st.st_mode & S_IRGRP) != 0 && !group_read) {
    return Refused(what, "is readable by its group (mode " + Mode(st.st_mode) +
                             "): chmod g-r it, or set seal_key_group_read (CLI: --seal-key-group-read) where a "
                             "Kubernetes secret mounted with fsGroup must be group-readable");
  }
  for (const std::string& dir : Dirs(path)) KVTIER_RETURN_IF_ERROR(CheckDir(dir, what));
  return Status::Ok();
}

}  // namespace kvtier::internal
