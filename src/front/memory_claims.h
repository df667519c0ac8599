// MemoryClaims: the memory of jobs not yet taken, as TierShell checks it
// (include/kvtier/tier_shell.h, "Claims"): a job that writes may touch no
// byte that a held claim reads or writes, nor one byte from two of its own
// rows; a job that reads may touch no byte that a held claim writes.
//
// Ranges are kept by their first byte; those that overlap [b, e) start in
// (b - longest, e), where `longest` is the longest range ever claimed, so a
// check costs a logarithmic lookup per range (rows are of similar sizes).
// Not thread-safe: the shell holds its lock around every call.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvtier/tier_shell.h"

namespace kvtier::internal {

class MemoryClaims {
 public:
  struct Refusal {
    size_t row = 0;
    std::string_view why;  // a static text
  };
  // The rows of `ranges` a job of `use` may not touch, ascending, each once.
  std::vector<Refusal> Conflicts(std::span<const MemoryRange> ranges, MemoryUse use) const;
  // Claims `ranges` for `job`, except the rows of `skip` (ascending).
  void Take(uint64_t job, std::span<const MemoryRange> ranges, MemoryUse use, const std::vector<Refusal>& skip);
  void Release(uint64_t job);
  bool empty() const { return jobs_.empty(); }

 private:
  struct Held {
    uintptr_t end = 0;
    MemoryUse use = MemoryUse::kRead;
  };
  using Ranges = std::multimap<uintptr_t, Held>;
  // Why [r.begin, r.end) may not be used for `use`; empty when it may.
  std::string_view HeldConflict(const MemoryRange& r, MemoryUse use) const;

  Ranges held_;
  uintptr_t longest_ = 0;
  std::unordered_map<uint64_t, std::vector<Ranges::iterator>> jobs_;
};

}  // namespace kvtier::internal
