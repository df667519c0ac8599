// gc: reclaims orphaned namespaces, enforces a capacity bound by least recent
// use, and always removes stale temp/probe files and short (corrupt) blocks
// where the row is known (FORMAT.md L196).
// Only layout files are deleted, each only if it is still the file scanned,
// and a namespace gc cannot fully read (its leases above all) is kept.
//
// Bounded memory, whatever the volume holds: the first walk keeps statistics per namespace,
// a histogram of use times (gc_histogram.h) and the oldest blocks that fit a
// fixed budget (gc_candidates.h). When nothing must go first and the bound
// asks no more than those oldest blocks hold, they go in exact LRU order and
// that one walk is all. Otherwise a second walk removes orphaned namespaces'
// and short blocks (and fills the histogram anew), and one more, only when
// the bound is over, removes the blocks beyond the histogram's cut-off. No
// walk holds the list of all blocks.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <vector>

#include "format/layout_names.h"
#include "io/io_watch.h"
#include "ops/gc_candidates.h"
#include "ops/gc_histogram.h"
#include "ops/ops_internal.h"
#include "ops/removed_blocks.h"
#include "ops/row_basis.h"
#include "ops/use_time.h"

namespace kvtier {
namespace internal {
namespace {

enum class Fate { kLive, kKept, kOrphaned };

class GcRun {
 public:
  GcRun(const GcOptions& o, const TreeScan& first, GcReport* report, const std::set<std::string>* no_reclaim = nullptr,
        FirstWalkUse* first_use = nullptr)
      : o_(o), editor_(first.root_fd), removed_(o.on_block_removed, o.root, first), report_(report),
        now_(first_use ? first_use->now : std::time(nullptr)), no_reclaim_(no_reclaim), first_use_(first_use) {}

  Status Run(const TreeScan& first);
  bool WouldReclaim(const NsScan& ns) const { return Orphaned(ns); }

 private:
  // A selected file that cannot be removed is listed with its errno (the
  // bound is not enforced); one replaced meanwhile (ESTALE) is another
  // writer's new file, not ours to judge. Lists stop at list_max (counts
  // go on). Whether the file is gone now. Thread-safe.
  bool Reclaim(const ScannedFile& f, const char* reason, int dir_fd = -1) {
    if (o_.stop && o_.stop()) {  // SIGTERM, or the collector lease lost (FORMAT.md L122)
      std::lock_guard lock(mu_);
      report_->stopped = true;
      return false;
    }
    int err = 0;
    if (!o_.dry_run) err = removed_.Remove(editor_, f, reason, dir_fd);  // tells on_block_removed
    std::lock_guard lock(mu_);
    if (err != 0) {
      if (err == ESTALE) return false;
      ++report_->files_failed;
      if (report_->failed.size() < o_.list_max) report_->failed.push_back({f.rel, f.bytes, reason, err, std::strerror(err)});
      return false;
    }
    ++report_->files_reclaimed;
    report_->bytes_reclaimed += f.bytes;
    ReasonTotal& total = report_->by_reason[reason];
    ++total.files;
    total.bytes += f.bytes;
    if (report_->reclaimed.size() < o_.list_max) report_->reclaimed.push_back({f.rel, f.bytes, reason});
    return !o_.dry_run;
  }

  // Stale temp and probe files (L81, L82), before the walk that prunes
  // directories (a stale temp file would keep its directory).
  void StaleFiles(const NsScan& ns) {
    for (const ScannedFile& t : ns.tmps) {
      if (AgeAtLeast(now_, t.mtime, o_.tmp_grace_s)) Reclaim(t, "stale_tmp");
    }
    for (const ScannedFile& p : ns.probes) {
      if (AgeAtLeast(now_, p.mtime, o_.tmp_grace_s)) Reclaim(p, "stale_tmp");
    }
  }

