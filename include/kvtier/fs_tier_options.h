// The options of one fs tier, each with its one default: the config parser
// fills them from its key table (config.cc) and FsTier::Open takes the same
// structs (fs_tier.h), so nothing copies the options field by field between
// the two.
#pragma once

#include <cstdint>

#include "kvtier/options.h"

namespace kvtier {

// Store backpressure of one fs tier (vllm-fs-tier.md §4.7; vLLM's
// EMABackpressureDetector, PR #50045): pressure starts when the EMA of store
// latency per MiB exceeds the high water mark and ends when it falls below
// the low water mark; while it lasts, new stores are dropped. Loads and
// promotions are never dropped. Invariant after parsing: 0 < low < high,
// 0 < alpha <= 1.
struct BackpressureOptions {
  // `backpressure_cls` (required in JSON).
  BackpressureDetector detector = BackpressureDetector::kEma;
  // `policy_cls`; default DropStorePolicy.
  BackpressurePolicy policy = BackpressurePolicy::kDropStore;
  // `high_water_s`, seconds of store latency per MiB. Default 0.005 for a
  // LOCAL or unspecified tier, 0.020 for REMOTE.
  double high_water_s_per_mib = 0.005;
  // `low_water_s`, seconds per MiB. Default 0.001 for LOCAL or unspecified,
  // 0.005 for REMOTE.
  double low_water_s_per_mib = 0.001;
  // `alpha`: EMA smoothing factor in (0, 1] (the weight of the newest
  // sample); default 0.3.
  double ema_alpha = 0.3;
  // `warmup`: store completions observed before pressure can start; default 3.
  uint32_t warmup_completions = 3;

  bool operator==(const BackpressureOptions&) const = default;
};

}  // namespace kvtier
