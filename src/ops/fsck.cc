// fsck: findings that cite FORMAT.md rules; --repair acts only on layout
// files, through directory fds, and only on the inode it examined.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "format/layout_names.h"
#include "format/seal_record.h"
#include "io/io_watch.h"
#include "ops/ops_internal.h"
#include "ops/block_verify.h"
#include "ops/removed_blocks.h"
#include "ops/row_basis.h"
#include "ops/seal_check.h"
#include "ops/trailer_sizes.h"
#include "util/crc32c.h"

namespace kvtier {
namespace internal {

namespace {

class FsckRun {
 public:
  FsckRun(const FsckOptions& o, const TreeScan& scan, FsckReport* report, const ExtraBlockCheck& extra,
          const SealKeys* keys)
      : o_(o), editor_(scan.root_fd), report_(report), now_(std::time(nullptr)), extra_(extra), keys_(keys),
        removed_(o.on_block_removed, o.root, scan) {
    for (const auto& [name, ns] : scan.namespaces) {
      const ConfigInfo info = ParseConfig(ns);
      // L182: a sealed namespace's blocks are all row + trailer, never plain rows.
      if (info.sealed) sealed_[name] = info.seal_key_id;
      // A seal member in a config.json that fails its digest (L79) may be an
      // edit: its blocks are judged by it but none is removed for it.
      if (info.sealed && !info.digest_matches) seal_untrusted_.insert(name);
      rows_[name] = RowBasisOf(ns, info, o_.row_bytes);  // L196
      if (!info.sealed && ns.blocks.count != 0 && !ns.blocks.sizes.All(rows_[name].bytes)) mixed_.insert(name);
    }
  }

  // Whether a second walk must visit the blocks: only where a block is not
  // of its namespace's row size, or their data or roots are checked.
  bool NeedsBlockWalk(const TreeScan& first) const {
    if (o_.verify_data || extra_) return true;
    for (const auto& [name, key_id] : sealed_) {
      if (first.namespaces.at(name).blocks.count != 0) return true;  // L182: each block's record is read
    }
    for (const auto& [name, ns] : first.namespaces) {
      if (ns.blocks.count != 0 && (ns.blocks.oversize != 0 || !ns.blocks.sizes.All(rows_.at(name).bytes))) return true;
    }
    return false;
  }

  // One block of the second walk (walker threads): its size against the
  // row (L80), then with verify_data its CRC (L67). Whether it was removed.
  bool Block(const std::string& ns, const ScannedFile& b, int dir_fd) {
    if (extra_) {
      if (auto f = extra_(ns, b)) Add(f->kind, f->path, f->rule.c_str(), f->action, f->detail);
    }
    const auto row = rows_.find(ns);
    if (row == rows_.end()) return false;  // a namespace new since the first walk: judged next time
    const RowBasis& basis = row->second;
    if (const auto sealed = sealed_.find(ns); sealed != sealed_.end()) {
      const bool trusted = !seal_untrusted_.count(ns);
      if (b.size == basis.bytes) return SealedBlock(sealed->second, trusted, b, dir_fd);
      // L196: by the most common size alone a block is judged by its own record.
      return basis.trusted() ? WrongSize(ns, b, basis, trusted) : SealedOtherSize(ns, sealed->second, trusted, b, dir_fd);
    }
    if (b.size == basis.bytes) {
      SampleMode(ns, b, dir_fd);
      return o_.verify_data && VerifyOne(b, dir_fd);
    }
    // L136: the row and its trailer, beside plain rows.
    if (b.size == basis.bytes + format::kTrailerBytes) {
      const format::TrailerState trailer = TrailerOf(b, dir_fd);
      if (trailer == format::TrailerState::kValid) return o_.verify_data && VerifyOne(b, dir_fd);
      if (trailer == format::TrailerState::kDamaged) return DamagedTrailer(b);
    }
    // A plain row beside trailer blocks? Not where the row size is given or declared.
    if (!basis.trusted() && b.size + format::kTrailerBytes == basis.bytes) return Defer(ns, b);
    return WrongSize(ns, b, basis);
  }

  // L67, L131: the trailer's magic with a record that fails its own CRC (or
  // names another length) is a corrupt block, as docs/checksums.md says, not
  // a longer row: reported as a CRC mismatch and removed with --repair.
  bool DamagedTrailer(const ScannedFile& b) {
    std::string detail = std::to_string(b.size) + " bytes: the row and a damaged checksum trailer";
    const RepairAction action = Remove(b, &detail, "crc_mismatch");
    Add(FindingKind::kCrcMismatch, b.rel, "L67", action, detail);
    return action == RepairAction::kRemoved;
  }

