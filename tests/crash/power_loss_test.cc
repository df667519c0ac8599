// Proves CRASH_INVARIANTS.md C9, C10 and C11 under a real power cut, and
// measures what C8 (`durability: none`) loses; this is the power-loss test of
// C14.
//
// The rig (power_loss_rig.h): two inner filesystems, ext4 and XFS, on loop
// devices whose images live on an XFS with reflink. Each round a crash_writer
// child (the real fs tier, its real io_uring or syscall backend, O_DIRECT or
// buffered) stores rows on one inner filesystem; at a seeded random moment
// the test reads every ACK the writer has printed so far (through a pipe,
// outside the filesystems), then clones the inner image with FICLONE: that
// clone is the disk after a power cut, without the page cache and whatever
// was not written back. The writer is then SIGKILLed, the clone is mounted
// (its journal replays) and checked; the live filesystem goes on into later
// rounds with its debris, so later cuts also see older blocks.
//
// Every round stores its own keys, so every block found names the mode that
// wrote it. On each recovered image:
//  * C10: every `full` block acknowledged before the cut (in this round or an
//    earlier one, and not evicted since) loads kOk with its exact row;
//  * C9/C10: every `file` or `full` block file that survived, acknowledged or
//    not, is whole: row_size bytes, the key's exact bytes, and a CRC
//    attribute that is either absent (C9 allows it lost) or right;
//  * C11: a load through the real tier's load path (a fresh FsTier on the
//    recovered image) returns kOk only with the exact row, kCorrupt only for
//    a file that is not whole, kMiss only when there is no file. The one
//    exception is C12's residual risk: a `none` file of full length and
//    wrong content without its attribute (counted, never seen so far);
//  * C8 (`none`) promises nothing more, so what `none` (and `file`) lost of
//    the blocks acknowledged before the cut is printed, not asserted.
// Between rounds about half of the blocks are evicted (unlinked, as gc may,
// L71), and temp files and empty block directories are removed, so the
// filesystems never fill and scans stay short. Every 4 rounds on a
// filesystem it is frozen and thawed (a checkpoint), so journal replays stay
// short.
//
// KVTIER_POWERLOSS_ROUNDS overrides the 200 rounds. The seed is printed;
// KVTIER_TEST_SEED replays every round's plan (filesystem, mode, backend,
// batch, cut moment), though not the kernel's timing. The writer's
// KVTIER_CRASH_WRITER_FAULT (skip_fdatasync, skip_dirsync) removes one sync
// step; the test must then fail. Skips, with one line, where the rig cannot
// be built (not root, no loop devices, no mkfs.xfs, no reflink).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "crash_rows.h"
#include "power_loss_check.h"
#include "power_loss_child.h"
#include "power_loss_rig.h"
#include "support/test_support.h"

