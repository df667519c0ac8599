// `kvtier config check FILE`: validates a kv_connector_extra_config file the
// way the store will read it, and prints the effective configuration (and,
// on stderr, the values that are kvtier's defaults where vLLM's differ).
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/cli_text.h"
#include "commands.h"
#include "kvtier/config.h"

namespace kvtier::internal {

void RegisterConfigCommand(CLI::App* app, CliContext* ctx) {
  CLI::App* config = app->add_subcommand("config", "Inspect kv_connector_extra_config files");
  config->require_subcommand(1);
  CLI::App* check = config->add_subcommand(
      "check", "Validate a config and print it with every default filled in (exit 2 when invalid)");
  auto path = std::make_shared<std::string>();
  auto gpu_block_size = std::make_shared<uint32_t>(16);
  check->add_option("FILE", *path, "The JSON file ('-' is not accepted)")->required();
  check->add_option("--gpu-block-size", *gpu_block_size, "The engine's GPU block size in tokens")
      ->capture_default_str();
  check->callback([path, gpu_block_size, ctx] {
    Result<OffloadConfig> cfg = LoadOffloadConfigFile(*path, EngineContext{*gpu_block_size});
    if (!cfg.ok()) {
      // The status already names the file and the offending key.
      PrintError("config check", cfg.status().ToString());
      ctx->exit_code = cfg.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
      return;
    }
    std::cout << OffloadConfigToJson(*cfg) << "\n";
    // Where kvtier's default departs from vLLM's, say so: the same file means
    // something else to vLLM's own tier.
    for (const std::string& note : KvtierDefaultNotes(*cfg)) {
      PrintError("config check", "note: " + note);
    }
    ctx->exit_code = 0;
  });
}

}  // namespace kvtier::internal
