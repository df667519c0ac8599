// Proves gc's candidate buffer (src/ops/gc_candidates.h) keeps its bound and
// its promise whatever the number of blocks offered: it never holds more than
// budget / kEntryBytes entries; offered from several threads at once it holds
// exactly the oldest of them (use time, then name), oldest first, and says
// whether anything was dropped; and each entry gives back the very path,
// inode and bytes of the block offered (both hash lengths, any group).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <thread>

#include "ops/gc_candidates.h"
#include "support/test_support.h"

namespace kvtier::internal {
namespace {

// A clock past every use time offered: the order is the use times' own.
constexpr int64_t kNoFuture = INT64_MAX;

ScannedFile RandomBlock(std::mt19937_64& rng, uint64_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex(rng() % 2 == 0 ? 64 : 32, '0');
  for (char& c : hex) c = kDigits[rng() % 16];
  const uint64_t group = rng() % 3 == 0 ? rng() % 100000 : 0;
  ScannedFile f;
  f.rel = "m_0123456789a" + std::to_string(rng() % 3) + "_r" + std::to_string(rng() % 4) + "/" + hex.substr(0, 3) + "/" +
          hex.substr(3, 2) + "_g" + std::to_string(group) + "/" + hex + ".bin";
  f.mtime = static_cast<int64_t>(rng() % 100000);  // ties in one second are common
  f.atime = f.mtime - static_cast<int64_t>(rng() % 2);
  f.bytes = f.size = 4096 + rng() % 4096;
  f.ino = n + 1, f.dev = 77;
  f.mode = S_IFREG | 0644;
  return f;
}

// Offers n random blocks from `threads` threads; returns them.
std::vector<ScannedFile> OfferMany(CandidateBuffer* buffer, uint64_t seed, size_t n, int threads) {
  std::mt19937_64 rng(seed);
  std::vector<ScannedFile> all;
  for (size_t i = 0; i < n; ++i) all.push_back(RandomBlock(rng, i));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (size_t i = static_cast<size_t>(t); i < n; i += static_cast<size_t>(threads)) buffer->Offer(all[i], kNoFuture);
    });
  }
  for (auto& th : pool) th.join();
  return all;
}

TEST(CandidateBufferTest, HoldsExactlyTheOldestWithinItsBudget) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::printf("%zu bytes per entry: 32 MiB holds %zu blocks\n", CandidateBuffer::kEntryBytes,
              static_cast<size_t>((uint64_t{32} << 20) / CandidateBuffer::kEntryBytes));
  for (const size_t n : {size_t{100}, size_t{1000}, size_t{50000}}) {
    CandidateBuffer buffer(1000 * CandidateBuffer::kEntryBytes + 5);
    std::vector<ScannedFile> all = OfferMany(&buffer, seed + n, n, 4);
    const std::vector<ScannedFile> by_ino = all;  // by_ino[ino - 1]
    EXPECT_EQ(buffer.entries_max(), 1000u);
    EXPECT_EQ(buffer.entries(), std::min<size_t>(n, 1000)) << "n " << n;
    EXPECT_EQ(buffer.dropped(), n > 1000) << "n " << n;
    EXPECT_TRUE(buffer.oldest_set());
    const uint64_t held_bytes = buffer.held_bytes();
    const std::vector<CandidateBuffer::Entry> oldest = buffer.TakeOldestFirst();
    // The exact sort by use time; within one second any order, so compare activity and the set.
    std::sort(all.begin(), all.end(), [](const ScannedFile& a, const ScannedFile& b) { return a.activity() < b.activity(); });
    uint64_t sum = 0;
    for (size_t i = 0; i < oldest.size(); ++i) {
      const ScannedFile f = buffer.File(oldest[i]);
      EXPECT_EQ(f.activity(), all[i].activity()) << "entry " << i << " of " << n;
      EXPECT_EQ(by_ino[f.ino - 1].rel, f.rel) << "the path rebuilt";
      EXPECT_EQ(by_ino[f.ino - 1].bytes, f.bytes);
      EXPECT_EQ(f.dev, 77u);
      EXPECT_EQ(buffer.DirOf(oldest[i]), SplitRel(f.rel).first);
      sum += f.bytes;
    }
    EXPECT_EQ(sum, held_bytes);
  }
}

TEST(CandidateBufferTest, TheBoundHoldsWhateverTheNumberOffered) {
  CandidateBuffer buffer(64 * CandidateBuffer::kEntryBytes);
  std::mt19937_64 rng(testing::TestSeed());
  for (size_t i = 0; i < 300000; ++i) buffer.Offer(RandomBlock(rng, i), kNoFuture);
  EXPECT_EQ(buffer.entries(), 64u);
  EXPECT_TRUE(buffer.dropped());
  CandidateBuffer none(CandidateBuffer::kEntryBytes - 1);
  none.Offer(RandomBlock(rng, 0), kNoFuture);
  EXPECT_EQ(none.entries(), 0u);
  EXPECT_TRUE(none.dropped()) << "a buffer that holds nothing never claims to hold everything";
}

TEST(CandidateBufferTest, NamesItCannotRebuildAreDroppedNotGuessed) {
  CandidateBuffer buffer(1 << 20);
  ScannedFile f;
  const std::string hex = std::string(64, 'a').replace(0, 5, "abcde");
  f.rel = "m_0123456789ab_r0/abd/de_g0/" + hex + ".bin";  // <hhh> is not the hash's: a path File() would not give back
  buffer.Offer(f, kNoFuture);
  f.rel = "m_0123456789ab_r0/abc/de_g007/" + hex + ".bin";  // "_g007": not Shard2Name's
  buffer.Offer(f, kNoFuture);
  EXPECT_EQ(buffer.entries(), 0u);
  EXPECT_TRUE(buffer.dropped());
  EXPECT_FALSE(buffer.oldest_set()) << "an old block it could not hold: gc must walk again";
}

}  // namespace
}  // namespace kvtier::internal
