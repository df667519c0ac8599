// Proves the policy kvtier's SGLang adapter holds (include/kvtier/sglang.h),
// so kvtier.sglang stays a translation:
//  * SglangConfigKeyKind puts every key of the fs tier's own table
//    (FsTierConfigKeys: max_bytes among them, type and module_path not) into
//    the tier's config, model_path and model_revision into the namespace,
//    SGLang's own keys aside, anything else as unknown;
//  * Open refuses a store_queue_bytes_max below one page, naming the key,
//    and takes one of exactly one page;
//  * a store call of more pages than half the queue holds is stored whole,
//    as several jobs (the fs tier would drop one such job), and after a job
//    with a failure the later pages are false and never written.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kvtier/config.h"
#include "kvtier/sglang.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

// 4 tokens x 2 layers x (512 + 512) bytes: 8192 bytes a page.
constexpr testing::SglangShape kShape{4, 2, 512, 512, 1};
constexpr uint64_t kPage = 4 * 2 * (512 + 512);

TEST(SglangConfigKeyKind, FsTableKeysGoToTheTierAndTheRestAsSglangSays) {
  const std::vector<std::string_view> fs = FsTierConfigKeys();
  ASSERT_NE(std::find(fs.begin(), fs.end(), "max_bytes"), fs.end());
  ASSERT_NE(std::find(fs.begin(), fs.end(), "root_dir"), fs.end());
  EXPECT_EQ(std::find(fs.begin(), fs.end(), "type"), fs.end());
  EXPECT_EQ(std::find(fs.begin(), fs.end(), "module_path"), fs.end());
  for (std::string_view key : fs) EXPECT_EQ(SglangConfigKeyKind(key), SglangConfigKey::kFsTier) << key;
  EXPECT_EQ(SglangConfigKeyKind("model_path"), SglangConfigKey::kNamespace);
  EXPECT_EQ(SglangConfigKeyKind("model_revision"), SglangConfigKey::kNamespace);
  for (std::string_view key : {"backend_name", "module_path", "class_name", "interface_v1", "prefetch_threshold",
                               "tp_lcm_size", "use_shared_cp_storage"}) {
    EXPECT_EQ(SglangConfigKeyKind(key), SglangConfigKey::kSglang) << key;
  }
  EXPECT_EQ(SglangConfigKeyKind("metadata_ttl"), SglangConfigKey::kUnknown);
  EXPECT_EQ(SglangConfigKeyKind("type"), SglangConfigKey::kUnknown);
}

class SglangTierPolicyTest : public ::testing::Test {
 protected:
  SglangTierOptions Options(uint64_t queue_bytes) const {
    SglangTierOptions o;
    o.tier.root_dir = root_.path().string();
    o.tier.store_queue_bytes_max = queue_bytes;
    o.spec = testing::SglangSpec("org/policy", kShape);
    return o;
  }

  // n pages of distinct bytes; page `short_page` (if < n) one byte short.
  void MakePages(size_t n, size_t short_page = SIZE_MAX) {
    bytes_.assign(n, {});
    for (size_t i = 0; i < n; ++i) bytes_[i].assign(i == short_page ? kPage - 1 : kPage, static_cast<uint8_t>(i + 1));
    for (size_t i = 0; i < n; ++i) {
      keys_.push_back(std::string(63, '0') + static_cast<char>('a' + i));
      pages_.push_back({std::span<const uint8_t>(bytes_[i])});
    }
    views_.assign(keys_.begin(), keys_.end());
  }

  testing::TempDir root_;
  std::vector<std::vector<uint8_t>> bytes_;
  std::vector<std::string> keys_;
  std::vector<std::string_view> views_;
  std::vector<SglangConstPagePieces> pages_;
};

TEST_F(SglangTierPolicyTest, AQueueBelowOnePageIsRefusedNamingTheKey) {
  auto refused = SglangTier::Open(Options(kPage - 1));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("store_queue_bytes_max"), std::string::npos) << refused.status().ToString();
  auto one_page = SglangTier::Open(Options(kPage));
  ASSERT_TRUE(one_page.ok()) << one_page.status().ToString();
  MakePages(3);
  EXPECT_EQ((*one_page)->Store(views_, pages_), std::vector<bool>(3, true));  // one page a job
}

TEST_F(SglangTierPolicyTest, ALargeStoreIsStoredAsSeveralJobs) {
  auto store = SglangTier::Open(Options(4 * kPage));  // 2 pages a job; 7 in one job would be dropped
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  MakePages(7);
  EXPECT_EQ((*store)->Store(views_, pages_), std::vector<bool>(7, true));
  const FsTierMetrics m = (*store)->Metrics();
  EXPECT_EQ(m.rows_stored, 7u);
  EXPECT_EQ(m.rows_dropped, 0u);
  EXPECT_EQ((*store)->ExistsPrefix(views_), 7u);
}

TEST_F(SglangTierPolicyTest, PagesAfterAFailedJobAreFalseAndNotWritten) {
  auto store = SglangTier::Open(Options(4 * kPage));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  MakePages(6, /*short_page=*/1);  // the first job (pages 0, 1) fails on page 1
  EXPECT_EQ((*store)->Store(views_, pages_), std::vector<bool>({true, false, false, false, false, false}));
  EXPECT_EQ((*store)->Metrics().rows_stored, 1u);
  const std::vector<std::string_view> later(views_.begin() + 2, views_.end());
  EXPECT_EQ((*store)->ExistsPrefix(later), 0u);
}

}  // namespace
}  // namespace kvtier
