// Proves the streaming directory lister behind du, fsck and gc
// (ListDirChunks in src/util/dir_fd.h):
// - every entry of a 5000-entry directory is handed on exactly once, in
//   batches never larger than the chunk and never empty, with its lstat;
// - a callback that removes the entries it was handed (as gc's visitors do
//   while a shard directory is still being read) still sees every other
//   entry exactly once, and the directory ends empty;
// - an entry that vanished between readdir and its lstat is handed on with
//   stat_errno ENOENT and st_mode 0, as ListDir did; one that cannot be
//   stat'ed (a directory without search permission) with EACCES;
// - an empty directory calls nothing; a callback returning false stops the
//   listing with ECANCELED; ListDir, now built on it, lists the same.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "support/test_support.h"
#include "util/dir_fd.h"

namespace kvtier::internal {
namespace {

namespace fs = std::filesystem;

constexpr int kEntries = 5000;

std::string NameOf(int i) { return "f" + std::to_string(i); }

void Fill(const fs::path& dir, int n) {
  for (int i = 0; i < n; ++i) {
    const int fd = open((dir / NameOf(i)).c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0) << NameOf(i);
    close(fd);
  }
}

UniqueFd OpenOrDie(const fs::path& dir) {
  UniqueFd fd;
  EXPECT_EQ(OpenDirAt(AT_FDCWD, dir.string(), &fd), 0) << dir;
  return fd;
}

TEST(ListDirChunksTest, EveryEntryOnceInBoundedBatches) {
  testing::TempDir dir;
  Fill(dir.path(), kEntries);
  fs::create_directory(dir.path() / "sub");
  const UniqueFd fd = OpenOrDie(dir.path());
  std::map<std::string, int> seen;
  size_t batches = 0, largest = 0;
  const int err = ListDirChunks(fd.get(), 64, [&](std::vector<DirEntry>& batch) {
    ++batches;
    largest = std::max(largest, batch.size());
    EXPECT_FALSE(batch.empty());
    for (const DirEntry& e : batch) {
      ++seen[e.name];
      EXPECT_EQ(e.stat_errno, 0) << e.name;
      EXPECT_TRUE(e.name == "sub" ? S_ISDIR(e.st.st_mode) : S_ISREG(e.st.st_mode)) << e.name;
    }
    return true;
  });
  ASSERT_EQ(err, 0);
  EXPECT_LE(largest, 64u) << "never more than the chunk held";
  EXPECT_EQ(batches, (kEntries + 1 + 63) / 64u);
  ASSERT_EQ(seen.size(), kEntries + 1u) << "no entry missed, '.' and '..' left out";
  for (const auto& [name, n] : seen) EXPECT_EQ(n, 1) << name << " listed more than once";
  std::vector<DirEntry> all;
  ASSERT_EQ(ListDir(fd.get(), &all), 0);
  std::set<std::string> names;
  for (const DirEntry& e : all) names.insert(e.name);
  EXPECT_EQ(names.size(), seen.size());
  EXPECT_EQ(all.size(), seen.size());
}

TEST(ListDirChunksTest, RemovingWhatWasHandedOnSkipsNothing) {
  testing::TempDir dir;
  Fill(dir.path(), kEntries);
  const UniqueFd fd = OpenOrDie(dir.path());
  std::map<std::string, int> seen;
  const int err = ListDirChunks(fd.get(), 100, [&](std::vector<DirEntry>& batch) {
    for (const DirEntry& e : batch) {
      ++seen[e.name];
      EXPECT_EQ(e.stat_errno, 0) << e.name << ": only entries already listed were removed";
      EXPECT_EQ(UnlinkIfSameAt(fd.get(), e.name, e.st.st_dev, e.st.st_ino), 0) << e.name;
    }
    return true;
  });
  ASSERT_EQ(err, 0);
  ASSERT_EQ(seen.size(), static_cast<size_t>(kEntries));
  for (const auto& [name, n] : seen) EXPECT_EQ(n, 1) << name;
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(ListDirChunksTest, VanishedEntriesKeepTheirStatError) {
  testing::TempDir dir;
  Fill(dir.path(), kEntries);
  const UniqueFd fd = OpenOrDie(dir.path());
  size_t listed = 0, vanished = 0;
  bool first = true;
  const int err = ListDirChunks(fd.get(), 1, [&](std::vector<DirEntry>& batch) {
    EXPECT_EQ(batch.size(), 1u);
    const DirEntry& e = batch[0];
    ++listed;
    if (e.stat_errno != 0) {
      EXPECT_EQ(e.stat_errno, ENOENT) << e.name;
      EXPECT_EQ(e.st.st_mode, 0u) << e.name;
      ++vanished;
    }
    if (first) {  // everything else goes: what readdir already buffered is listed, unstat-able
      for (int i = 0; i < kEntries; ++i) {
        if (NameOf(i) != e.name) unlink((dir.path() / NameOf(i)).c_str());
      }
      first = false;
    }
    return true;
  });
  ASSERT_EQ(err, 0);
  EXPECT_GT(vanished, 0u) << "readdir hands on entries it read before they were removed";
  EXPECT_LT(listed, static_cast<size_t>(kEntries)) << "and not the rest";
}

TEST(ListDirChunksTest, UnsearchableDirectoryRecordsEacces) {
  if (geteuid() == 0) GTEST_SKIP() << "root searches any directory (CAP_DAC_OVERRIDE)";
  testing::TempDir dir;
  Fill(dir.path(), 10);
  ASSERT_EQ(chmod(dir.path().c_str(), 0444), 0);  // readable, not searchable
  const UniqueFd fd = OpenOrDie(dir.path());
  size_t denied = 0;
  const int err = ListDirChunks(fd.get(), 4, [&](std::vector<DirEntry>& batch) {
    for (const DirEntry& e : batch) denied += e.stat_errno == EACCES && e.st.st_mode == 0;
    return true;
  });
  (void)chmod(dir.path().c_str(), 0755);
  ASSERT_EQ(err, 0);
  EXPECT_EQ(denied, 10u);
}

TEST(ListDirChunksTest, EmptyDirectoryAndStopping) {
  testing::TempDir dir;
  const UniqueFd fd = OpenOrDie(dir.path());
  int calls = 0;
  EXPECT_EQ(ListDirChunks(fd.get(), 8, [&](std::vector<DirEntry>&) { return ++calls, true; }), 0);
  EXPECT_EQ(calls, 0) << "an empty directory hands on no batch";
  Fill(dir.path(), 100);
  EXPECT_EQ(ListDirChunks(fd.get(), 8, [&](std::vector<DirEntry>&) { return ++calls, false; }), ECANCELED);
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace kvtier::internal
