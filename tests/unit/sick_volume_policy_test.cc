// Proves the fs tier's sick-volume policy (docs/sick-volumes.md,
// src/fs/sick_volume_policy.h) without a FUSE mount: the I/O loop runs on a
// clock the test moves (ManualClock) over a FakeBackend that holds requests
// as a hung mount holds them in the kernel, one loop pass at a time
// (FakeBackend::Settle), so nothing sleeps and every step is deterministic.
// A root goes down after kMissesToDown deadline misses in a row (an answer
// in between resets the count) and then fails work at once; while down it is
// probed once per kProbeIntervalNs, never twice at a time, and a probe that
// answers brings it back; a request is abandoned only kAbandonGraceMs past
// its deadline, keeps its slot while stuck and reports once; queued work
// behind stuck slots expires at its own deadline, never reaching the
// backend; closing returns with stuck requests left to the kernel, and waits
// for a request (or a probe) only until it counts as stuck.
// The FUSE tests (tests/integration/sick_volume_test.cc) cover the same
// policy on real hung mounts.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <thread>

#include "fs/fs_tier_internal.h"
#include "fs/sick_volume_policy.h"
#include "support/fake_backend.h"
#include "support/manual_clock.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

using internal::IoRequest;
constexpr uint32_t kIoTimeoutMs = 1000;
constexpr uint64_t kRow = 4096;
// A request issued at t is abandoned at t + kAbandonNs, not a nanosecond before.
constexpr uint64_t kAbandonNs = (kIoTimeoutMs + internal::kAbandonGraceMs) * 1'000'000;

bool IsProbe(const IoRequest& r) { return (r.flags & AT_STATX_FORCE_SYNC) != 0; }

class SickVolumePolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FsTierOpenOptions o;
    o.tier.root_dir = dir_.path().string();
    o.ns = testing::Spec("sick/policy");
    o.row_bytes = kRow;
    o.tier.io_timeout_ms = kIoTimeoutMs;
    o.tier.n_read_threads = 1;
    o.tier.n_write_threads = 1;
    auto fake = std::make_unique<testing::FakeBackend>(testing::TestSeed(), testing::FaultPlan{});
    fake_ = fake.get();
    fake_->StepManually();
    fake_->HoldWhere([](const IoRequest&) { return true; });  // a hung mount
    tier_ = internal::OpenFsTierWithBackend(o, std::move(fake), clock_).value();
  }
  // Whatever the mount still holds is abandoned by now: the close returns.
  void TearDown() override {
    clock_.AdvanceNs(kAbandonNs);
    tier_.reset();
  }
  uint64_t Lookup(uint64_t i) {
    const OffloadKey key = testing::Key(i);
    return tier_->SubmitLookup({&key, 1}).value();
  }
  // Runs one loop pass, then collects what finished.
  void Settle() {
    fake_->Settle();
    std::vector<JobResult> out;
    tier_->PollFinished(&out);
    for (JobResult& r : out) ASSERT_TRUE(results_.emplace(r.job_id, std::move(r)).second) << "reported twice";
  }
  // Moves the clock by `ns`, then runs one loop pass.
  void Pass(uint64_t ns) {
    clock_.AdvanceNs(ns);
    Settle();
  }
  bool Done(uint64_t id) const { return results_.count(id) != 0; }
  const KeyResult& Key0(uint64_t id) { return results_.at(id).keys.at(0); }
  size_t Probes() const {
    size_t n = 0;
    for (const IoRequest& r : fake_->held()) n += IsProbe(r) ? 1 : 0;
    return n;
  }
  // `n` lookups whose requests the backend cancels at their deadline.
  void CancelledLookups(int n) {
    for (int i = 0; i < n; ++i) {
      Lookup(100 + i);
      Settle();
      ASSERT_EQ(fake_->Release({}, -ECANCELED), 1u);
      Settle();
    }
  }
  void TurnDown() {
    CancelledLookups(internal::kMissesToDown);
    ASSERT_EQ(tier_->Metrics().root_up, 0u);
  }

  testing::TempDir dir_;
  testing::ManualClock clock_;
  testing::FakeBackend* fake_ = nullptr;  // owned by the tier (kept past its close if it still holds requests)
  std::unique_ptr<FsTier> tier_;
  std::map<uint64_t, JobResult> results_;
};