namespace kvtier::powerloss {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kDefaultRounds = 200;
constexpr uint32_t kCutWindowUs = 200000;  // the cut comes 0-200 ms after the writer is ready
// Every this many rounds on a filesystem, the live one is checkpointed
// (frozen and thawed), so journal replays stay short (see Rig::Checkpoint).
constexpr int kCheckpointRounds = 4;
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kExt4Bytes = 128 * kMiB;
constexpr uint64_t kXfsBytes = 320 * kMiB;  // about the smallest XFS mkfs.xfs makes

int Rounds() {
  if (const char* env = std::getenv("KVTIER_POWERLOSS_ROUNDS"); env != nullptr && *env != '\0')
    return std::max(1, std::atoi(env));
  return kDefaultRounds;
}

// Every inner filesystem x mode x backend x O_DIRECT combination in 24 rounds.
Plan MakePlan(int round, bool uring_ok, std::mt19937_64* rng) {
  Plan p;
  p.round = round;
  p.inner = static_cast<size_t>(round % kInners);
  p.mode = static_cast<Durability>((round / 2) % kModes);
  p.uring = uring_ok && (round / 6) % 2 == 0;
  p.direct = (round / 12) % 2 == 0;
  p.batch = 1 + (*rng)() % 16;
  p.max_rows = 64 + (*rng)() % 961;
  p.cut_after_us = static_cast<uint32_t>((*rng)() % (kCutWindowUs + 1));
  return p;
}

std::string Describe(const Plan& p, const Rig& rig) {
  std::ostringstream s;
  s << "round " << p.round << ": " << InnerFsName(rig.InnerType(p.inner)) << ", durability "
    << ModeName(p.mode) << ", " << (p.uring ? "io_uring" : "syscall") << ", "
    << (p.direct ? "O_DIRECT" : "buffered") << ", batch " << p.batch << ", at most " << p.max_rows
    << " rows, cut " << p.cut_after_us << " us after READY";
  return s.str();
}

std::vector<std::string> WriterArgv(const Plan& p, const fs::path& root, uint64_t content_seed) {
  return {KVTIER_CRASH_WRITER_PATH,
          "--root",
          root.string(),
          "--seed",
          std::to_string(content_seed),
          "--row-bytes",
          std::to_string(kRow),
          "--backend",
          p.uring ? "uring" : "syscall",
          "--durability",
          ModeName(p.mode),
          "--o-direct",
          p.direct ? "1" : "0",
          "--first-key",
          std::to_string(p.FirstKey()),
          "--batch",
          std::to_string(p.batch),
          "--jobs",
          "4",
          "--threads",
          "4",
          "--max-rows",
          std::to_string(p.max_rows)};
}

class PhaseClock;

class PowerLoss : public ::testing::Test {
 protected:
  void SetUp() override {
    auto rig = Rig::Create(dir_.path());
    if (!rig.ok() && rig.status().code() == StatusCode::kUnavailable) {
      GTEST_SKIP() << "power-loss rig unavailable: " << rig.status().message();
    }
    ASSERT_TRUE(rig.ok()) << "building the power-loss rig: " << rig.status().ToString();
    rig_ = std::move(rig).value();
    for (InnerFs type : {InnerFs::kExt4, InnerFs::kXfs}) {
      auto inner = rig_->AddInner(type, type == InnerFs::kExt4 ? kExt4Bytes : kXfsBytes);
      ASSERT_TRUE(inner.ok()) << "making the inner " << InnerFsName(type) << ": "
                              << inner.status().ToString();
    }
  }
  // Unmounts before dir_ is removed; on a crash of the test process itself
  // the kernel does the same (the namespace dies, the loops autoclear).
  void TearDown() override { rig_.reset(); }

  enum class CutOutcome { kCut, kNoUring, kFailed };
  // One round; false when the writer found io_uring unavailable (not run).
  bool RunRound(const Plan& plan);
  // Runs the round's writer until the power cut; records its ACKs.
  CutOutcome WriteAndCut(const Plan& plan, PhaseClock* clock);
  // Mounts the clone, checks it, drops it, and tidies the live filesystem.
  void RecoverAndCheck(const Plan& plan, PhaseClock* clock);
  void Evict(size_t inner);

  testing::TempDir dir_;  // declared first: removed after the rig is gone
  std::unique_ptr<Rig> rig_;
  Ledger ledger_;
  Figures figures_;
  uint64_t content_seed_ = 0;
  std::mt19937_64 rng_;
  uint64_t acks_before_cut_[kModes] = {}, acks_after_cut_ = 0, rows_done_rounds_ = 0;
  // Seconds spent per phase, over all rounds: writer (start to cut), cut
  // (FICLONE), kill, mount (journal replay), check, drop (unmount, unlink), evict.
  double phase_s_[7] = {};
  double mount_s_[kInners] = {};
};

// Adds the time since the last call to one of the phase totals.
class PhaseClock {
 public:
  explicit PhaseClock(double* totals) : totals_(totals) {}
  double Lap(int phase) {
    const auto now = Clock::now();
    const double lap = std::chrono::duration<double>(now - last_).count();
    totals_[phase] += lap;
    last_ = now;
    return lap;
  }

