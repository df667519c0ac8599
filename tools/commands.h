// Registration of the CLI's subcommands. Each Register* adds a subcommand to
// the app whose callback runs the command and stores its exit status in ctx.
#pragma once

namespace CLI {
class App;
}

namespace kvtier::internal {

struct KvGroupFlags;

struct CliContext {
  int exit_code = 0;
};

// kvtier hash: block hashes, offload keys and file paths of a prompt.
void RegisterHashCommand(CLI::App* app, CliContext* ctx);
// kvtier config check: validate a kv_connector_extra_config file.
void RegisterConfigCommand(CLI::App* app, CliContext* ctx);
// kvtier bench: throughput and latency figures (bench fs: the filesystem tier).
void RegisterBenchCommand(CLI::App* app, CliContext* ctx);
// kvtier du, fsck, gc: keeping a shared root_dir healthy.
void RegisterOpsCommands(CLI::App* app, CliContext* ctx);
// kvtier doctor: what a volume can do and what kvtier's "auto" picks there.
void RegisterDoctorCommand(CLI::App* app, CliContext* ctx);
// kvtier replay: a serving trace through the whole stack.
void RegisterReplayCommand(CLI::App* app, CliContext* ctx);

// --layers N and --kv-groups FILE.json (the model's KV-cache groups, which
// name the fs namespace) on a command that writes one (tools/cli/kv_groups.h).
void AddKvGroupFlags(CLI::App* cmd, KvGroupFlags* flags);
// --seal-key-group-read on a command that reads --seal-key-file (FORMAT.md L174).
void AddSealKeyGroupReadFlag(CLI::App* cmd, bool* allow);

}  // namespace kvtier::internal
