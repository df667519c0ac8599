// Proves the tiered store's job table on its own: ids start at 1 and are
// never reused; a job finishes only when no chunk is pending and then takes
// no more results; unknown jobs and indexes, a second completion of one
// chunk, and settling or expecting a pending chunk change nothing; finished
// jobs are polled once, oldest first, with their request id and every
// chunk's outcome; copy records are taken once; Idle ignores results still
// waiting for Poll; a chunk that ends a load's prefix (EndPrefix) turns the
// later kOk chunks into kMiss when the job finishes, whatever order they
// completed in. A seeded random run checks completions against a model.
#include "tiered_store/job_table.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "support/test_support.h"

namespace kvtier::internal {
namespace {

ChunkResult Result(ChunkOutcome outcome) { return ChunkResult{outcome, Status::Ok()}; }

TEST(JobTableTest, IdsStartAtOneAndAreNeverReused) {
  JobTable jobs;
  const uint64_t a = jobs.Create(TransferKind::kStore, 7, 0);
  EXPECT_EQ(a, 1u);
  ASSERT_TRUE(jobs.FinishIfDone(a)) << "a job of no chunks finishes at once";
  std::vector<TransferResult> out;
  ASSERT_EQ(jobs.Poll(&out), 1u);
  EXPECT_EQ(jobs.Create(TransferKind::kLoad, 7, 1), 2u) << "a polled id is not handed out again";
}

TEST(JobTableTest, FinishesOnlyWhenNothingIsPending) {
  JobTable jobs;
  const uint64_t id = jobs.Create(TransferKind::kStore, 3, 3);
  EXPECT_TRUE(jobs.Settle(id, 0, Result(ChunkOutcome::kAlreadyCached)));
  EXPECT_TRUE(jobs.Expect(id, 1));
  EXPECT_TRUE(jobs.Expect(id, 2));
  EXPECT_EQ(jobs.pending(id), 2u);
  EXPECT_FALSE(jobs.FinishIfDone(id));
  EXPECT_TRUE(jobs.Complete(id, 2, Result(ChunkOutcome::kOk)));
  EXPECT_FALSE(jobs.FinishIfDone(id));
  EXPECT_FALSE(jobs.Idle());
  EXPECT_TRUE(jobs.Complete(
      id, 1, ChunkResult{ChunkOutcome::kError, Status(StatusCode::kIoError, "boom")}));
  EXPECT_TRUE(jobs.FinishIfDone(id));
  EXPECT_FALSE(jobs.FinishIfDone(id)) << "finishing twice";
  EXPECT_TRUE(jobs.Idle()) << "a result waiting for Poll is not work in flight";

  std::vector<TransferResult> out;
  ASSERT_EQ(jobs.Poll(&out), 1u);
  EXPECT_EQ(out[0].job_id, id);
  EXPECT_EQ(out[0].kind, TransferKind::kStore);
  EXPECT_EQ(out[0].request_id, 3u);
  ASSERT_EQ(out[0].chunks.size(), 3u);
  EXPECT_EQ(out[0].chunks[0].outcome, ChunkOutcome::kAlreadyCached);
  EXPECT_EQ(out[0].chunks[1].outcome, ChunkOutcome::kError);
  EXPECT_EQ(out[0].chunks[1].status.code(), StatusCode::kIoError);
  EXPECT_EQ(out[0].chunks[2].outcome, ChunkOutcome::kOk);
  EXPECT_EQ(out[0].OkPrefix(), 1u);
  EXPECT_EQ(jobs.Poll(&out), 0u) << "polled once";
}

TEST(JobTableTest, BadIdsAndDoubleCompletionsChangeNothing) {
  JobTable jobs;
  const uint64_t id = jobs.Create(TransferKind::kLoad, 1, 2);
  EXPECT_FALSE(jobs.Settle(99, 0, Result(ChunkOutcome::kOk)));
  EXPECT_FALSE(jobs.Expect(99, 0));
  EXPECT_FALSE(jobs.Complete(99, 0, Result(ChunkOutcome::kOk)));
  EXPECT_FALSE(jobs.Complete(0, 0, Result(ChunkOutcome::kOk)));
  EXPECT_FALSE(jobs.Expect(id, 2)) << "index out of range";
  EXPECT_FALSE(jobs.Complete(id, 0, Result(ChunkOutcome::kOk))) << "a chunk not expected";
  ASSERT_TRUE(jobs.Expect(id, 0));
  ASSERT_TRUE(jobs.Expect(id, 1));
  EXPECT_FALSE(jobs.Expect(id, 0)) << "already pending";
  EXPECT_FALSE(jobs.Settle(id, 0, Result(ChunkOutcome::kMiss)))
      << "a pending chunk waits for its completion";
  EXPECT_TRUE(jobs.Complete(id, 0, Result(ChunkOutcome::kOk)));
  EXPECT_FALSE(jobs.Complete(id, 0, Result(ChunkOutcome::kError))) << "double completion";
  EXPECT_EQ(jobs.pending(id), 1u) << "a double completion must not count as chunk 1's";
  EXPECT_FALSE(jobs.FinishIfDone(id));
  EXPECT_TRUE(jobs.Complete(id, 1, Result(ChunkOutcome::kOk)));
  ASSERT_TRUE(jobs.FinishIfDone(id));
  EXPECT_FALSE(jobs.Complete(id, 1, Result(ChunkOutcome::kError)))
      << "a finished job takes no results";
  std::vector<TransferResult> out;
  ASSERT_EQ(jobs.Poll(&out), 1u);
  EXPECT_EQ(out[0].chunks[0].outcome, ChunkOutcome::kOk) << "the first completion stands";
}

TEST(JobTableTest, PollHandsBackJobsInFinishingOrder) {
  JobTable jobs;
  const uint64_t a = jobs.Create(TransferKind::kStore, 1, 1);
  const uint64_t b = jobs.Create(TransferKind::kPrefetch, 0, 1);
  ASSERT_TRUE(jobs.Expect(a, 0));
  ASSERT_TRUE(jobs.Expect(b, 0));
  ASSERT_TRUE(jobs.Complete(b, 0, Result(ChunkOutcome::kOk)));
  ASSERT_TRUE(jobs.FinishIfDone(b));
  ASSERT_TRUE(jobs.Complete(a, 0, Result(ChunkOutcome::kOk)));
  ASSERT_TRUE(jobs.FinishIfDone(a));
  std::vector<TransferResult> out(1);  // Poll appends
  ASSERT_EQ(jobs.Poll(&out), 2u);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[1].job_id, b);
  EXPECT_EQ(out[1].request_id, 0u);
  EXPECT_EQ(out[2].job_id, a);
}

TEST(JobTableTest, CopyRecordsAreTakenOnce) {
  JobTable jobs;
  EXPECT_TRUE(jobs.Idle());
  CopyRecord record;
  record.job_id = 4;
  record.index = {0, 2};
  EXPECT_TRUE(jobs.AddCopy(17, record));
  record.job_id = 5;
  EXPECT_FALSE(jobs.AddCopy(17, record)) << "a ticket already recorded";
  EXPECT_FALSE(jobs.Idle()) << "a copy is in flight";
  EXPECT_FALSE(jobs.TakeCopy(18).has_value());
  std::optional<CopyRecord> taken = jobs.TakeCopy(17);
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->job_id, 4u) << "the first record stays";
  EXPECT_EQ(taken->index, (std::vector<size_t>{0, 2}));
  EXPECT_FALSE(jobs.TakeCopy(17).has_value());
  EXPECT_TRUE(jobs.Idle());
}

