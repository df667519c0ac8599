// SglangConfigKeyKind: how kvtier sorts SGLang's extra_config keys. The fs
// tier's keys come from the config parser's own table (FsTierConfigKeys), so
// a key added there reaches SGLang users without a second list to update.
#include <algorithm>
#include <array>
#include <string_view>
#include <vector>

#include "kvtier/config.h"
#include "kvtier/sglang.h"

namespace kvtier {
namespace {

// FORMAT.md's optional SGLang namespace fields, beside what SGLang's config gives.
constexpr std::array<std::string_view, 2> kNamespaceKeys = {"model_path", "model_revision"};

// Keys SGLang itself reads from --hicache-storage-backend-extra-config (the
// factory, the controller, HiRadixCache). Some are removed before a backend
// sees them and some are not, and that changes between SGLang versions.
constexpr std::array<std::string_view, 11> kSglangKeys = {
    "backend_name", "module_path", "class_name", "interface_v1", "prefetch_threshold", "prefetch_timeout_base",
    "prefetch_timeout_per_ki_token", "prefetch_timeout_max", "hicache_storage_pass_prefix_keys", "tp_lcm_size",
    "use_shared_cp_storage",
};

template <class Names>
bool Among(const Names& names, std::string_view key) {
  return std::find(names.begin(), names.end(), key) != names.end();
}

}  // namespace

SglangConfigKey SglangConfigKeyKind(std::string_view key) {
  // SGLang's module_path (the backend's Python module) shadows the fs table's
  // vLLM module_path, which FsTierConfigKeys leaves out anyway.
  static const std::vector<std::string_view> fs_keys = FsTierConfigKeys();
  if (Among(fs_keys, key)) return SglangConfigKey::kFsTier;
  if (Among(kNamespaceKeys, key)) return SglangConfigKey::kNamespace;
  if (Among(kSglangKeys, key)) return SglangConfigKey::kSglang;
  return SglangConfigKey::kUnknown;
}

}  // namespace kvtier
