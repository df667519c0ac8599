// Text and JSON forms of the operators' reports.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <sstream>

#include "bench/bench_common.h"
#include "cli/ops_command.h"
#include "util/name_escape.h"

namespace kvtier::internal {

Result<uint64_t> ParseSizeBytes(std::string_view text) {
  size_t end = 0;
  while (end < text.size() && ((text[end] >= '0' && text[end] <= '9') || text[end] == '.')) ++end;
  std::string unit(text.substr(end));
  if (unit.size() == 3 && unit.substr(1) == "iB") unit = unit.substr(0, 1);
  if (unit.size() == 2 && unit[1] == 'B') unit = unit.substr(0, 1);
  static const std::map<std::string, double> kUnits = {{"", 1}, {"B", 1}, {"K", 1024.0}, {"M", 1048576.0},
                                                       {"G", 1073741824.0}, {"T", 1099511627776.0}};
  auto it = kUnits.find(unit);
  if (end == 0 || it == kUnits.end()) return InvalidArgument("not a size: '" + std::string(text) + "' (e.g. 500M, 10G, 2T)");
  const double value = std::strtod(std::string(text.substr(0, end)).c_str(), nullptr) * it->second;
  if (!(value >= 0) || value > 1.8e19) return InvalidArgument("size out of range: '" + std::string(text) + "'");
  return static_cast<uint64_t>(value);
}

// "90s ago", "3d ago"; a time after this host's clock (FORMAT.md L155: a
// wrong clock somewhere) as "in 3d", never a negative age.
static std::string Span(uint64_t s) {
  if (s < 120) return std::to_string(s) + "s";
  if (s < 7200) return std::to_string(s / 60) + "m";
  if (s < 172800) return std::to_string(s / 3600) + "h";
  return std::to_string(s / 86400) + "d";
}

static std::string Age(int64_t unix_s) {
  if (unix_s == 0) return "-";
  const int64_t now = std::time(nullptr);
  // Modular differences: exact for any two int64 times.
  if (unix_s > now) return "in " + Span(static_cast<uint64_t>(unix_s) - static_cast<uint64_t>(now));
  return Span(static_cast<uint64_t>(now) - static_cast<uint64_t>(unix_s)) + " ago";
}

// FORMAT.md L155: blocks dated more than 300 s ahead, said once under a report.
static void FarFutureText(std::ostringstream& out, const char* tool, uint64_t n) {
  if (n == 0) return;
  out << tool << ": " << n << " blocks have a use time more than 300 s after this host's clock (a writer's clock, or this "
      << "host's, is wrong): gc counts them as least recently used (FORMAT.md L155)\n";
}

static nlohmann::json ProblemsJson(const std::vector<ScanProblem>& problems) {
  nlohmann::json list = nlohmann::json::array();
  for (const ScanProblem& p : problems) list.push_back({{"path", p.path}, {"detail", p.detail}});
  return list;
}

static void ProblemsText(std::ostringstream& out, const char* what, const std::vector<ScanProblem>& problems) {
  for (const ScanProblem& p : problems) out << what << " " << QuoteName(p.path) << ": " << EscapeUnprintable(p.detail) << "\n";
}

nlohmann::json DuJson(const DuReport& r, const DuTop& top, size_t of) {
  nlohmann::json list = nlohmann::json::array();
  for (const NamespaceUsage& u : r.namespaces) {
    list.push_back({{"dir", u.dir}, {"model", u.model}, {"digest", u.digest}, {"has_config", u.has_config},
                    {"engine", u.engine},
                    {"config", {{"tokens_per_hash", u.tokens_per_hash}, {"blocks_per_file", u.blocks_per_file},
                                {"dtype", u.dtype}, {"tp_size", u.tp_size}, {"groups", u.groups},
                                {"page_size", u.page_size}, {"mem_layout", u.mem_layout}}},
                    {"ranks", u.ranks}, {"blocks", u.blocks}, {"bytes", u.bytes}, {"tmp_files", u.tmp_files},
                    {"newest_activity", u.newest_activity}, {"oldest_activity", u.oldest_activity},
                    {"newest_counted_activity", u.newest_counted_activity}, {"far_future_blocks", u.far_future_blocks},
                    {"live_leases", u.live_leases}, {"leases_known", u.leases_known}, {"sealed", u.sealed},
                    {"seal_key_id", u.sealed && !u.seal_key_id.empty() ? nlohmann::json(u.seal_key_id) : nullptr}});
  }
  nlohmann::json j = {{"namespaces", list}, {"total_bytes", r.total_bytes}, {"total_blocks", r.total_blocks},
                      {"files_scanned", r.files_scanned}, {"unreadable", ProblemsJson(r.unreadable)},
                      {"unreadable_unlisted", r.unreadable_unlisted},
                      {"exit_code", r.ExitCode()}};
  if (top.n != 0) j["top"] = {{"n", top.n}, {"by", top.by == DuTopBy::kBytes ? "bytes" : "age"}, {"of", of}};
  MakeJsonUtf8(&j);  // names on the volume may be any bytes
  return j;
}

// The settings that size a namespace's files: vLLM's tokens per hash x
// blocks per file; SGLang's page size, host layout and TP size.
static std::string Geometry(const NamespaceUsage& u) {
  if (u.engine == "sglang") {
    return "page " + std::to_string(u.page_size) + " " + (u.mem_layout.empty() ? "?" : QuoteName(u.mem_layout)) +
           " tp" + std::to_string(u.tp_size);
  }
  return std::to_string(u.tokens_per_hash) + " tokens/hash x " + std::to_string(u.blocks_per_file) + " blocks/file";
}

// A sealed namespace (FORMAT.md L180): its key id (never the key), "?" when
// config.json does not give a valid one.
static std::string Sealed(const NamespaceUsage& u) {
  if (!u.sealed) return "";
  return ", sealed (key id " + (u.seal_key_id.empty() ? std::string("?") : u.seal_key_id) + ")";
}

std::string DuText(const DuReport& r, const DuTop& top, size_t of) {
  std::ostringstream out;
  char line[512];
  std::snprintf(line, sizeof line, "%-52s %-6s %10s %11s %5s %6s %-12s %-10s %s\n", "NAMESPACE", "ENGINE", "BLOCKS",
                "BYTES", "TMP", "LEASES", "NEWEST", "DTYPE", "GEOMETRY");
  out << line;
  // The name and the dtype (from the volume: any length, quoted when odd)
  // are padded here rather than formatted into the fixed buffer.
  auto padded = [](std::string s, size_t width) {
    if (s.size() < width) s.resize(width, ' ');
    return s;
  };
  for (const NamespaceUsage& u : r.namespaces) {
    const std::string leases = u.leases_known ? std::to_string(u.live_leases) : "?";
    std::snprintf(line, sizeof line, " %10llu %11s %5llu %6s %-12s ", static_cast<unsigned long long>(u.blocks),
                  HumanBytes(u.bytes).c_str(), static_cast<unsigned long long>(u.tmp_files), leases.c_str(),
                  Age(u.newest_activity).c_str());
    out << padded(QuoteName(u.dir), 52) << ' ' << padded(u.engine.empty() ? "?" : u.engine, 6) << line
        << padded(u.dtype.empty() ? "?" : QuoteName(u.dtype), 10) << ' ' << Geometry(u) << Sealed(u) << "\n";
  }
  if (top.n != 0) {
    out << "top " << r.namespaces.size() << " of " << of << " namespaces by "
        << (top.by == DuTopBy::kBytes ? "bytes (largest first)" : "age (coldest first)") << "\n";
  }
  out << "total: " << (top.n != 0 ? of : r.namespaces.size()) << " namespaces, " << r.total_blocks << " blocks, "
      << HumanBytes(r.total_bytes) << " (" << r.files_scanned << " files scanned)\n";
  uint64_t far_future = 0;
  for (const NamespaceUsage& u : r.namespaces) far_future += u.far_future_blocks;
  FarFutureText(out, "du", far_future);
  ProblemsText(out, "unreadable:", r.unreadable);
  if (!r.unreadable.empty()) {
    out << "du: incomplete: " << r.unreadable.size() + r.unreadable_unlisted << " parts could not be read (exit 8)";
    out << (r.unreadable_unlisted != 0 ? ", " + std::to_string(r.unreadable_unlisted) + " not listed\n" : "\n");
  }
  return out.str();
}

nlohmann::json FsckJson(const FsckReport& r) {
  nlohmann::json findings = nlohmann::json::array();
  std::map<std::string, uint64_t> by_kind;
  uint64_t repaired = 0;
  for (const Finding& f : r.findings) {
    findings.push_back({{"kind", FindingKindName(f.kind)}, {"path", f.path}, {"rule", f.rule},
                        {"action", RepairActionName(f.action)}, {"detail", f.detail}});
    ++by_kind[std::string(FindingKindName(f.kind))];
    repaired += f.action != RepairAction::kNone;
  }
  nlohmann::json unlisted = nlohmann::json::object();  // counted past the lists' cap: never repaired
  for (const auto& [kind, n] : r.findings_unlisted) {
    by_kind[std::string(FindingKindName(kind))] += n;
    unlisted[std::string(FindingKindName(kind))] = n;
  }
  nlohmann::json j = {{"findings", findings},
                      {"summary", {{"files_scanned", r.files_scanned}, {"blocks_checked", r.blocks_checked},
                                   {"blocks_verified", r.blocks_verified},
                                   {"verified_without_noatime", r.verified_without_noatime},
                                   {"verify_read_bytes", r.verify_read_bytes},
                                   {"sealed_checked", r.sealed_checked}, {"sealed_verified", r.sealed_verified},
                                   {"findings", r.FindingsTotal()}, {"by_kind", by_kind}, {"unlisted", unlisted},
                                   {"repaired", repaired}, {"left", r.FindingsTotal() - repaired},
                                   {"exit_code", r.ExitCode()}}}};
  MakeJsonUtf8(&j);  // paths and details may hold any bytes
  return j;
}

std::string FsckText(const FsckReport& r) {
  std::ostringstream out;
  for (const Finding& f : r.findings) {
    out << FindingKindName(f.kind) << " (" << f.rule << ") " << QuoteName(f.path);
    if (!f.detail.empty()) out << ": " << EscapeUnprintable(f.detail);
    if (f.action != RepairAction::kNone) out << " [" << RepairActionName(f.action) << "]";
    out << "\n";
  }
  for (const auto& [kind, n] : r.findings_unlisted) {
    out << "... and " << n << " more " << FindingKindName(kind) << " not listed (nor repaired): a later run lists them\n";
  }
  const nlohmann::json summary = FsckJson(r)["summary"];
  out << "fsck: " << r.files_scanned << " files, " << r.blocks_checked << " blocks checked";
  if (r.blocks_verified) out << ", " << r.blocks_verified << " verified";
  if (r.verified_without_noatime) out << " (" << r.verified_without_noatime << " without O_NOATIME: their atime may have moved)";
  if (r.sealed_checked) out << ", " << r.sealed_checked << " sealed (" << r.sealed_verified << " tags checked)";
  out << "; " << r.FindingsTotal() << " findings, " << summary["repaired"].get<uint64_t>() << " repaired -> "
      << (r.ExitCode() == 0 ? "clean" : r.ExitCode() == 1 ? "repaired" : "problems left") << "\n";
  return out.str();
}

nlohmann::json GcJson(const GcReport& r) {
  nlohmann::json list = nlohmann::json::array();
  for (const Reclaimed& x : r.reclaimed) list.push_back({{"path", x.path}, {"bytes", x.bytes}, {"reason", x.reason}});
  nlohmann::json failed = nlohmann::json::array();
  for (const FailedRemoval& f : r.failed) {
    failed.push_back({{"path", f.path}, {"bytes", f.bytes}, {"reason", f.reason}, {"errno", f.sys_errno}, {"detail", f.detail}});
  }
  nlohmann::json j = {{"dry_run", r.dry_run}, {"reclaimed", list}, {"failed", failed}, {"bytes_reclaimed", r.bytes_reclaimed},
                      {"files_scanned", r.files_scanned}, {"files_reclaimed", r.files_reclaimed},
                      {"files_failed", r.files_failed}, {"dirs_removed", r.dirs_removed},
                      {"capacity_cutoff", r.capacity_cutoff}, {"capacity_tolerance_s", r.capacity_tolerance_s},
                      {"far_future_blocks", r.far_future_blocks},
                      {"walks", r.walks}, {"candidates_held", r.candidates_held},
                      {"capacity_skipped", r.capacity_skipped},
                      {"kept", ProblemsJson(r.kept)},
                      {"unreadable", ProblemsJson(r.unreadable)}, {"unreadable_unlisted", r.unreadable_unlisted},
                      {"exit_code", r.ExitCode()}};
  MakeJsonUtf8(&j);  // names on the volume may be any bytes
  return j;
}

std::string GcText(const GcReport& r) {
  std::ostringstream out;
  std::map<std::string, std::pair<uint64_t, uint64_t>> by_reason;
  for (const Reclaimed& x : r.reclaimed) {
    out << (r.dry_run ? "would remove " : "removed ") << QuoteName(x.path) << " (" << HumanBytes(x.bytes) << ", " << x.reason << ")\n";
    by_reason[x.reason].first++;
    by_reason[x.reason].second += x.bytes;
  }
  if (r.files_reclaimed > r.reclaimed.size()) {
    out << "... and " << (r.files_reclaimed - r.reclaimed.size()) << " more (the list stops at --list-max)\n";
  }
  out << "gc" << (r.dry_run ? " (dry run)" : "") << ": " << r.files_reclaimed << " files, "
      << HumanBytes(r.bytes_reclaimed) << (r.dry_run ? " reclaimable" : " reclaimed");
  for (const auto& [reason, c] : by_reason) out << "; " << reason << " " << c.first;
  out << " (" << r.files_scanned << " files scanned";
  if (r.dirs_removed) out << ", " << r.dirs_removed << " empty shard directories removed";
  out << ", " << r.walks << (r.walks == 1 ? " walk" : " walks");
  out << ")\n";
  for (const FailedRemoval& f : r.failed) {
    out << "not removed " << QuoteName(f.path) << " (" << HumanBytes(f.bytes) << ", " << f.reason << "): "
        << EscapeUnprintable(f.detail) << "\n";
  }
  FarFutureText(out, "gc", r.far_future_blocks);
  if (!r.capacity_skipped.empty()) out << "gc: capacity bound not enforced: " << EscapeUnprintable(r.capacity_skipped) << "\n";
  ProblemsText(out, "kept", r.kept);
  ProblemsText(out, "unreadable:", r.unreadable);
  if (r.files_failed != 0) {
    out << "gc: " << r.files_failed << " selected files could not be removed: the bound is not enforced (exit 4)\n";
  }
  if (!r.unreadable.empty()) {
    out << "gc: incomplete: " << r.unreadable.size() + r.unreadable_unlisted << " parts could not be read (exit 8)";
    out << (r.unreadable_unlisted != 0 ? ", " + std::to_string(r.unreadable_unlisted) + " not listed\n" : "\n");
  }
  return out.str();
}

std::function<void(const ScanProgress&)> MakeProgressBar(std::string_view what) {
  if (!isatty(STDERR_FILENO)) return nullptr;
  const auto start = std::chrono::steady_clock::now();
  return [what = std::string(what), start](const ScanProgress& p) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "\r%s: %llu files, %s, %.0f files/s   ", what.c_str(),
                 static_cast<unsigned long long>(p.files), HumanBytes(p.bytes).c_str(), s > 0 ? p.files / s : 0.0);
  };
}

}  // namespace kvtier::internal