  // L80 (L182 in a sealed namespace): a block not of the size `basis` says.
  bool WrongSize(const std::string& ns, const ScannedFile& b, const RowBasis& basis, bool removable = true) {
    std::string detail = std::to_string(b.size) + " bytes, " + basis.name() + std::to_string(basis.bytes);
    if (basis.bytes != o_.row_bytes && sealed_.count(ns)) detail += " (the row and its seal trailer)";
    // L109: never read, whatever the row (a sparse terabyte costs a stat).
    if (b.size > kBlockBytesMax) detail += "; larger than any block (" + std::to_string(kBlockBytesMax) + " bytes): not read";
    // Short files are what vLLM itself deletes (L65), where the row is known
    // (L196); longer ones may be rows of a 64 K-page host (L66) and are only reported.
    RepairAction action = RepairAction::kNone;
    if (RemovableShort(b.size, basis)) {
      action = RemoveIf(removable, b, &detail, "size_mismatch");
    } else if (!basis.trusted() && b.size < basis.bytes) {
      detail += "; not removed: no row size is given or declared (L196)";
      Suspect(ns);  // a longer one is kept whatever the basis (L66)
    }
    Add(FindingKind::kSizeMismatch, b.rel, "L80", action, detail);
    return action == RepairAction::kRemoved;
  }

  // L196: a block of a sealed namespace not of its most common size, judged
  // by its own seal record (and with the key, its tag) as L182/L183 judge
  // one of that size: no record of the namespace's key, or a failed tag, is
  // a seal_mismatch; a sound one is reported, never removed for its size.
  bool SealedOtherSize(const std::string& ns, const std::string& key_id, bool removable, const ScannedFile& b,
                       int dir_fd) {
    bool tag_checked = false;
    const std::optional<bool> removed = JudgeSealed(key_id, removable, b, dir_fd, &tag_checked);
    if (removed) return *removed;
    const RowBasis& basis = rows_.at(ns);
    std::string detail = std::to_string(b.size) + " bytes, " + basis.name() + std::to_string(basis.bytes) +
                         (tag_checked ? "; its tag checks under the key: a sealed block of another row size"
                                      : "; its seal record is sound, and only its tag (--seal-key-file with "
                                        "--verify-data) can judge it: not removed (L196)");
    if (!tag_checked && b.size < basis.bytes) Suspect(ns);  // a longer one is kept whatever the basis (L66)
    Add(FindingKind::kSizeMismatch, b.rel, "L196", RepairAction::kNone, detail);
    return false;
  }

  void Suspect(const std::string& ns) {
    std::lock_guard lock(mu_);
    ++suspect_[ns];
  }

  // L182, L183: a block of a sealed namespace, of its size: its seal record
  // and key id against config.json's, and with verify_data and the key
  // among FsckOptions::seal_key_files its tag. Whether it was removed.
  bool SealedBlock(const std::string& key_id, bool removable, const ScannedFile& b, int dir_fd) {
    return JudgeSealed(key_id, removable, b, dir_fd).value_or(false);
  }
  // The same, nullopt where the block is sound (*tag_checked: by its tag).
  std::optional<bool> JudgeSealed(const std::string& key_id, bool removable, const ScannedFile& b, int dir_fd,
                                  bool* tag_checked = nullptr) {
    IoScope io(b.rel);
    UniqueFd fd;
    struct stat st;
    if (io.cancelled() || OpenRegularAt(dir_fd, SplitRel(b.rel).second, /*no_atime=*/true, &fd, &st) != 0 ||
        st.st_ino != b.ino || st.st_dev != b.dev) {
      return false;  // gone or replaced meanwhile: judged next time
    }
    ++sealed_checked_;
    const uint64_t size = std::min(static_cast<uint64_t>(st.st_size), b.size);
    std::string detail;
    SealVerdict verdict = SealStructure(fd.get(), size, key_id, &detail);
    const int key = o_.verify_data ? keys_->Find(key_id) : -1;
    const char* rule = "L182";
    if (verdict == SealVerdict::kSound && key >= 0) {
      rule = "L183";
      ++sealed_verified_;
      uint64_t read_bytes = 0;
      verdict = SealTag(fd.get(), size, b.rel, *keys_, key, &io, &detail, &read_bytes);
      read_bytes_ += read_bytes;
      if (tag_checked != nullptr) *tag_checked = true;
    }
    if (verdict == SealVerdict::kSound) return std::nullopt;
    if (verdict == SealVerdict::kUnjudged) return false;
    // L165: a later version's record is reported, never removed.
    const RepairAction action = verdict == SealVerdict::kBroken ? RemoveIf(removable, b, &detail, "seal_mismatch") : RepairAction::kNone;
    Add(FindingKind::kSealMismatch, b.rel, rule, action, detail);
    return action == RepairAction::kRemoved;
  }

