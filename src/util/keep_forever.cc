// KeepForever (see header).
#include "util/keep_forever.h"

#include <mutex>
#include <vector>

namespace kvtier::internal {

void KeepForever(void* allocation) {
  static std::mutex* const mu = new std::mutex;
  static std::vector<void*>* const kept = new std::vector<void*>;  // never destroyed, on purpose
  std::lock_guard lock(*mu);
  kept->push_back(allocation);
}

}  // namespace kvtier::internal
