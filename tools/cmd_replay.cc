// `kvtier replay`: flag wiring and the processes of the instances (see
// tools/replay/replay.h for what one instance does).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli_text.h"
#include "cli/spawn.h"
#include "commands.h"
#include "kvtier/config.h"
#include "replay/plot.h"
#include "replay/replay.h"
#include "replay/trace.h"
#include "staging/engine_kv_cache.h"
#include "util/json_text.h"
#include "util/read_file.h"

namespace kvtier::internal {
namespace {

// The repo's configs/default.json, embedded so that `kvtier replay` runs from
// any directory without --config.
constexpr const char* kDefaultConfig = R"({
  "spec_name": "TieringOffloadingSpec",
  "cpu_bytes_to_use": 1073741824,
  "block_size": 64,
  "eviction_policy": "lru",
  "secondary_tiers": [
    {"type": "fs", "root_dir": "./kvcache", "n_read_threads": 8, "n_write_threads": 8}
  ]
})";

struct ReplayFlags {
  ReplayOptions options;
  std::string trace_path, synthetic, config_path, plot_path, worker;
  SyntheticOptions synth;
  uint32_t instances = 1;
  bool restart = false, json = false;
  double store_loss_max = kDefaultStoreLossMax;  // share of a tier's stores, [0, 1]
};

Result<Trace> LoadTrace(const ReplayFlags& f) {
  if (!f.trace_path.empty()) return LoadTraceFile(f.trace_path);
  SyntheticOptions s = f.synth;
  s.name = f.synthetic.empty() ? "agents" : f.synthetic;
  return GenerateSynthetic(s);
}

// The file is read with the library's cap and checks (a FIFO or device is an
// error, not a hang) and depth-checked here, before WithRoot parses and dumps
// it, so that every error is one message from the parent.
Status LoadConfig(ReplayFlags* f) {
  if (f->config_path.empty()) {
    f->options.config_json = kDefaultConfig;
    return Status::Ok();
  }
  KVTIER_ASSIGN_OR_RETURN(f->options.config_json,
                          ReadFileCapped(f->config_path, "config file", kOffloadConfigBytesMax));
  return CheckJsonDepth(f->options.config_json, static_cast<size_t>(kOffloadConfigDepthMax), "config file " + f->config_path);
}

// The argv of a worker process: the same replay, one instance and phase.
std::vector<std::string> WorkerArgv(const ReplayFlags& f, uint32_t instance, int phase) {
  const ReplayOptions& o = f.options;
  std::vector<std::string> argv = {SelfExePath(), "replay", "--root", o.root, "--worker",
                                   std::to_string(instance) + "/" + std::to_string(f.instances) + "/" +
                                       std::to_string(phase),
                                   "--gpu-blocks", std::to_string(o.gpu_blocks), "--kv-bytes-per-token",
                                   std::to_string(o.kv_bytes_per_token), "--prefill-tokens-per-s",
                                   std::to_string(o.prefill_tokens_per_s), "--model", o.model, "--device",
                                   std::to_string(ResolveDevice(o.device))};
  if (!f.config_path.empty()) argv.insert(argv.end(), {"--config", f.config_path});
  for (std::string& arg : KvGroupArgs(o.kv_groups)) argv.push_back(std::move(arg));
  if (!f.trace_path.empty()) {
    argv.insert(argv.end(), {"--trace", f.trace_path});
  } else {
    argv.insert(argv.end(), {"--synthetic", f.synthetic.empty() ? "agents" : f.synthetic, "--seed",
                             std::to_string(f.synth.seed), "--scale", std::to_string(f.synth.scale),
                             "--requests", std::to_string(f.synth.requests)});
  }
  return argv;
}

// Runs every instance of one phase as its own process, concurrently, and
// merges their reports.
Result<PhaseReport> RunPhase(const ReplayFlags& f, int phase) {
  std::vector<Result<ChildOutput>> outputs(f.instances, Status(StatusCode::kInternal, "not run"));
  std::vector<std::thread> threads;
  for (uint32_t i = 0; i < f.instances; ++i) {
    threads.emplace_back([&, i] { outputs[i] = RunChild("/proc/self/exe", WorkerArgv(f, i, phase)); });
  }
  for (std::thread& t : threads) t.join();
  PhaseReport total;
  for (uint32_t i = 0; i < f.instances; ++i) {
    if (!outputs[i].ok()) return outputs[i].status();
    if (outputs[i]->exit_code != 0) {
      return Status(StatusCode::kInternal, "replay instance " + std::to_string(i) + " exited with status " +
                                               std::to_string(outputs[i]->exit_code));
    }
    const nlohmann::json j = nlohmann::json::parse(outputs[i]->out, nullptr, false);
    KVTIER_ASSIGN_OR_RETURN(PhaseReport part, PhaseFromJson(j));
    MergePhase(&total, part);
  }
  return total;
}