TEST_F(SickVolumePolicyTest, ARootGoesDownAfterTheMissesInARowAndThenFailsWorkAtOnce) {
  CancelledLookups(internal::kMissesToDown - 1);
  EXPECT_EQ(tier_->Metrics().root_up, 1u) << "one miss short of the threshold";
  const uint64_t answered = Lookup(1);  // the filesystem answers (no such block): the count starts again
  Settle();
  ASSERT_EQ(fake_->Release({}, std::nullopt), 1u);
  Settle();
  EXPECT_EQ(Key0(answered).outcome, KeyOutcome::kMiss);
  CancelledLookups(internal::kMissesToDown - 1);
  EXPECT_EQ(tier_->Metrics().root_up, 1u) << "an answer in between resets the misses in a row";
  CancelledLookups(1);
  const FsTierMetrics m = tier_->Metrics();
  EXPECT_EQ(m.root_up, 0u);
  EXPECT_EQ(m.deadline_misses, 2u * internal::kMissesToDown - 1);

  const size_t sent = fake_->held().size() + fake_->log().size();
  const uint64_t lookup = Lookup(2);
  std::vector<uint8_t> row(kRow);
  const OffloadKey key = testing::Key(3);
  const std::span<uint8_t> rows[] = {row};
  const std::span<const uint8_t> const_rows[] = {row};
  const uint64_t load = tier_->SubmitLoad({&key, 1}, rows).value();
  const uint64_t store = tier_->SubmitStore({&key, 1}, const_rows).value();
  Settle();
  EXPECT_EQ(Key0(lookup).outcome, KeyOutcome::kMiss);
  EXPECT_EQ(Key0(load).status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(Key0(store).outcome, KeyOutcome::kDropped);
  EXPECT_EQ(fake_->held().size() + fake_->log().size(), sent) << "a down root's work never reaches the volume";
}

TEST_F(SickVolumePolicyTest, ADownRootIsProbedOncePerIntervalAndComesBackWhenAProbeAnswers) {
  TurnDown();
  Pass(internal::kProbeIntervalNs - 1);
  EXPECT_EQ(Probes(), 0u) << "no probe before one interval";
  Pass(1);
  ASSERT_EQ(Probes(), 1u);
  EXPECT_STREQ(fake_->held()[0].path, ".") << "a forced statx of root_dir itself";
  Pass(3 * internal::kProbeIntervalNs);
  EXPECT_EQ(Probes(), 1u) << "a probe the mount holds is never duplicated";

  ASSERT_EQ(fake_->Release(IsProbe, -ETIMEDOUT), 1u);  // no answer: still down
  Settle();
  EXPECT_EQ(tier_->Metrics().root_up, 0u);
  Pass(internal::kProbeIntervalNs - 1);
  EXPECT_EQ(Probes(), 0u) << "the next probe one interval after the last one's result";
  Pass(1);
  ASSERT_EQ(Probes(), 1u);
  ASSERT_EQ(fake_->Release(IsProbe, 0), 1u);  // the mount answers
  Settle();
  EXPECT_EQ(tier_->Metrics().root_up, 1u);
  Lookup(7);
  Settle();
  EXPECT_EQ(fake_->held().size(), 1u) << "an up root sends work to the volume again";
}

TEST_F(SickVolumePolicyTest, ARequestIsAbandonedOnlyAfterTheGraceAndKeepsItsSlotUntilTheKernelReturnsIt) {
  const uint64_t id = Lookup(1);
  Settle();
  Pass(kAbandonNs - 1);
  EXPECT_FALSE(Done(id)) << "past the deadline, within the grace: the cancel may still land";
  EXPECT_EQ(tier_->Metrics().requests_stuck, 0u);
  Pass(1);
  ASSERT_TRUE(Done(id));
  EXPECT_EQ(Key0(id).status.code(), StatusCode::kTimedOut);
  FsTierMetrics m = tier_->Metrics();
  EXPECT_EQ(m.requests_stuck, 1u);
  EXPECT_EQ(m.deadline_misses, 1u);

  // Both slots: the stuck one is still the kernel's, so the next two
  // lookups get one slot and a queue place.
  Lookup(2), Lookup(3);
  Settle();
  EXPECT_EQ(fake_->held().size(), 2u);
  const uint64_t stuck_tag = fake_->held()[0].tag;
  ASSERT_EQ(fake_->Release([&](const IoRequest& r) { return r.tag == stuck_tag; }, 0), 1u);
  Settle();
  m = tier_->Metrics();
  EXPECT_EQ(m.requests_stuck, 0u) << "the kernel returned it";
  EXPECT_EQ(m.deadline_misses, 1u) << "its late answer is no new miss";
  EXPECT_EQ(fake_->held().size(), 2u) << "its slot went to the queued lookup";
}

TEST_F(SickVolumePolicyTest, ACancelThatLandsWithinTheGraceFreesTheSlotAtOnce) {
  const uint64_t id = Lookup(1);
  Settle();
  clock_.AdvanceMs(kIoTimeoutMs + internal::kAbandonGraceMs / 2);
  ASSERT_EQ(fake_->Release({}, -ECANCELED), 1u);
  Settle();
  ASSERT_TRUE(Done(id));
  EXPECT_EQ(Key0(id).status.code(), StatusCode::kTimedOut);
  const FsTierMetrics m = tier_->Metrics();
  EXPECT_EQ(m.requests_stuck, 0u);
  EXPECT_EQ(m.deadline_misses, 1u);
}

TEST_F(SickVolumePolicyTest, QueuedWorkBehindStuckSlotsExpiresAtItsOwnDeadlineWithoutReachingTheVolume) {
  const uint64_t a = Lookup(1), b = Lookup(2);  // one per slot (the write slot takes reads when idle)
  Settle();
  ASSERT_EQ(fake_->held().size(), 2u);
  clock_.AdvanceMs(500);
  const uint64_t queued = Lookup(3);
  Settle();
  Pass(kAbandonNs - 500'000'000);
  ASSERT_TRUE(Done(a) && Done(b));
  EXPECT_FALSE(Done(queued)) << "queued for less than a request may take";
  EXPECT_EQ(tier_->Metrics().root_up, 1u);
  Pass(500'000'000);
  ASSERT_TRUE(Done(queued));
  EXPECT_EQ(Key0(queued).status.code(), StatusCode::kTimedOut);
  EXPECT_EQ(fake_->held().size(), 2u);
  EXPECT_TRUE(fake_->log().empty()) << "the queued lookup never reached the volume";
  EXPECT_EQ(tier_->Metrics().deadline_misses, 3u) << "each stuck request and the expired one";
}

TEST_F(SickVolumePolicyTest, ClosingLeavesStuckRequestsToTheKernelAndReturns) {
  const uint64_t id = Lookup(1);
  Settle();
  Pass(kAbandonNs);
  ASSERT_TRUE(Done(id));
  tier_.reset();  // returns although the mount still holds the request
  EXPECT_EQ(fake_->held().size(), 1u) << "its memory is left to the process exit, never freed under the kernel";
}

// Closes the tier on a thread of its own; the test moves the clock past the
// abandonment of what the mount holds, then waits for the close.
void CloseOnceAbandoned(std::unique_ptr<FsTier>* tier, testing::FakeBackend* fake, testing::ManualClock* clock) {
  std::atomic<bool> closed{false};
  const uint64_t wakes = fake->wakes();
  std::thread closer([&] {
    tier->reset();
    closed = true;
    fake->Wake();  // the tier left the fake to the process exit: it outlives the close
  });
  fake->AwaitWakes(wakes + 1);  // the close asked the loop to stop
  fake->Settle(&closed);
  EXPECT_FALSE(closed) << "the close waits for a request the kernel may still answer";
  clock->AdvanceNs(kAbandonNs);
  fake->Wake();
  closer.join();
  EXPECT_TRUE(closed);
}

TEST_F(SickVolumePolicyTest, CloseWaitsForAHeldRequestOnlyUntilItIsAbandoned) {
  Lookup(1);
  Settle();
  CloseOnceAbandoned(&tier_, fake_, &clock_);
  EXPECT_EQ(fake_->held().size(), 1u);
}

TEST_F(SickVolumePolicyTest, CloseWaitsForAProbeOnlyUntilItCountsAsStuck) {
  TurnDown();
  Pass(internal::kProbeIntervalNs);
  ASSERT_EQ(Probes(), 1u);
  CloseOnceAbandoned(&tier_, fake_, &clock_);
  EXPECT_EQ(Probes(), 1u);
}

}  // namespace
}  // namespace kvtier
