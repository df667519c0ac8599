// Durations on the command line: one grammar and one parser for every flag
// that takes one (`du`/`fsck`/`gc`/`hash` --io-timeout, --tmp-grace,
// gc's --older-than, --interval, --check-interval, --collector-ttl, and
// `bench fs --io-timeout`).
//
//   DURATION = NUMBER [UNIT]
//   NUMBER   = digits, with an optional fraction of at most 9 decimals
//              ("30", "0.5", ".5", "1.5")
//   UNIT     = ms | s | m | h | d    (none: seconds)
//
// A value is rounded up to what the option keeps (a millisecond, or a whole
// second for ParseDurationS), so that a small positive duration never becomes
// 0, which some flags read as "no deadline". Everything else is refused with
// a message that gives the grammar: empty text, a sign, NaN, inf, exponents,
// hex, spaces, other units, and values above the option's maximum.
#pragma once

#include <cstdint>
#include <string_view>

#include "kvtier/result.h"

namespace kvtier::internal {

// 100 years: far beyond any useful timeout or age, and every consumer can
// turn it into int64 nanoseconds (std::chrono's, which hold 292 years)
// without overflow.
inline constexpr uint64_t kDurationMsMax = uint64_t{36500} * 86400 * 1000;

// Milliseconds, at most max_ms (a message naming the maximum otherwise).
Result<uint64_t> ParseDurationMs(std::string_view text, uint64_t max_ms = kDurationMsMax);

// Whole seconds, rounded up ("0.5" and "500ms" are 1), for the options kept
// in seconds: --older-than, --tmp-grace.
Result<uint64_t> ParseDurationS(std::string_view text);

}  // namespace kvtier::internal
