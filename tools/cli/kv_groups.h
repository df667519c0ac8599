// The model's KV-cache groups for the commands that write an fs namespace
// (`kvtier replay`, `kvtier bench fs`, `kvtier bench tiers`): one helper for
// their --layers / --kv-groups flags, so that each writes the namespace
// (directory digest and config.json) that vLLM writes for the same model.
//
// vLLM (build_offloading_config, then FileMapper.from_offloading_spec with
// parallel_agnostic=True, as its fs tier calls it) records one
// {"tokens_per_block", "layer_names"} entry per KV-cache group. A model with
// exactly one full-attention group on one GPU gets the parallel-agnostic
// namespace (no "parallel_agnostic" key); a model with several groups does
// not (the key is written as false, sizes 1, rank 0). tokens_per_hash is the
// GCD of the groups' block sizes, which is the block size itself here:
// kvtier's commands simulate one GPU block size, so every group must use it.
//
// Groups are taken to be full attention (a single group from --kv-groups
// gets the agnostic namespace); kvtier stores its chunks under group 0 only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/layout.h"
#include "kvtier/result.h"

namespace kvtier::internal {

// vLLM's default GPU block size (cache_config.block_size), which the bench
// commands simulate.
inline constexpr uint32_t kVllmDefaultBlockTokens = 16;
// The default when neither flag is given: Llama-3.1-8B, one full-attention
// group of 32 layers.
inline constexpr uint32_t kDefaultKvLayers = 32;
// --layers accepts 1..kKvLayersMax; a --kv-groups file is at most
// kKvGroupsFileBytesMax bytes.
inline constexpr uint32_t kKvLayersMax = 4096;
inline constexpr size_t kKvGroupsFileBytesMax = 1 << 20;

// The flags as the user gave them (kept to forward them to child processes).
struct KvGroupFlags {
  uint32_t layers = 0;      // --layers N; 0: not given
  std::string groups_file;  // --kv-groups FILE.json; empty: not given
};

// One full-attention group of `layers` layers named as vLLM names Llama's
// ("model.layers.{i}.self_attn.attn").
KvCacheGroupSpec FullAttentionGroup(uint32_t layers, uint32_t tokens_per_block);

// Parses a --kv-groups document: a non-empty JSON list of
// {"tokens_per_block": int, "layer_names": [str, ...]}, each layer named once.
// kInvalidArgument naming `what` and the offending element.
Result<std::vector<KvCacheGroupSpec>> ParseKvGroupsJson(std::string_view text, std::string_view what);

// The groups the flags describe (the default set when neither is given).
// kInvalidArgument when both are given, --layers is out of range, the file is
// unreadable, too large or malformed, or a group's tokens_per_block is not
// `gpu_block_tokens` (the command's simulated GPU block size).
Result<std::vector<KvCacheGroupSpec>> KvGroupsFromFlags(const KvGroupFlags& flags, uint32_t gpu_block_tokens);

// What vLLM derives from the groups: kv_cache_groups, tokens_per_hash (their
// common block size) and the effective parallel-agnostic flag (one group).
// `groups` must be non-empty and share one tokens_per_block.
void ApplyKvGroups(std::vector<KvCacheGroupSpec> groups, NamespaceSpec* spec);

// The flags again, for the argv of a child process ("--layers=N",
// "--kv-groups=FILE", or nothing for the default).
std::vector<std::string> KvGroupArgs(const KvGroupFlags& flags);

}  // namespace kvtier::internal