  // L92: no live lease and no activity within --older-than. Fails closed:
  // a namespace whose leases or parts could not be read is kept, and said so.
  bool Orphaned(const NsScan& ns) const {
    if (!o_.older_than_s || LiveLeases(ns, o_.lease_ttl_s, now_) > 0) return false;
    int64_t newest = ns.blocks.newest;
    newest = std::max({newest, ns.tmps_newest, ns.leases_newest});  // all of them, listed or not
    if (!AgeAtLeast(now_, newest, *o_.older_than_s)) return false;
    if (ns.leases_known && ns.unreadable.empty()) return true;
    const std::string why = ns.unreadable.empty() ? "it changed during the walk"
                                                  : ns.unreadable.front().path + ": " + ns.unreadable.front().detail;
    std::lock_guard lock(mu_);
    report_->kept.push_back({ns.dir, (ns.leases_known ? "parts could not be read; " : "its leases could not be read; ") + why});
    return false;
  }

  // What is left of an orphaned namespace once its blocks are gone (the
  // walk removed its emptied shard directories).
  void ReclaimNamespaceRest(const NsScan& ns) {
    for (const ScannedFile& l : ns.leases) Reclaim(l, "orphaned_namespace");
    // More leases than a list holds: the rest go next pass, and config.json
    // and the root marker (L100) with them, never a namespace half gone.
    if (ns.leases.more() != 0) return;
    if (ns.has_config) Reclaim(ns.config, "orphaned_namespace");
    if (ns.root_marker) Reclaim(*ns.root_marker, "orphaned_namespace");  // L100
    if (o_.dry_run) return;
    for (int64_t rank : ns.ranks) (void)editor_.RemoveEmptyDir(format::BlockDirName(ns.dir, rank));
    const std::string meta = ns.dir + "/" + std::string(format::kMetaDirName);
    for (const std::string& d : {meta + "/" + std::string(format::kLeaseDirName), meta, ns.dir}) {
      (void)editor_.RemoveEmptyDir(d);  // fails harmlessly when not empty
    }
  }

  Fate FateOf(const std::string& ns) const {
    const auto it = fate_.find(ns);
    return it == fate_.end() ? Fate::kKept : it->second;  // new since the first walk: left for next time
  }

  // The second walk: orphaned namespaces' and short blocks go; the others'
  // bytes go into the histogram of use times.
  bool SecondWalkBlock(const std::string& ns, const ScannedFile& b, int dir_fd) {
    const Fate fate = FateOf(ns);
    if (fate == Fate::kKept) return false;
    if (fate == Fate::kOrphaned) return Reclaim(b, "orphaned_namespace", dir_fd);
    if (RemovableShort(b.size, rows_.at(ns))) return Reclaim(b, "corrupt", dir_fd);  // L65, L80, L196
    histogram_.Add(UseHistogram::Bucket(now_, b.activity()), b.bytes);
    live_bytes_ += b.bytes;
    return false;
  }

  // The third walk: blocks older than the cut-off bucket go; in the bucket
  // itself, blocks in walk order until the bound is met.
  bool CapacityBlock(const std::string& ns, const ScannedFile& b, int dir_fd) {
    if (FateOf(ns) != Fate::kLive || RemovableShort(b.size, rows_.at(ns))) return false;
    const int bucket = UseHistogram::Bucket(now_, b.activity());
    if (bucket < cut_.bucket) return false;
    if (bucket == cut_.bucket) {
      int64_t left = boundary_left_.load();
      do {
        if (left <= 0) return false;
      } while (!boundary_left_.compare_exchange_weak(left, left - static_cast<int64_t>(b.bytes)));
    }
    // max_bytes's need is "capacity", what reclaim_bytes asks beyond it "min_free".
    const bool capacity = capacity_taken_.fetch_add(b.bytes) < capacity_need_;
    return Reclaim(b, capacity ? "capacity" : "min_free", dir_fd);
  }