int RunWorker(const ReplayFlags& f, const Trace& trace) {
  unsigned instance = 0, instances = 0;
  int phase = -1;
  if (std::sscanf(f.worker.c_str(), "%u/%u/%d", &instance, &instances, &phase) != 3 || instances == 0 ||
      instance >= instances || phase < 0 || phase > 2) {
    PrintError("replay", "bad --worker '" + f.worker + "'");
    return 2;
  }
  Result<PhaseReport> report = RunReplayWorker(f.options, trace, instance, instances, phase);
  if (!report.ok()) {
    PrintError("replay", "instance " + std::to_string(instance) + ": " + report.status().ToString());
    return 1;
  }
  std::cout << PhaseToJson(*report, /*with_points=*/true).dump() << "\n";
  return 0;
}

Result<std::vector<PhaseReport>> RunAllPhases(const ReplayFlags& f, const Trace& trace) {
  std::vector<PhaseReport> phases;
  if (f.instances == 1 && !f.restart) {
    KVTIER_ASSIGN_OR_RETURN(PhaseReport all, RunReplayWorker(f.options, trace, 0, 1, 0));
    phases.push_back(std::move(all));
    return phases;
  }
  for (int phase : f.restart ? std::vector<int>{1, 2} : std::vector<int>{0}) {
    KVTIER_ASSIGN_OR_RETURN(PhaseReport p, RunPhase(f, phase));
    phases.push_back(std::move(p));
  }
  return phases;
}

Status WritePlot(const std::string& path, const std::vector<PhaseReport>& phases, const std::string& title) {
  std::vector<ReplayPoint> points;
  for (const PhaseReport& p : phases) points.insert(points.end(), p.points.begin(), p.points.end());
  std::ofstream out(path);
  out << RenderReplaySvg(points, title);
  if (!out) return Status(StatusCode::kIoError, "cannot write " + path);
  return Status::Ok();
}

std::string FormatStoreLoss(const StoreLoss& loss, double share_max) {
  if (loss.tier.empty()) return "stores: none\n";
  char line[256];
  std::snprintf(line, sizeof(line), "stores lost, worst tier %s: %llu of %llu (%.1f %%: %llu failed, %llu dropped); "
                "--store-loss-max %.1f %%\n", loss.tier.c_str(),
                static_cast<unsigned long long>(loss.failed + loss.dropped), static_cast<unsigned long long>(loss.stores),
                100.0 * loss.share(), static_cast<unsigned long long>(loss.failed),
                static_cast<unsigned long long>(loss.dropped), 100.0 * share_max);
  return line;
}

// 1: a loaded row failed verification; kReplayExitStoresLost: a tier lost
// more than --store-loss-max of its stores (the figures then describe a
// store that did not work); else 0.
int ReplayExitCode(const std::vector<PhaseReport>& phases, const StoreLoss& loss, double share_max) {
  uint64_t corrupt = 0;
  for (const PhaseReport& p : phases) corrupt += p.rows_corrupt;
  if (loss.share() > share_max) {
    std::fprintf(stderr, "kvtier replay: tier %s lost %llu of %llu stores (%llu failed, %llu dropped): %.1f %%, more "
                 "than --store-loss-max %.1f %%\n", loss.tier.c_str(),
                 static_cast<unsigned long long>(loss.failed + loss.dropped),
                 static_cast<unsigned long long>(loss.stores), static_cast<unsigned long long>(loss.failed),
                 static_cast<unsigned long long>(loss.dropped), 100.0 * loss.share(), 100.0 * share_max);
  }
  if (corrupt > 0) {
    std::fprintf(stderr, "kvtier replay: %llu loaded rows failed verification\n",
                 static_cast<unsigned long long>(corrupt));
    return 1;
  }
  return loss.share() > share_max ? kReplayExitStoresLost : 0;
}

