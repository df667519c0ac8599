// The names and helpers of a job's results (kvtier/fs_tier.h).
#include "kvtier/fs_tier.h"

namespace kvtier {

std::string_view KeyOutcomeName(KeyOutcome outcome) {
  switch (outcome) {
    case KeyOutcome::kOk: return "ok";
    case KeyOutcome::kSkippedExists: return "skipped_exists";
    case KeyOutcome::kMiss: return "miss";
    case KeyOutcome::kCorrupt: return "corrupt";
    case KeyOutcome::kDropped: return "dropped";
    case KeyOutcome::kError: return "error";
  }
  return "unknown";
}

size_t JobResult::OkPrefix() const {
  size_t n = 0;
  while (n < keys.size() && keys[n].outcome == KeyOutcome::kOk) ++n;
  return n;
}

}  // namespace kvtier
