// The --layers / --kv-groups flags shared by replay, bench fs and bench tiers.
#include <CLI/CLI.hpp>
#include <string>

#include "cli/kv_groups.h"
#include "commands.h"

namespace kvtier::internal {

void AddKvGroupFlags(CLI::App* cmd, KvGroupFlags* flags) {
  auto* layers = cmd->add_option(
                        "--layers", flags->layers,
                        "The model's attention layers: one full-attention KV-cache group of N layers named "
                        "model.layers.{i}.self_attn.attn, as vLLM names Llama's (default: " +
                            std::to_string(kDefaultKvLayers) + ", Llama-3.1-8B); names the fs namespace")
                     ->check(CLI::Range(uint32_t{1}, kKvLayersMax));
  cmd->add_option("--kv-groups", flags->groups_file,
                  "The model's KV-cache groups from a JSON file: [{\"tokens_per_block\": 16, \"layer_names\": "
                  "[\"...\"]}, ...], as in vLLM's config.json (every group uses the simulated GPU block of 16 "
                  "tokens; several groups give a namespace that is not parallel-agnostic)")
      ->excludes(layers);
}

}  // namespace kvtier::internal
