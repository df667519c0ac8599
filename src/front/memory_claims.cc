// MemoryClaims (memory_claims.h).
#include "front/memory_claims.h"

#include <algorithm>
#include <set>

namespace kvtier::internal {
namespace {

constexpr std::string_view kWrittenByLoad = "memory that a load not yet polled writes";
constexpr std::string_view kReadByStore = "memory that a store not yet polled reads";
constexpr std::string_view kTwiceInLoad = "memory that another row of this load writes (a buffer named twice)";

// Rows of a writing job whose ranges overlap another range of the same job:
// a sweep over the ranges in address order.
std::set<size_t> OverlapsWithin(std::span<const MemoryRange> ranges) {
  std::vector<MemoryRange> sorted(ranges.begin(), ranges.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
  std::set<size_t> rows;
  uintptr_t end = 0;
  size_t owner = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (i > 0 && sorted[i].begin < end) rows.insert({sorted[i].row, owner});
    if (i == 0 || sorted[i].end > end) end = sorted[i].end, owner = sorted[i].row;
  }
  return rows;
}

}  // namespace

std::string_view MemoryClaims::HeldConflict(const MemoryRange& r, MemoryUse use) const {
  auto it = held_.lower_bound(r.begin > longest_ ? r.begin - longest_ : 0);
  for (; it != held_.end() && it->first < r.end; ++it) {
    if (it->second.end <= r.begin) continue;
    if (it->second.use == MemoryUse::kWrite) return kWrittenByLoad;
    if (use == MemoryUse::kWrite) return kReadByStore;
  }
  return {};
}

std::vector<MemoryClaims::Refusal> MemoryClaims::Conflicts(std::span<const MemoryRange> ranges,
                                                         MemoryUse use) const {
  std::vector<Refusal> out;
  for (const MemoryRange& r : ranges) {
    const std::string_view why = HeldConflict(r, use);
    if (!why.empty()) out.push_back({r.row, why});
  }
  if (use == MemoryUse::kWrite) {
    for (size_t row : OverlapsWithin(ranges)) out.push_back({row, kTwiceInLoad});
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.row < b.row; });
  out.erase(std::unique(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.row == b.row; }),
            out.end());
  return out;
}

void MemoryClaims::Take(uint64_t job, std::span<const MemoryRange> ranges, MemoryUse use,
                        const std::vector<Refusal>& skip) {
  std::vector<Ranges::iterator>& mine = jobs_[job];
  for (const MemoryRange& r : ranges) {
    const bool skipped = std::binary_search(skip.begin(), skip.end(), Refusal{r.row, {}},
                                            [](const auto& a, const auto& b) { return a.row < b.row; });
    if (skipped || r.end <= r.begin) continue;
    mine.push_back(held_.emplace(r.begin, Held{r.end, use}));
    longest_ = std::max(longest_, r.end - r.begin);
  }
}

void MemoryClaims::Release(uint64_t job) {
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return;
  for (Ranges::iterator r : it->second) held_.erase(r);
  jobs_.erase(it);
}

}  // namespace kvtier::internal