// Random jobs with chunks settled, expected and completed (some twice, some
// for unknown ids); a model says when each job must finish and what it holds.
TEST(JobTableTest, EndPrefixMakesLaterOkChunksMisses) {
  JobTable jobs;
  const uint64_t id = jobs.Create(TransferKind::kLoad, 1, 5);
  for (size_t i = 0; i < 4; ++i) ASSERT_TRUE(jobs.Expect(id, i));
  ASSERT_TRUE(jobs.Settle(id, 4, Result(ChunkOutcome::kMiss)));
  EXPECT_TRUE(jobs.Complete(id, 3, Result(ChunkOutcome::kOk)));  // later chunks may finish first
  EXPECT_TRUE(jobs.Complete(id, 0, Result(ChunkOutcome::kOk)));
  jobs.EndPrefix(id, 2);
  jobs.EndPrefix(id, 3);  // a later end changes nothing
  EXPECT_TRUE(jobs.Complete(id, 2, ChunkResult{ChunkOutcome::kError, Status(StatusCode::kIoError, "x")}));
  EXPECT_TRUE(jobs.Complete(id, 1, Result(ChunkOutcome::kOk)));
  ASSERT_TRUE(jobs.FinishIfDone(id));
  std::vector<TransferResult> out;
  ASSERT_EQ(jobs.Poll(&out), 1u);
  std::vector<ChunkOutcome> got;
  for (const ChunkResult& c : out[0].chunks) got.push_back(c.outcome);
  EXPECT_EQ(got, (std::vector<ChunkOutcome>{ChunkOutcome::kOk, ChunkOutcome::kOk, ChunkOutcome::kError,
                                            ChunkOutcome::kMiss, ChunkOutcome::kMiss}));
  jobs.EndPrefix(id, 0);  // a finished job: nothing happens
}

