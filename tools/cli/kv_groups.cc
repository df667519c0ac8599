// The KV-cache groups of --layers / --kv-groups (kv_groups.h).
#include "cli/kv_groups.h"

#include <filesystem>
#include <set>

#include "cli/json_input.h"
#include "util/read_file.h"
#include "util/utf8.h"

namespace kvtier::internal {
namespace {

using nlohmann::json;

Result<std::vector<std::string>> ParseLayerNames(const json& group, const std::string& at,
                                                 std::set<std::string>* seen) {
  auto names = group.find("layer_names");
  if (names == group.end()) return InvalidArgument(at + ": missing key 'layer_names'");
  if (!names->is_array() || names->empty()) {
    return InvalidArgument(at + ".layer_names: expected a non-empty list of layer names");
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < names->size(); ++i) {
    const json& n = (*names)[i];
    const std::string where = at + ".layer_names[" + std::to_string(i) + "]";
    if (!n.is_string() || n.get<std::string>().empty()) {
      return InvalidArgument(where + ": expected a non-empty string");
    }
    const std::string name = n.get<std::string>();
    if (!IsValidUtf8(name)) return InvalidArgument(where + ": not valid UTF-8");
    if (!seen->insert(name).second) {
      return InvalidArgument(where + ": layer '" + name + "' is already in a group (a layer belongs to one group)");
    }
    out.push_back(name);
  }
  return out;
}

Result<KvCacheGroupSpec> ParseGroup(const json& group, const std::string& at, std::set<std::string>* seen) {
  if (!group.is_object()) {
    return InvalidArgument(at + ": expected an object {\"tokens_per_block\": int, \"layer_names\": [str, ...]}");
  }
  for (auto it = group.begin(); it != group.end(); ++it) {
    if (it.key() != "tokens_per_block" && it.key() != "layer_names") {
      return InvalidArgument(at + ": unknown key '" + it.key() + "' (valid: layer_names, tokens_per_block)");
    }
  }
  auto tpb = group.find("tokens_per_block");
  if (tpb == group.end()) return InvalidArgument(at + ": missing key 'tokens_per_block'");
  KvCacheGroupSpec spec;
  KVTIER_ASSIGN_OR_RETURN(spec.tokens_per_block, JsonToInt64(*tpb, at + ".tokens_per_block"));
  if (spec.tokens_per_block < 1) {
    return InvalidArgument(at + ".tokens_per_block: must be at least 1, got " + std::to_string(spec.tokens_per_block));
  }
  KVTIER_ASSIGN_OR_RETURN(spec.layer_names, ParseLayerNames(group, at, seen));
  return spec;
}

Status CheckBlockSizes(const std::vector<KvCacheGroupSpec>& groups, std::string_view what, uint32_t gpu_block_tokens) {
  for (size_t i = 0; i < groups.size(); ++i) {
    if (groups[i].tokens_per_block == gpu_block_tokens) continue;
    return InvalidArgument(std::string(what) + "[" + std::to_string(i) + "].tokens_per_block is " +
                           std::to_string(groups[i].tokens_per_block) + ", but this command simulates a GPU block of " +
                           std::to_string(gpu_block_tokens) + " tokens; every group must use it");
  }
  return Status::Ok();
}

}  // namespace

KvCacheGroupSpec FullAttentionGroup(uint32_t layers, uint32_t tokens_per_block) {
  KvCacheGroupSpec group;
  group.tokens_per_block = tokens_per_block;
  for (uint32_t i = 0; i < layers; ++i) group.layer_names.push_back("model.layers." + std::to_string(i) + ".self_attn.attn");
  return group;
}

Result<std::vector<KvCacheGroupSpec>> ParseKvGroupsJson(std::string_view text, std::string_view what) {
  KVTIER_ASSIGN_OR_RETURN(json doc, ParseJsonKeepingBigInts(text, what));
  if (!doc.is_array() || doc.empty()) {
    return InvalidArgument(std::string(what) +
                           ": expected a non-empty JSON list of {\"tokens_per_block\": int, \"layer_names\": [str, ...]}");
  }
  std::vector<KvCacheGroupSpec> groups;
  std::set<std::string> seen;
  for (size_t i = 0; i < doc.size(); ++i) {
    KVTIER_ASSIGN_OR_RETURN(KvCacheGroupSpec g, ParseGroup(doc[i], std::string(what) + "[" + std::to_string(i) + "]", &seen));
    groups.push_back(std::move(g));
  }
  return groups;
}

Result<std::vector<KvCacheGroupSpec>> KvGroupsFromFlags(const KvGroupFlags& flags, uint32_t gpu_block_tokens) {
  if (flags.layers != 0 && !flags.groups_file.empty()) {
    return InvalidArgument("give --layers or --kv-groups, not both");
  }
  if (flags.groups_file.empty()) {
    const uint32_t layers = flags.layers == 0 ? kDefaultKvLayers : flags.layers;
    if (layers > kKvLayersMax) {
      return InvalidArgument("--layers must be in [1, " + std::to_string(kKvLayersMax) + "], got " + std::to_string(layers));
    }
    return std::vector<KvCacheGroupSpec>{FullAttentionGroup(layers, gpu_block_tokens)};
  }
  const std::string what = "--kv-groups " + flags.groups_file;
  KVTIER_ASSIGN_OR_RETURN(std::string text, ReadFileCapped(flags.groups_file, "--kv-groups file", kKvGroupsFileBytesMax));
  KVTIER_ASSIGN_OR_RETURN(std::vector<KvCacheGroupSpec> groups, ParseKvGroupsJson(text, what));
  KVTIER_RETURN_IF_ERROR(CheckBlockSizes(groups, what, gpu_block_tokens));
  return groups;
}

void ApplyKvGroups(std::vector<KvCacheGroupSpec> groups, NamespaceSpec* spec) {
  // One block size for every group, so their GCD (vLLM's tokens_per_hash) is it.
  spec->tokens_per_hash = groups.empty() ? spec->tokens_per_hash : groups.front().tokens_per_block;
  // FileMapper grants the agnostic namespace only to a single full-attention
  // group; with several it writes "parallel_agnostic": false (TP1: sizes 1).
  spec->parallel_agnostic = groups.size() == 1;
  spec->kv_cache_groups = std::move(groups);
}

std::vector<std::string> KvGroupArgs(const KvGroupFlags& flags) {
  std::vector<std::string> args;
  if (flags.layers != 0) args.push_back("--layers=" + std::to_string(flags.layers));
  if (!flags.groups_file.empty()) {
    // Absolute, in case the child runs elsewhere.
    std::error_code ec;
    const std::filesystem::path abs = std::filesystem::absolute(flags.groups_file, ec);
    args.push_back("--kv-groups=" + (ec ? flags.groups_file : abs.string()));
  }
  return args;
}

}  // namespace kvtier::internal
