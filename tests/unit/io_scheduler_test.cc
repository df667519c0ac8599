// Proves the scheduler's policy without a kernel: each class runs within its
// own budget; a read slot takes a load ahead of any store backlog, so loads
// overtake stores; idle slots steal from the other queue; -EAGAIN/-EINTR
// re-issue the same request (bounded); completions in any order reach the
// right op; finished ops free their slots; while loads are active (and for
// the linger after), stores are capped at stores_while_loading_max whatever
// slots are free, and the cap lifts once the linger has passed. A request
// that outlives abandon_after_ns is abandoned: its op's result is handed out
// at once while the op keeps its slot until the kernel returns the request,
// a late completion is never retried, queued ops fail once they have waited
// that long behind stuck slots (and only then), and TakeAll empties
// everything for a tier that closes with requests still in the kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "io/scheduler.h"
#include "support/test_support.h"

namespace kvtier::internal {
namespace {

// An op that issues `steps` requests and records what it saw.
class CountingOp : public BlockOp {
 public:
  CountingOp(int id, int steps, std::vector<int>* started) : id_(id), steps_(steps), started_(started) {}
  bool NextRequest(IoRequest* req) override {
    if (issued_ == steps_) return false;
    if (issued_ == 0) started_->push_back(id_);
    ++issued_;
    *req = IoRequest{};
    req->op = IoOp::kStatx;
    req->offset = static_cast<uint64_t>(id_);  // lets the test see whose request it is
    return true;
  }
  void OnCompletion(int64_t res) override { results.push_back(res); }
  void OnAbandon() override {
    abandoned = true;
    steps_ = issued_;  // only the request in flight is left: no cleanup
  }
  std::vector<int64_t> results;
  bool abandoned = false;