  // L136: blocks one trailer smaller than the most common size, judged once
  // the walk has sampled whether that size's blocks carry trailers: if one
  // does, they are plain rows of the same row size (and are verified as
  // such); else they are reported, never removed by their size alone (L196:
  // the most common size may be files a co-tenant planted).
  void JudgeDeferred() {
    for (const auto& [ns, b] : deferred_) {
      const ModeTrailer mode = mode_trailer_[ns];
      if (mode.trailer) {
        UniqueFd dir;
        if (o_.verify_data && editor_.OpenDir(SplitRel(b.rel).first, &dir) == 0) VerifyOne(b, dir.get());
        continue;
      }
      std::string detail = std::to_string(b.size) + " bytes, most common size " + std::to_string(rows_.at(ns).bytes);
      detail += mode.sampled == 0 ? "; no block of that size could be read for a trailer (L136): not removed"
                                  : "; those sampled carry no trailer, and no row size is given or declared (L196): "
                                    "not removed";
      Suspect(ns);
      Add(FindingKind::kSizeMismatch, b.rel, "L80", RepairAction::kNone, detail);
    }
    Unlisted(FindingKind::kSizeMismatch, deferred_.more());
    // L196: one finding per namespace whose sizes nothing trusted can settle.
    for (const auto& [ns, n] : suspect_) {
      Add(FindingKind::kSuspectSizes, ns, "L196", RepairAction::kNone,
          std::to_string(n) + " blocks not of the most common size (" + std::to_string(rows_.at(ns).bytes) +
              " bytes) were kept: files planted by a co-tenant can make any size the most common; give --row-bytes"
              " (or, sealed, --seal-key-file with --verify-data) to judge them");
    }
  }

  void Namespace(const NsScan& ns) {
    for (const ScanProblem& p : ns.unreadable) Add(FindingKind::kUnreadable, p.path, "L97", RepairAction::kNone, p.detail);
    CheckConfig(ns);
    for (const auto& [path, why] : ns.bad_names) Add(FindingKind::kBadName, path, "L94", RepairAction::kNone, why);
    for (const ScannedFile& f : ns.non_files) NonFile(f);
    report_->blocks_checked += ns.blocks.count;
    for (const ScannedFile& t : ns.tmps) Aged(t, FindingKind::kStaleTmp, "L81");
    for (const ScannedFile& p : ns.probes) Aged(p, FindingKind::kProbeLeftover, "L82");
    for (const std::string& s : ns.strays) Add(FindingKind::kStrayFile, s, "L90", RepairAction::kNone, "");
    for (const std::string& d : ns.empty_dirs) EmptyDir(d);
    Unlisted(FindingKind::kUnreadable, ns.unreadable.more());
    Unlisted(FindingKind::kBadName, ns.bad_names.more());
    Unlisted(FindingKind::kNotRegular, ns.non_files.more());
    Unlisted(FindingKind::kStaleTmp, ns.tmps.more());
    Unlisted(FindingKind::kProbeLeftover, ns.probes.more());
    Unlisted(FindingKind::kStrayFile, ns.strays.more());
    Unlisted(FindingKind::kEmptyDir, ns.empty_dirs.more());
  }
  void RootStray(const std::string& name) { Add(FindingKind::kStrayFile, name, "L90", RepairAction::kNone, ""); }
  // Findings the scan counted past its lists (kFindingsListMax): counted,
  // never acted on this pass.
  void Unlisted(FindingKind kind, uint64_t n) {
    if (n != 0) report_->findings_unlisted[kind] += n;
  }

 private:
  void Add(FindingKind kind, std::string path, const char* rule, RepairAction action, std::string detail) {
    std::lock_guard lock(mu_);
    report_->findings.push_back({kind, std::move(path), rule, action, std::move(detail)});
  }
  // A removal that fails says why in the finding's detail (the finding is left, exit 4); one
  // replaced meanwhile (ESTALE) is another writer's file. `reason`: for on_block_removed.
  // Remove, where the namespace's seal member is trusted (L182).
  RepairAction RemoveIf(bool removable, const ScannedFile& f, std::string* detail, const char* reason) {
    if (removable) return Remove(f, detail, reason);
    *detail += "; not removed: config.json fails its digest (L79), so its seal member is not trusted";
    return RepairAction::kNone;
  }

