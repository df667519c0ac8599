// du, fsck and gc over the roots of one path_sharding tier (FORMAT.md
// L99-L101): each root is scanned on its own, checked against its markers,
// and the reports are merged, with every path prefixed by its root.
//
// - du adds a namespace's usage up over the roots;
// - fsck runs its checks on every root and reports blocks that lie on a root
//   other than their own as wrong_root (never removed: a list given in the
//   wrong order must not delete the cache);
// - gc reclaims a namespace whole only if it would on every root that holds
//   it (a namespace half gone would fail the tier's next start, L100), while
//   --max-bytes bounds each root by itself: each drive fills on its own.
#include <algorithm>
#include <functional>
#include <map>
#include <memory>

#include "format/layout_names.h"
#include "format/root_list.h"
#include "kvtier/hashing.h"
#include "kvtier/layout.h"
#include "ops/ops_internal.h"

namespace kvtier::internal {
namespace {

std::string RootName(const std::vector<std::string>& roots, size_t i) {
  return "root_dir[" + std::to_string(i) + "] \"" + roots[i] + "\"";
}

// L100: a marker that contradicts the list means the list is not the one the
// tier uses: every verdict about placement would be wrong.
Status CheckMarkers(const std::vector<std::string>& roots, size_t i, const TreeScan& scan) {
  for (const auto& [name, ns] : scan.namespaces) {
    if (!ns.root_slot || (ns.root_slot->count == roots.size() && ns.root_slot->index == i)) continue;
    return InvalidArgument(RootName(roots, i) + " holds root " + std::to_string(ns.root_slot->index) + " of " +
                           std::to_string(ns.root_slot->count) + " of namespace " + name +
                           ", but the list gives it position " + std::to_string(i) + " of " +
                           std::to_string(roots.size()) + " (FORMAT.md L100): list the roots as the tier does");
  }
  return Status::Ok();
}

struct RootScans {
  std::vector<std::string> roots;
  std::vector<TreeScan> scans;
};

// visitors(i, one): what the walk of root i calls back (gc's first walk), if set.
template <class Options>
Result<RootScans> ScanRoots(const Options& o, const std::function<ScanVisitors(size_t, const Options&)>& visitors = {}) {
  RootScans out;
  KVTIER_ASSIGN_OR_RETURN(out.roots, format::SplitRootDirs(o.root, /*sharded=*/true));
  for (size_t i = 0; i < out.roots.size(); ++i) {
    Options one = o;
    one.root = out.roots[i];
    Result<TreeScan> scan = ScanTree(one, visitors ? visitors(i, one) : ScanVisitors{});
    if (!scan.ok()) return scan.status().WithContext("root_dir[" + std::to_string(i) + "]");
    KVTIER_RETURN_IF_ERROR(CheckMarkers(out.roots, i, *scan));
    out.scans.push_back(std::move(*scan));
  }
  return out;
}

template <class Options>
Options ForRoot(const Options& o, const std::string& root) {
  Options one = o;
  one.root = root;
  return one;
}

void Prefix(const std::string& root, std::vector<ScanProblem>* problems) {
  for (ScanProblem& p : *problems) p.path = JoinRoot(root, p.path);
}

void MergeUsage(const NamespaceUsage& u, NamespaceUsage* into) {
  into->blocks += u.blocks;
  into->bytes += u.bytes;
  into->tmp_files += u.tmp_files;
  into->newest_activity = std::max(into->newest_activity, u.newest_activity);
  into->newest_counted_activity = std::max(into->newest_counted_activity, u.newest_counted_activity);
  into->far_future_blocks += u.far_future_blocks;
  if (u.oldest_activity != 0) {
    into->oldest_activity = into->oldest_activity == 0 ? u.oldest_activity : std::min(into->oldest_activity, u.oldest_activity);
  }
  for (int64_t rank : u.ranks) {
    if (std::find(into->ranks.begin(), into->ranks.end(), rank) == into->ranks.end()) into->ranks.push_back(rank);
  }
  std::sort(into->ranks.begin(), into->ranks.end());
  into->live_leases = std::max(into->live_leases, u.live_leases);  // one instance holds a lease on every root
  into->leases_known = into->leases_known && u.leases_known;
  if (!into->has_config && u.has_config) {  // the first root with a config.json describes the namespace
    into->has_config = true;
    into->model = u.model;
    into->dtype = u.dtype;
    into->tokens_per_hash = u.tokens_per_hash, into->blocks_per_file = u.blocks_per_file;
    into->tp_size = u.tp_size, into->groups = u.groups;
    into->engine = u.engine, into->page_size = u.page_size, into->mem_layout = u.mem_layout;
  }
}

// The namespaces whose blocks are placed by L99 over this list: those with a
// marker, and those every root holds (vLLM creates <NS> on each of its roots).
std::map<std::string, bool> ShardedNamespaces(const RootScans& s) {
  std::map<std::string, size_t> roots_holding;
  std::map<std::string, bool> sharded;
  for (const TreeScan& scan : s.scans) {
    for (const auto& [name, ns] : scan.namespaces) {
      ++roots_holding[name];
      sharded[name] = sharded[name] || ns.root_slot.has_value();
    }
  }
  for (auto& [name, yes] : sharded) yes = yes || roots_holding[name] == s.roots.size();
  return sharded;
}

// L101: a block whose root by L99 is another one (checked on fsck's walk
// of root i's blocks).
ExtraBlockCheck WrongRoots(const RootScans& s, size_t i, const std::map<std::string, bool>& sharded) {
  return [&s, i, &sharded](const std::string& ns, const ScannedFile& b) -> std::optional<Finding> {
    const auto it = sharded.find(ns);
    if (it == sharded.end() || !it->second) return std::nullopt;
    const std::string file = SplitRel(b.rel).second;  // the view below points into it
    const auto hex = format::BlockFileHex(file);
    const Result<BlockHash> hash = hex ? BlockHash::FromHex(*hex) : Result<BlockHash>(InvalidArgument("not a block"));
    if (!hash.ok()) return std::nullopt;
    const size_t want = format::RootIndexOf(hash->bytes(), s.roots.size());
    if (want == i) return std::nullopt;
    return Finding{FindingKind::kWrongRoot, b.rel, "L101", RepairAction::kNone,
                   "belongs on " + RootName(s.roots, want) + " (hash mod " + std::to_string(s.roots.size()) + ")"};
  };
}

}  // namespace

bool IsRootList(const std::string& root) { return root.find(',') != std::string::npos; }

Result<DuReport> DuRoots(const ScanOptions& o) {
  KVTIER_ASSIGN_OR_RETURN(RootScans s, ScanRoots(o));
  DuReport out;
  std::map<std::string, NamespaceUsage> merged;
  for (size_t i = 0; i < s.roots.size(); ++i) {
    DuReport r = DuScanned(s.scans[i]);
    out.files_scanned += r.files_scanned;
    out.total_bytes += r.total_bytes;
    out.total_blocks += r.total_blocks;
    Prefix(s.roots[i], &r.unreadable);
    out.unreadable.insert(out.unreadable.end(), r.unreadable.begin(), r.unreadable.end());
    out.unreadable_unlisted += r.unreadable_unlisted;
    for (const NamespaceUsage& u : r.namespaces) {
      auto [it, fresh] = merged.emplace(u.dir, u);
      if (!fresh) MergeUsage(u, &it->second);
    }
  }
  for (auto& [dir, u] : merged) out.namespaces.push_back(std::move(u));  // sorted by dir, as Du's
  return out;
}

Result<FsckReport> FsckRoots(const FsckOptions& o) {
  KVTIER_ASSIGN_OR_RETURN(RootScans s, ScanRoots(o));
  const std::map<std::string, bool> sharded = ShardedNamespaces(s);
  FsckReport out;
  for (size_t i = 0; i < s.roots.size(); ++i) {
    KVTIER_ASSIGN_OR_RETURN(FsckReport r, FsckScanned(ForRoot(o, s.roots[i]), s.scans[i], WrongRoots(s, i, sharded)));
    for (Finding& f : r.findings) f.path = JoinRoot(s.roots[i], f.path);
    out.findings.insert(out.findings.end(), r.findings.begin(), r.findings.end());
    for (const auto& [kind, n] : r.findings_unlisted) out.findings_unlisted[kind] += n;
    out.files_scanned += r.files_scanned;
    out.blocks_checked += r.blocks_checked;
    out.blocks_verified += r.blocks_verified;
    out.verified_without_noatime += r.verified_without_noatime;
    out.verify_read_bytes += r.verify_read_bytes;
  }
  return out;
}

Result<GcReport> GcRoots(const GcOptions& o) {
  // Each root's first walk keeps its own histogram and candidates (its share of the budget).
  std::vector<std::unique_ptr<FirstWalkUse>> uses;
  auto first_walk = [&](size_t, const GcOptions& one) {
    const size_t roots = std::count(o.root.begin(), o.root.end(), ',') + 1;
    uses.push_back(std::make_unique<FirstWalkUse>(o.candidates_bytes_max / roots));
    return FirstWalkVisitors(one, uses.back().get());
  };
  KVTIER_ASSIGN_OR_RETURN(RootScans s, ScanRoots<GcOptions>(o, first_walk));
  std::map<std::string, size_t> holding, orphaned;
  for (size_t i = 0; i < s.roots.size(); ++i) {
    for (const auto& [name, ns] : s.scans[i].namespaces) ++holding[name];
    for (const std::string& name : OrphanedNamespaces(ForRoot(o, s.roots[i]), s.scans[i])) ++orphaned[name];
  }
  std::set<std::string> no_reclaim;  // orphaned on some roots only: kept whole on all
  for (const auto& [name, n] : holding) {
    if (orphaned[name] < n) no_reclaim.insert(name);
  }
  GcReport out;
  out.dry_run = o.dry_run;
  for (size_t i = 0; i < s.roots.size(); ++i) {
    GcOptions one = ForRoot(o, s.roots[i]);
    if (!o.reclaim_bytes.empty()) one.reclaim_bytes = {o.reclaim_bytes[i]};  // each root's own goal
    KVTIER_ASSIGN_OR_RETURN(GcReport r, GcScanned(one, s.scans[i], no_reclaim, uses[i].get()));
    out.stopped = out.stopped || r.stopped;
    for (const auto& [reason, t] : r.by_reason) {
      out.by_reason[reason].files += t.files;
      out.by_reason[reason].bytes += t.bytes;
    }
    for (Reclaimed& c : r.reclaimed) c.path = JoinRoot(s.roots[i], c.path);
    for (FailedRemoval& f : r.failed) f.path = JoinRoot(s.roots[i], f.path);
    out.failed.insert(out.failed.end(), r.failed.begin(), r.failed.end());
    Prefix(s.roots[i], &r.unreadable);
    Prefix(s.roots[i], &r.kept);
    out.reclaimed.insert(out.reclaimed.end(), r.reclaimed.begin(), r.reclaimed.end());
    out.unreadable.insert(out.unreadable.end(), r.unreadable.begin(), r.unreadable.end());
    out.unreadable_unlisted += r.unreadable_unlisted;
    out.kept.insert(out.kept.end(), r.kept.begin(), r.kept.end());
    out.bytes_reclaimed += r.bytes_reclaimed;
    out.files_scanned += r.files_scanned;
    out.files_reclaimed += r.files_reclaimed;
    out.files_failed += r.files_failed;
    out.dirs_removed += r.dirs_removed;
    out.walks = std::max(out.walks, r.walks);
    out.candidates_held += r.candidates_held;
    if (out.capacity_skipped.empty()) out.capacity_skipped = r.capacity_skipped;
    out.capacity_cutoff = std::max(out.capacity_cutoff, r.capacity_cutoff);
    out.capacity_tolerance_s = std::max(out.capacity_tolerance_s, r.capacity_tolerance_s);
    out.far_future_blocks += r.far_future_blocks;
  }
  return out;
}

}  // namespace kvtier::internal
