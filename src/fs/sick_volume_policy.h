// The sick-volume policy's constants, in one place (docs/sick-volumes.md
// describes the behaviour they tune). The I/O loop (fs_tier_io_loop.cc)
// applies them on its injected clock (io/clock.h); RootHealth
// (root_health.h) and the scheduler's abandonment (io/scheduler.h) take them
// as arguments, so tests can run the policy on any values.
//
// The one knob users set is io_timeout_ms (docs/config.md): every number
// here is relative to it or small beside it.
#pragma once

#include <cstdint>

namespace kvtier::internal {

// How long past its deadline (io_timeout_ms) a request may take to come
// back cancelled before the loop abandons it instead. Longer lets more
// cancels land (a cancelled request frees its slot and fd at once; an
// abandoned one keeps them kernel-held until the kernel returns it); shorter
// gives the caller its kTimedOut sooner. A job's result comes within
// io_timeout_ms + this + kLoopPollMs of its request's issue.
inline constexpr uint64_t kAbandonGraceMs = 100;

// Deadline misses in a row (with no answer in between) that turn a root
// down. Fewer fail a sick root's work at once sooner; more keep a root up
// through a few unlucky requests on a mount that is slow but alive (any
// answer, an errno included, resets the count).
inline constexpr int kMissesToDown = 3;

// The least time between two probes of a root that is down (one probe at a
// time: a probe stuck in the kernel is never duplicated). Shorter brings a
// recovered root back sooner; longer sends fewer calls, and strands fewer
// kernel workers, on a mount that stays hung.
inline constexpr uint64_t kProbeIntervalNs = 1'000'000'000;

// The loop's wait for completions while work is in flight or a root is
// down: abandonment, queue expiry and probes are noticed on this beat.
// Shorter makes those bounds tighter; longer wakes an idle-but-busy loop
// less often (an idle loop with every root up sleeps until woken).
inline constexpr int kLoopPollMs = 50;

}  // namespace kvtier::internal
