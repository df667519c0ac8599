// `kvtier bench`: flag wiring over the benchmark functions in src/cli/.
#include <CLI/CLI.hpp>

#include "commands.h"

namespace kvtier::internal {

void RegisterBenchCommand(CLI::App* app, CliContext* ctx) {
  CLI::App* bench = app->add_subcommand("bench", "Measure kvtier's throughput and latency");
  bench->require_subcommand(1);
  (void)ctx;  // `kvtier bench fs` is added by issue 3's benchmark work
}

}  // namespace kvtier::internal
