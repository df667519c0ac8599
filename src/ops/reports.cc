// du and fsck over a TreeScan.

#include <algorithm>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>

#include "format/seal_record.h"
#include "layout/py_json.h"
#include "ops/ops_internal.h"
#include "ops/scan.h"
#include "util/json_text.h"

namespace kvtier {
namespace internal {
namespace {

// No config.json nests deeper than this (vLLM's is 3 levels deep).
constexpr size_t kConfigDepthMax = 32;

// L180: a sealed namespace's config.json names its key by the key id of
// L161; only a well-formed one is reported (it is printed, and the volume's
// writers choose these bytes).
void ReadSeal(const nlohmann::json& fields, ConfigInfo* info) {
  const std::string key(format::kSealConfigKey);
  if (!fields.contains(key)) return;
  info->sealed = true;
  const nlohmann::json& seal = fields[key];
  if (!seal.is_object() || !seal.contains("key_id") || !seal["key_id"].is_string()) return;
  const std::string id = seal["key_id"].get<std::string>();
  uint8_t raw[format::kSealKeyIdBytes];
  if (format::ParseSealKeyIdHex(id, raw) && format::SealKeyIdHex(raw) == id) info->seal_key_id = id;
}

}  // namespace

ConfigInfo ParseConfig(const NsScan& ns) {
  ConfigInfo info;
  if (!ns.has_config || !ns.config_error.empty()) return info;
  // The canonical dump below recurses: refuse nesting no config has first.
  if (!CheckJsonDepth(ns.config_text, kConfigDepthMax, "config.json").ok()) return info;
  nlohmann::json fields = nlohmann::json::parse(ns.config_text, nullptr, /*allow_exceptions=*/false);
  if (fields.is_discarded() || !fields.is_object()) return info;
  info.parses = true;
  auto canonical = PyJsonDumpsCompact(fields);
  info.digest_matches = canonical.ok() && format::NamespaceDigestOf(*canonical) == ns.digest;  // L79
  auto get_int = [&](const char* key) {
    return fields.contains(key) && fields[key].is_number_integer() ? fields[key].get<int64_t>() : -1;
  };
  info.tokens_per_hash = get_int("tokens_per_hash");
  info.blocks_per_file = get_int("blocks_per_file");
  info.tp_size = get_int("tp_size");
  info.page_size = get_int("page_size");
  info.page_bytes = get_int("page_bytes");
  auto get_string = [&](const char* key) {
    return fields.contains(key) && fields[key].is_string() ? fields[key].get<std::string>() : std::string();
  };
  info.model = get_string("model_name");
  info.dtype = get_string("dtype");
  info.mem_layout = get_string("mem_layout");
  // "inference_engine" tells vLLM's namespaces from SGLang's (FORMAT.md L103).
  info.engine = get_string("inference_engine");
  if (info.engine != "vllm" && info.engine != "sglang") info.engine.clear();
  if (fields.contains("kv_cache_groups") && fields["kv_cache_groups"].is_array()) {
    info.groups = static_cast<int64_t>(fields["kv_cache_groups"].size());
    for (const auto& g : fields["kv_cache_groups"]) {
      const bool known = g.is_object() && g.contains("tokens_per_block") && g["tokens_per_block"].is_number_integer();
      info.group_tokens.push_back(known ? g["tokens_per_block"].get<int64_t>() : -1);
    }
  }
  ReadSeal(fields, &info);
  return info;
}

uint64_t LiveLeases(const NsScan& ns, uint64_t ttl_s, int64_t now) {
  uint64_t live = 0;
  for (const ScannedFile& l : ns.leases) live += AgeAtMost(now, l.mtime, ttl_s);
  // Past the list's cap, at least the newest lease is counted if live.
  if (live == 0 && ns.leases.more() != 0 && AgeAtMost(now, ns.leases_newest, ttl_s)) live = 1;
  return live;
}

uint64_t MostCommonSize(const NsScan& ns) { return ns.blocks.sizes.Mode(); }

namespace {

// One namespace's du line: the directory's name, config.json's settings,
// and the blocks' bytes and activity.
NamespaceUsage Usage(const std::string& name, const NsScan& ns, int64_t now) {
  const ConfigInfo info = ParseConfig(ns);
  NamespaceUsage u{
      .dir = name,
      .model = info.model.empty() ? name.substr(0, name.size() - format::kDigestHexChars - 1) : info.model,  // L2
      .digest = ns.digest,
      .has_config = ns.has_config,
      .engine = info.engine,
      .tokens_per_hash = info.tokens_per_hash,
      .blocks_per_file = info.blocks_per_file,
      .tp_size = info.tp_size,
      .groups = info.groups,
      .dtype = info.dtype,
      .page_size = info.page_size,
      .mem_layout = info.mem_layout,
      .ranks = ns.ranks,
      .blocks = ns.blocks.count,
      .bytes = ns.blocks.bytes,
      .tmp_files = ns.tmps.total() + ns.young_tmps,
      .newest_activity = ns.blocks.newest,
      .oldest_activity = ns.blocks.oldest,
      .newest_counted_activity = ns.blocks.newest_counted,
      .far_future_blocks = ns.blocks.far_future,
      .live_leases = LiveLeases(ns, kDefaultLeaseTtlS, now),
      .leases_known = ns.leases_known,
      .sealed = info.sealed,
      .seal_key_id = info.seal_key_id,
  };
  return u;
}

}  // namespace

DuReport DuScanned(const TreeScan& scan) {
  const int64_t now = std::time(nullptr);
  DuReport report;
  report.files_scanned = scan.files;
  for (const auto& [name, ns] : scan.namespaces) {
    NamespaceUsage u = Usage(name, ns, now);
    report.unreadable.insert(report.unreadable.end(), ns.unreadable.begin(), ns.unreadable.end());
    report.unreadable_unlisted += ns.unreadable.more();
    report.total_bytes += u.bytes;
    report.total_blocks += u.blocks;
    report.namespaces.push_back(std::move(u));
  }
  return report;
}

}  // namespace internal

namespace internal {

Result<DuReport> DuUnwatched(const ScanOptions& options) {
  if (IsRootList(options.root)) return DuRoots(options);
  KVTIER_ASSIGN_OR_RETURN(TreeScan scan, ScanTree(options));
  return DuScanned(scan);
}

}  // namespace internal

std::string_view FindingKindName(FindingKind kind) {
  static constexpr std::string_view kNames[] = {"config_missing", "config_torn", "config_digest_mismatch",
                                                "bad_name", "size_mismatch", "crc_mismatch", "stale_tmp",
                                                "probe_leftover", "stray_file", "empty_dir", "unreadable",
                                                "not_regular", "wrong_root", "seal_mismatch",
                                                "suspect_sizes"};
  return kNames[static_cast<int>(kind)];
}

std::string_view RepairActionName(RepairAction action) {
  static constexpr std::string_view kNames[] = {"none", "removed", "quarantined"};
  return kNames[static_cast<int>(action)];
}

int DuReport::ExitCode() const { return unreadable.empty() ? 0 : 8; }
int GcReport::ExitCode() const {
  return (failed.empty() && files_failed == 0 && !capacity_lease_failed ? 0 : 4) | (unreadable.empty() ? 0 : 8);
}

uint64_t FsckReport::FindingsTotal() const {
  uint64_t n = findings.size();
  for (const auto& [kind, count] : findings_unlisted) n += count;
  return n;
}

int FsckReport::ExitCode() const {
  bool left = !findings_unlisted.empty(), repaired = false;  // those unlisted were not repaired
  for (const Finding& f : findings) (f.action == RepairAction::kNone ? left : repaired) = true;
  return left ? 4 : repaired ? 1 : 0;
}

}  // namespace kvtier