 private:
  int id_, steps_, issued_ = 0;
  std::vector<int>* started_;
};

TEST(IoScheduler, LoadsOvertakeAStoreBacklog) {
  std::vector<int> started;
  IoScheduler s({/*reads*/ 1, /*writes*/ 2, 8});
  for (int i = 0; i < 10; ++i) s.Enqueue(std::make_unique<CountingOp>(100 + i, 1, &started), IoClass::kWrite);
  s.Enqueue(std::make_unique<CountingOp>(1, 1, &started), IoClass::kRead);
  std::vector<IoRequest> reqs;
  s.Emit(&reqs, 0);
  ASSERT_EQ(reqs.size(), 3u);  // one read slot + two write slots
  EXPECT_EQ(started.front(), 1) << "the load must start first, ahead of ten queued stores";
  EXPECT_EQ(s.queued(IoClass::kWrite), 8u);
}

TEST(IoScheduler, IdleSlotsStealFromTheOtherQueueKeepingAReadReserve) {
  std::vector<int> started;
  IoScheduler s({8, 2, 8});
  for (int i = 0; i < 20; ++i) s.Enqueue(std::make_unique<CountingOp>(i, 1, &started), IoClass::kWrite);
  std::vector<IoRequest> reqs;
  s.Emit(&reqs, 0);
  EXPECT_EQ(reqs.size(), 8u) << "2 write slots + 6 idle read slots serve stores; 2 of 8 read slots stay free";
  s.Enqueue(std::make_unique<CountingOp>(99, 1, &started), IoClass::kRead);
  s.Emit(&reqs, 0);
  EXPECT_EQ(started.back(), 99) << "the reserve starts a load at once";
  IoScheduler w({2, 2, 8});  // write slots steal loads freely
  for (int i = 0; i < 6; ++i) w.Enqueue(std::make_unique<CountingOp>(i, 1, &started), IoClass::kRead);
  std::vector<IoRequest> wreqs;
  w.Emit(&wreqs, 0);
  EXPECT_EQ(wreqs.size(), 4u);
}

// Completes every in-flight request of `reqs` whose op id is in [lo, hi) and
// drops them from `reqs`.
void CompleteIds(IoScheduler* s, std::vector<IoRequest>* reqs, uint64_t lo, uint64_t hi) {
  std::vector<IoRequest> keep;
  for (const IoRequest& r : *reqs) {
    if (r.offset >= lo && r.offset < hi) {
      s->Complete({r.tag, 0});
    } else {
      keep.push_back(r);
    }
  }
  *reqs = std::move(keep);
}

// A scheduler with `stores` queued stores (ids 100...) and `reads` queued
// read-class ops (ids 1...) of type ReadOp, each one request long.
template <class ReadOp = CountingOp>
std::unique_ptr<IoScheduler> Backlog(SchedulerLimits limits, int stores, int reads, std::vector<int>* started) {
  auto s = std::make_unique<IoScheduler>(limits);
  for (int i = 0; i < stores; ++i) s->Enqueue(std::make_unique<CountingOp>(100 + i, 1, started), IoClass::kWrite);
  for (int i = 0; i < reads; ++i) s->Enqueue(std::make_unique<ReadOp>(1 + i, 1, started), IoClass::kRead);
  return s;
}

SchedulerLimits Capped(int reads, int writes, int cap) {
  SchedulerLimits limits{reads, writes, 8};
  limits.stores_while_loading_max = cap;
  return limits;
}

TEST(IoScheduler, LoadsCapStoresUntilTheLingerHasPassed) {
  std::vector<int> started;
  SchedulerLimits limits = Capped(/*reads*/ 4, /*writes*/ 8, /*cap*/ 2);
  limits.read_linger_ns = 1000;
  const std::unique_ptr<IoScheduler> owned = Backlog(limits, 20, 1, &started);
  IoScheduler& s = *owned;
  std::vector<IoRequest> reqs;
  s.Emit(&reqs, /*now_ns=*/10'000);
  EXPECT_EQ(reqs.size(), 3u) << "one load and two stores, though 8 write slots and 3 read slots are free";
  EXPECT_EQ(s.stores_running(), 2);
  CompleteIds(&s, &reqs, 100, 200);  // the two stores finish; the load still runs
  s.Emit(&reqs, 10'500);
  EXPECT_EQ(s.stores_running(), 2) << "two more stores, no more";
  CompleteIds(&s, &reqs, 1, 2);  // the load finishes
  CompleteIds(&s, &reqs, 100, 200);
  s.Emit(&reqs, 10'900);
  EXPECT_EQ(s.stores_running(), 2) << "inside the linger after the last load the cap holds";
  CompleteIds(&s, &reqs, 100, 200);
  s.Emit(&reqs, 20'000);
  EXPECT_EQ(s.stores_running(), 8 + 3) << "past the linger stores take every write slot and the stealable read slots";
}

TEST(IoScheduler, LookupsDoNotHoldStoresBack) {
  class LookupLikeOp : public CountingOp {
   public:
    using CountingOp::CountingOp;
    bool ReadsData() const override { return false; }
  };
  std::vector<int> started;
  const std::unique_ptr<IoScheduler> owned = Backlog<LookupLikeOp>(Capped(/*reads*/ 4, /*writes*/ 8, /*cap*/ 2), 20, 4, &started);
  IoScheduler& s = *owned;
  std::vector<IoRequest> reqs;
  s.Emit(&reqs, 0);
  EXPECT_EQ(s.stores_running(), 8) << "four lookups take the read slots; stores keep all 8 write slots";
}

TEST(IoScheduler, WithoutACapStoresKeepTheirSlotsBesideLoads) {
  std::vector<int> started;
  const std::unique_ptr<IoScheduler> owned = Backlog(Capped(/*reads*/ 4, /*writes*/ 8, /*cap: none*/ 0), 20, 1, &started);
  IoScheduler& s = *owned;
  std::vector<IoRequest> reqs;
  s.Emit(&reqs, 0);
  EXPECT_EQ(s.stores_running(), 8 + 2) << "8 write slots and the read slots outside the reserve";
}

TEST(IoScheduler, ACappedWriteSlotStillServesLoads) {
  std::vector<int> started;
  const std::unique_ptr<IoScheduler> owned = Backlog(Capped(/*reads*/ 1, /*writes*/ 4, /*cap*/ 1), 4, 4, &started);
  IoScheduler& s = *owned;
  std::vector<IoRequest> reqs;
  s.Emit(&reqs, 0);
  EXPECT_EQ(s.stores_running(), 1);
  EXPECT_EQ(reqs.size(), 5u) << "1 read slot + 4 write slots: one store, and loads stolen by the other write slots";
}

TEST(IoScheduler, RetryableErrorsReissueTheSameRequest) {
  std::vector<int> started;
  IoScheduler s({1, 1, /*retries*/ 3});
  auto op = std::make_unique<CountingOp>(7, 1, &started);
  CountingOp* raw = op.get();
  s.Enqueue(std::move(op), IoClass::kRead);
  std::vector<IoRequest> reqs;
  s.Emit(&reqs, 0);
  ASSERT_EQ(reqs.size(), 1u);
  for (int64_t err : {-EAGAIN, -EINTR, -EAGAIN}) {
    s.Complete({reqs.back().tag, err});
    s.Emit(&reqs, 0);
    EXPECT_EQ(reqs.back().offset, 7u);
  }
  EXPECT_TRUE(raw->results.empty()) << "retried errors never reach the op";
  s.Complete({reqs.back().tag, -EAGAIN});  // the fourth: retries exhausted
  ASSERT_EQ(raw->results.size(), 1u);
  EXPECT_EQ(raw->results[0], -EAGAIN);
  std::vector<std::unique_ptr<BlockOp>> done;
  s.TakeFinished(&done);
  EXPECT_EQ(done.size(), 1u);
  EXPECT_TRUE(s.idle());
}

// A one-request CountingOp whose request names `path` in `dirfd`.
class NamedOp : public CountingOp {
 public:
  NamedOp(int id, std::vector<int>* started, int dirfd, const char* path)
      : CountingOp(id, 1, started), dirfd_(dirfd), path_(path) {}
  bool NextRequest(IoRequest* req) override {
    if (!CountingOp::NextRequest(req)) return false;
    req->dirfd = dirfd_;
    req->path = path_;
    return true;
  }

 private:
  int dirfd_;
  const char* path_;
};

TEST(IoScheduler, StalePathLookupsAreRetriedButStaleFdsAreNot) {
  std::vector<int> started;
  IoScheduler s({1, 1, 8});
  auto op = std::make_unique<CountingOp>(3, 1, &started);
  CountingOp* raw = op.get();
  s.Enqueue(std::move(op), IoClass::kRead);
  std::vector<IoRequest> reqs;
  s.Emit(&reqs, 0);
  ASSERT_EQ(reqs.size(), 1u);
  // CountingOp's statx has no path: an fd-based ESTALE reaches the op.
  s.Complete({reqs[0].tag, -ESTALE});
  ASSERT_EQ(raw->results, std::vector<int64_t>{-ESTALE});

  IoScheduler p({1, 1, 8});
  auto path_op = std::make_unique<NamedOp>(4, &started, AT_FDCWD, "/shared/volume/x");
  CountingOp* path_raw = path_op.get();
  p.Enqueue(std::move(path_op), IoClass::kRead);
  std::vector<IoRequest> preqs;
  p.Emit(&preqs, 0);
  p.Complete({preqs.back().tag, -ESTALE});
  p.Emit(&preqs, 0);
  ASSERT_EQ(preqs.size(), 2u) << "the path lookup is issued again";
  EXPECT_TRUE(path_raw->results.empty());
  p.Complete({preqs.back().tag, 0});
  EXPECT_EQ(path_raw->results, std::vector<int64_t>{0});
}

// A single name in a directory fd (a held shard directory): the stale handle
// is the fd's own, so ESTALE goes straight to the op, which reopens it,
// instead of being retried with the same dead fd.
TEST(IoScheduler, StaleSingleNamesInADirectoryFdReachTheOp) {
  std::vector<int> started;
  IoScheduler s({1, 1, 8});
  auto op = std::make_unique<NamedOp>(5, &started, 7, "0123abcd.bin");
  CountingOp* raw = op.get();
  s.Enqueue(std::move(op), IoClass::kRead);
  std::vector<IoRequest> reqs;
  s.Emit(&reqs, 0);
  ASSERT_EQ(reqs.size(), 1u);
  s.Complete({reqs[0].tag, -ESTALE});
  EXPECT_EQ(raw->results, std::vector<int64_t>{-ESTALE});
}

TEST(IoScheduler, ShuffledCompletionsReachTheirOps) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  std::vector<int> started;
  IoScheduler s({4, 4, 8});
  std::vector<CountingOp*> ops;
  for (int i = 0; i < 50; ++i) {
    auto op = std::make_unique<CountingOp>(i, 3, &started);
    ops.push_back(op.get());
    s.Enqueue(std::move(op), i % 2 ? IoClass::kRead : IoClass::kWrite);
  }
  std::vector<IoRequest> pending;
  std::vector<std::unique_ptr<BlockOp>> done;  // keeps finished ops alive for the checks below
  while (!s.idle()) {
    s.Emit(&pending, 0);
    ASSERT_LE(s.in_flight(), 8u);
    std::shuffle(pending.begin(), pending.end(), rng);
    IoRequest r = pending.back();
    pending.pop_back();
    s.Complete({r.tag, static_cast<int64_t>(r.offset)});  // echo the op's id as the result
    s.TakeFinished(&done);
  }
  EXPECT_EQ(done.size(), 50u);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(ops[i]->results, std::vector<int64_t>(3, i)) << "op " << i;
  }
}

}  // namespace
}  // namespace kvtier::internal

namespace kvtier::internal {
namespace {

constexpr uint64_t kMs = 1'000'000;

TEST(IoSchedulerAbandon, AStuckRequestIsAbandonedButKeepsItsSlotUntilTheKernelReturnsIt) {
  std::vector<int> started;
  SchedulerLimits limits{1, 1, 8};
  limits.abandon_after_ns = 100 * kMs;
  IoScheduler s(limits);
  std::vector<CountingOp*> ops;
  for (int i = 0; i < 2; ++i) {  // one in the read slot, one stealing the write slot
    auto op = std::make_unique<CountingOp>(i, 2, &started);
    ops.push_back(op.get());
    s.Enqueue(std::move(op), IoClass::kRead, 1 * kMs);
  }
  std::vector<IoRequest> reqs;
  s.Emit(&reqs, 1 * kMs);
  ASSERT_EQ(reqs.size(), 2u);
  const uint64_t tag = reqs[0].tag;
  EXPECT_EQ(s.Expire(100 * kMs), 0u) << "not yet past abandon_after_ns";
  EXPECT_EQ(s.Expire(101 * kMs), 2u);
  EXPECT_TRUE(ops[0]->abandoned && ops[1]->abandoned);
  EXPECT_EQ(s.stuck(), 2u);
  EXPECT_TRUE(s.only_stuck());
  std::vector<BlockOp*> abandoned;
  s.TakeAbandoned(&abandoned);
  ASSERT_EQ(abandoned.size(), 2u);
  EXPECT_TRUE(abandoned[0]->result_taken && abandoned[1]->result_taken);
  EXPECT_EQ(s.Expire(500 * kMs), 0u) << "a stuck request is counted once";
  // Both slots are still the kernel's: a third load waits.
  s.Enqueue(std::make_unique<CountingOp>(2, 1, &started), IoClass::kRead, 500 * kMs);
  reqs.clear();
  s.Emit(&reqs, 500 * kMs);
  EXPECT_TRUE(reqs.empty());
  // The late completion: EINTR would be retried for a live op, never for an abandoned one.
  s.Complete({tag, -EINTR});
  EXPECT_EQ(s.stuck(), 1u);
  std::vector<std::unique_ptr<BlockOp>> finished;
  s.TakeFinished(&finished);
  ASSERT_EQ(finished.size(), 1u) << "the abandoned op ends once the kernel returned its request";
  EXPECT_EQ(ops[0]->results, std::vector<int64_t>{-EINTR});
  reqs.clear();
  s.Emit(&reqs, 501 * kMs);
  EXPECT_EQ(reqs.size(), 1u) << "the freed slot serves the queued load";
}

TEST(IoSchedulerAbandon, QueuedOpsFailAfterTheWaitOnlyWhileSlotsAreStuck) {
  std::vector<int> started;
  SchedulerLimits limits{1, 1, 8};
  limits.abandon_after_ns = 100 * kMs;
  IoScheduler s(limits);
  std::vector<CountingOp*> ops;
  for (int i = 0; i < 3; ++i) {
    auto op = std::make_unique<CountingOp>(i, 1, &started);
    ops.push_back(op.get());
    s.Enqueue(std::move(op), IoClass::kRead, 1 * kMs);
  }
  std::vector<IoRequest> reqs;
  s.Emit(&reqs, 50 * kMs);  // op 0 reads, op 1 steals the write slot, op 2 waits (since 1 ms)
  ASSERT_EQ(reqs.size(), 2u);
  s.Complete({reqs[1].tag, 0});  // op 1 is done; op 2 would take its slot at the next Emit
  std::vector<std::unique_ptr<BlockOp>> finished;
  s.TakeFinished(&finished);
  // Op 2 has waited 101 ms, past the limit, but nothing is stuck (op 0 was issued at 50 ms):
  EXPECT_EQ(s.Expire(102 * kMs), 0u);
  EXPECT_FALSE(ops[2]->abandoned) << "a queue that moves never fails an op";
  EXPECT_EQ(s.Expire(151 * kMs), 2u);  // op 0 stuck, and op 2 expired behind it: two misses
  EXPECT_TRUE(ops[0]->abandoned);
  EXPECT_TRUE(ops[2]->abandoned);
  EXPECT_EQ(s.queued(IoClass::kRead), 0u);
  finished.clear();
  s.TakeFinished(&finished);
  ASSERT_EQ(finished.size(), 1u) << "the never-started op ends at once";
  EXPECT_FALSE(finished[0]->result_taken) << "its result comes with it, not through TakeAbandoned";
}

TEST(IoSchedulerAbandon, ARequestIntoMemoryTheOpDoesNotOwnIsCountedStuckButNeverAbandoned) {
  class PinnedOp : public CountingOp {
   public:
    using CountingOp::CountingOp;
    bool MayAbandon() const override { return false; }
  };
  std::vector<int> started;
  SchedulerLimits limits{1, 1, 8};
  limits.abandon_after_ns = 100 * kMs;
  IoScheduler s(limits);
  auto op = std::make_unique<PinnedOp>(1, 1, &started);
  PinnedOp* raw = op.get();
  s.Enqueue(std::move(op), IoClass::kRead, 1 * kMs);
  std::vector<IoRequest> reqs;
  s.Emit(&reqs, 1 * kMs);
  EXPECT_EQ(s.Expire(200 * kMs), 1u) << "a miss for the root's health";
  EXPECT_EQ(s.stuck(), 1u);
  EXPECT_FALSE(raw->abandoned);
  std::vector<BlockOp*> abandoned;
  s.TakeAbandoned(&abandoned);
  EXPECT_TRUE(abandoned.empty()) << "no result while the kernel may write the caller's memory";
  EXPECT_FALSE(s.only_stuck()) << "a closing tier waits for it";
  s.Complete({reqs[0].tag, 0});
  std::vector<std::unique_ptr<BlockOp>> finished;
  s.TakeFinished(&finished);
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_FALSE(finished[0]->result_taken) << "its result comes when the kernel returns the request";
}

TEST(IoSchedulerAbandon, ARetriedRequestIsNotTheKernelsUntilReissued) {
  std::vector<int> started;
  SchedulerLimits limits{1, 1, 8};
  limits.abandon_after_ns = 100 * kMs;
  IoScheduler s(limits);
  s.Enqueue(std::make_unique<CountingOp>(1, 1, &started), IoClass::kRead, 1 * kMs);
  std::vector<IoRequest> reqs;
  s.Emit(&reqs, 1 * kMs);
  s.Complete({reqs[0].tag, -EAGAIN});  // just before its abandonment: retried
  EXPECT_EQ(s.Expire(150 * kMs), 0u) << "a request waiting to be re-issued is not stuck in the kernel";
  reqs.clear();
  s.Emit(&reqs, 150 * kMs);
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(s.Expire(200 * kMs), 0u) << "its time counts from the re-issue";
  EXPECT_EQ(s.Expire(251 * kMs), 1u);
}

TEST(IoSchedulerAbandon, ZeroNeverAbandonsAndTakeAllEmptiesEverything) {
  std::vector<int> started;
  IoScheduler never({1, 1, 8});
  never.Enqueue(std::make_unique<CountingOp>(1, 1, &started), IoClass::kRead, 1);
  std::vector<IoRequest> reqs;
  never.Emit(&reqs, 1);
  EXPECT_EQ(never.Expire(uint64_t{1} << 62), 0u) << "abandon_after_ns 0: io_timeout_ms 0 waits for ever";

  SchedulerLimits limits{1, 1, 8};
  limits.abandon_after_ns = 10;
  IoScheduler s(limits);
  for (int i = 0; i < 4; ++i) s.Enqueue(std::make_unique<CountingOp>(i, 1, &started), IoClass::kWrite, 1);
  reqs.clear();
  s.Emit(&reqs, 1);
  s.Expire(100);
  std::vector<std::unique_ptr<BlockOp>> all;
  s.TakeAll(&all);
  EXPECT_EQ(all.size(), 4u);
  EXPECT_TRUE(s.idle());
  EXPECT_EQ(s.stuck(), 0u);
}

}  // namespace
}  // namespace kvtier::internal
