// Proves the sick-volume behaviour (docs/sick-volumes.md) on a real FUSE
// mount (kvtier_faultfs), once per backend (io_uring and the syscall pool):
//  * with every call on the mount hung, loads, lookups and stores of the fs
//    tier and of VllmTier all get their results within io_timeout_ms plus
//    the abandonment grace (lookups decided as misses, loads failed, stores
//    failed or dropped), the root turns down (later work fails at once),
//    stuck kernel requests stay bounded by the slots, and closing the tier
//    returns while the mount is still hung; VllmTier::Drain(0) only checks,
//    answering kTimedOut at once while a job is held;
//  * when the mount answers again, a probe turns the root up and loads work;
//  * a read answered after its job was reported never writes the row the
//    caller has since reused (bounce rows; without them the job is not
//    reported until the kernel has let the read go), a write answered
//    late never publishes a block nor leaves a temp file, and a rename
//    answered late publishes one that is announced (KV events) then;
//  * a slow mount (200 ms a call) keeps serving with no error, and each errno
//    gets its documented outcome (docs/sick-volumes.md);
//  * with several roots, one hung root fails only its share of the keys.
// Liveness bounds are generous (a hang is what they catch, not speed).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <map>
#include <thread>

#include "kvtier/fs_tier.h"
#include "kvtier/vllm_tier.h"
#include "support/faultfs_mount.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using testing::FaultFs;

constexpr uint64_t kRow = 16384;
constexpr uint32_t kTimeoutMs = 400;
// Io timeout + the I/O loop's grace and poll, with room for a loaded CI machine.
constexpr int kLivenessMs = static_cast<int>(kTimeoutMs) + 5000;

constexpr char kModel[] = "kvtier-test/sick";
using testing::Key;
using testing::Spec;
// The key bytes this file's tests use: the last byte spreads keys over
// several roots (L99).
constexpr testing::KeyShape kKeyShape = testing::KeyShape::Last(0x5c, true);

std::vector<OffloadKey> Keys(uint64_t first, size_t n) {
  std::vector<OffloadKey> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back(Key(first + i, kKeyShape));
  return keys;
}

