// Proves that SglangTier never lets two calls in flight at once use the
// same host memory where one of them writes it: SGLang's prefetch I/O and
// backup threads call concurrently, and a load still running into a page's
// pieces would overwrite what a second load (answered true) put there, or
// what a store is reading. Method: a FUSE root (tests/support/faultfs) holds
// the reads of page A's file, so a load of A into memory M is in flight for
// certain (the daemon counts the held call); meanwhile a load of page B into
// M and a store from M answer false and leave M alone; once A's read is
// let through, A loads into M, and M is free for B again. Were memory
// claimed per call only, B's load would answer true and M then hold A's
// bytes: the test fails then.
#include <gtest/gtest.h>

#include <cstring>
#include <future>

#include "kvtier/sglang.h"
#include "support/faultfs_mount.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

constexpr testing::SglangShape kShape{4, 2, 512, 512, 1};  // 8192-byte pages
constexpr uint64_t kPage = 8192;

std::string PageKey(char c) { return std::string(64, c); }  // 64 lowercase hex: the file's own name

TEST(SglangOverlap, ACallInFlightKeepsItsMemoryFromOtherCalls) {
  if (const std::string why = testing::FaultFs::Unavailable(); !why.empty()) GTEST_SKIP() << why;
  testing::TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto mount, testing::FaultFs::Mount((dir.path() / "backing").string(),
                                                           (dir.path() / "mnt").string()));
  SglangTierOptions o;
  o.tier.root_dir = mount->mountpoint();
  o.spec = testing::SglangSpec("kvtier-test/overlap", kShape);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SglangTier> store, SglangTier::Open(o));
  std::vector<uint8_t> a(kPage, 0xaa), b(kPage, 0xbb), m(kPage, 0);
  const std::string ka = PageKey('a'), kb = PageKey('b'), kc = PageKey('c');
  const std::vector<std::string_view> keys_a{ka}, keys_b{kb}, keys_c{kc}, keys_ab{ka, kb};
  const std::vector<SglangConstPagePieces> both{{std::span<const uint8_t>(a)}, {std::span<const uint8_t>(b)}};
  ASSERT_EQ(store->Store(keys_ab, both), (std::vector<bool>{true, true}));

  ASSERT_OK(mount->Hang("read", ka));
  const std::vector<SglangPagePieces> into_m{{std::span<uint8_t>(m)}};
  const std::vector<SglangConstPagePieces> from_m{{std::span<const uint8_t>(m)}};
  auto load_a = std::async(std::launch::async, [&] { return store->Load(keys_a, into_m); });
  ASSERT_TRUE(mount->WaitHung(1, 10000)) << "the load of page A never reached its read";
  EXPECT_EQ(store->Load(keys_b, into_m), std::vector<bool>{false}) << "a second load into memory a load writes";
  EXPECT_EQ(store->Store(keys_c, from_m), std::vector<bool>{false})
      << "a store of memory a load writes";
  ASSERT_OK(mount->Release());
  EXPECT_EQ(load_a.get(), std::vector<bool>{true});
  EXPECT_EQ(m, a);
  EXPECT_EQ(store->Load(keys_b, into_m), std::vector<bool>{true}) << "the memory stayed claimed";
  EXPECT_EQ(m, b);
  store->Close();
}

}  // namespace
}  // namespace kvtier