  // FORMAT.md L108: a shard directory gc emptied (or found empty) goes, by
  // rmdir of the inode listed, only if the listing showed it unchanged for
  // dir_grace_s: a writer that just made it is about to create its file.
  bool PruneDir(const std::string& ns, const ScannedFile& d, size_t left, int parent_fd) {
    if (left != 0 || o_.dry_run) return false;
    const Fate fate = FateOf(ns);
    if (fate == Fate::kKept || (fate == Fate::kLive && !AgeAtLeast(now_, d.mtime, o_.dir_grace_s))) return false;
    IoScope io(d.rel);
    if (io.cancelled() || UnlinkIfSameAt(parent_fd, SplitRel(d.rel).second, d.dev, d.ino, /*dir=*/true) != 0) return false;
    ++dirs_removed_;
    return true;
  }

  ScanVisitors Visitors(bool (GcRun::*block)(const std::string&, const ScannedFile&, int)) {
    ScanVisitors v;
    v.block = [this, block](const std::string& ns, const ScannedFile& b, int fd) { return (this->*block)(ns, b, fd); };
    v.shard_dir = [this](const std::string& ns, const ScannedFile& d, size_t left, int fd) { return PruneDir(ns, d, left, fd); };
    return v;
  }

  void Decide(const TreeScan& first);
  bool NeedsSecondWalk(const TreeScan& first) const;
  void PruneListedEmptyDirs(const TreeScan& first);
  uint64_t Need(uint64_t live_bytes);
  Status Capacity(const TreeScan& first, const UseHistogram& histogram, uint64_t live_bytes, CandidateBuffer* buffer);
  bool TrimFromBuffer(uint64_t need, CandidateBuffer* buffer);
  bool UsedSinceWalk(int dir_fd, const ScannedFile& f) const;
  void RemoveByDirectory(const CandidateBuffer& buffer, const std::vector<CandidateBuffer::Entry>& oldest, size_t capacity_n);
  void RemoveShard2(const CandidateBuffer& buffer, const std::vector<CandidateBuffer::Entry>& oldest,
                    const std::vector<size_t>& idx, size_t begin, size_t end, size_t capacity_n, int parent_fd);

