// gc: reclaims orphaned namespaces, enforces a capacity bound by least recent
// use, and always removes stale temp/probe files and short (corrupt) blocks.
// Only layout files are deleted, each only if it is still the file scanned,
// and a namespace gc cannot fully read (its leases above all) is kept.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <set>

#include "format/layout_names.h"
#include "ops/io_watch.h"
#include "ops/ops_internal.h"

namespace kvtier {
namespace internal {
namespace {

class GcRun {
 public:
  GcRun(const GcOptions& o, const TreeScan& scan, GcReport* report, const std::set<std::string>* no_reclaim = nullptr)
      : o_(o), editor_(scan.root_fd), report_(report), now_(std::time(nullptr)), no_reclaim_(no_reclaim) {}

  void Run(TreeScan& scan) {
    for (const auto& [name, ns] : scan.namespaces) {
      report_->unreadable.insert(report_->unreadable.end(), ns.unreadable.begin(), ns.unreadable.end());
    }
    const std::set<std::string> keep(o_.keep.begin(), o_.keep.end());
    std::vector<const ScannedFile*> candidates;  // blocks eligible for capacity eviction
    uint64_t total = 0;
    for (auto& [name, ns] : scan.namespaces) {
      const bool kept = keep.count(name) > 0;
      if (!kept) Always(ns);
      uint64_t ns_bytes = 0;
      for (const ScannedFile& b : ns.blocks) ns_bytes += b.size;
      if (kept) {
        total += ns_bytes;
        continue;
      }
      if ((no_reclaim_ == nullptr || no_reclaim_->count(name) == 0) && Orphaned(ns)) {
        ReclaimNamespace(ns);
        continue;
      }
      total += ns_bytes;
      for (const ScannedFile& b : ns.blocks) candidates.push_back(&b);
    }
    if (o_.max_bytes || !o_.reclaim_bytes.empty()) Capacity(candidates, total);
  }
  bool WouldReclaim(const NsScan& ns) const { return Orphaned(ns); }

 private:
  // F9: a selected file that cannot be removed is listed with its errno (the
  // bound is not enforced); one replaced meanwhile (ESTALE) is another
  // writer's new file, not ours to judge.
  void Reclaim(const ScannedFile& f, const char* reason) {
    if (report_->stopped || (o_.stop && o_.stop())) return void(report_->stopped = true);  // SIGTERM, or the lease lost
    if (const int err = o_.dry_run ? 0 : editor_.Remove(f)) {
      if (err != ESTALE) report_->failed.push_back({f.rel, f.size, reason, err, std::strerror(err)});
      return;
    }
    report_->reclaimed.push_back({f.rel, f.size, reason});
    report_->bytes_reclaimed += f.size;
    ReasonTotal& total = report_->by_reason[reason];
    ++total.files;
    total.bytes += f.size;
  }

  // Stale temp and probe files (L81, L82) and short blocks (L65, L80).
  void Always(NsScan& ns) {
    for (const ScannedFile& t : ns.tmps) {
      if (AgeAtLeast(now_, t.mtime, o_.tmp_grace_s)) Reclaim(t, "stale_tmp");
    }
    for (const ScannedFile& p : ns.probes) {
      if (AgeAtLeast(now_, p.mtime, o_.tmp_grace_s)) Reclaim(p, "stale_tmp");
    }
    const uint64_t row = MostCommonSize(ns);
    auto short_block = [&](const ScannedFile& b) { return b.size < row; };
    for (const ScannedFile& b : ns.blocks) {
      if (short_block(b)) Reclaim(b, "corrupt");
    }
    ns.blocks.erase(std::remove_if(ns.blocks.begin(), ns.blocks.end(), short_block), ns.blocks.end());
  }

  // L92: no live lease and no activity within --older-than. Fails closed:
  // a namespace whose leases or parts could not be read is kept, and said so.
  bool Orphaned(const NsScan& ns) const {
    if (!o_.older_than_s || LiveLeases(ns, o_.lease_ttl_s, now_) > 0) return false;
    int64_t newest = 0;
    for (const ScannedFile& b : ns.blocks) newest = std::max(newest, b.activity());
    for (const ScannedFile& t : ns.tmps) newest = std::max(newest, t.mtime);
    for (const ScannedFile& l : ns.leases) newest = std::max(newest, l.mtime);
    if (!AgeAtLeast(now_, newest, *o_.older_than_s)) return false;
    if (ns.leases_known && ns.unreadable.empty()) return true;
    const std::string why = ns.unreadable.empty() ? "it changed during the walk"
                                                  : ns.unreadable.front().path + ": " + ns.unreadable.front().detail;
    report_->kept.push_back({ns.dir, (ns.leases_known ? "parts could not be read; " : "its leases could not be read; ") + why});
    return false;
  }

