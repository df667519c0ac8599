// FORMAT.md L174: who may write, and read, a seal key file before a tier or
// a tool reads a key from it (as OpenSSH judges a private key's file).
// Whoever can write the file, or the directory it sits in, chooses the key
// the volume's blocks are sealed and trusted under.
#pragma once

#include <sys/stat.h>

#include <string>
#include <string_view>

#include "kvtier/status.h"

namespace kvtier::internal {

// L174: `st` (fstat of the file opened at `path`, symlinks followed) must be
// owned by this process's user or root, writable by neither group nor
// others, readable by no others, and readable by its group only where
// `group_read` allows it (Kubernetes secrets mounted with fsGroup); the
// directory holding `path`, and the one holding what it resolves to, owned
// by this user or root and writable by neither group nor others (write bits
// on a read-only mount, as a Kubernetes Secret's tmpfs, write nothing).
// kPermissionDenied naming `what` and the fix, never the content.
Status CheckKeyFileAccess(const struct stat& st, const std::string& path, bool group_read, std::string_view what);

}  // namespace kvtier::internal
