// Proves the collector lease's protocol (FORMAT.md L120-L123) step by step:
// the first collector takes the lease and may collect only after settling and
// only within its validity; a live holder is never taken over; a stale one is
// taken over by exactly one of two observers (the other's rename moves the
// winner's fresh lease aside, sees it is not the file it judged, and puts it
// back); a holder whose lease was replaced stops at once; a released lease is
// taken at the next tick; a symlinked .kvtier is refused. Something at
// gc.lease that is not a lease (a symlink, dangling or not, a FIFO, a
// directory, empty or not) stops no collector: it is named as the problem,
// moved aside after the TTL without being followed or opened (a symlink's
// target keeps its bytes, a directory its entries) and the lease taken. A
// holder whose root path comes to name another directory gives its lease up
// (in the directory it was taken in) and collects no more. An observer names
// the holder of the lease it watches from the owner record (token, pid, UTC
// start), and a planted body without one as an unknown owner (L195); a
// planted token with newlines or control bytes is printed escaped.
//
// Method: several CollectorLease objects on one real directory, each ticked
// by hand with TickAt(now) on a made-up steady clock, so that the TTL,
// settling and validity decisions are exact. Real time passes (a few ms)
// only where a holder's refresh must change the file's mtime, whose
// granularity is the kernel's.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "ops/collector_lease.h"
#include "support/test_support.h"

