// Proves the bounds of the fs tier's cache of open shard directories
// (src/fs/shard_dirs.h): at most entries_max entries, the least recently used
// evicted first; an entry past its time to live is never returned; Drop only
// removes the entry a failed request used, not a newer one; and an fd is
// closed once neither the cache nor an op holds its entry (at eviction, at
// the cache's end), never while an op still holds it; and all instances of a
// process (several roots and tiers) cache at most kProcessEntriesMax fds;
// and that a store into an unknown first-level directory makes it first only
// while unknown ones have lately been missing (a fresh tree), never after
// they have lately been present (a restarted instance on a full volume),
// and that the directories seen to exist are remembered, within a bound; so
// are the directories whose entry is synced, forgotten when made again.
#include "fs/shard_dirs.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvtier::internal {
namespace {

int OpenDir() { return ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC); }
bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) >= 0; }

TEST(ShardDirsTest, EvictsTheLeastRecentlyUsedBeyondItsBound) {
  ShardDirs dirs(2, 1000);
  const int a = dirs.Put("a", OpenDir(), 0)->fd.get();
  dirs.Put("b", OpenDir(), 0);
  ASSERT_NE(dirs.Find("a", 1), nullptr);  // "a" is now the most recently used
  dirs.Put("c", OpenDir(), 2);            // evicts "b"
  EXPECT_EQ(dirs.size(), 2u);
  EXPECT_EQ(dirs.Find("b", 3), nullptr);
  EXPECT_NE(dirs.Find("a", 3), nullptr);
  EXPECT_NE(dirs.Find("c", 3), nullptr);
  EXPECT_TRUE(IsOpen(a));
}

TEST(ShardDirsTest, EveryInstanceTogetherStaysWithinTheProcessBudget) {
  const size_t before = ShardDirs::ProcessEntries();
  constexpr size_t kRoots = 4;
  std::vector<std::unique_ptr<ShardDirs>> roots;
  for (size_t r = 0; r < kRoots; ++r) roots.push_back(std::make_unique<ShardDirs>(ShardDirs::kEntriesMax, 1000));
  for (size_t i = 0; i < ShardDirs::kEntriesMax; ++i) {
    for (auto& dirs : roots) {
      ShardDirs::Ref ref = dirs->Put(std::to_string(i), OpenDir(), 0);
      ASSERT_NE(ref, nullptr);  // an op always gets its directory, cached or not
      ASSERT_LE(ShardDirs::ProcessEntries(), ShardDirs::kProcessEntriesMax) << "root cache of " << dirs->size();
    }
  }
  for (auto& dirs : roots) EXPECT_GT(dirs->size(), 0u) << "every root keeps a share";
  roots.clear();
  EXPECT_EQ(ShardDirs::ProcessEntries(), before);
}

TEST(ShardDirsTest, AnEntryPastItsTimeToLiveIsNeverReturned) {
  ShardDirs dirs(4, 1000);
  ShardDirs::Ref held = dirs.Put("a", OpenDir(), 100);
  EXPECT_NE(dirs.Find("a", 1099), nullptr);
  EXPECT_EQ(dirs.Find("a", 1100), nullptr);
  EXPECT_EQ(dirs.size(), 0u);
  EXPECT_TRUE(IsOpen(held->fd.get()));  // an op still holding it keeps its fd
}

TEST(ShardDirsTest, DropRemovesOnlyTheEntryThatFailed) {
  ShardDirs dirs(4, 1000);
  ShardDirs::Ref old = dirs.Put("a", OpenDir(), 0);
  ShardDirs::Ref fresh = dirs.Put("a", OpenDir(), 1);  // another op opened it again meanwhile
  dirs.Drop("a", old.get());
  EXPECT_EQ(dirs.Find("a", 2), fresh);
  dirs.Drop("a", fresh.get());
  EXPECT_EQ(dirs.Find("a", 2), nullptr);
}