  RepairAction Remove(const ScannedFile& f, std::string* detail, const char* reason = "") {
    if (!o_.repair) return RepairAction::kNone;
    // Shard directories the removal empties go too, so one pass leaves a
    // clean tree, by L108: as they were before it, unchanged for the grace
    // (rmdir fails harmlessly on a directory that is not empty).
    const bool in_shard = std::count(f.rel.begin(), f.rel.end(), '/') == 3;
    const std::string dir2 = SplitRel(f.rel).first;
    const std::optional<ScannedFile> shard = in_shard ? editor_.LookAtDir(dir2) : std::nullopt;
    const std::optional<ScannedFile> parent = in_shard ? editor_.LookAtDir(SplitRel(dir2).first) : std::nullopt;
    if (const int err = removed_.Remove(editor_, f, reason)) {
      if (err != ESTALE) *detail += std::string(detail->empty() ? "" : "; ") + "not removed: " + std::strerror(err);
      return RepairAction::kNone;
    }
    if (PruneDir(shard)) (void)PruneDir(parent);
    return RepairAction::kRemoved;
  }
  // FORMAT.md L108, as gc: a shard directory goes by rmdir of the inode
  // looked at, and only if that look showed it unchanged for dir_grace_s: a
  // writer that just made it is about to create its file.
  bool PruneDir(const std::optional<ScannedFile>& d) {
    return d && AgeAtLeast(now_, d->mtime, o_.dir_grace_s) && editor_.Remove(*d) == 0;
  }
  void Aged(const ScannedFile& f, FindingKind kind, const char* rule) {
    if (!AgeAtLeast(now_, f.mtime, o_.tmp_grace_s)) return;  // may be a write in flight
    std::string detail = "age " + std::to_string(now_ - f.mtime) + " s";
    const RepairAction action = Remove(f, &detail);
    Add(kind, f.rel, rule, action, detail);
  }
  // An empty directory (L91); repair removes it by L108. A <hh>_g<g>
  // directory may be the last entry of its <hhh> parent, which then goes
  // too, by the same rule (looked at before its child goes).
  void EmptyDir(const std::string& d) {
    std::string detail;
    bool removed = false;
    if (o_.repair) {
      const std::optional<ScannedFile> dir = editor_.LookAtDir(d);
      const bool shard = std::count(d.begin(), d.end(), '/') == 2;
      const std::optional<ScannedFile> parent = shard ? editor_.LookAtDir(SplitRel(d).first) : std::nullopt;
      removed = PruneDir(dir);
      if (removed) (void)PruneDir(parent);
      if (dir && !removed && !AgeAtLeast(now_, dir->mtime, o_.dir_grace_s)) {
        detail = "changed within the last " + std::to_string(o_.dir_grace_s) + " s (L108): a writer may be using it; left";
      }
    }
    Add(FindingKind::kEmptyDir, d, "L91", removed ? RepairAction::kRemoved : RepairAction::kNone, detail);
  }

  // A directory, symlink, FIFO, socket or device at a block or config.json
  // name (L95): readers treat it as absent, and it blocks every store of
  // that name, so repair removes it (a directory only when empty).
  void NonFile(const ScannedFile& f) {
    const char* what = S_ISDIR(f.mode) ? "a directory" : S_ISLNK(f.mode) ? "a symlink" : S_ISFIFO(f.mode) ? "a FIFO"
                       : S_ISSOCK(f.mode) ? "a socket" : "a device or other non-file";
    std::string detail = std::string(what) + " at a layout file name";
    const RepairAction action = Remove(f, &detail);
    Add(FindingKind::kNotRegular, f.rel, "L95", action, detail);
  }

  void CheckConfig(const NsScan& ns) {
    const std::string path = ns.dir + "/" + std::string(format::kConfigName);
    if (!ns.has_config) {
      if (ns.blocks.count != 0) Add(FindingKind::kConfigMissing, path, "L78", RepairAction::kNone, "");
      return;
    }
    if (ns.config_oversize) {  // no config.json is that large: treat it as torn, never read it
      std::string detail = ns.config_error;
      Add(FindingKind::kConfigTorn, path, "L77", Quarantine(ns.dir, &detail), detail);
      return;
    }
    if (!ns.config_error.empty()) return;  // unreadable: reported with the scan's problems
    const ConfigInfo info = ParseConfig(ns);
    if (info.parses && info.digest_matches) return;
    const FindingKind kind = info.parses ? FindingKind::kConfigDigestMismatch : FindingKind::kConfigTorn;
    std::string detail;
    Add(kind, path, info.parses ? "L79" : "L77", Quarantine(ns.dir, &detail), detail);
  }

