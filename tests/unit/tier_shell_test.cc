// Proves the safety shell every front end uses (include/kvtier/tier_shell.h)
// on a real FsTier whose I/O completions a gate holds until the test opens
// it (support/gated_backend.h: real syscalls on real files), so "a job
// still running" is a fact, not a race:
//  * memory claims: a write overlapping a held write or read, or another row
//    of its own job, is refused, reads share; a seeded random model agrees
//    with a brute-force check (seed printed on failure); a refused row of a
//    partial submit is left out and not claimed;
//  * close: it refuses new calls from its first instant, waits for a call in
//    flight and for a running job, keeps their results for Poll, is
//    idempotent, and threads racing it each complete or get kUnavailable;
//  * waits: WaitFor returns the caller's own job while another thread waits
//    for its own; with a deadline it answers kTimedOut and keeps the job's
//    memory claimed until the job has finished;
//  * clear: ClearNamespace removes the namespace's block files that its
//    filter accepts (every one without a filter), and no foreign file.
#include "kvtier/tier_shell.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "front/memory_claims.h"
#include "fs/fs_tier_internal.h"
#include "support/gated_backend.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

using internal::MemoryClaims;
constexpr uint64_t kRow = 4096;

MemoryRange Range(uintptr_t begin, uintptr_t end, size_t row) { return {begin, end, row}; }

std::vector<size_t> Rows(const std::vector<MemoryClaims::Refusal>& r) {
  std::vector<size_t> rows;
  for (const auto& x : r) rows.push_back(x.row);
  return rows;
}

TEST(MemoryClaims, WritesNeedMemoryNoHeldJobUsesReadsShareIt) {
  MemoryClaims claims;
  claims.Take(1, std::vector{Range(1000, 2000, 0)}, MemoryUse::kWrite, {});
  claims.Take(2, std::vector{Range(5000, 5100, 0)}, MemoryUse::kRead, {});
  const auto at = [&](uintptr_t b, uintptr_t e, MemoryUse use) { return Rows(claims.Conflicts(std::vector{Range(b, e, 0)}, use)); };
  EXPECT_EQ(at(1999, 3000, MemoryUse::kRead), std::vector<size_t>{0});  // one byte of a held write
  EXPECT_EQ(at(0, 1001, MemoryUse::kWrite), std::vector<size_t>{0});
  EXPECT_EQ(at(2000, 5000, MemoryUse::kWrite), std::vector<size_t>{});  // adjacent on both sides
  EXPECT_EQ(at(5050, 5051, MemoryUse::kWrite), std::vector<size_t>{0});  // inside a held read
  EXPECT_EQ(at(4000, 6000, MemoryUse::kRead), std::vector<size_t>{});    // reads share
  const auto within = claims.Conflicts(std::vector{Range(10, 20, 0), Range(30, 40, 1), Range(19, 21, 2)}, MemoryUse::kWrite);
  EXPECT_EQ(Rows(within), (std::vector<size_t>{0, 2}));
  EXPECT_NE(within.front().why.find("twice"), std::string_view::npos);
  EXPECT_TRUE(claims.Conflicts(std::vector{Range(10, 20, 0), Range(15, 25, 1)}, MemoryUse::kRead).empty());
  claims.Release(1);
  EXPECT_EQ(at(1000, 2000, MemoryUse::kWrite), std::vector<size_t>{});
  claims.Release(2);
  EXPECT_TRUE(claims.empty());
}

// Random claims of random lengths, taken and released, against a brute force.
TEST(MemoryClaims, AgreesWithABruteForceModel) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE("KVTIER_TEST_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  MemoryClaims claims;
  std::map<uint64_t, std::pair<std::vector<MemoryRange>, MemoryUse>> model;
  const auto random_ranges = [&] {
    std::vector<MemoryRange> rs;
    for (size_t i = 0, n = 1 + rng() % 4; i < n; ++i) {
      const uintptr_t b = rng() % 10000;
      rs.push_back(Range(b, b + 1 + rng() % (rng() % 8 == 0 ? 3000 : 100), i));
    }
    return rs;
  };
  for (uint64_t job = 1; job < 3000; ++job) {
    const std::vector<MemoryRange> rs = random_ranges();
    const MemoryUse use = rng() % 2 ? MemoryUse::kWrite : MemoryUse::kRead;
    std::set<size_t> want;
    for (const MemoryRange& r : rs) {
      for (const auto& [id, held] : model) {
        for (const MemoryRange& h : held.first) {
          const bool overlap = h.begin < r.end && r.begin < h.end;
          if (overlap && (use == MemoryUse::kWrite || held.second == MemoryUse::kWrite)) want.insert(r.row);
        }
      }
      for (const MemoryRange& o : rs) {
        if (use == MemoryUse::kWrite && &o != &r && o.begin < r.end && r.begin < o.end) want.insert(r.row);
      }
    }
    const std::vector<size_t> got = Rows(claims.Conflicts(rs, use));
    ASSERT_EQ(got, std::vector<size_t>(want.begin(), want.end())) << "job " << job;
    if (want.empty()) claims.Take(job, rs, use, {}), model[job] = {rs, use};
    if (!model.empty() && rng() % 3 == 0) {
      auto it = std::next(model.begin(), static_cast<long>(rng() % model.size()));
      claims.Release(it->first);
      model.erase(it);
    }
  }
}

class TierShellTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FsTierOpenOptions o;
    o.tier.root_dir = root_.path().string();
    o.tier.io_timeout_ms = 0;  // held I/O is never cancelled: the gate decides
    o.ns = testing::Spec("shell/model");
    o.row_bytes = kRow;
    auto opener = [this](const FsTierOpenOptions& opts) {
      auto gate = std::make_unique<testing::GatedBackend>();
      gate_ = gate.get();
      return internal::OpenFsTierWithBackend(opts, std::move(gate));
    };
    ASSERT_OK_AND_ASSIGN(shell_, TierShell::Open(o, "test shell", opener));
  }
  // A store of rows_[i] under key i.
  Result<uint64_t> Store(size_t i) {
    const std::vector<std::span<uint8_t>> rows{rows_.Row(i)};
    const std::vector<OffloadKey> keys{testing::Key(i)};
    return shell_->Submit(MemoryUse::kRead, RowRanges(rows), [&](FsTier& t) {
      return t.SubmitStore(keys, std::vector<std::span<const uint8_t>>(rows.begin(), rows.end()));
    });
  }
  Result<uint64_t> Load(std::vector<size_t> at, std::vector<size_t>* refused = nullptr) {
    std::vector<std::span<uint8_t>> rows;
    for (size_t i : at) rows.push_back(rows_.Row(i));
    return shell_->Submit(MemoryUse::kWrite, RowRanges(rows), [&](FsTier& t) {
      std::vector<std::span<uint8_t>> sent;
      std::vector<OffloadKey> keys;
      for (size_t j = 0; j < rows.size(); ++j) {
        if (refused == nullptr || std::find(refused->begin(), refused->end(), j) == refused->end()) {
          sent.push_back(rows[j]), keys.push_back(testing::Key(at[j]));
        }
      }
      return t.SubmitLoad(keys, sent);
    }, {}, refused);
  }

  testing::TempDir root_;
  testing::AlignedRows rows_{8, kRow, 7};
  testing::GatedBackend* gate_ = nullptr;
  std::unique_ptr<TierShell> shell_;
};

TEST_F(TierShellTest, ConflictingRowsAreRefusedNamedOrLeftOut) {
  gate_->Hold();
  ASSERT_OK_AND_ASSIGN(uint64_t store, Store(0));
  const Result<uint64_t> load = Load({0});
  ASSERT_EQ(load.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(load.status().message().find("test shell: rows[0]: memory that a store not yet polled reads"),
            std::string::npos) << load.status().ToString();
  std::vector<size_t> refused;
  ASSERT_OK_AND_ASSIGN(uint64_t partial, Load({1, 0, 2}, &refused));
  EXPECT_EQ(refused, std::vector<size_t>{1});
  EXPECT_EQ(Store(1).status().code(), StatusCode::kInvalidArgument);  // the partial load writes row 1
  gate_->Release();
  ASSERT_OK_AND_ASSIGN(JobResult done, shell_->WaitFor(partial, kWaitForever));
  EXPECT_EQ(done.keys.size(), 2u);
  ASSERT_OK(Store(1).status());  // WaitFor ended the load's claim
  ASSERT_OK(shell_->WaitFor(store, kWaitForever).status());
  ASSERT_OK(Load({0}).status());
}

TEST_F(TierShellTest, CloseRefusesAtOnceWaitsForUsesAndJobsAndKeepsTheirResults) {
  std::optional<TierShell::Use> use(std::in_place, *shell_);
  ASSERT_TRUE(*use);
  gate_->Hold();
  ASSERT_OK_AND_ASSIGN(uint64_t job, Store(3));
  std::atomic<bool> closed{false};
  std::thread closer([&] {
    shell_->Close();
    closed = true;
  });
  while (!shell_->closing()) std::this_thread::yield();
  EXPECT_EQ(Store(4).status().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(static_cast<bool>(TierShell::Use(*shell_)));
  EXPECT_EQ(shell_->BlockPath(testing::Key(0)).status().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(closed.load());  // a use is in flight
  use.reset();
  gate_->Release();
  shell_->Close();  // a second caller returns once the first has finished
  EXPECT_EQ(shell_->tier_for_tests(), nullptr);
  closer.join();
  EXPECT_TRUE(closed.load());
  std::vector<JobResult> results;
  ASSERT_EQ(shell_->Poll(&results), 1u);
  EXPECT_EQ(results[0].job_id, job);
  EXPECT_EQ(shell_->Metrics().rows_stored, 1u);
  EXPECT_EQ(shell_->WaitFor(job + 100, kWaitForever).status().code(), StatusCode::kNotFound);
  EXPECT_OK(shell_->WaitIdle(0));
}

// Threads submit, wait for their own jobs and poll while two threads close:
// every call completes or is kUnavailable, and none crashes or hangs.
TEST_F(TierShellTest, CallsRacingCloseCompleteOrAreUnavailable) {
  std::atomic<int> refused{0}, done{0};
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        TierShell::Use use(*shell_);
        Result<uint64_t> job = use ? Store(t) : Result<uint64_t>(shell_->Closed());
        if (!job.ok()) {
          EXPECT_EQ(job.status().code(), StatusCode::kUnavailable) << job.status().ToString();
          ++refused;
          continue;
        }
        EXPECT_OK(shell_->WaitFor(*job, kWaitForever).status());
        ++done;
      }
    });
  }
  while (done.load() < 10) std::this_thread::yield();
  std::thread a([&] { shell_->Close(); }), b([&] { shell_->Close(); });
  a.join(), b.join();
  for (auto& t : threads) t.join();
  EXPECT_EQ(refused.load() + done.load(), 800);
  EXPECT_EQ(Store(0).status().code(), StatusCode::kUnavailable);
}

