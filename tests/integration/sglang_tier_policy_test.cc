// Proves the policy kvtier's SGLang adapter holds (include/kvtier/sglang.h),
// so kvtier.sglang stays a translation: SglangConfigKeyKind puts every key
// of the fs tier's own table (FsTierConfigKeys: max_bytes among them, type
// and module_path not) into the tier's config, model_path and
// model_revision into the namespace, SGLang's own keys aside, anything else
// as unknown.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kvtier/config.h"
#include "kvtier/sglang.h"

namespace kvtier {
namespace {

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

}  // namespace
}  // namespace kvtier