  // Moves config.json aside (L77, L79): the next vLLM or kvtier start writes
  // a correct one; the old bytes stay under .kvtier/quarantine/. Every step
  // is relative to the namespace directory's fd and refuses symlinks, so a
  // swapped .kvtier cannot move the file out of the tree.
  RepairAction Quarantine(const std::string& ns_dir, std::string* detail) {
    if (!o_.repair) return RepairAction::kNone;
    IoScope io(ns_dir + "/" + std::string(format::kConfigName));
    UniqueFd ns, meta, quarantine;
    int err = io.cancelled() ? ECANCELED : editor_.OpenDir(ns_dir, &ns);
    for (auto [parent, name, out] : {std::tuple{&ns, format::kMetaDirName, &meta},
                                     std::tuple{&meta, format::kQuarantineDirName, &quarantine}}) {
      if (err != 0) break;
      const std::string n(name);
      if (mkdirat(parent->get(), n.c_str(), 0777) != 0 && errno != EEXIST) err = errno;
      if (err == 0) err = OpenDirAt(parent->get(), n, out);
    }
    const std::string to = std::string(format::kConfigName) + "." + std::to_string(now_);
    if (err == 0 && renameat(ns.get(), std::string(format::kConfigName).c_str(), quarantine.get(), to.c_str()) != 0) err = errno;
    if (err == 0) return RepairAction::kQuarantined;
    *detail += std::string(detail->empty() ? "" : "; ") + "not quarantined: " + std::strerror(err);
    return RepairAction::kNone;
  }

  // What the last page of the block `b` says (one open and one pread,
  // without changing what gc sees); kAbsent if it is no longer `b`, with
  // `unread` (if given) set when nothing could be read: a block that
  // vanished, changed or failed to read proves nothing about trailers.
  format::TrailerState TrailerOf(const ScannedFile& b, int dir_fd, bool* unread = nullptr) {
    IoScope io(b.rel);
    UniqueFd fd;
    struct stat st;
    format::TrailerRecord record;
    bool failed = true;
    format::TrailerState state = format::TrailerState::kAbsent;
    if (!io.cancelled() && OpenRegularAt(dir_fd, SplitRel(b.rel).second, /*no_atime=*/true, &fd, &st) == 0 &&
        st.st_ino == b.ino && st.st_dev == b.dev) {
      state = ReadTrailerRecord(fd.get(), static_cast<uint64_t>(st.st_size), &record, &failed);
    }
    if (unread != nullptr) *unread = failed;
    return state;
  }
  // Whether a namespace's most common size is that of trailer blocks:
  // settled by the first of up to kModeSamples of its blocks of that size
  // to show a valid trailer (a torn one among them cannot decide it alone).
  static constexpr int kModeSamples = 3;
  struct ModeTrailer {
    int sampled = 0, reading = 0;
    bool trailer = false;
  };
  void SampleMode(const std::string& ns, const ScannedFile& b, int dir_fd) {
    if (!mixed_.count(ns)) return;
    {
      std::lock_guard lock(trailer_mu_);
      ModeTrailer& m = mode_trailer_[ns];
      if (m.trailer || m.sampled + m.reading >= kModeSamples) return;
      ++m.reading;
    }
    bool unread = false;
    const bool trailer = TrailerOf(b, dir_fd, &unread) == format::TrailerState::kValid;
    std::lock_guard lock(trailer_mu_);
    ModeTrailer& m = mode_trailer_[ns];
    --m.reading;
    if (!unread) ++m.sampled;  // only a block read counts (L136: none read, none removed)
    m.trailer = m.trailer || trailer;
  }
  bool Defer(const std::string& ns, const ScannedFile& b) {
    std::lock_guard lock(trailer_mu_);
    deferred_.emplace_back(ns, b);
    return false;
  }

