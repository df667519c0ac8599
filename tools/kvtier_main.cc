// kvtier: the operators' CLI. Subcommands are thin wrappers over the
// functions in tools/cli/, tools/bench/ and tools/replay/; this file only
// wires flags to them.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <string>

#include "cli/cli_text.h"
#include "commands.h"
#include "kvtier/version.h"

namespace {

// CLI11 would name an unknown command only as an extra argument: say which
// commands there are instead. False (after printing) when argv[1] is none.
bool KnownCommand(CLI::App& app, int argc, char** argv) {
  if (argc <= 1 || argv[1][0] == '-') return true;
  std::string valid;
  bool known = false;
  for (const CLI::App* sub : app.get_subcommands({})) {
    known = known || sub->get_name() == argv[1];
    valid += (valid.empty() ? "" : ", ") + sub->get_name();
  }
  if (!known) {
    kvtier::internal::PrintError("", std::string("unknown command '") + argv[1] + "' (valid: " + valid + ")");
    std::fprintf(stderr, "Run 'kvtier --help' for usage.\n");
  }
  return known;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvtier: a multi-tier KV-cache block store compatible with vLLM's fs tier", "kvtier"};
  app.set_version_flag("--version", std::string("kvtier ") + kvtier::Version());
  app.require_subcommand(1);
  app.fallthrough(false);
  kvtier::internal::CliContext ctx;
  kvtier::internal::RegisterHashCommand(&app, &ctx);
  kvtier::internal::RegisterConfigCommand(&app, &ctx);
  kvtier::internal::RegisterBenchCommand(&app, &ctx);
  kvtier::internal::RegisterOpsCommands(&app, &ctx);
  kvtier::internal::RegisterReplayCommand(&app, &ctx);
  if (!KnownCommand(app, argc, argv)) return 2;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Usage errors exit 2, as getopt-style tools do; CLI11's own codes differ.
    // The message may quote an argument: escaped, as every message is.
    kvtier::internal::PrintError("", e.what());
    std::fprintf(stderr, "Run 'kvtier --help' for usage.\n");
    return 2;
  }
  return ctx.exit_code;
}
