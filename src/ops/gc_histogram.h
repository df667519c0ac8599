// UseHistogram: the blocks' bytes by how long ago they were used, in a fixed
// number of buckets, so gc finds the least-recently-used cut-off for any
// number of blocks in constant memory. Buckets are one second wide
// for ages under 128 s and 1/64 of their age wide beyond (log-linear, as
// HdrHistogram): 128 + 57 * 64 buckets cover every age up to 2^63 s.
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <cstdint>

#include "ops/use_time.h"

namespace kvtier::internal {

class UseHistogram {
 public:
  static constexpr int kLinear = 128;  // one bucket per second below this age
  static constexpr int kSubBits = 6;   // 64 buckets per doubling beyond
  static constexpr int kBuckets = kLinear + (63 - 7) * (1 << kSubBits) + (1 << kSubBits);

  // The bucket of a block used at `then`, seen at `now`: higher is older.
  // A use in the future counts as CountedUse says (FORMAT.md L155): as now
  // within the tolerance, as the epoch beyond it.
  static int Bucket(int64_t now, int64_t then) {
    then = CountedUse(now, then);
    const uint64_t age = then >= now ? 0 : static_cast<uint64_t>(now) - static_cast<uint64_t>(then);
    if (age < kLinear) return static_cast<int>(age);
    const int msb = 63 - std::countl_zero(age);  // >= 7
    const int shift = msb - kSubBits;
    const uint64_t sub = (age >> shift) - (uint64_t{1} << kSubBits);  // 0..63
    return kLinear + (msb - 7) * (1 << kSubBits) + static_cast<int>(sub);
  }
  // How many seconds of age a bucket spans.
  static uint64_t WidthS(int bucket) {
    if (bucket < kLinear) return 1;
    return uint64_t{1} << ((bucket - kLinear) / (1 << kSubBits) + 7 - kSubBits);
  }
  // The youngest age (seconds) a bucket holds.
  static uint64_t LowestAgeS(int bucket) {
    if (bucket < kLinear) return static_cast<uint64_t>(bucket);
    const int msb = (bucket - kLinear) / (1 << kSubBits) + 7;
    const uint64_t sub = static_cast<uint64_t>((bucket - kLinear) % (1 << kSubBits));
    return ((uint64_t{1} << kSubBits) + sub) << (msb - kSubBits);
  }

  void Add(int bucket, uint64_t bytes) {  // thread-safe
    bytes_[bucket].fetch_add(bytes, std::memory_order_relaxed);
  }
  uint64_t Bytes(int bucket) const { return bytes_[bucket].load(std::memory_order_relaxed); }

  struct Cut {
    int bucket = -1;            // blocks in older buckets all go; -1: none needed
    uint64_t older_bytes = 0;   // their bytes
  };
  // The youngest bucket at which the oldest blocks' bytes reach `need`.
  Cut CutFor(uint64_t need) const {
    Cut c;
    if (need == 0) return c;
    for (int b = kBuckets - 1; b >= 0; --b) {
      if (c.older_bytes + Bytes(b) >= need) return {b, c.older_bytes};
      c.older_bytes += Bytes(b);
    }
    return {0, c.older_bytes};  // not enough: every bucket goes
  }

 private:
  std::array<std::atomic<uint64_t>, kBuckets> bytes_{};
};

}  // namespace kvtier::internal
