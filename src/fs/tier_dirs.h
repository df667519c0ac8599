// The fs tier's own directories outside the block tree (namespace setup,
// config.json, the O_DIRECT probe, leases), over util/dir_fd.h. root_dir is
// the operator's and used as given (L1); below it, on a volume that others
// may write, each level is opened from its parent's fd with O_NOFOLLOW, so a
// planted symlink fails with a Status naming the path, never followed, and
// later *at() calls stay in the directory that was checked.
#pragma once

#include <string>

#include "kvtier/result.h"
#include "util/dir_fd.h"

namespace kvtier::internal {

// root_dir itself, following symlinks in it (the operator chose the path).
Result<UniqueFd> OpenRootDir(const std::string& root_dir);

// mkdirat(parent_fd, name) (an existing directory is fine), then the
// directory opened without following a symlink. With `durable`, the parent
// is fsynced when the directory was created here. `display` names it in errors.
Result<UniqueFd> MakeTierDir(int parent_fd, const std::string& name, const std::string& display, bool durable);

}  // namespace kvtier::internal
