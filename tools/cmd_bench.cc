// `kvtier bench`: flag wiring over the benchmark functions in tools/bench/.
#include <CLI/CLI.hpp>
#include <climits>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "bench/bench_fs.h"
#include "bench/bench_tiers.h"
#include "cli/cli_text.h"
#include "cli/duration.h"
#include "cli/ops_events.h"
#include "commands.h"
#include "util/name_escape.h"

namespace kvtier::internal {
namespace {

struct BenchFsFlags {
  BenchFsOptions options;
  std::string backend = "auto";
  bool no_direct = false;
  bool no_checksum = false;
  std::string inline_metadata = "auto";
  std::string bounce_loads = "auto";
  std::string io_timeout = std::to_string(FsTierOptions{}.io_timeout_ms) + "ms";  // the tier's default
  EventsFlags events;  // endpoint and replay_endpoint; the rest keep their defaults
  int64_t events_hwm = KvEventsConfig{}.hwm;
  bool json = false;
};

// The named choices, which CLI11 has checked.
void ApplyChoiceFlags(const BenchFsFlags& f, BenchFsOptions* options) {
  BenchFsOptions& o = *options;
  static const std::map<std::string, IoBackendKind> kBackends = {
      {"auto", IoBackendKind::kAuto},
      {"uring", IoBackendKind::kUring},
      {"syscall", IoBackendKind::kSyscall}};
  o.backend = kBackends.at(f.backend);
  o.o_direct = !f.no_direct;
  o.checksum_blocks = !f.no_checksum;
  static const std::map<std::string, InlineMetadata> kInline = {
      {"auto", InlineMetadata::kAuto}, {"on", InlineMetadata::kOn}, {"off", InlineMetadata::kOff}};
  o.inline_metadata = kInline.at(f.inline_metadata);
  static const std::map<std::string, BounceLoads> kBounce = {
      {"auto", BounceLoads::kAuto}, {"on", BounceLoads::kOn}, {"off", BounceLoads::kOff}};
  o.bounce_loads = kBounce.at(f.bounce_loads);
}

// The run's options from the flags; kInvalidArgument (usage) naming the flag.
Result<BenchFsOptions> BenchFsOptionsOf(const BenchFsFlags& f) {
  BenchFsOptions o = f.options;
  ApplyChoiceFlags(f, &o);
  // The tier keeps its deadline in 32 bits of milliseconds (49.7 days).
  Result<uint64_t> io_timeout_ms = ParseDurationMs(f.io_timeout, UINT32_MAX);
  if (!io_timeout_ms.ok()) return InvalidArgument("--io-timeout: " + io_timeout_ms.status().message());
  o.io_timeout_ms = static_cast<uint32_t>(*io_timeout_ms);
  if (!f.events.endpoint.empty()) {
    KVTIER_ASSIGN_OR_RETURN(o.kv_events_config, EventsConfigOf(f.events, o.root));
    o.kv_events_config.hwm = f.events_hwm;
  }
  return o;
}

int RunBenchFsCommand(const BenchFsFlags& f) {
  Result<BenchFsOptions> o = BenchFsOptionsOf(f);
  if (!o.ok()) {
    PrintError("bench fs", o.status().message());
    return 2;
  }
  Result<BenchFsResult> result = RunBenchFs(*o);
  // A kv_events_config the tier's open refused: the --events-* flag's value.
  if (!result.ok() && result.status().message().starts_with("kv_events_config.")) {
    PrintError("bench fs", NameTheEventsFlag(result.status()).message());
    return 2;
  }
  if (!result.ok()) {
    PrintError("bench fs", result.status().ToString());
    return result.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (f.json) {
    std::cout << JsonOutput(BenchFsJson(*result));
  } else {
    std::cout << FormatBenchFs(*result);
  }
  if (!result->ok()) {
    std::fprintf(stderr, "kvtier bench fs: %llu of %llu rows did not round-trip%s%s\n",
                 static_cast<unsigned long long>(result->rows - result->rows_verified),
                 static_cast<unsigned long long>(result->rows),
                 result->first_error.empty() ? "" : "; first: ", EscapeUnprintable(result->first_error).c_str());
    return 1;
  }
  return 0;
}

// The model's KV-cache groups and blocks per file, and the tier's kv events (what publishing
// every store costs: bench/kv_events_cost.sh).
void AddBenchFsTierFlags(CLI::App* cmd, BenchFsFlags* f) {
  AddKvGroupFlags(cmd, &f->options.kv_groups);
  cmd->add_option(
         "--blocks-per-file", f->options.blocks_per_file,
         "Blocks a file holds (the namespace's blocks_per_file); above 1 each store is given its "
         "blocks' hashes and records them (FORMAT.md L197)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  CLI::Option* endpoint = cmd->add_option(
      "--events-endpoint", f->events.endpoint,
      "Turn the tier's kv_events_config on: every stored row publishes vLLM's BlockStored on a ZMQ PUB socket "
      "here (bound when it holds * or :: or is ipc:// or inproc://, else connected; docs/kv-events.md)");
  cmd->add_option("--events-replay-endpoint", f->events.replay_endpoint,
                  "With --events-endpoint: the tier's replay_endpoint (a ROUTER socket, bound)")
      ->needs(endpoint);
  cmd->add_option("--events-hwm", f->events_hwm,
                  "With --events-endpoint: the PUB socket's high-water mark in messages (kv_events_config.hwm; "
                  "0: unlimited)")
      ->check(CLI::Range(int64_t{0}, int64_t{INT_MAX}))  // ZeroMQ's int
      ->capture_default_str()
      ->needs(endpoint);
}

void RegisterBenchFs(CLI::App* bench, CliContext* ctx) {
  auto flags = std::make_shared<BenchFsFlags>();
  BenchFsOptions& o = flags->options;
  CLI::App* cmd = bench->add_subcommand(
      "fs",
      "Store N rows into an fs tier under DIR, drop the page cache, load and verify them; "
      "GB/s, rows/s, p50/p99 latency and CPU s/GB per direction");
  cmd->add_option("--root", o.root, "An existing directory for the benchmark's namespace")->required();
  cmd->add_option("--row-bytes", o.row_bytes,
                  "Bytes per row / block file (a multiple of 4096; 1MiB, 2MiB accepted)")
      ->required()
      ->transform(CLI::AsSizeValue(false));
  cmd->add_option("--rows", o.rows, "Rows to store and load")->required();
  cmd->add_option("--queue-depth", o.queue_depth, "Rows in flight; also n_read_threads = n_write_threads")
      ->capture_default_str();
  cmd->add_option("--backend", flags->backend, "auto | uring | syscall")
      ->check(CLI::IsMember({"auto", "uring", "syscall"}))
      ->capture_default_str();
  cmd->add_flag("--mixed", o.mixed, "Also measure load latency under a saturating store stream");
  cmd->add_flag("--json", flags->json, "Machine-readable output");
  cmd->add_flag("--keep", o.keep, "Leave the benchmark's files in place");
  cmd->add_flag("--no-direct", flags->no_direct, "Buffered I/O (no O_DIRECT)");
  cmd->add_flag("--no-checksum", flags->no_checksum,
                "checksum_blocks: false (no CRC32C, no xattr), as vLLM's default");
  cmd->add_option("--seal-key-file", o.seal_key_file, "Seal the namespace with this key (AES-256-GCM, docs/sealed.md)");
  AddSealKeyGroupReadFlag(cmd, &o.seal_key_group_read);
  cmd->add_option("--inline-metadata", flags->inline_metadata,
                  "The tier's inline_metadata: auto | on | off (docs/config.md)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  cmd->add_option("--bounce-loads", flags->bounce_loads,
                  "The tier's bounce_loads: auto | on | off (docs/config.md): measures what the bounce rows cost")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of the keys and the row content")->capture_default_str();
  cmd->add_option("--batch", o.batch, "Rows per submitted job (latency is then per job)")
      ->capture_default_str();
  cmd->add_option("--poll-us", o.poll_us, "PollFinished interval when nothing has finished (us)")
      ->capture_default_str();
  cmd->add_option("--mixed-load-depth", o.mixed_load_depth, "Loads in flight during --mixed")
      ->capture_default_str();
  cmd->add_option("--mixed-rows", o.mixed_rows,
                  "Timed loads per --mixed sub-phase (at most half of --rows)")
      ->capture_default_str();
  cmd->add_option("--mixed-store-depth", o.mixed_store_depth,
                  "Store rows outstanding in the --mixed stream (0: twice --queue-depth)")
      ->capture_default_str();
  cmd->add_option("--io-timeout", flags->io_timeout,
                  "Deadline of every I/O: the tier's io_timeout_ms (seconds, e.g. 0.5 or 30, or with a unit: "
                  "500ms, 10s; 0: none)")
      ->capture_default_str();
  cmd->add_option("--stores-while-loading", o.stores_while_loading_max,
                  "Stores running at once while loads are active (the tier's stores_while_loading_max; 0: no cap)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  AddBenchFsTierFlags(cmd, flags.get());
  cmd->callback([flags, ctx] { ctx->exit_code = RunBenchFsCommand(*flags); });
}

struct BenchTiersFlags {
  BenchTiersOptions options;
  std::string phase = "all";  // hidden: "load" is the re-executed child
  bool json = false;
};

// The child of `bench tiers`: the load phase alone, its report on stdout.
int RunBenchTiersLoadPhase(const BenchTiersFlags& f) {
  Result<BenchTiersLoad> load = RunBenchTiersLoad(f.options);
  if (!load.ok()) {
    PrintError("bench tiers (load phase)", load.status().ToString());
    return load.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::cout << BenchTiersLoadJson(*load).dump(-1, ' ', false,
                                              nlohmann::json::error_handler_t::replace)
            << "\n";
  return load->verified == f.options.rows && load->corrupt == 0 ? 0 : 1;
}

int RunBenchTiersCommand(const BenchTiersFlags& f) {
  if (f.phase == "load") return RunBenchTiersLoadPhase(f);
  const std::string warning = BenchTiersWarning(f.options);
  if (!warning.empty()) PrintError("bench tiers", "warning: " + warning);
  Result<BenchTiersResult> result = RunBenchTiers(f.options);
  if (!result.ok()) {
    PrintError("bench tiers", result.status().ToString());
    return result.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (f.json) {
    std::cout << JsonOutput(BenchTiersJson(*result));
  } else {
    std::cout << FormatBenchTiers(*result);
  }
  if (!result->ok()) {
    const BenchTiersLoad& l = result->load;
    std::fprintf(
        stderr,
        "kvtier bench tiers: %llu of %llu rows verified (%llu corrupt, %llu missing; fs0 write-through: %llu "
        "failed, %llu dropped)%s%s\n",
        static_cast<unsigned long long>(l.verified), static_cast<unsigned long long>(result->rows),
        static_cast<unsigned long long>(l.corrupt), static_cast<unsigned long long>(l.missing),
        static_cast<unsigned long long>(result->fs_stores_failed),
        static_cast<unsigned long long>(result->fs_stores_dropped),
        l.first_error.empty() ? "" : "; first: ", EscapeUnprintable(l.first_error).c_str());
    return 1;
  }
  return 0;
}

void RegisterBenchTiers(CLI::App* bench, CliContext* ctx) {
  auto flags = std::make_shared<BenchTiersFlags>();
  BenchTiersOptions& o = flags->options;
  CLI::App* cmd = bench->add_subcommand(
      "tiers",
      "Store N rows from a GPU (the host stand-in without one) through a TieredStore (a CPU tier of --cpu-bytes in "
      "front of an fs tier under DIR), then load and verify them in a fresh process (an empty CPU "
      "tier, as after a restart); GB/s per direction and hits per tier");
  cmd->add_option("--root", o.root, "An existing directory for the fs tier (its root_dir)")
      ->required();
  cmd->add_option("--rows", o.rows,
                  "Rows (chunks) to store and load: far more than the CPU tier holds")
      ->required();
  cmd->add_option("--cpu-bytes", o.cpu_bytes,
                  "cpu_bytes_to_use: the CPU tier's size (64MiB accepted)")
      ->required()
      ->transform(CLI::AsSizeValue(false));
  cmd->add_option("--row-bytes", o.row_bytes,
                  "Bytes per row = per GPU block (a multiple of 4096; 256KiB accepted)")
      ->capture_default_str()
      ->transform(CLI::AsSizeValue(false));
  cmd->add_option("--batch", o.batch, "Chunks per request and job (cut to the CPU tier's rows)")
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of the keys and the row content")->capture_default_str();
  cmd->add_option("--device", o.device,
                  "CUDA device holding the engine's KV blocks; -1: the host stand-in (default: "
                  "device 0 when a GPU is present, else the stand-in)");
  cmd->add_option("--model", o.model,
                  "Model name of the fs namespace (default: kvtier-bench/tiers-<row bytes>)");
  AddKvGroupFlags(cmd, &o.kv_groups);
  cmd->add_flag("--json", flags->json, "Machine-readable output");
  cmd->add_flag("--keep", o.keep, "Leave the benchmark's files in place");
  // The load phase re-executes this binary with --phase load; not for users.
  cmd->add_option("--phase", flags->phase)->check(CLI::IsMember({"all", "load"}))->group("");
  cmd->callback([flags, ctx] { ctx->exit_code = RunBenchTiersCommand(*flags); });
}

}  // namespace

void RegisterBenchCommand(CLI::App* app, CliContext* ctx) {
  CLI::App* bench = app->add_subcommand("bench", "Measure kvtier's throughput and latency");
  bench->require_subcommand(1);
  RegisterBenchFs(bench, ctx);
  RegisterBenchTiers(bench, ctx);
}

}  // namespace kvtier::internal
