// Memory the kernel may still write into after its owner is gone (a request
// abandoned on a hung mount: its op's buffers, the ring or threads that hold
// it). Such memory is never freed: it stays until the process exits, listed
// in a registry that is itself never destroyed, so that it stays reachable
// (leak checkers do not report it) and no destructor runs at exit (one would
// free memory under the kernel, or join a thread stuck in it).
#pragma once

#include <memory>

namespace kvtier::internal {

void KeepForever(void* allocation);

template <class T>
void KeepForever(std::unique_ptr<T> owned) {
  KeepForever(static_cast<void*>(owned.release()));
}

}  // namespace kvtier::internal
