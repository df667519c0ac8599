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
#include "cli/ops_events.h"
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

// The flags of `kvtier fsck` beyond the common ones.
struct FsckFlags {
  bool repair = false, verify = false, group_read = false;
  std::string row_bytes;
  std::vector<std::string> seal_keys;
  EventsFlags events;
};

// The events of a run, if asked for: false (after printing) when they cannot be opened.
bool OpenEvents(const EventsFlags& flags, const std::string& root, std::string_view cmd,
                std::shared_ptr<RemovalEvents>* out) {
  Result<std::shared_ptr<RemovalEvents>> opened = RemovalEvents::Open(flags, root);
  if (!opened.ok()) PrintError(cmd, opened.status().message());
  if (opened.ok()) *out = std::move(*opened);
  return opened.ok();
}

// fsck's exit code: 8 for a bad flag value or an error, else the report's.
int RunFsck(const CommonFlags& f, const FsckFlags& k) {
  FsckOptions o;
  if (!Fill(f, "fsck", &o)) return 8;
  o.repair = k.repair;
  o.verify_data = k.verify;
  o.seal_key_files = k.seal_keys;
  o.seal_key_group_read = k.group_read;
  if (!k.row_bytes.empty() && !Take(ParseSizeBytes(k.row_bytes), "fsck", "--row-bytes", &o.row_bytes)) return 8;
  if (!k.events.endpoint.empty() && !k.repair) {
    PrintError("fsck", "--events-endpoint: needs --repair (without it fsck removes nothing)");
    return 8;
  }
  std::shared_ptr<RemovalEvents> events;
  if (!OpenEvents(k.events, f.root, "fsck", &events)) return 8;
  if (events) o.on_block_removed = events->Callback();
  Result<FsckReport> r = Fsck(o);
  if (events) events->Close();  // what is queued is sent before the report (and before a hung exit)
  const int rc = Emit<FsckReport>(r, "fsck", f.json, o.progress != nullptr, &FsckJson, &FsckText);
  return rc != 0 ? 8 : r->ExitCode();  // operational errors are 8, as e2fsck's
}