  const GcOptions& o_;
  TreeEditor editor_;
  RemovedBlocks removed_;  // tells o_.on_block_removed
  GcReport* report_;
  int64_t now_;
  const std::set<std::string>* no_reclaim_;  // namespaces never reclaimed whole (several roots)
  FirstWalkUse* first_use_;                  // the first walk's histogram and candidates, when it made them
  mutable std::mutex mu_;                    // guards report_
  std::map<std::string, Fate> fate_;         // by namespace, from the first walk
  std::map<std::string, RowBasis> rows_;     // by namespace: what its sizes are judged by (L196)
  uint64_t kept_bytes_ = 0;
  std::atomic<uint64_t> live_bytes_{0}, dirs_removed_{0};
  UseHistogram histogram_;  // of the second walk
  UseHistogram::Cut cut_;
  std::atomic<int64_t> boundary_left_{0};
  uint64_t capacity_need_ = 0;  // what max_bytes asks; reclaim_bytes may ask more
  std::atomic<uint64_t> capacity_taken_{0};
};

// What becomes of each namespace, by the first walk.
void GcRun::Decide(const TreeScan& first) {
  const std::set<std::string> keep(o_.keep.begin(), o_.keep.end());
  for (const auto& [name, ns] : first.namespaces) {
    report_->unreadable.insert(report_->unreadable.end(), ns.unreadable.begin(), ns.unreadable.end());
    report_->unreadable_unlisted += ns.unreadable.more();
    rows_[name] = RowBasisOf(ns, ParseConfig(ns), /*given_row_bytes=*/0);
    if (keep.count(name) > 0) {
      fate_[name] = Fate::kKept;
      kept_bytes_ += ns.blocks.bytes;
      continue;
    }
    StaleFiles(ns);
    const bool may_reclaim = no_reclaim_ == nullptr || no_reclaim_->count(name) == 0;
    fate_[name] = may_reclaim && Orphaned(ns) ? Fate::kOrphaned : Fate::kLive;
  }
}

// The second walk is needed where blocks must go before the histogram is
// right (orphaned namespaces, short blocks), or without the first walk's.
bool GcRun::NeedsSecondWalk(const TreeScan& first) const {
  if (first_use_ == nullptr) return true;
  for (const auto& [name, ns] : first.namespaces) {
    const Fate fate = fate_.at(name);
    if (fate == Fate::kOrphaned) return true;
    if (fate == Fate::kLive && ns.blocks.count != 0 && !ns.blocks.sizes.All(rows_.at(name).bytes)) return true;  // short blocks?
  }
  return false;
}

// Without a second walk, the empty shard directories the first one listed
// go by the same rule (L108), looked at again (lstat) first.
void GcRun::PruneListedEmptyDirs(const TreeScan& first) {
  for (const auto& [name, ns] : first.namespaces) {
    if (fate_.at(name) != Fate::kLive) continue;
    for (const std::string& d : ns.empty_dirs) {
      const size_t depth = static_cast<size_t>(std::count(d.begin(), d.end(), '/'));
      if (depth < 1 || depth > 2) continue;  // <hhh> or <hhh>/<hh>_g<g> below a block directory
      // The <hhh> parent is looked at before its child goes: it may go too,
      // by the same rule, if that child was its last entry.
      const auto [parent, leaf] = SplitRel(d);
      std::optional<ScannedFile> up = depth == 2 ? editor_.LookAtDir(parent) : std::nullopt;
      const std::optional<ScannedFile> dir = editor_.LookAtDir(d);
      UniqueFd fd, up_fd;
      if (!dir || editor_.OpenDir(parent, &fd) != 0 || !PruneDir(name, *dir, 0, fd.get())) continue;
      if (up && editor_.OpenDir(SplitRel(parent).first, &up_fd) == 0) (void)PruneDir(name, *up, 0, up_fd.get());
    }
  }
}

// What the bound asks: max_bytes's need ("capacity") or reclaim_bytes's if more.
uint64_t GcRun::Need(uint64_t live_bytes) {
  const uint64_t total = kept_bytes_ + live_bytes;
  if (o_.max_bytes && total > *o_.max_bytes) {
    capacity_need_ = total - std::min(o_.low_water_bytes.value_or(*o_.max_bytes), *o_.max_bytes);
  }
  return std::max(capacity_need_, o_.reclaim_bytes.empty() ? 0 : o_.reclaim_bytes.front());
}

// The bound: the candidate buffer when it holds what must go; else a
// histogram of use times gives the cut-off and one more walk removes what
// lies beyond it.
Status GcRun::Capacity(const TreeScan& first, const UseHistogram& histogram, uint64_t live_bytes, CandidateBuffer* buffer) {
  const uint64_t need = Need(live_bytes);
  if (need == 0) return Status::Ok();
  if (o_.capacity_gate) report_->capacity_skipped = o_.capacity_gate();
  if (!report_->capacity_skipped.empty() || (buffer != nullptr && TrimFromBuffer(need, buffer))) return Status::Ok();
  cut_ = histogram.CutFor(need);
  if (cut_.bucket < 0) return Status::Ok();
  boundary_left_ = static_cast<int64_t>(std::min<uint64_t>(need - cut_.older_bytes, INT64_MAX));
  report_->capacity_cutoff = now_ - static_cast<int64_t>(UseHistogram::LowestAgeS(cut_.bucket));
  report_->capacity_tolerance_s = UseHistogram::WidthS(cut_.bucket);
  ++report_->walks;
  return ScanAgain(o_, first, Visitors(&GcRun::CapacityBlock)).status();
}

// Exact LRU from the buffer: it holds the oldest blocks of the tree, so when
// it held every block or its bytes reach `need`, the oldest of them until
// `need` is met are exactly the blocks to go. False: walk again instead.
bool GcRun::TrimFromBuffer(uint64_t need, CandidateBuffer* buffer) {
  if (!buffer->oldest_set() || (buffer->dropped() && buffer->held_bytes() < need)) return false;
  std::vector<CandidateBuffer::Entry> oldest = buffer->TakeOldestFirst();
  uint64_t taken = 0;
  size_t n = 0, capacity_n = 0;
  for (; n < oldest.size() && taken < need; ++n) {
    capacity_n += taken < capacity_need_ ? 1 : 0;  // max_bytes's share is "capacity", the rest "min_free"
    taken += oldest[n].bytes;
  }
  oldest.resize(n);
  if (n == 0) return true;
  // Ties within one second are taken in name order: the stated tolerance.
  report_->capacity_cutoff = oldest.back().activity;
  report_->capacity_tolerance_s = 1;
  RemoveByDirectory(*buffer, oldest, capacity_n);
  return true;
}

// The selected blocks, directory by directory (oldest[i] for i < capacity_n
// go for "capacity"): each shard directory is looked at before its first
// removal and pruned after its last by L108, as a walk would.
void GcRun::RemoveByDirectory(const CandidateBuffer& buffer, const std::vector<CandidateBuffer::Entry>& oldest,
                              size_t capacity_n) {
  if (o_.dry_run) {  // what the walk saw, oldest first: no directory is looked at
    for (size_t i = 0; i < oldest.size(); ++i) Reclaim(buffer.File(oldest[i]), i < capacity_n ? "capacity" : "min_free");
    return;
  }
  std::vector<size_t> idx(oldest.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  auto key = [&](size_t i) {
    const CandidateBuffer::Entry& e = oldest[i];
    return std::make_tuple(e.dir, e.hash[0], e.hash[1], e.hash[2] >> 4, e.group);  // <NS>_r<rank>, <hhh>, <hh>, group
  };
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  for (size_t begin = 0; begin < idx.size() && !report_->stopped;) {  // stopped: look at no more directories
    const std::string shard1 = SplitRel(buffer.DirOf(oldest[idx[begin]])).first;
    size_t end = begin;
    while (end < idx.size() && SplitRel(buffer.DirOf(oldest[idx[end]])).first == shard1) ++end;
    const std::optional<ScannedFile> up = editor_.LookAtDir(shard1);
    UniqueFd fd, up_fd;
    const int err = editor_.OpenDir(shard1, &fd);
    for (size_t run = begin; run < end;) {
      size_t run_end = run;
      while (run_end < end && key(idx[run_end]) == key(idx[run])) ++run_end;
      RemoveShard2(buffer, oldest, idx, run, run_end, capacity_n, err == 0 ? fd.get() : -1);
      run = run_end;
    }
    const std::string ns(format::ParseBlockDirName(SplitRel(shard1).first)->ns);
    if (up && err == 0 && editor_.OpenDir(SplitRel(shard1).first, &up_fd) == 0) (void)PruneDir(ns, *up, 0, up_fd.get());
    begin = end;
  }
}

// One <hh>_g<g> directory's selected blocks (idx[begin, end)); parent_fd: its <hhh>'s fd (-1: none).
void GcRun::RemoveShard2(const CandidateBuffer& buffer, const std::vector<CandidateBuffer::Entry>& oldest,
                         const std::vector<size_t>& idx, size_t begin, size_t end, size_t capacity_n, int parent_fd) {
  const std::string dir = buffer.DirOf(oldest[idx[begin]]);
  const std::optional<ScannedFile> listed = editor_.LookAtDir(dir);  // its mtime before any removal (L108)
  UniqueFd fd;
  // A directory that cannot be opened now (a flaky network mount) is left
  // for the next pass: without its fd nothing can tell a block used since
  // the walk, and a path-based unlink could then remove one.
  const bool open = parent_fd >= 0 && editor_.OpenDir(dir, &fd) == 0;
  for (size_t k = begin; k < end && open; ++k) {
    const ScannedFile f = buffer.File(oldest[idx[k]]);
    if (UsedSinceWalk(fd.get(), f)) continue;
    Reclaim(f, idx[k] < capacity_n ? "capacity" : "min_free", fd.get());
  }
  const std::string ns(format::ParseBlockDirName(SplitRel(SplitRel(dir).first).first)->ns);
  if (listed && parent_fd >= 0) (void)PruneDir(ns, *listed, 0, parent_fd);
}

// A block loaded (L75: its atime set) or rewritten since the walk is in use
// again: kept, as a walk would keep it (the trim frees that much less).
bool GcRun::UsedSinceWalk(int dir_fd, const ScannedFile& f) const {
  IoScope io(f.rel);
  struct stat st;
  if (io.cancelled() || fstatat(dir_fd, SplitRel(f.rel).second.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return false;
  // f.activity() is as counted at the walk (FORMAT.md L155); a time found now
  // counts as the epoch only when still dated far ahead: any other is a use
  // (a block the walk counted as now, and found ahead still, is kept: the safe side).
  const int64_t use = std::max(st.st_mtim.tv_sec, st.st_atim.tv_sec);
  return st.st_ino == f.ino && (FarFuture(now_, use) ? 0 : use) > f.activity();
}

Status GcRun::Run(const TreeScan& first) {
  Decide(first);
  report_->walks = 1;
  if (first_use_ != nullptr) report_->candidates_held = first_use_->candidates.entries();
  if (!NeedsSecondWalk(first)) {
    uint64_t live = 0;
    for (const auto& [name, ns] : first.namespaces) live += fate_[name] == Fate::kLive ? ns.blocks.bytes : 0;
    KVTIER_RETURN_IF_ERROR(Capacity(first, first_use_->histogram, live, &first_use_->candidates));
    if (report_->walks == 1 && !o_.dry_run) PruneListedEmptyDirs(first);
    report_->dirs_removed = dirs_removed_.load();
    return Status::Ok();
  }
  ++report_->walks;
  KVTIER_RETURN_IF_ERROR(ScanAgain(o_, first, Visitors(&GcRun::SecondWalkBlock)).status());
  for (const auto& [name, ns] : first.namespaces) {
    if (fate_[name] == Fate::kOrphaned) ReclaimNamespaceRest(ns);
  }
  KVTIER_RETURN_IF_ERROR(Capacity(first, histogram_, live_bytes_.load(), nullptr));
  report_->dirs_removed = dirs_removed_.load();
  return Status::Ok();
}

}  // namespace

Result<GcReport> GcScanned(const GcOptions& o, const TreeScan& first, const std::set<std::string>& no_reclaim,
                           FirstWalkUse* first_use) {
  IoRootScope io_root(first.root);
  GcReport report;
  report.dry_run = o.dry_run;
  report.files_scanned = first.files;
  for (const auto& [name, ns] : first.namespaces) report.far_future_blocks += ns.blocks.far_future;
  KVTIER_RETURN_IF_ERROR(GcRun(o, first, &report, &no_reclaim, first_use).Run(first));
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

ScanVisitors FirstWalkVisitors(const GcOptions& options, FirstWalkUse* use) {
  use->now = std::time(nullptr);
  if (!options.max_bytes && options.reclaim_bytes.empty()) return {};
  auto keep = std::make_shared<const std::set<std::string>>(options.keep.begin(), options.keep.end());
  ScanVisitors visit;
  visit.block = [keep, use](const std::string& ns, const ScannedFile& b, int) {
    if (keep->count(ns) != 0) return false;
    use->histogram.Add(UseHistogram::Bucket(use->now, b.activity()), b.bytes);
    use->candidates.Offer(b, use->now);
    return false;
  };
  return visit;
}

Result<GcReport> GcUnwatched(const GcOptions& options) {
  if (IsRootList(options.root)) return GcRoots(options);
  // The first walk's histogram and candidates spare walks when no block must go first.
  auto use = std::make_unique<FirstWalkUse>(options.candidates_bytes_max);
  KVTIER_ASSIGN_OR_RETURN(TreeScan scan, ScanTree(options, FirstWalkVisitors(options, use.get())));
  return GcScanned(options, scan, {}, use.get());
}

}  // namespace internal

}  // namespace kvtier
