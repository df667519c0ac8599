// Aborting a FUSE connection from outside its daemon, through the fusectl
// file system: every pending and later call on the mount then fails with
// ENOTCONN, as when the server is gone. Used by kvtier_faultfs ("gone") and by
// the test harness (a daemon that will not answer at teardown).
#pragma once

#include <string>

namespace kvtier::faultfs {

// The connection id of the FUSE mount at `mountpoint` (its st_dev as the
// kernel names it under /sys/fs/fuse/connections), read from
// /proc/self/mountinfo so that nothing touches the mount itself; -1 when
// no FUSE mount is there.
long FuseConnectionOf(const std::string& mountpoint);

// Writes 1 to /sys/fs/fuse/connections/<id>/abort, mounting fusectl there
// first when it is not. Returns "" on success, else why it failed.
std::string AbortFuseConnection(long connection);

}  // namespace kvtier::faultfs
