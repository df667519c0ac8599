// `kvtier du`, `kvtier fsck`, `kvtier gc`: flag wiring over src/ops and the
// report formatters in tools/cli/ops_command.h.
#include <signal.h>

#include <CLI/CLI.hpp>

#include <atomic>
#include <cstdio>
#include <functional>
#include <iostream>
#include <optional>
#include <tuple>

#include "cli/cli_text.h"
#include "cli/duration.h"
#include "cli/gc_watch.h"
#include "cli/ops_command.h"
#include "commands.h"

namespace kvtier::internal {
namespace {

struct CommonFlags {
  std::string root;
  int jobs = 8;
  bool force = false;
  bool json = false;
  std::string tmp_grace = "1h";
  std::string io_timeout = "30s";  // kDefaultIoTimeoutMs
};

void AddCommon(CLI::App* cmd, CommonFlags* f) {
  cmd->add_option("ROOT", f->root, "The root_dir shared by the instances (the roots of a path_sharding tier: a comma-separated list)")->required();
  cmd->add_option("--jobs", f->jobs, "Walker threads")->capture_default_str()->check(CLI::Range(1, 256));
  cmd->add_flag("--force", f->force, "Scan a directory that does not look like a kvtier/vLLM root");
  cmd->add_flag("--json", f->json, "Machine-readable output");
  cmd->add_option("--io-timeout", f->io_timeout,
                  "Give up (exit 8, naming the path) when one file-system call takes longer than this: a hung "
                  "mount (seconds, e.g. 0.5 or 30, or with a unit: 500ms, 10s, 2m; 0: wait forever)")
      ->capture_default_str();
}

// Stores r's value in *out; false after "kvtier CMD: FLAG: message" when r
// is an error.
template <class T, class Out>
bool Take(const Result<T>& r, std::string_view cmd, std::string_view flag, Out* out) {
  if (!r.ok()) PrintError(cmd, std::string(flag) + ": " + r.status().message());
  if (r.ok()) *out = *r;
  return r.ok();
}

// Fills the scan options; false (after printing) on a bad flag value.
bool Fill(const CommonFlags& f, std::string_view cmd, ScanOptions* o) {
  o->root = f.root;
  o->jobs = f.jobs;
  o->force = f.force;
  if (!Take(ParseDurationS(f.tmp_grace), cmd, "--tmp-grace", &o->tmp_grace_s) ||
      !Take(ParseDurationMs(f.io_timeout), cmd, "--io-timeout", &o->io_timeout_ms)) {
    return false;
  }
  if (!f.json) o->progress = MakeProgressBar(std::string("kvtier ") + std::string(cmd));
  return true;
}

template <class Report>
int Emit(const Result<Report>& r, std::string_view cmd, bool json, bool progress_shown,
         const std::function<nlohmann::json(const Report&)>& to_json,
         const std::function<std::string(const Report&)>& to_text) {
  if (progress_shown) std::fputs("\n", stderr);
  if (!r.ok()) {
    // The message may name a file on the volume: escaped as fsck's details.
    PrintError(cmd, r.status().ToString());
    if (r.status().code() == StatusCode::kTimedOut) ExitHung();
    return r.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  // The report is complete (gc has already deleted): its output must not
  // fail. The formatters make every string valid UTF-8; `replace` is the
  // backstop that keeps dump() from throwing if one were missed.
  std::cout << (json ? to_json(*r).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n" : to_text(*r));
  return 0;
}

// The command's callback, run in a child process (RunGuarded): on a hung
// mount the operator gets exit 8 back even where the stuck thread cannot die.
std::function<void()> Guarded(std::function<void()> body, CliContext* ctx) {
  return [body = std::move(body), ctx] {
    ctx->exit_code = RunGuarded([&] {
      body();
      return ctx->exit_code;
    });
  };
}

void RegisterDu(CLI::App* app, CliContext* ctx) {
  auto f = std::make_shared<CommonFlags>();
  CLI::App* du = app->add_subcommand("du", "Usage per namespace of a shared root_dir");
  AddCommon(du, f.get());
  auto top_n = std::make_shared<size_t>(0);
  auto by = std::make_shared<std::string>("bytes");
  CLI::Option* top_option = du->add_option("--top", *top_n,
                                    "Only the N largest namespaces (or the N coldest, with --by age), whichever "
                                    "engine wrote them; the totals stay the whole volume's")
                         ->check(CLI::Range(size_t{1}, size_t{1} << 40));
  du->add_option("--by", *by, "With --top: bytes (largest first) | age (least recently used first)")
      ->capture_default_str()
      ->needs(top_option);
  du->callback(Guarded([f, ctx, top_n, by] {
    ScanOptions o;
    DuTop top{.n = *top_n};
    if (!Take(ParseDuTopBy(*by), "du", "--by", &top.by) || !Fill(*f, "du", &o)) return void(ctx->exit_code = 2);
    Result<DuReport> r = Du(o);
    const size_t of = r.ok() ? r->namespaces.size() : 0;
    if (r.ok()) KeepTopNamespaces(top, &*r);
    const int rc = Emit<DuReport>(
        r, "du", f->json, o.progress != nullptr, [&](const DuReport& d) { return DuJson(d, top, of); },
        [&](const DuReport& d) { return DuText(d, top, of); });
    ctx->exit_code = rc != 0 ? rc : r->ExitCode();  // 8: parts could not be read
  }, ctx));
}

void RegisterFsck(CLI::App* app, CliContext* ctx) {
  auto f = std::make_shared<CommonFlags>();
  auto repair = std::make_shared<bool>(false);
  auto verify = std::make_shared<bool>(false);
  auto row_bytes = std::make_shared<std::string>();
  CLI::App* fsck = app->add_subcommand("fsck", "Check a root_dir against the layout rules (exit 0/1/4/8 as e2fsck)");
  AddCommon(fsck, f.get());
  fsck->add_flag("--repair", *repair, "Remove or quarantine what is broken (layout files only)");
  CLI::Option* verify_flag =
      fsck->add_flag("--verify-data", *verify, "Read every block and check its CRC32C (a sealed block: its tag, given its key)");
  fsck->add_option("--tmp-grace", f->tmp_grace, "Temp and probe files younger than this are in flight")->capture_default_str();
  fsck->add_option("--row-bytes", *row_bytes, "Expected block size (default: each namespace's most common size)");
  auto seal_keys = std::make_shared<std::vector<std::string>>();
  fsck->add_option("--seal-key-file", *seal_keys,
                   "A seal key (repeatable: the primary and read keys): with --verify-data, check the tag of every "
                   "block of the sealed namespaces it sealed (docs/sealed.md)")
      ->needs(verify_flag);
  fsck->callback(Guarded([=] {
    FsckOptions o;
    if (!Fill(*f, "fsck", &o)) return void(ctx->exit_code = 8);
    o.repair = *repair;
    o.verify_data = *verify;
    o.seal_key_files = *seal_keys;
    if (!row_bytes->empty() && !Take(ParseSizeBytes(*row_bytes), "fsck", "--row-bytes", &o.row_bytes)) {
      return void(ctx->exit_code = 8);
    }
    Result<FsckReport> r = Fsck(o);
    const int rc = Emit<FsckReport>(r, "fsck", f->json, o.progress != nullptr, &FsckJson, &FsckText);
    ctx->exit_code = rc != 0 ? 8 : r->ExitCode();  // operational errors are 8, as e2fsck's
  }, ctx));
}

// The flags of `gc --watch` (tools/cli/gc_watch.h).
struct WatchFlags {
  bool watch = false;
  std::string interval = "60s", check = "2s", min_free, min_free_target, ttl = "30s", metrics_file;
  std::optional<uint16_t> metrics_port;
  std::string metrics_address = "127.0.0.1";
};

void AddWatchFlags(CLI::App* gc, WatchFlags* w) {
  gc->add_flag("--watch", w->watch, "Run until SIGTERM/SIGINT: a pass every --interval, sooner below --min-free; "
                                   "one collector per volume (a lease in <root>/.kvtier/)");
  gc->add_option("--interval", w->interval, "--watch: time between passes")->capture_default_str();
  gc->add_option("--check-interval", w->check, "--watch: time between free-space samples")->capture_default_str();
  gc->add_option("--min-free", w->min_free, "--watch: a pass as soon as a root's free space is below this (e.g. 10%, 50G)");
  gc->add_option("--min-free-target,--min-free-low", w->min_free_target,
                 "--watch: below --min-free, remove least recently used blocks until this is free (default: --min-free + 25%)");
  gc->add_option("--collector-ttl", w->ttl, "Take over a collector lease unchanged this long (--watch, and a one-shot --max-bytes)")
      ->capture_default_str();
  gc->add_option("--metrics-file", w->metrics_file, "--watch: write Prometheus text here (temp file + rename)");
  gc->add_option("--metrics-port", w->metrics_port, "--watch: serve GET /metrics on this TCP port (0: any, logged)");
  gc->add_option("--metrics-address", w->metrics_address, "--watch: the IPv4 address --metrics-port listens on")
      ->capture_default_str();
}

std::atomic<bool> g_watch_stop{false};

// The watch's options from its flags, checked with or without --watch (a
// one-shot gc takes the collector lease too); false (after printing) on a
// bad value.
bool FillWatch(const WatchFlags& w, const GcOptions& gc, bool json, GcWatchOptions* o) {
  o->gc = gc;
  o->gc.progress = nullptr;
  o->metrics_file = w.metrics_file;
  o->metrics_port = w.metrics_port;
  o->metrics_address = w.metrics_address;
  auto fail = [](const char* flag, const Status& s) {
    PrintError("gc", std::string(flag) + ": " + s.message());
    return false;
  };
  if (w.watch && (gc.dry_run || json)) {
    return fail(gc.dry_run ? "--dry-run" : "--json", InvalidArgument("not with --watch"));
  }
  const std::pair<const std::string*, uint64_t*> durations[] = {{&w.interval, &o->interval_ms}, {&w.check, &o->check_ms},
                                                                {&w.ttl, &o->collector_ttl_ms}};
  const char* names[] = {"--interval", "--check-interval", "--collector-ttl"};
  for (size_t i = 0; i < 3; ++i) {
    if (!Take(ParseDurationMs(*durations[i].first), "gc", names[i], durations[i].second)) return false;
    if (*durations[i].second == 0) return fail(names[i], InvalidArgument("must be more than 0"));
  }
  for (auto [text, out, flag] : {std::tuple{&w.min_free, &o->min_free, "--min-free"},
                                 std::tuple{&w.min_free_target, &o->min_free_target, "--min-free-target"}}) {
    if (text->empty()) continue;
    if (!Take(ParseFreeSpace(*text), "gc", flag, out)) return false;
  }
  if (o->min_free_target && !o->min_free) return fail("--min-free-target", InvalidArgument("needs --min-free"));
  return true;
}

void InstallStopHandler() {
  struct sigaction sa {};
  sa.sa_handler = [](int) { g_watch_stop = true; };
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

int RunWatchCommand(const GcWatchOptions& o) {
  InstallStopHandler();
  return RunGcWatch(o, g_watch_stop);
}

void RegisterGc(CLI::App* app, CliContext* ctx) {
  auto f = std::make_shared<CommonFlags>();
  auto dry_run = std::make_shared<bool>(false);
  // Optional, so that an empty value is refused rather than taken for none.
  using OptionalText = std::optional<std::string>;
  auto older = std::make_shared<OptionalText>(), max_bytes = std::make_shared<OptionalText>(),
       low_water = std::make_shared<OptionalText>();
  auto candidates = std::make_shared<std::string>("32M");
  auto keep = std::make_shared<std::vector<std::string>>();
  auto list_max = std::make_shared<uint64_t>(kDefaultGcListMax);
  auto ignore_lease = std::make_shared<bool>(false);

  auto watch = std::make_shared<WatchFlags>();
  CLI::App* gc = app->add_subcommand("gc", "Reclaim orphaned namespaces, stale temp files, corrupt blocks, capacity");
  AddCommon(gc, f.get());
  gc->add_flag("--dry-run", *dry_run, "Print what would be removed; change nothing");
  gc->add_option("--older-than", *older, "Reclaim namespaces with no live lease and no use for this long (e.g. 7d)");
  gc->add_option("--max-bytes", *max_bytes, "Delete least-recently-used blocks until under this (e.g. 500G)");
  gc->add_option("--low-water", *low_water, "With --max-bytes: delete down to this");
  gc->add_option("--keep", *keep, "A namespace directory never to touch (repeatable)");
  gc->add_option("--tmp-grace", f->tmp_grace, "Temp and probe files younger than this are in flight")->capture_default_str();
  gc->add_option("--list-max", *list_max, "List at most this many removed (and failed) files; the counts cover all")
      ->capture_default_str();
  gc->add_option("--candidates-max", *candidates,
                 "Memory for the least recently used blocks the first walk keeps; a capacity trim they cover "
                 "needs no second walk (0: always walk again)")
      ->capture_default_str();
  gc->add_flag("--ignore-lease", *ignore_lease,
               "One-shot --max-bytes: trim even while another collector (gc --watch) holds the volume's lease; "
               "without it such a gc takes the lease for its run, or skips the trim (exit 0, said so)");

  AddWatchFlags(gc, watch.get());
  gc->callback(Guarded([=] {
    GcOptions o;
    if (!Fill(*f, "gc", &o)) return void(ctx->exit_code = 2);
    o.dry_run = *dry_run;
    o.list_max = *list_max;
    for (std::string k : *keep) {
      while (k.size() > 1 && k.back() == '/') k.pop_back();
      o.keep.push_back(k.substr(k.rfind('/') + 1));  // a path or a bare directory name
    }
    auto parse = [&](const std::optional<std::string>& text, auto parser, auto* out, const char* flag) {
      return !text || Take(parser(*text), "gc", flag, out);
    };
    if (!parse(*older, ParseDurationS, &o.older_than_s, "--older-than") ||
        !parse(*max_bytes, ParseSizeBytes, &o.max_bytes, "--max-bytes") ||
        !parse(*low_water, ParseSizeBytes, &o.low_water_bytes, "--low-water") ||
        !parse(OptionalText(*candidates), ParseSizeBytes, &o.candidates_bytes_max, "--candidates-max")) {
      return void(ctx->exit_code = 2);
    }
    if (o.low_water_bytes && !o.max_bytes) {
      PrintError("gc", "--low-water needs --max-bytes");
      return void(ctx->exit_code = 2);
    }
    GcWatchOptions w;
    if (!FillWatch(*watch, o, f->json, &w)) return void(ctx->exit_code = 2);
    if (watch->watch) return void(ctx->exit_code = RunWatchCommand(w));
    if (!watch->min_free.empty() || !watch->metrics_file.empty() || watch->metrics_port) {
      PrintError("gc", "--min-free, --metrics-file and --metrics-port need --watch");
      return void(ctx->exit_code = 2);
    }
    // L124: a one-shot capacity trim is one collector's job at a time.
    std::shared_ptr<OneShotLease> lease;
    if (o.max_bytes && !o.dry_run && !*ignore_lease) {
      lease = OneShotLease::Start(o, w.collector_ttl_ms);
      o.capacity_gate = [lease] { return lease->Gate(); };
      // SIGTERM/SIGINT: finish the removal in progress, remove no more, and
      // give the lease up (L122) rather than leave it to go stale.
      InstallStopHandler();
      o.stop = [lease] { return g_watch_stop || lease->Lost(); };
    }
    // Given up on every way out, exceptions included (Finish is idempotent).
    const std::unique_ptr<OneShotLease, void (*)(OneShotLease*)> finish(lease.get(), [](OneShotLease* l) {
      if (l != nullptr) l->Finish();
    });
    Result<GcReport> r = Gc(o);
    if (lease) lease->Finish();
    const int rc = Emit<GcReport>(r, "gc", f->json, o.progress != nullptr, &GcJson, &GcText);
    ctx->exit_code = rc != 0 ? rc : r->ExitCode();  // 4: removals failed; 8: parts could not be read
    // 4 too where the bound went unenforced for want of a lease (EACCES,
    // EROFS, a hung mount), not because another collector enforces it.
    if (rc == 0 && lease && lease->Failed()) ctx->exit_code |= 4;
  }, ctx));
}

}  // namespace

void RegisterOpsCommands(CLI::App* app, CliContext* ctx) {
  RegisterDu(app, ctx);
  RegisterFsck(app, ctx);
  RegisterGc(app, ctx);
  RegisterDoctorCommand(app, ctx);
}

}  // namespace kvtier::internal