  void ReclaimNamespace(const NsScan& ns) {
    for (const ScannedFile& b : ns.blocks) Reclaim(b, "orphaned_namespace");
    for (const ScannedFile& l : ns.leases) Reclaim(l, "orphaned_namespace");
    if (ns.has_config) Reclaim(ns.config, "orphaned_namespace");
    if (ns.root_marker) Reclaim(*ns.root_marker, "orphaned_namespace");  // L100
    if (!o_.dry_run) RemoveEmptyDirs(ns);
  }

  // Directories left empty, deepest first; a directory with a stray file in
  // it (or a fresh write) is not empty and stays.
  void RemoveEmptyDirs(const NsScan& ns) {
    std::set<std::string, std::greater<>> dirs;
    for (const ScannedFile& b : ns.blocks) {
      for (size_t at = b.rel.rfind('/'); at != std::string::npos && at > 0; at = b.rel.rfind('/', at - 1)) {
        dirs.insert(b.rel.substr(0, at));
      }
    }
    for (int64_t rank : ns.ranks) dirs.insert(format::BlockDirName(ns.dir, rank));
    const std::string meta = ns.dir + "/" + std::string(format::kMetaDirName);
    dirs.insert(meta + "/" + std::string(format::kLeaseDirName));
    dirs.insert(meta);
    dirs.insert(ns.dir);
    for (const std::string& d : dirs) (void)editor_.RemoveEmptyDir(d);  // fails harmlessly when not empty
  }

  // max_bytes's need is "capacity", what reclaim_bytes asks beyond it "min_free".
  void Capacity(std::vector<const ScannedFile*>& blocks, uint64_t total) {
    uint64_t capacity_need = 0;
    if (o_.max_bytes && total > *o_.max_bytes) {
      capacity_need = total - std::min(o_.low_water_bytes.value_or(*o_.max_bytes), *o_.max_bytes);
    }
    const uint64_t need = std::max(capacity_need, o_.reclaim_bytes.empty() ? 0 : o_.reclaim_bytes.front());
    if (need == 0) return;
    std::sort(blocks.begin(), blocks.end(),
              [](const ScannedFile* a, const ScannedFile* b) { return a->activity() < b->activity(); });
    uint64_t freed = 0;
    for (const ScannedFile* b : blocks) {
      if (freed >= need) break;
      const uint64_t before = report_->bytes_reclaimed;
      Reclaim(*b, freed < capacity_need ? "capacity" : "min_free");
      freed += report_->bytes_reclaimed - before;
    }
  }

  const GcOptions& o_;
  TreeEditor editor_;
  GcReport* report_;
  int64_t now_;
  const std::set<std::string>* no_reclaim_;  // namespaces never reclaimed whole (several roots)
};

}  // namespace

GcReport GcScanned(const GcOptions& o, TreeScan& scan, const std::set<std::string>& no_reclaim) {
  IoRootScope io_root(scan.root);
  GcReport report;
  report.dry_run = o.dry_run;
  report.files_scanned = scan.files;
  GcRun(o, scan, &report, &no_reclaim).Run(scan);
  return report;
}

std::set<std::string> OrphanedNamespaces(const GcOptions& o, const TreeScan& scan) {
  GcReport scratch;  // the reasons for keeping one are reported by the real run
  GcRun run(o, scan, &scratch);
  std::set<std::string> out;
  for (const auto& [name, ns] : scan.namespaces) {
    if (run.WouldReclaim(ns)) out.insert(name);
  }
  return out;
}

Result<GcReport> GcUnwatched(const GcOptions& options) {
  if (IsRootList(options.root)) return GcRoots(options);
  KVTIER_ASSIGN_OR_RETURN(TreeScan scan, ScanTree(options));
  return GcScanned(options, scan, {});
}

}  // namespace internal

}  // namespace kvtier