int RunReplayCommand(ReplayFlags& f) {
  Status config = LoadConfig(&f);
  // Bad --layers / --kv-groups: one message here, not one per instance.
  if (config.ok()) config = KvGroupsFromFlags(f.options.kv_groups, f.options.gpu_block_tokens).status();
  Result<Trace> trace = config.ok() ? LoadTrace(f) : Result<Trace>(config);
  if (!trace.ok()) {
    PrintError("replay", trace.status().ToString());
    return 2;
  }
  if (!f.worker.empty()) return RunWorker(f, *trace);
  Result<std::vector<PhaseReport>> phases = RunAllPhases(f, *trace);
  if (!phases.ok()) {
    PrintError("replay", phases.status().ToString());
    return phases.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (!f.plot_path.empty()) {
    Status s = WritePlot(f.plot_path, *phases, "kvtier replay: " + trace->name);
    if (!s.ok()) PrintError("replay", s.ToString());
  }
  const StoreLoss loss = WorstStoreLoss(*phases);
  if (f.json) {
    nlohmann::json report = ReplayJson(*phases, trace->name, f.instances, f.restart);
    report["store_loss"] = StoreLossJson(loss, f.store_loss_max);
    std::cout << JsonOutput(std::move(report));
  } else {
    std::cout << FormatReplayTable(*phases, trace->name, f.instances) << "\n" << FormatStoreLoss(loss, f.store_loss_max);
  }
  return ReplayExitCode(*phases, loss, f.store_loss_max);
}

}  // namespace

void RegisterReplayCommand(CLI::App* app, CliContext* ctx) {
  auto f = std::make_shared<ReplayFlags>();
  CLI::App* cmd = app->add_subcommand(
      "replay",
      "Serve a trace through a simulated GPU cache and the tiers; report hits per tier, load speed, TTFT and the "
      "stores each tier wrote, failed or dropped. Exit 0: served; 1: a loaded row failed verification or the run "
      "failed; 2: bad input; 3: a tier lost more than --store-loss-max of its stores");
  auto* trace = cmd->add_option("--trace", f->trace_path, "A JSONL trace (docs/trace-format.md)");
  cmd->add_option("--synthetic", f->synthetic, "A built-in trace: agents (default) | chat")
      ->check(CLI::IsMember({"agents", "chat"}))
      ->excludes(trace);
  cmd->add_option("--root", f->options.root, "Root of the first fs tier")->capture_default_str();
  cmd->add_option("--config", f->config_path, "kv_connector_extra_config JSON (default: configs/default.json)");
  cmd->add_option("--instances", f->instances, "Server processes sharing the root")->check(CLI::Range(1, 64));
  cmd->add_flag("--restart", f->restart, "Restart every instance halfway through the trace");
  cmd->add_flag("--json", f->json, "Machine-readable report");
  cmd->add_option("--store-loss-max", f->store_loss_max,
                  "Largest share of its stores a tier may lose (fail, or drop for room or backpressure) before the "
                  "run exits 3; 1 never fails")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--plot", f->plot_path, "Write an SVG of hit rate and load latency over time");
  cmd->add_option("--seed", f->synth.seed, "Seed of the synthetic trace")->capture_default_str();
  cmd->add_option("--scale", f->synth.scale, "Length multiplier of the synthetic trace")->capture_default_str();
  cmd->add_option("--requests", f->synth.requests, "Truncate the synthetic trace (0: all)")->capture_default_str();
  cmd->add_option("--gpu-blocks", f->options.gpu_blocks, "Simulated GPU KV pool, in blocks")->capture_default_str();
  cmd->add_option("--kv-bytes-per-token", f->options.kv_bytes_per_token, "KV bytes per token of the stand-in model")
      ->capture_default_str();
  cmd->add_option("--prefill-tokens-per-s", f->options.prefill_tokens_per_s, "Prefill speed for the TTFT estimate")
      ->capture_default_str();
  cmd->add_option("--model", f->options.model, "Model name (names the namespace)")->capture_default_str();
  AddKvGroupFlags(cmd, &f->options.kv_groups);
  cmd->add_option("--device", f->options.device,
                  "CUDA device of the simulated GPU pool; -1: host memory (the host stand-in); default: "
                  "device 0 when a GPU is present, else the stand-in");
  cmd->add_option("--worker", f->worker, "internal: run one instance (I/N/PHASE)")->group("");
  cmd->callback([f, ctx] { ctx->exit_code = RunReplayCommand(*f); });
}

}  // namespace kvtier::internal
