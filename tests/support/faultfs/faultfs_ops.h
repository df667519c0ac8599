// The FUSE callbacks of kvtier_faultfs: a passthrough of a backing directory
// (high-level path API) where every call first passes the fault table.
#pragma once

#define FUSE_USE_VERSION 312
#include <fuse.h>
#include <fuse_lowlevel.h>

#include <string>

#include "faultfs/fault_rules.h"

namespace kvtier::faultfs {

struct Backing {
  int dir_fd = -1;   // the backing directory, for the *at() calls
  std::string path;  // its absolute path, for the calls that have no *at() form (xattrs)
};

// The callbacks act on `backing` and consult `rules`; both must outlive the
// FUSE session.
fuse_operations MakeOperations(Backing* backing, FaultRules* rules);

}  // namespace kvtier::faultfs