TEST(ShardDirsTest, FdsCloseWhenNoLongerHeld) {
  int evicted = -1, kept = -1, held_fd = -1;
  ShardDirs::Ref held;
  {
    ShardDirs dirs(1, 1000);
    evicted = dirs.Put("a", OpenDir(), 0)->fd.get();
    held = dirs.Put("b", OpenDir(), 0);  // evicts "a": nobody holds it
    held_fd = held->fd.get();
    EXPECT_FALSE(IsOpen(evicted));
    kept = dirs.Find("b", 1)->fd.get();
    EXPECT_TRUE(IsOpen(kept));
  }
  EXPECT_TRUE(IsOpen(held_fd));  // the cache is gone, an op still holds "b"
  held.reset();
  EXPECT_FALSE(IsOpen(held_fd));
}

TEST(ShardDirsTest, NoEntriesMeansNothingIsKept) {
  ShardDirs dirs(0, 1000);
  ShardDirs::Ref dir = dirs.Put("a", OpenDir(), 0);
  EXPECT_TRUE(IsOpen(dir->fd.get()));
  EXPECT_EQ(dirs.Find("a", 1), nullptr);
  EXPECT_EQ(dirs.size(), 0u);
}

TEST(ShardDirsTest, ParentsAreMadeFirstOnlyWhileUnknownOnesWereMissing) {
  ShardDirs dirs(4, 1000);
  EXPECT_FALSE(dirs.MakeParentFirst()) << "a new instance opens first: the tree may be full";
  EXPECT_FALSE(dirs.ParentKnown("ns_r0/abc"));
  dirs.SawParent("ns_r0/abc", /*existed=*/false, /*probed=*/true);
  EXPECT_TRUE(dirs.ParentKnown("ns_r0/abc"));
  EXPECT_TRUE(dirs.MakeParentFirst()) << "an unknown directory was missing: a fresh tree";
  // Known ones say nothing about unknown ones.
  for (int i = 0; i < 20; ++i) dirs.SawParent("ns_r0/abc", true, /*probed=*/false);
  EXPECT_TRUE(dirs.MakeParentFirst());
  // Unknown ones found present turn it around, after as many as were missing.
  for (int i = 0; i < 20; ++i) dirs.SawParent("ns_r0/" + std::to_string(100 + i), false, true);
  int present = 0;
  while (dirs.MakeParentFirst() && present < 100) dirs.SawParent("ns_r0/p" + std::to_string(present++), true, true);
  EXPECT_LE(present, 8) << "the choice is bounded in how long it remembers";
  EXPECT_FALSE(dirs.MakeParentFirst());
}

TEST(ShardDirsTest, KnownParentsStayWithinTheirBound) {
  ShardDirs dirs(4, 1000);
  for (size_t i = 0; i <= ShardDirs::kParentsMax; ++i) dirs.SawParent(std::to_string(i), true, false);
  EXPECT_TRUE(dirs.ParentKnown(std::to_string(ShardDirs::kParentsMax)));
  EXPECT_FALSE(dirs.ParentKnown("0")) << "past the bound the set starts again";
}

TEST(ShardDirsTest, SyncedEntriesAreForgottenWhenMadeAgainAndStayWithinTheirBound) {
  ShardDirs dirs(4, 1000);
  EXPECT_FALSE(dirs.EntrySynced("ns_r0/abc/de_g0")) << "nothing is synced before a parent's fsync";
  dirs.NoteEntrySynced("ns_r0/abc/de_g0");
  EXPECT_TRUE(dirs.EntrySynced("ns_r0/abc/de_g0"));
  EXPECT_FALSE(dirs.EntrySynced("ns_r0/abc")) << "each directory's entry on its own";
  dirs.ForgetEntrySynced("ns_r0/abc/de_g0");  // made again: a new entry
  EXPECT_FALSE(dirs.EntrySynced("ns_r0/abc/de_g0"));
  for (size_t i = 0; i <= ShardDirs::kSyncedMax; ++i) dirs.NoteEntrySynced(std::to_string(i));
  EXPECT_TRUE(dirs.EntrySynced(std::to_string(ShardDirs::kSyncedMax)));
  EXPECT_FALSE(dirs.EntrySynced("0")) << "past the bound the set starts again (a sync more, never one less)";
}

}  // namespace
}  // namespace kvtier::internal