 private:
  double* totals_;
  Clock::time_point last_ = Clock::now();
};

bool PowerLoss::RunRound(const Plan& plan) {
  PhaseClock clock(phase_s_);
  const CutOutcome cut = WriteAndCut(plan, &clock);
  if (cut == CutOutcome::kNoUring) return false;
  if (cut == CutOutcome::kCut) RecoverAndCheck(plan, &clock);
  return true;
}

PowerLoss::CutOutcome PowerLoss::WriteAndCut(const Plan& plan, PhaseClock* clock) {
  const fs::path err_log = dir_.path() / "writer.stderr";
  WriterProcess writer;
  const Status started =
      writer.Start(WriterArgv(plan, rig_->InnerMount(plan.inner) / "root", content_seed_), err_log);
  EXPECT_TRUE(started.ok()) << started.ToString();
  if (!started.ok()) return CutOutcome::kFailed;
  writer.AwaitReady();
  if (writer.unavailable()) return CutOutcome::kNoUring;
  EXPECT_TRUE(writer.ready()) << "no READY from the writer; its stderr: "
                              << testing::ReadFileOrDie(err_log);
  const auto cut_at = Clock::now() + std::chrono::microseconds(plan.cut_after_us);
  writer.PumpUntil(cut_at);
  std::this_thread::sleep_until(cut_at);  // a writer that finished early: still cut on time
  writer.DrainNow();
  const size_t before_cut = writer.acks().size();
  clock->Lap(0);
  const Status cut = rig_->CutPower(plan.inner);
  clock->Lap(1);
  writer.Kill();
  clock->Lap(2);
  EXPECT_TRUE(cut.ok()) << cut.ToString();
  EXPECT_EQ(writer.problem(), "") << testing::ReadFileOrDie(err_log);
  for (const std::string& nack : writer.nacks())
    ADD_FAILURE() << "the writer could not store: " << nack;
  for (size_t k = 0; k < writer.acks().size(); ++k) {
    ledger_.acked[writer.acks()[k]] = Acked{plan.round, k < before_cut, false};
  }
  acks_before_cut_[ModeIndex(plan.mode)] += before_cut;
  acks_after_cut_ += writer.acks().size() - before_cut;
  if (before_cut >= plan.max_rows) ++rows_done_rounds_;
  return cut.ok() ? CutOutcome::kCut : CutOutcome::kFailed;
}

void PowerLoss::RecoverAndCheck(const Plan& plan, PhaseClock* clock) {
  auto mounted = rig_->MountCrash();
  EXPECT_TRUE(mounted.ok()) << "mounting the crash image: " << mounted.status().ToString();
  mount_s_[plan.inner] += clock->Lap(3);
  if (mounted.ok()) {
    CheckCrashImage(mounted.value() / "root", plan.round, ledger_, content_seed_, &figures_);
  }
  clock->Lap(4);
  const Status dropped = rig_->DropCrash();
  EXPECT_TRUE(dropped.ok()) << dropped.ToString();
  clock->Lap(5);
  Evict(plan.inner);
  if ((plan.round / kInners) % kCheckpointRounds == kCheckpointRounds - 1) {
    const Status s = rig_->Checkpoint(plan.inner);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  clock->Lap(6);
}

// On the live filesystem (the writer is dead): unlinks about half of the
// blocks, as gc or another instance may (L71), every temp file, and then the
// block directories left empty (as fsck's empty_dir repair, L91), so later
// stores create them again and the tree stays small.
void PowerLoss::Evict(size_t inner) {
  std::error_code ec;
  const fs::path root = rig_->InnerMount(inner) / "root";
  std::vector<fs::path> doomed, dirs;
  for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code dec;
    if (it->is_directory(dec)) {
      // Block directories only: not the namespace's, nor kvtier's metadata (L73).
      if (it.depth() >= 1 && it->path().native().find("/.kvtier") == std::string::npos)
        dirs.push_back(it->path());
    } else if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0 &&
               name.find(".bin_") != std::string::npos) {
      doomed.push_back(it->path());
    } else if (const auto key = crash::CrashKeyIndex(name); key && rng_() % 2 == 0) {
      doomed.push_back(it->path());
      if (auto acked = ledger_.acked.find(*key); acked != ledger_.acked.end())
        acked->second.evicted = true;
    }
  }
  for (const fs::path& path : doomed) fs::remove(path, ec);
  // Deepest first; a directory that is not empty stays (rmdir fails).
  std::sort(dirs.begin(), dirs.end(), [](const fs::path& a, const fs::path& b) {
    return a.native().size() > b.native().size();
  });
  for (const fs::path& dir : dirs) ::rmdir(dir.c_str());
}