TEST(JobTableTest, RandomCompletionsMatchAModel) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  JobTable jobs;
  struct Model {
    std::vector<int> outcome;  // -1 pending, else a ChunkOutcome
  };
  std::map<uint64_t, Model> running;
  size_t finished = 0;
  for (int step = 0; step < 4000; ++step) {
    if (running.empty() || rng() % 5 == 0) {
      const size_t n = 1 + rng() % 5;
      const uint64_t id = jobs.Create(TransferKind::kStore, 1, n);
      Model m;
      for (size_t i = 0; i < n; ++i) {
        if (rng() % 2 == 0) {
          ASSERT_TRUE(jobs.Expect(id, i));
          m.outcome.push_back(-1);
        } else {
          ASSERT_TRUE(jobs.Settle(id, i, Result(ChunkOutcome::kAlreadyCached)));
          m.outcome.push_back(static_cast<int>(ChunkOutcome::kAlreadyCached));
        }
      }
      running[id] = m;
    }
    auto it = std::next(running.begin(), static_cast<long>(rng() % running.size()));
    const size_t i = rng() % it->second.outcome.size();
    const bool was_pending = it->second.outcome[i] == -1;
    ASSERT_EQ(jobs.Complete(it->first, i, Result(ChunkOutcome::kOk)), was_pending)
        << "seed " << seed << " step " << step;
    if (was_pending) it->second.outcome[i] = static_cast<int>(ChunkOutcome::kOk);
    const bool done = std::count(it->second.outcome.begin(), it->second.outcome.end(), -1) == 0;
    ASSERT_EQ(jobs.FinishIfDone(it->first), done) << "seed " << seed << " step " << step;
    if (!done) continue;
    std::vector<TransferResult> out;
    ASSERT_EQ(jobs.Poll(&out), 1u) << "seed " << seed;
    for (size_t c = 0; c < out[0].chunks.size(); ++c) {
      ASSERT_EQ(static_cast<int>(out[0].chunks[c].outcome), it->second.outcome[c])
          << "seed " << seed;
    }
    running.erase(it);
    ++finished;
  }
  EXPECT_EQ(jobs.running(), running.size());
  EXPECT_GT(finished, 100u);
}

}  // namespace
}  // namespace kvtier::internal