namespace kvtier::internal {
namespace {

namespace fs = std::filesystem;
using State = CollectorLease::State;
using testing::TempDir;

constexpr uint64_t kTtlMs = 3000;                 // R = 200 ms, V = 600 ms, settling 800 ms
constexpr int64_t kMs = 1000000;                  // ns
constexpr int64_t kTtl = kTtlMs * kMs, kR = 200 * kMs, kV = 3 * kR, kSettle = kV + kR;

std::unique_ptr<CollectorLease> Open(const fs::path& root) {
  Result<std::unique_ptr<CollectorLease>> lease = CollectorLease::Open(root.string(), kTtlMs);
  EXPECT_TRUE(lease.ok()) << lease.status().ToString();
  return lease.ok() ? std::move(*lease) : nullptr;
}

std::string LeaseBody(const fs::path& root) {
  std::ifstream in(root / ".kvtier" / "gc.lease");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Only gc.lease is left in .kvtier: no temp or aside name outlives a step.
void ExpectOnlyTheLease(const fs::path& root) {
  for (const auto& e : fs::directory_iterator(root / ".kvtier")) EXPECT_EQ(e.path().filename(), "gc.lease");
}

// Lets the kernel's clock move past the mtime granularity before a refresh.
void LetMtimeMove() { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }

// a holds the lease from t = 0 (settled at kSettle).
void HoldFromZero(CollectorLease* a) {
  ASSERT_EQ(a->TickAt(0), State::kSettling);
  ASSERT_EQ(a->TickAt(kSettle), State::kHolding);
}

TEST(CollectorLease, FirstComerHoldsAfterSettlingAndOnlyWithinItsValidity) {
  TempDir dir;
  auto a = Open(dir.path()), b = Open(dir.path());
  EXPECT_EQ(a->refresh_ms(), 200u);
  EXPECT_EQ(a->TickAt(0), State::kSettling);
  EXPECT_FALSE(a->MayCollectAt(0));
  EXPECT_NE(LeaseBody(dir.path()).find(a->token()), std::string::npos);
  EXPECT_EQ(b->TickAt(0), State::kObserving);
  EXPECT_EQ(a->TickAt(kSettle - 1), State::kSettling);
  EXPECT_FALSE(a->MayCollectAt(kSettle - 1));
  EXPECT_EQ(a->TickAt(kSettle), State::kHolding);
  EXPECT_TRUE(a->MayCollectAt(kSettle + kV - 1));
  EXPECT_FALSE(a->MayCollectAt(kSettle + kV));  // no check since: it must not remove
  EXPECT_EQ(a->acquisitions(), 1u);
  ExpectOnlyTheLease(dir.path());
}

TEST(CollectorLease, ALiveHolderIsNeverTakenOver) {
  TempDir dir;
  auto a = Open(dir.path()), b = Open(dir.path());
  HoldFromZero(a.get());
  for (int64_t t = kSettle; t < kSettle + 3 * kTtl; t += kR) {
    LetMtimeMove();
    ASSERT_EQ(a->TickAt(t), State::kHolding);
    ASSERT_EQ(b->TickAt(t), State::kObserving) << "at " << t / kMs << " ms";
  }
  EXPECT_EQ(b->acquisitions(), 0u);
}

TEST(CollectorLease, AnObserverNamesTheHolderFromItsOwnerRecord) {
  TempDir dir;
  auto a = Open(dir.path()), b = Open(dir.path());
  HoldFromZero(a.get());
  EXPECT_EQ(a->OtherHolder(), "");  // its own lease
  EXPECT_EQ(b->OtherHolder(), "");  // not looked yet
  ASSERT_EQ(b->TickAt(kSettle), State::kObserving);
  const std::string pid = std::to_string(getpid());
  EXPECT_EQ(b->OtherHolder().rfind("collector " + a->token() + " (pid " + pid + ") since 20", 0), 0u) << b->OtherHolder();
  EXPECT_EQ(b->OtherHolder().back(), 'Z') << b->OtherHolder();
  // Planted bodies: never a crash, never a member that is not there.
  const fs::path lease = dir.path() / ".kvtier" / "gc.lease";
  for (const char* body : {"{\"pid\": 1}\n", "{\"token\": \"t\", \"started\": 99999999999999999999999}",
                           "{\"token\": \"unterminated"}) {
    a->Release();
    std::ofstream(lease) << body;
    ASSERT_EQ(b->TickAt(kSettle + kR), State::kObserving);
    const std::string holder = b->OtherHolder();
    EXPECT_TRUE(holder.rfind("an unknown owner", 0) == 0 || holder.rfind("collector t (pid ?) since ", 0) == 0)
        << body << " -> " << holder;
  }
  // A planted token cannot forge a log line: a newline, an escape sequence
  // or any control byte is printed escaped, in $'...' quotes.
  a->Release();
  std::ofstream(lease) << "{\"token\": \"x\nkvtier: forged line\x1b[31m\x01\x7f'\", \"pid\": 7}\n";
  ASSERT_EQ(b->TickAt(kSettle + kR), State::kObserving);
  const std::string holder = b->OtherHolder();
  EXPECT_EQ(holder.rfind("collector $'x\\nkvtier: forged line\\x1b[31m\\x01\\x7f\\'' (pid 7) since ", 0), 0u)
      << holder;
  for (const char c : holder) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "an unprintable byte in: " << holder;
}

TEST(CollectorLease, OfTwoObserversOfAStaleLeaseExactlyOneTakesIt) {
  TempDir dir;
  auto a = Open(dir.path()), b = Open(dir.path()), c = Open(dir.path());
  HoldFromZero(a.get());
  EXPECT_EQ(b->TickAt(kSettle), State::kObserving);
  EXPECT_EQ(c->TickAt(kSettle), State::kObserving);
  // a stops refreshing (killed). Unchanged for just under the TTL: not yet stale.
  EXPECT_EQ(b->TickAt(kSettle + kTtl - 1), State::kObserving);
  // c judges it stale, and b takes it over just before c's rename: c's rename
  // then moves b's fresh lease, which c must see and put back.
  bool raced = false;
  c->SetBeforeTakeoverForTest([&] {
    LetMtimeMove();  // the new lease's mtime must differ from the stale one's
    raced = b->TickAt(kSettle + kTtl) == State::kSettling;
  });
  EXPECT_EQ(c->TickAt(kSettle + kTtl), State::kObserving);
  EXPECT_TRUE(raced);
  EXPECT_NE(LeaseBody(dir.path()).find(b->token()), std::string::npos);
  ExpectOnlyTheLease(dir.path());
  EXPECT_EQ(b->TickAt(kSettle + kTtl + kSettle), State::kHolding);
  EXPECT_TRUE(b->MayCollectAt(kSettle + kTtl + kSettle));
  EXPECT_EQ(c->acquisitions(), 0u);
  // The old holder, back, finds its lease gone and stops.
  EXPECT_EQ(a->TickAt(kSettle + kTtl + kSettle), State::kObserving);
  EXPECT_FALSE(a->MayCollectAt(kSettle + kTtl + kSettle));
}

TEST(CollectorLease, AHolderWhoseLeaseWasReplacedStopsAtOnce) {
  TempDir dir;
  auto a = Open(dir.path());
  HoldFromZero(a.get());
  ASSERT_TRUE(a->MayCollectAt(kSettle));
  std::ofstream(dir.path() / ".kvtier" / "x.tmp") << "{\"token\": \"someone-else\"}\n";
  fs::rename(dir.path() / ".kvtier" / "x.tmp", dir.path() / ".kvtier" / "gc.lease");
  EXPECT_EQ(a->TickAt(kSettle + kR), State::kObserving);
  EXPECT_FALSE(a->MayCollectAt(kSettle + kR));
}

TEST(CollectorLease, AReleasedLeaseIsTakenAtTheNextTick) {
  TempDir dir;
  auto a = Open(dir.path()), b = Open(dir.path());
  HoldFromZero(a.get());
  EXPECT_EQ(b->TickAt(kSettle), State::kObserving);
  a->Release();
  EXPECT_FALSE(fs::exists(dir.path() / ".kvtier" / "gc.lease"));
  EXPECT_FALSE(a->MayCollectAt(kSettle));
  EXPECT_EQ(b->TickAt(kSettle + kR), State::kSettling);
  ExpectOnlyTheLease(dir.path());
}

TEST(CollectorLease, ASymlinkedMetadataDirectoryIsRefused) {
  TempDir dir, elsewhere;
  fs::create_directory_symlink(elsewhere.path(), dir.path() / ".kvtier");
  Result<std::unique_ptr<CollectorLease>> lease = CollectorLease::Open(dir.path().string(), kTtlMs);
  ASSERT_FALSE(lease.ok());
  EXPECT_NE(lease.status().message().find(".kvtier"), std::string::npos) << lease.status().ToString();
  EXPECT_TRUE(fs::is_empty(elsewhere.path()));
}

// What the non-lease test plants at gc.lease.
enum class Planted { kSymlink, kDanglingSymlink, kFifo, kEmptyDir, kFullDir };

void Plant(Planted what, const fs::path& at, const fs::path& target) {
  switch (what) {
    case Planted::kSymlink: return fs::create_symlink(target, at);
    case Planted::kDanglingSymlink: return fs::create_symlink(target.string() + ".none", at);
    case Planted::kFifo: ASSERT_EQ(mkfifo(at.c_str(), 0644), 0); return;
    case Planted::kEmptyDir: fs::create_directory(at); return;
    case Planted::kFullDir: fs::create_directory(at); std::ofstream(at / "keep") << "not ours"; return;
  }
}

TEST(CollectorLease, ANonLeaseIsMovedAsideAfterTheTtlUnfollowedAndTheLeaseTaken) {
  for (Planted what : {Planted::kSymlink, Planted::kDanglingSymlink, Planted::kFifo, Planted::kEmptyDir, Planted::kFullDir}) {
    SCOPED_TRACE(static_cast<int>(what));
    TempDir dir, outside;
    auto a = Open(dir.path());
    const fs::path target = outside.path() / "precious", lease = dir.path() / ".kvtier" / "gc.lease";
    std::ofstream(target) << "precious bytes";
    Plant(what, lease, target);
    EXPECT_EQ(a->TickAt(kR), State::kObserving);  // first sighting (a steady clock is never 0)
    EXPECT_TRUE(a->blocked());
    EXPECT_NE(a->problem().find(lease.string()), std::string::npos) << a->problem();
    EXPECT_NE(a->problem().find("not a lease"), std::string::npos) << a->problem();
    EXPECT_EQ(a->TickAt(kR + kTtl - 1), State::kObserving);
    EXPECT_EQ(a->TickAt(kR + kTtl), State::kSettling) << a->problem();
    EXPECT_EQ(a->TickAt(kR + kTtl + kSettle), State::kHolding);
    EXPECT_TRUE(a->MayCollectAt(kR + kTtl + kSettle));
    EXPECT_FALSE(a->blocked());
    EXPECT_NE(LeaseBody(dir.path()).find(a->token()), std::string::npos);
    EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(lease)));
    std::ifstream in(target);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "precious bytes");  // never followed
    if (what != Planted::kFullDir) {
      ExpectOnlyTheLease(dir.path());
      continue;
    }
    // A directory with entries is not ours to empty: it goes to a name of its own, entries kept.
    size_t moved = 0;
    for (const auto& e : fs::directory_iterator(dir.path() / ".kvtier")) {
      if (e.path().filename() == "gc.lease") continue;
      EXPECT_EQ(e.path().extension(), ".bad");
      EXPECT_TRUE(fs::exists(e.path() / "keep"));
      ++moved;
    }
    EXPECT_EQ(moved, 1u);
    EXPECT_NE(a->problem().find("remove it by hand"), std::string::npos) << a->problem();
  }
}

TEST(CollectorLease, AHolderWhoseRootPathNamesAnotherDirectoryGivesItUp) {
  TempDir dir;
  const fs::path root = dir.path() / "root", old = dir.path() / "root.old";
  fs::create_directory(root);
  auto a = Open(root);
  HoldFromZero(a.get());
  EXPECT_TRUE(a->RootStill());
  fs::rename(root, old);
  fs::create_directory(root);
  EXPECT_FALSE(a->RootStill());
  EXPECT_FALSE(a->MayCollect());
  EXPECT_EQ(a->TickAt(kSettle + kR), State::kObserving);
  EXPECT_TRUE(a->root_replaced());
  EXPECT_FALSE(a->MayCollectAt(kSettle + kR));
  EXPECT_FALSE(fs::exists(old / ".kvtier" / "gc.lease"));  // given up where it was taken
  EXPECT_FALSE(fs::exists(root / ".kvtier"));             // and nothing made in the new one
  EXPECT_EQ(a->TickAt(kSettle + 2 * kR), State::kObserving);
  auto b = Open(root);  // what the watch does next: compete for the new directory's lease
  EXPECT_EQ(b->TickAt(kSettle + 2 * kR), State::kSettling);
}

}  // namespace
}  // namespace kvtier::internal