int64_t MsSince(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

// Polls `ready` every 20 ms for up to timeout_ms.
template <class F>
bool Eventually(F ready, int timeout_ms) {
  const auto until = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!ready()) {
    if (Clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

bool TimedOutOrUnavailable(const KeyResult& r) {
  return r.outcome == KeyOutcome::kError &&
         (r.status.code() == StatusCode::kTimedOut || r.status.code() == StatusCode::kUnavailable);
}

class SickVolumeTest : public ::testing::TestWithParam<IoBackendKind> {
 protected:
  void SetUp() override {
    if (const std::string why = FaultFs::Unavailable(); !why.empty()) GTEST_SKIP() << why;
    ASSERT_OK_AND_ASSIGN(mount_, FaultFs::Mount((dir_.path() / "backing").string(), (dir_.path() / "mnt").string()));
  }
  void TearDown() override {
    tier_.reset();  // bounded even while hung (the point of the tests)
    mount_.reset();
  }

  FsTierOpenOptions Options(std::string root_dir) const {
    FsTierOpenOptions o;
    o.tier.root_dir = std::move(root_dir);
    o.tier.io_timeout_ms = kTimeoutMs;
    o.tier.n_read_threads = 2;
    o.tier.n_write_threads = 2;
    o.tier.io_backend = GetParam();
    o.ns = Spec(kModel, {"l0", "l1"});
    o.row_bytes = kRow;
    return o;
  }
  void Open(FsTierOpenOptions o) {
    auto tier = FsTier::Open(o);
    if (!tier.ok() && tier.status().code() == StatusCode::kUnavailable) GTEST_SKIP() << tier.status().ToString();
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    tier_ = std::move(tier).value();
  }
  void Open() { Open(Options(mount_->mountpoint())); }
  // An VllmTier over the mount's root and `region`'s 8 rows (skips where the backend is refused).
  void OpenEngine(const testing::AlignedRows& region, std::unique_ptr<VllmTier>* engine) {
    auto opened = VllmTier::Open({.fs = Options(mount_->mountpoint()), .rows = {region.data, 8 * kRow}});
    if (!opened.ok() && opened.status().code() == StatusCode::kUnavailable) GTEST_SKIP() << opened.status().ToString();
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    *engine = std::move(opened).value();
  }

  JobResult Wait(Result<uint64_t> id, int timeout_ms = kLivenessMs) {
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.ok() ? testing::WaitForJob(tier_.get(), *id, timeout_ms) : JobResult{};
  }
  JobResult Store(const std::vector<OffloadKey>& keys, const testing::AlignedRows& rows) {
    return Wait(tier_->SubmitStore(keys, rows.Const()));
  }
  JobResult Load(const std::vector<OffloadKey>& keys, const testing::AlignedRows& rows) {
    return Wait(tier_->SubmitLoad(keys, rows.Mut()));
  }
  // Waits for several jobs at once (WaitForJob drops the others it polls).
  std::map<uint64_t, JobResult> WaitAll(const std::vector<uint64_t>& ids) {
    std::map<uint64_t, JobResult> done;
    const bool all = Eventually(
        [&] {
          std::vector<JobResult> polled;
          tier_->PollFinished(&polled);
          for (JobResult& r : polled) done[r.job_id] = std::move(r);
          return std::all_of(ids.begin(), ids.end(), [&](uint64_t id) { return done.contains(id); });
        },
        kLivenessMs);
    EXPECT_TRUE(all) << done.size() << " of " << ids.size() << " jobs finished on the hung mount";
    return done;
  }
  // A job that must be finished by the time Submit returned (root down).
  JobResult Immediate(Result<uint64_t> id) {
    std::vector<JobResult> done;
    tier_->PollFinished(&done);
    for (JobResult& r : done) {
      if (id.ok() && r.job_id == *id) return r;
    }
    ADD_FAILURE() << "job not finished at once while the root is down";
    return {};
  }
  // While the root is down: new work ends inside its Submit call, and nothing grows.
  void ExpectDownWorkEndsInSubmit(const testing::AlignedRows& rows) {
    const std::vector<std::span<uint8_t>> one_row = {rows.Row(0)};
    const std::vector<std::span<const uint8_t>> one_const = {rows.Row(0)};
    for (uint64_t i = 0; i < 50; ++i) {
      EXPECT_EQ(Immediate(tier_->SubmitLookup(Keys(300 + i, 1))).keys.at(0).outcome, KeyOutcome::kMiss);
      EXPECT_TRUE(TimedOutOrUnavailable(Immediate(tier_->SubmitLoad(Keys(0, 1), one_row)).keys.at(0)));
      EXPECT_EQ(Immediate(tier_->SubmitStore(Keys(400 + i, 1), one_const)).keys.at(0).outcome, KeyOutcome::kDropped);
    }
  }
  // The lookup and getattr calls the mount has seen (a probe is a getattr of root_dir).
  uint64_t LookupCalls() {
    const Result<uint64_t> n = mount_->Calls("lookup");
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    return n.ok() ? *n : 0;
  }
  // Waits until the kernel has returned every abandoned request and their
  // ops have finished their cleanup (closing, removing a temp file).
  void WaitUnstuck() {
    EXPECT_TRUE(Eventually(
        [&] {
          const FsTierMetrics m = tier_->Metrics();
          return m.requests_stuck == 0 && m.in_flight == 0;
        },
        10000))
        << tier_->Metrics().requests_stuck << " requests still stuck after the release";
  }
  std::vector<fs::path> BackingFiles(const std::string& suffix) const {
    std::vector<fs::path> found;
    for (const auto& e : fs::recursive_directory_iterator(dir_.path() / "backing")) {
      const std::string name = e.path().filename().string();
      if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
        found.push_back(e.path());
      }
    }
    return found;
  }

  testing::TempDir dir_;
  std::unique_ptr<FaultFs> mount_;
  std::unique_ptr<FsTier> tier_;
};

TEST_P(SickVolumeTest, EveryCallReturnsInBoundedTimeOnAHungMount) {
  Open();
  testing::AlignedRows rows(4, kRow, testing::TestSeed());
  ASSERT_EQ(Store(Keys(0, 4), rows).OkPrefix(), 4u);
  ASSERT_OK(mount_->Hang("all"));
  const auto t0 = Clock::now();
  testing::AlignedRows target(2, kRow, 1);
  auto load = tier_->SubmitLoad(Keys(0, 2), target.Mut());
  auto lookup = tier_->SubmitLookup(Keys(100, 4));
  testing::AlignedRows fresh(2, kRow, 2);
  auto store = tier_->SubmitStore(Keys(200, 2), fresh.Const());
  ASSERT_TRUE(load.ok() && lookup.ok() && store.ok());
  std::map<uint64_t, JobResult> done = WaitAll({*load, *lookup, *store});
  const JobResult loaded = done[*load], looked = done[*lookup], stored = done[*store];
  std::printf("hung mount: three jobs decided in %lld ms (io_timeout_ms %u)\n", static_cast<long long>(MsSince(t0)),
              kTimeoutMs);
  ASSERT_EQ(loaded.keys.size(), 2u);
  for (const KeyResult& r : loaded.keys) EXPECT_TRUE(TimedOutOrUnavailable(r)) << r.status.ToString();
  for (const KeyResult& r : looked.keys) {
    EXPECT_TRUE(r.outcome == KeyOutcome::kMiss || TimedOutOrUnavailable(r)) << r.status.ToString();
  }
  for (const KeyResult& r : stored.keys) {
    EXPECT_TRUE(r.outcome == KeyOutcome::kDropped || TimedOutOrUnavailable(r)) << r.status.ToString();
  }
  ASSERT_TRUE(Eventually([&] { return tier_->Metrics().root_up == 0; }, kLivenessMs)) << "the root never turned down";
  const uint64_t asked_when_down = LookupCalls();  // the first probe comes a second later
  ExpectDownWorkEndsInSubmit(rows);
  // Probes come and hang too: once the mount was asked again (only a probe
  // asks it now), the counts below include one.
  EXPECT_TRUE(Eventually([&] { return LookupCalls() > asked_when_down; }, kLivenessMs)) << "no probe was sent";
  const FsTierMetrics m = tier_->Metrics();
  EXPECT_GE(m.deadline_misses, 3u);
  EXPECT_GE(m.requests_stuck, 1u);
  EXPECT_LE(m.requests_stuck, 2u + 2u + 1u) << "stuck requests are bounded by the slots and one probe";
  EXPECT_EQ(m.read_queue_depth + m.write_queue_depth, 0u);
  const auto close_t0 = Clock::now();
  tier_.reset();
  std::printf("hung mount: the tier closed in %lld ms\n", static_cast<long long>(MsSince(close_t0)));
  EXPECT_LT(MsSince(close_t0), kLivenessMs);
}

TEST_P(SickVolumeTest, ARootResumesWhenTheMountAnswersAgain) {
  Open();
  testing::AlignedRows rows(2, kRow, testing::TestSeed());
  ASSERT_EQ(Store(Keys(0, 2), rows).OkPrefix(), 2u);
  ASSERT_OK(mount_->Hang("all"));
  for (int i = 0; i < 4 && tier_->Metrics().root_up == 1; ++i) Wait(tier_->SubmitLookup(Keys(10 + 4 * i, 4)));
  ASSERT_EQ(tier_->Metrics().root_up, 0u);
  ASSERT_OK(mount_->Release());
  ASSERT_TRUE(Eventually([&] { return tier_->Metrics().root_up == 1; }, kLivenessMs)) << "no probe brought it back";
  testing::AlignedRows back(2, kRow, 9);
  const JobResult loaded = Load(Keys(0, 2), back);
  EXPECT_EQ(loaded.OkPrefix(), 2u) << loaded.keys.at(0).status.ToString();
  EXPECT_EQ(std::memcmp(back.data, rows.data, 2 * kRow), 0);
  WaitUnstuck();
}

// Hangs the read of a stored block past its deadline, reuses the row, then
// lets the server answer: returns the row's first byte after the release.
uint8_t LateReadIntoReusedRow(FaultFs* mount, FsTier* tier, uint8_t stored_byte) {
  testing::AlignedRows row(1, kRow, 0);
  std::memset(row.data, stored_byte, kRow);
  EXPECT_EQ(testing::WaitForJob(tier, tier->SubmitStore(Keys(7, 1), row.Const()).value()).OkPrefix(), 1u);
  EXPECT_OK(mount->Hang("read"));
  const JobResult loaded = testing::WaitForJob(tier, tier->SubmitLoad(Keys(7, 1), row.Mut()).value(), kLivenessMs);
  EXPECT_TRUE(TimedOutOrUnavailable(loaded.keys.at(0))) << loaded.keys.at(0).status.ToString();
  std::memset(row.data, 0x11, kRow);  // the engine reuses the row
  EXPECT_OK(mount->Release());
  EXPECT_TRUE(Eventually([&] { return tier->Metrics().requests_stuck == 0; }, 10000));
  for (uint64_t i = 0; i < kRow; ++i) {
    if (row.data[i] != 0x11) return row.data[i];
  }
  return 0x11;
}

TEST_P(SickVolumeTest, ALateReadNeverWritesAReusedRow) {
  Open();  // bounce_loads "auto": on, as a FUSE mount is no local filesystem
  EXPECT_EQ(LateReadIntoReusedRow(mount_.get(), tier_.get(), 0xa7), 0x11) << "the late read reached the row";
}

TEST_P(SickVolumeTest, WithoutBounceRowsAHungReadHoldsItsJobUntilTheKernelLetsGo) {
  FsTierOpenOptions o = Options(mount_->mountpoint());
  o.tier.bounce_loads = BounceLoads::kOff;
  Open(o);
  testing::AlignedRows row(1, kRow, testing::TestSeed());
  ASSERT_EQ(Store(Keys(7, 1), row).OkPrefix(), 1u);
  ASSERT_OK(mount_->Hang("read"));
  const Result<uint64_t> id = tier_->SubmitLoad(Keys(7, 1), row.Mut());
  ASSERT_TRUE(id.ok());
  // The read targets the caller's row: reporting the job would hand the row
  // back while the kernel may still write it, so it is counted stuck, and waited for.
  ASSERT_TRUE(Eventually([&] { return tier_->Metrics().requests_stuck == 1; }, kLivenessMs));
  std::vector<JobResult> done;
  tier_->PollFinished(&done);
  EXPECT_TRUE(done.empty()) << "a job reported while its read into the caller's row was still in the kernel";
  EXPECT_GE(tier_->Metrics().deadline_misses, 1u);
  ASSERT_OK(mount_->Release());
  const JobResult loaded = testing::WaitForJob(tier_.get(), *id, kLivenessMs);
  EXPECT_EQ(loaded.keys.size(), 1u) << "the job ends once the kernel has returned the read";
}

TEST_P(SickVolumeTest, ALateWriteNeverPublishesABlock) {
  Open();
  testing::AlignedRows row(1, kRow, testing::TestSeed());
  ASSERT_OK(mount_->Hang("write"));
  const JobResult stored = Store(Keys(5, 1), row);
  EXPECT_TRUE(TimedOutOrUnavailable(stored.keys.at(0))) << stored.keys.at(0).status.ToString();
  std::memset(row.data, 0x22, kRow);  // reused before the server answers
  ASSERT_OK(mount_->Release());
  WaitUnstuck();
  EXPECT_TRUE(BackingFiles(".bin").empty()) << "a block was published by a late write";
  EXPECT_TRUE(BackingFiles(".tmp").empty()) << "the abandoned store's temp file was left behind";
  testing::AlignedRows back(1, kRow, 3);
  EXPECT_EQ(Load(Keys(5, 1), back).keys.at(0).outcome, KeyOutcome::kMiss);
}

// The store fails at its deadline, but the kernel renames it when the
// mount answers: the block is on the volume, so it is announced then.
TEST_P(SickVolumeTest, ARenameAnsweredLatePublishesABlockThatIsAnnounced) {
  FsTierOpenOptions o = Options(mount_->mountpoint());
  o.tier.enable_kv_events = true, o.keep_key_events = true;  // vLLM's channel, as VllmTier opens it
  Open(o);
  testing::AlignedRows row(1, kRow, testing::TestSeed());
  ASSERT_OK(mount_->Hang("rename"));
  EXPECT_TRUE(TimedOutOrUnavailable(Store(Keys(7, 1), row).keys.at(0)));
  EXPECT_TRUE(tier_->TakeKeyEvents().empty()) << "a store that failed was announced";
  ASSERT_OK(mount_->Release());
  WaitUnstuck();
  EXPECT_EQ(BackingFiles(".bin").size(), 1u) << "the late rename did not publish the block";
  std::vector<TierKeyEvent> events;
  EXPECT_TRUE(Eventually([&] { return !(events = tier_->TakeKeyEvents()).empty(); }, kLivenessMs));
  EXPECT_EQ(events, (std::vector<TierKeyEvent>{{Keys(7, 1)[0], false}}));
}

TEST_P(SickVolumeTest, ASlowMountKeepsServing) {
  FsTierOpenOptions o = Options(mount_->mountpoint());
  o.tier.io_timeout_ms = 3000;  // a path walk is one FUSE lookup (200 ms) per level
  Open(o);
  ASSERT_OK(mount_->Delay("all", 200));
  testing::AlignedRows rows(2, kRow, testing::TestSeed()), back(2, kRow, 1);
  constexpr int kSlowJobMs = 120000;  // some 20 calls of 200 ms per store, each waited for
  EXPECT_EQ(Wait(tier_->SubmitStore(Keys(0, 2), rows.Const()), kSlowJobMs).OkPrefix(), 2u);
  EXPECT_EQ(Wait(tier_->SubmitLookup(Keys(0, 2)), kSlowJobMs).OkPrefix(), 2u);
  EXPECT_EQ(Wait(tier_->SubmitLoad(Keys(0, 2), back.Mut()), kSlowJobMs).OkPrefix(), 2u);
  EXPECT_EQ(std::memcmp(back.data, rows.data, 2 * kRow), 0);
  const FsTierMetrics m = tier_->Metrics();
  EXPECT_EQ(m.deadline_misses, 0u);
  EXPECT_EQ(m.root_up, 1u);
  EXPECT_EQ(m.store_errors + m.load_errors + m.lookup_errors, 0u);
}

struct ErrnoCase {
  const char* op;
  int err;
  const char* path;  // which calls fail
  JobKind kind;
  KeyOutcome outcome;
  StatusCode code;
};

TEST_P(SickVolumeTest, EachErrnoHasItsDocumentedOutcome) {
  Open();
  testing::AlignedRows rows(1, kRow, testing::TestSeed());
  ASSERT_EQ(Store(Keys(0, 1), rows).OkPrefix(), 1u);
  const ErrnoCase cases[] = {
      {"read", EIO, ".bin", JobKind::kLoad, KeyOutcome::kError, StatusCode::kIoError},
      {"open", EACCES, ".bin", JobKind::kLoad, KeyOutcome::kError, StatusCode::kPermissionDenied},
      {"open", ENOTCONN, ".bin", JobKind::kLoad, KeyOutcome::kError, StatusCode::kIoError},
      {"open", ESTALE, ".bin", JobKind::kLoad, KeyOutcome::kMiss, StatusCode::kOk},
      {"lookup", EIO, "", JobKind::kLookup, KeyOutcome::kError, StatusCode::kIoError},
      {"open", ENOSPC, ".tmp", JobKind::kStore, KeyOutcome::kError, StatusCode::kNoSpace},
      {"write", ENOSPC, ".tmp", JobKind::kStore, KeyOutcome::kError, StatusCode::kNoSpace},
      {"write", EIO, ".tmp", JobKind::kStore, KeyOutcome::kError, StatusCode::kIoError},
      {"rename", EROFS, ".tmp", JobKind::kStore, KeyOutcome::kError, StatusCode::kPermissionDenied},
  };
  uint64_t next_store = 1000;
  for (const ErrnoCase& c : cases) {
    SCOPED_TRACE(std::string(c.op) + " " + strerror(c.err));
    ASSERT_OK(mount_->Fail(c.op, c.err, c.path));
    testing::AlignedRows row(1, kRow, 5);
    JobResult r;
    if (c.kind == JobKind::kLoad) r = Load(Keys(0, 1), row);
    if (c.kind == JobKind::kLookup) r = Wait(tier_->SubmitLookup(Keys(0, 1)));
    if (c.kind == JobKind::kStore) r = Store(Keys(next_store++, 1), row);
    ASSERT_OK(mount_->Clear());
    ASSERT_EQ(r.keys.size(), 1u);
    EXPECT_EQ(KeyOutcomeName(r.keys[0].outcome), KeyOutcomeName(c.outcome)) << r.keys[0].status.ToString();
    EXPECT_EQ(r.keys[0].status.code(), c.code) << r.keys[0].status.ToString();
  }
  EXPECT_TRUE(BackingFiles(".tmp").empty()) << "a failed store left its temp file";
  EXPECT_EQ(tier_->Metrics().root_up, 1u) << "an errno is an answer: the root stays up";
  testing::AlignedRows back(1, kRow, 6);
  EXPECT_EQ(Load(Keys(0, 1), back).OkPrefix(), 1u) << "the stored block survived every fault";
}

TEST_P(SickVolumeTest, OneHungRootFailsOnlyItsShareOfTheKeys) {
  testing::TempDir healthy;
  FsTierOpenOptions o = Options(mount_->mountpoint() + "," + healthy.path().string());
  o.tier.path_sharding = PathSharding::kByBlockHash;
  Open(o);
  constexpr size_t kKeys = 16;
  testing::AlignedRows rows(kKeys, kRow, testing::TestSeed()), back(kKeys, kRow, 1);
  ASSERT_EQ(Store(Keys(0, kKeys), rows).OkPrefix(), kKeys);
  ASSERT_OK(mount_->Hang("all"));
  const JobResult loaded = Load(Keys(0, kKeys), back);
  ASSERT_EQ(loaded.keys.size(), kKeys);
  size_t ok = 0, failed = 0;
  for (size_t i = 0; i < kKeys; ++i) {
    const bool on_healthy = tier_->BlockPath(Key(i, kKeyShape)).rfind(healthy.path().string(), 0) == 0;
    if (on_healthy) {
      EXPECT_EQ(loaded.keys[i].outcome, KeyOutcome::kOk) << i << ": " << loaded.keys[i].status.ToString();
      EXPECT_EQ(std::memcmp(back.Row(i).data(), rows.Row(i).data(), kRow), 0);
      ++ok;
    } else {
      EXPECT_TRUE(TimedOutOrUnavailable(loaded.keys[i])) << i << ": " << loaded.keys[i].status.ToString();
      ++failed;
    }
  }
  EXPECT_GT(ok, 0u);
  EXPECT_GT(failed, 0u);
  for (int i = 0; i < 3 && tier_->Metrics().roots_down == 0; ++i) Wait(tier_->SubmitLookup(Keys(100 + 8 * i, 8)));
  EXPECT_EQ(tier_->Metrics().roots_down, 1u);
  EXPECT_EQ(tier_->Metrics().root_up, 0u);
}

TEST_P(SickVolumeTest, VllmTierDecidesLookupsAndShutsDownOnAHungMount) {
  testing::AlignedRows region(8, kRow, testing::TestSeed());
  std::unique_ptr<VllmTier> engine;
  OpenEngine(region, &engine);
  if (IsSkipped() || HasFatalFailure()) return;
  const std::vector<OffloadKey> stored = Keys(0, 2);
  const int64_t slots[] = {0, 1};
  ASSERT_OK(engine->SubmitStore(1, stored, slots));
  ASSERT_OK(engine->Drain(kLivenessMs));
  std::vector<EngineJobResult> results;
  ASSERT_EQ(engine->PollFinished(&results), 1u);
  ASSERT_TRUE(results[0].success);
  results.clear();
  ASSERT_OK(mount_->Hang("all"));
  const auto t0 = Clock::now();
  const bool decided = Eventually(
      [&] {
        const LookupVerdict v = engine->Lookup(Key(50, kKeyShape), "req");
        engine->FlushLookups().IgnoreError();
        return v != LookupVerdict::kRetry;
      },
      kLivenessMs);
  EXPECT_TRUE(decided) << "a lookup on the hung mount was never decided";
  EXPECT_EQ(engine->Lookup(Key(50, kKeyShape), "req"), LookupVerdict::kMiss);
  ASSERT_OK(engine->SubmitLoad(2, stored, slots));
  EXPECT_TRUE(Eventually([&] { return engine->PollFinished(&results) > 0; }, kLivenessMs));
  ASSERT_EQ(results.size(), 1u);
  EXPECT_FALSE(results[0].success) << "a load on a hung mount fails as a job (vLLM recomputes)";
  std::printf("engine tier: lookup decided and load failed in %lld ms\n", static_cast<long long>(MsSince(t0)));
  const auto close_t0 = Clock::now();
  engine->Shutdown();
  engine.reset();
  EXPECT_LT(MsSince(close_t0), kLivenessMs);
}

// A timeout of 0 only checks, as in every kvtier wait (kWaitForever sets no
// limit): with a load held by the hung mount, Drain(0) answers at once.
TEST_P(SickVolumeTest, VllmTierDrainOfZeroOnlyChecks) {
  testing::AlignedRows region(8, kRow, testing::TestSeed());
  std::unique_ptr<VllmTier> engine;
  OpenEngine(region, &engine);
  if (IsSkipped() || HasFatalFailure()) return;
  const std::vector<OffloadKey> keys = Keys(0, 2);
  const int64_t slots[] = {0, 1};
  ASSERT_OK(engine->SubmitStore(1, keys, slots));
  ASSERT_OK(engine->Drain(kWaitForever));
  EXPECT_OK(engine->Drain(0));  // idle: the check passes
  ASSERT_OK(mount_->Hang("all"));
  ASSERT_OK(engine->SubmitLoad(2, keys, std::vector<int64_t>{2, 3}));
  const auto t0 = Clock::now();
  const Status checked = engine->Drain(0);
  EXPECT_LT(MsSince(t0), static_cast<int64_t>(kTimeoutMs)) << "Drain(0) waited for the hung load";
  EXPECT_EQ(checked.code(), StatusCode::kTimedOut) << checked.ToString();
  ASSERT_OK(engine->Drain(kWaitForever));  // the load's deadline ends it
  std::vector<EngineJobResult> results;
  ASSERT_EQ(engine->PollFinished(&results), 2u);
  EXPECT_TRUE(results[0].success);
  EXPECT_FALSE(results[1].success);
  engine->Shutdown();
}

INSTANTIATE_TEST_SUITE_P(Backends, SickVolumeTest, ::testing::Values(IoBackendKind::kUring, IoBackendKind::kSyscall),
                         [](const ::testing::TestParamInfo<IoBackendKind>& p) {
                           return p.param == IoBackendKind::kUring ? "Uring" : "Syscall";
                         });

}  // namespace
}  // namespace kvtier