TEST_F(TierShellTest, WaitForReturnsOnesOwnJobAndAtItsDeadlineKeepsTheMemoryClaimed) {
  gate_->Hold();
  ASSERT_OK_AND_ASSIGN(uint64_t first, Store(5));
  ASSERT_OK_AND_ASSIGN(uint64_t second, Store(6));
  const Result<JobResult> late = shell_->WaitFor(first, 20);
  EXPECT_EQ(late.status().code(), StatusCode::kTimedOut) << late.status().ToString();
  EXPECT_EQ(Load({5}).status().code(), StatusCode::kInvalidArgument) << "the abandoned job's memory was released";
  auto other = std::async(std::launch::async, [&] { return shell_->WaitFor(second, kWaitForever); });
  gate_->Release();
  const Result<JobResult> mine = other.get();
  ASSERT_OK(mine.status());
  EXPECT_EQ(mine->job_id, second);
  ASSERT_OK(shell_->WaitIdle(kWaitForever));
  std::vector<JobResult> polled;
  EXPECT_EQ(shell_->Poll(&polled), 0u) << "the abandoned job was handed over";
  ASSERT_OK(Load({5}).status());  // it finished: its claim ended
}

// Blocks of group 0 and 1 (vLLM's groups): a filter keeps group 0's, no filter clears the rest.
TEST_F(TierShellTest, ClearNamespaceRemovesTheBlocksItsFilterAcceptsAndNoForeignFile) {
  std::vector<OffloadKey> keys;
  for (size_t i = 0; i < 6; ++i) {
    keys.push_back(testing::Key(i));
    keys.back().group_idx = static_cast<uint32_t>(i % 2);
  }
  const std::vector<std::span<const uint8_t>> rows(6, rows_.Row(0));
  ASSERT_OK_AND_ASSIGN(JobResult stored,
                       shell_->SubmitAndWait(MemoryUse::kRead, {}, [&](FsTier& t) { return t.SubmitStore(keys, rows); }));
  ASSERT_EQ(stored.OkPrefix(), 6u);
  const std::filesystem::path foreign = root_.path() / shell_->ns().block_dir_name() / "notes.bin";
  testing::WriteFileOrDie(foreign, "foreign");
  ASSERT_OK_AND_ASSIGN(uint64_t odd, shell_->ClearNamespace([](std::string_view, uint32_t group) { return group == 1; }));
  EXPECT_EQ(odd, 3u);
  ASSERT_OK_AND_ASSIGN(JobResult found,
                       shell_->SubmitAndWait(MemoryUse::kRead, {}, [&](FsTier& t) { return t.SubmitLookup(keys); }));
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(found.keys[i].outcome, i % 2 == 0 ? KeyOutcome::kOk : KeyOutcome::kMiss) << "key " << i;
  }
  ASSERT_OK_AND_ASSIGN(uint64_t rest, shell_->ClearNamespace());
  EXPECT_EQ(rest, 3u);
  EXPECT_TRUE(std::filesystem::exists(foreign));
  shell_->Close();
  EXPECT_EQ(shell_->ClearNamespace().status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace kvtier