void PrintFigures(const Figures& f, const Rig& rig) {
  static const char* kFateNames[kFates] = {"intact", "absent", "empty", "short", "wrong"};
  std::ostringstream s;
  for (int mode = 0; mode < kModes; ++mode) {
    for (int inner = 0; inner < kInners; ++inner) {
      for (int earlier = 0; earlier < 2; ++earlier) {
        const uint64_t* fates = f.fates[mode][inner][earlier];
        uint64_t total = 0;
        for (int k = 0; k < kFates; ++k) total += fates[k];
        s << "[ power    ] " << ModeName(static_cast<Durability>(mode)) << " on "
          << InnerFsName(rig.InnerType(static_cast<size_t>(inner))) << ", acknowledged "
          << (earlier ? "in earlier rounds:   " : "before the cut:      ") << std::setw(6) << total;
        for (int k = 0; k < kFates; ++k) {
          s << "  " << kFateNames[k] << " " << fates[k];
          if (total > 0)
            s << " (" << std::fixed << std::setprecision(1) << 100.0 * fates[k] / total << "%)";
        }
        s << "\n";
      }
    }
  }
  s << "[ power    ] `full` blocks that had to survive: " << f.required << ", lost "
    << f.required_lost << "; whole blocks without "
    << "their CRC attribute: none " << f.attr_lost[0] << ", file " << f.attr_lost[1] << ", full "
    << f.attr_lost[2] << "; whole unacknowledged blocks: " << f.unacked_whole[0] << "/"
    << f.unacked_whole[1] << "/" << f.unacked_whole[2] << "\n"
    << "[ power    ] " << f.loads << " loads: " << f.loads_ok << " ok, " << f.loads_corrupt
    << " corrupt, " << f.loads_miss
    << " miss; `none` blocks of wrong content accepted (C12): " << f.accepted_wrong
    << "\n[ power    ] config.json after the cut: missing " << f.config_missing << ", empty "
    << f.config_empty << ", other " << f.config_wrong << "; temp files left " << f.tmp_files
    << "\n";
  for (const std::string& example : f.wrong_examples)
    s << "[ power    ] a block of a row's length with wrong content: " << example << "\n";
  std::fputs(s.str().c_str(), stdout);
}

TEST_F(PowerLoss, AcknowledgedBlocksSurvivePerDurabilityMode) {
  const uint64_t seed = testing::TestSeed();
  rng_.seed(seed);
  content_seed_ = rng_();
  const int rounds = Rounds();
  bool uring_ok = true;
  const auto start = Clock::now();
  for (int round = 0; round < rounds && !HasFailure(); ++round) {
    Plan plan = MakePlan(round, uring_ok, &rng_);
    SCOPED_TRACE(Describe(plan, *rig_) + " (seed " + std::to_string(seed) + ")");
    ledger_.plans.push_back(plan);
    if (!RunRound(plan)) {
      std::printf(
          "[ power    ] io_uring is unavailable here: every round uses the syscall backend\n");
      uring_ok = false;
      plan.uring = false;
      ledger_.plans.back() = plan;
      ASSERT_TRUE(RunRound(plan));
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf(
      "[ power    ] %d rounds in %.1f s (seed %llu); ACKs before the cut: none %llu, file %llu, "
      "full %llu; after it %llu; in %llu rounds the writer had finished before the cut\n",
      static_cast<int>(ledger_.plans.size()), seconds, static_cast<unsigned long long>(seed),
      static_cast<unsigned long long>(acks_before_cut_[0]),
      static_cast<unsigned long long>(acks_before_cut_[1]),
      static_cast<unsigned long long>(acks_before_cut_[2]),
      static_cast<unsigned long long>(acks_after_cut_),
      static_cast<unsigned long long>(rows_done_rounds_));
  PrintFigures(figures_, *rig_);
  std::printf(
      "[ power    ] seconds in: writer %.1f, cut %.1f, kill %.1f, mount %.1f, check %.1f, "
      "unmount %.1f, evict %.1f (mount: ext4 %.1f, xfs %.1f)\n",
      phase_s_[0], phase_s_[1], phase_s_[2], phase_s_[3], phase_s_[4], phase_s_[5], phase_s_[6],
      mount_s_[0], mount_s_[1]);
  RecordProperty("rounds", static_cast<int>(ledger_.plans.size()));
  RecordProperty("full_required", std::to_string(figures_.required));
  if (rounds >= 24 && !HasFailure()) {
    // Otherwise the rounds proved nothing: every mode must have had ACKs before a cut.
    for (int mode = 0; mode < kModes; ++mode) {
      EXPECT_GT(acks_before_cut_[mode], 0u) << ModeName(static_cast<Durability>(mode));
    }
  }
}

}  // namespace
}  // namespace kvtier::powerloss