  // Opens a block for verification without changing what gc sees (O_NOATIME)
  // and only if it is still the regular file scanned. Whether it was removed.
  bool VerifyOne(const ScannedFile& b, int dir_fd) {
    IoScope io(b.rel);  // before the fd: its close is a call too
    UniqueFd fd;
    struct stat st;
    bool atime_kept = true;
    if (io.cancelled() || OpenRegularAt(dir_fd, SplitRel(b.rel).second, /*no_atime=*/true, &fd, &st, &atime_kept) != 0) {
      return false;
    }
    if (st.st_ino != b.ino || st.st_dev != b.dev) return false;  // replaced meanwhile: judged next time
    ++verified_;
    with_atime_ += !atime_kept;
    std::string detail;
    // The size scanned is the row size (at most kBlockBytesMax unless the
    // operator gave a row): never more is read, whatever the file became.
    const uint64_t size = std::min(static_cast<uint64_t>(st.st_size), b.size);
    uint64_t read_bytes = 0;
    const Verdict verdict = CrcVerdict(fd.get(), size, &io, &detail, &read_bytes);
    read_bytes_ += read_bytes;
    if (verdict != Verdict::kMismatch) return false;
    const RepairAction action = Remove(b, &detail, "crc_mismatch");
    Add(FindingKind::kCrcMismatch, b.rel, "L67", action, detail);
    return action == RepairAction::kRemoved;
  }

 public:
  void Finish() {
    report_->sealed_checked += sealed_checked_.load();
    report_->sealed_verified += sealed_verified_.load();
    report_->blocks_verified += verified_.load();
    report_->verified_without_noatime += with_atime_.load();
    report_->verify_read_bytes += read_bytes_.load();
  }

 private:
  const FsckOptions& o_;
  TreeEditor editor_;
  FsckReport* report_;
  int64_t now_;
  const ExtraBlockCheck& extra_;
  std::map<std::string, RowBasis> rows_;  // by namespace: the size its blocks must have (L196)
  std::map<std::string, uint64_t> suspect_;  // by namespace: blocks kept by L196 (guarded by mu_)
  std::set<std::string> mixed_;           // namespaces whose blocks are not all of that size
  std::map<std::string, std::string> sealed_;  // sealed namespaces (L182): the key id config.json names
  std::set<std::string> seal_untrusted_;       // those whose config.json fails its digest (L79)
  const SealKeys* keys_;                       // FsckOptions::seal_key_files, loaded
  RemovedBlocks removed_;                      // tells o_.on_block_removed
  std::atomic<uint64_t> sealed_checked_{0}, sealed_verified_{0};
  std::mutex trailer_mu_;
  std::map<std::string, ModeTrailer> mode_trailer_;
  CappedList<std::pair<std::string, ScannedFile>> deferred_;  // (namespace, block) one trailer short
  std::atomic<uint64_t> verified_{0}, with_atime_{0}, read_bytes_{0};
  std::mutex mu_;
};

}  // namespace
}  // namespace internal

namespace internal {

// The first walk gave the row sizes; a second one visits the blocks, only
// where one may be judged (FsckRun::NeedsBlockWalk).
Result<FsckReport> FsckScanned(const FsckOptions& options, const TreeScan& first, const ExtraBlockCheck& extra) {
  IoRootScope io_root(first.root);
  FsckReport report;
  KVTIER_ASSIGN_OR_RETURN(const SealKeys keys, SealKeys::Load(options.seal_key_files, options.seal_key_group_read));
  FsckRun run(options, first, &report, extra, &keys);
  const TreeScan* scan = &first;
  std::optional<TreeScan> second;
  if (run.NeedsBlockWalk(first)) {
    ScanVisitors visit;
    visit.block = [&run](const std::string& ns, const ScannedFile& b, int dir_fd) { return run.Block(ns, b, dir_fd); };
    KVTIER_ASSIGN_OR_RETURN(second, ScanAgain(options, first, visit));
    scan = &*second;
    run.JudgeDeferred();
  }
  report.files_scanned = scan->files;
  for (const auto& [name, ns] : scan->namespaces) run.Namespace(ns);
  for (const std::string& s : scan->root_strays) run.RootStray(s);
  run.Unlisted(FindingKind::kStrayFile, scan->root_strays.more());
  run.Finish();
  return report;
}

}  // namespace internal

namespace internal {

Result<FsckReport> FsckUnwatched(const FsckOptions& options) {
  if (IsRootList(options.root)) return FsckRoots(options);
  KVTIER_ASSIGN_OR_RETURN(TreeScan scan, ScanTree(options));
  return FsckScanned(options, scan, {});
}

}  // namespace internal

}  // namespace kvtier
