// `kvtier doctor ROOT`: flag wiring over src/ops/doctor.h and the report
// formatters in tools/cli/doctor_command.h.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "cli/doctor_command.h"
#include "cli/duration.h"
#include "cli/ops_command.h"
#include "commands.h"
#include "util/name_escape.h"

namespace kvtier::internal {
namespace {

struct DoctorFlags {
  std::string root;
  bool json = false;
  std::string io_timeout = "10s";
  std::string io_bytes = "4M";
  int samples = 8;
};

// Fills the options; false (after printing) on a bad flag value.
bool FillDoctor(const DoctorFlags& f, DoctorOptions* o) {
  o->root = f.root;
  o->samples = f.samples;
  auto timeout = ParseDurationMs(f.io_timeout);
  auto bytes = ParseSizeBytes(f.io_bytes);
  if (!timeout.ok()) std::fprintf(stderr, "kvtier doctor: --io-timeout: %s\n", timeout.status().message().c_str());
  if (!bytes.ok()) std::fprintf(stderr, "kvtier doctor: --io-bytes: %s\n", bytes.status().message().c_str());
  if (!timeout.ok() || !bytes.ok()) return false;
  o->io_timeout_ms = *timeout;
  o->io_bytes = *bytes;
  return true;
}

int RunDoctorCommand(const DoctorFlags& f) {
  DoctorOptions o;
  if (!FillDoctor(f, &o)) return 2;
  const Result<DoctorReport> r = Doctor(o);
  if (!r.ok()) {
    std::fprintf(stderr, "kvtier doctor: %s\n", EscapeUnprintable(r.status().ToString()).c_str());
    if (r.status().code() == StatusCode::kTimedOut) ExitHung();
    return r.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::cout << (f.json ? DoctorJson(*r).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n" : DoctorText(*r));
  return r->ExitCode();
}

}  // namespace

void RegisterDoctorCommand(CLI::App* app, CliContext* ctx) {
  auto f = std::make_shared<DoctorFlags>();
  CLI::App* cmd = app->add_subcommand(
      "doctor", "Probe a volume (filesystem, xattrs, O_DIRECT, rename, link, atime, latency, throughput) and print what "
                "kvtier's \"auto\" settings do there; exit 0: kvtier can run, 1: it cannot, 2: bad flag, 8: a call hung");
  cmd->add_option("ROOT", f->root, "An existing directory: the root_dir to judge (probes run in ROOT/.kvtier/doctor.<token>/, removed after)")
      ->required();
  cmd->add_flag("--json", f->json, "Machine-readable output");
  cmd->add_option("--io-timeout", f->io_timeout,
                  "Give up (exit 8, naming the path) when one file-system call takes longer than this: a hung mount "
                  "(e.g. 500ms, 10s; 0: wait forever)")
      ->capture_default_str();
  cmd->add_option("--io-bytes", f->io_bytes, "Bytes written and read back for the throughput figures (up to 1G)")->capture_default_str();
  cmd->add_option("--samples", f->samples, "Calls timed per latency figure")->capture_default_str()->check(CLI::Range(1, 1000));
  cmd->callback([f, ctx] { ctx->exit_code = RunGuarded([f] { return RunDoctorCommand(*f); }); });
}

}  // namespace kvtier::internal