void RegisterFsck(CLI::App* app, CliContext* ctx) {
  auto f = std::make_shared<CommonFlags>();
  auto k = std::make_shared<FsckFlags>();
  CLI::App* fsck = app->add_subcommand("fsck", "Check a root_dir against the layout rules (exit 0/1/4/8 as e2fsck)");
  AddCommon(fsck, f.get());
  fsck->add_flag("--repair", k->repair, "Remove or quarantine what is broken (layout files only)");
  CLI::Option* verify_flag =
      fsck->add_flag("--verify-data", k->verify, "Read every block and check its CRC32C (a sealed block: its tag, given its key)");
  fsck->add_option("--tmp-grace", f->tmp_grace, "Temp and probe files younger than this are in flight")->capture_default_str();
  fsck->add_option("--row-bytes", k->row_bytes, "Expected block size (default: an SGLang namespace's declared page_bytes, else its most common size, which removes nothing but empty blocks: FORMAT.md L196)");
  fsck->add_option("--seal-key-file", k->seal_keys,
                   "A seal key (repeatable: the primary and read keys): with --verify-data, check the tag of every "
                   "block of the sealed namespaces it sealed (docs/sealed.md)")
      ->needs(verify_flag);
  AddSealKeyGroupReadFlag(fsck, &k->group_read);
  AddEventsFlags(fsck, &k->events);
  fsck->callback(Guarded([f, k, ctx] { ctx->exit_code = RunFsck(*f, *k); }, ctx));
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
bool FillWatch(const WatchFlags& w, const GcOptions& gc, bool json, GcWatchOptions* out) {
  CollectorOptions* o = &out->collector;
  o->gc = gc;
  o->gc.progress = nullptr;
  o->metrics_file = w.metrics_file;
  out->metrics_port = w.metrics_port;
  out->metrics_address = w.metrics_address;
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
  for (auto [text, opt, flag] : {std::tuple{&w.min_free, &o->min_free, "--min-free"},
                                 std::tuple{&w.min_free_target, &o->min_free_target, "--min-free-target"}}) {
    if (text->empty()) continue;
    if (!Take(ParseFreeSpace(*text), "gc", flag, opt)) return false;
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

int RunWatchCommand(GcWatchOptions o) {
  InstallStopHandler();
  return RunGcWatch(std::move(o), g_watch_stop);
}

// The one-shot flags of `kvtier gc`; optional texts, so that an empty value
// is refused rather than taken for none.
struct GcFlags {
  bool dry_run = false, ignore_lease = false;
  std::optional<std::string> older, max_bytes, low_water;
  std::string candidates = "32M";
  std::vector<std::string> keep;
  uint64_t list_max = kDefaultGcListMax;
};

void AddGcFlags(CLI::App* gc, CommonFlags* f, GcFlags* g) {
  gc->add_flag("--dry-run", g->dry_run, "Print what would be removed; change nothing");
  gc->add_option("--older-than", g->older, "Reclaim namespaces with no live lease and no use for this long (e.g. 7d)");
  gc->add_option("--max-bytes", g->max_bytes, "Delete least-recently-used blocks until under this (e.g. 500G)");
  gc->add_option("--low-water", g->low_water, "With --max-bytes: delete down to this");
  gc->add_option("--keep", g->keep, "A namespace directory never to touch (repeatable)");
  gc->add_option("--tmp-grace", f->tmp_grace, "Temp and probe files younger than this are in flight")->capture_default_str();
  gc->add_option("--list-max", g->list_max, "List at most this many removed (and failed) files; the counts cover all")
      ->capture_default_str();
  gc->add_option("--candidates-max", g->candidates,
                 "Memory for the least recently used blocks the first walk keeps; a capacity trim they cover "
                 "needs no second walk (0: always walk again)")
      ->capture_default_str();
  gc->add_flag("--ignore-lease", g->ignore_lease,
               "One-shot --max-bytes: trim even while another collector (gc --watch) holds the volume's lease; "
               "without it such a gc takes the lease for its run, or skips the trim (exit 0, said so)");
}

// False (after printing) on a bad value.
bool FillGc(const GcFlags& g, GcOptions* o) {
  o->dry_run = g.dry_run;
  o->list_max = g.list_max;
  for (std::string k : g.keep) {
    while (k.size() > 1 && k.back() == '/') k.pop_back();
    o->keep.push_back(k.substr(k.rfind('/') + 1));  // a path or a bare directory name
  }
  auto parse = [&](const std::optional<std::string>& text, auto parser, auto* out, const char* flag) {
    return !text || Take(parser(*text), "gc", flag, out);
  };
  if (!parse(g.older, ParseDurationS, &o->older_than_s, "--older-than") ||
      !parse(g.max_bytes, ParseSizeBytes, &o->max_bytes, "--max-bytes") ||
      !parse(g.low_water, ParseSizeBytes, &o->low_water_bytes, "--low-water") ||
      !parse(std::optional<std::string>(g.candidates), ParseSizeBytes, &o->candidates_bytes_max, "--candidates-max")) {
    return false;
  }
  if (o->low_water_bytes && !o->max_bytes) PrintError("gc", "--low-water needs --max-bytes");
  return !o->low_water_bytes || o->max_bytes;
}

// A one-shot gc; with a capacity bound one of the volume's collectors (L124).
// `events` (may be null) are closed before the report.
int RunOnceCommand(const GcOptions& o, bool ignore_lease, uint64_t collector_ttl_ms, bool json, RemovalEvents* events) {
  CollectOnceOptions once;
  static_cast<GcOptions&>(once) = o;
  once.collector_ttl_ms = collector_ttl_ms;
  once.ignore_lease = ignore_lease;
  if (CollectOnceTakesLease(once)) {
    // SIGTERM/SIGINT: finish the removal in progress, remove no more, and
    // give the lease up (L122) rather than leave it to go stale.
    InstallStopHandler();
    once.stop = [] { return g_watch_stop.load(); };
  }
  Result<GcReport> r = CollectOnce(once);
  if (events != nullptr) events->Close();  // what is queued is sent (at most 1 s), also before a hung exit
  const int rc = Emit<GcReport>(r, "gc", json, o.progress != nullptr, &GcJson, &GcText);
  // 4: removals failed, or the bound went unenforced for want of a lease;
  // 8: parts could not be read.
  return rc != 0 ? rc : r->ExitCode();
}

// Every removal of the run (and of each watch pass) published; a watch
// exports the publisher's counters and closes it as it ends.
void WithEvents(const std::shared_ptr<RemovalEvents>& events, GcOptions* o, GcWatchOptions* w) {
  o->on_block_removed = events->Callback();
  w->collector.gc.on_block_removed = o->on_block_removed;
  w->collector.metrics_extra = [events] { return events->MetricsText(); };
  w->on_end = [events] { events->Close(); };
}

void RegisterGc(CLI::App* app, CliContext* ctx) {
  auto f = std::make_shared<CommonFlags>();
  auto g = std::make_shared<GcFlags>();
  auto watch = std::make_shared<WatchFlags>();
  CLI::App* gc = app->add_subcommand("gc", "Reclaim orphaned namespaces, stale temp files, corrupt blocks, capacity");
  AddCommon(gc, f.get());
  AddGcFlags(gc, f.get(), g.get());
  AddWatchFlags(gc, watch.get());
  auto ev = std::make_shared<EventsFlags>();
  AddEventsFlags(gc, ev.get());
  gc->callback(Guarded([=] {
    GcOptions o;
    if (!Fill(*f, "gc", &o) || !FillGc(*g, &o)) return void(ctx->exit_code = 2);
    GcWatchOptions w;
    if (!FillWatch(*watch, o, f->json, &w)) return void(ctx->exit_code = 2);
    if (!watch->watch && (!watch->min_free.empty() || !watch->metrics_file.empty() || watch->metrics_port)) {
      PrintError("gc", "--min-free, --metrics-file and --metrics-port need --watch");
      return void(ctx->exit_code = 2);
    }
    std::shared_ptr<RemovalEvents> events;  // one publisher for the run, every pass of a watch
    if (!OpenEvents(*ev, f->root, "gc", &events)) return void(ctx->exit_code = 2);
    if (events) WithEvents(events, &o, &w);
    if (watch->watch) return void(ctx->exit_code = RunWatchCommand(std::move(w)));
    ctx->exit_code = RunOnceCommand(o, g->ignore_lease, w.collector.collector_ttl_ms, f->json, events.get());
  }, ctx));
}

}  // namespace

void AddSealKeyGroupReadFlag(CLI::App* cmd, bool* allow) {
  cmd->add_flag("--seal-key-group-read", *allow,
                "Accept a group-readable seal key file (a Kubernetes secret with fsGroup; FORMAT.md L174)");
}

void RegisterOpsCommands(CLI::App* app, CliContext* ctx) {
  RegisterDu(app, ctx);
  RegisterFsck(app, ctx);
  RegisterGc(app, ctx);
  RegisterDoctorCommand(app, ctx);
}

}  // namespace kvtier::internal
