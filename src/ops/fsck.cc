// fsck: findings that cite FORMAT.md rules; --repair acts only on layout files.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <ctime>
#include <mutex>
#include <thread>

#include "ops/ops_internal.h"
#include "util/crc32c.h"

namespace kvtier {
namespace internal {

bool RemoveIfUnchanged(const std::string& root, const ScannedFile& f) {
  const std::string path = root + "/" + f.rel;
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return errno == ENOENT;
  if (st.st_ino != f.ino || st.st_dev != f.dev) return false;  // replaced meanwhile: leave it
  return unlink(path.c_str()) == 0 || errno == ENOENT;
}

namespace {

// FORMAT.md L67: the CRC32C attribute against the bytes. Files without the
// attribute (written by vLLM) pass.
bool CrcMatches(const std::string& path, uint64_t size) {
  int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return true;  // vanished: nothing to judge
  uint8_t want[4];
  const ssize_t got = fgetxattr(fd, "user.vllm.kv_crc32c", want, sizeof want);
  bool ok = true;
  if (got == 4) {
    std::vector<uint8_t> data(size);
    size_t have = 0;
    ssize_t n;
    while (have < size && (n = pread(fd, data.data() + have, size - have, static_cast<off_t>(have))) > 0) {
      have += static_cast<size_t>(n);
    }
    const uint32_t crc = Crc32c({data.data(), have});
    ok = have == size && (uint32_t{want[0]} << 24 | uint32_t{want[1]} << 16 | uint32_t{want[2]} << 8 | want[3]) == crc;
  }
  close(fd);
  return ok;
}

class FsckRun {
 public:
  FsckRun(const FsckOptions& o, FsckReport* report) : o_(o), report_(report), now_(std::time(nullptr)) {}

  void Namespace(const NsScan& ns) {
    CheckConfig(ns);
    for (const auto& [path, why] : ns.bad_names) Add(FindingKind::kBadName, path, "L94", RepairAction::kNone, why);
    CheckSizes(ns);
    for (const ScannedFile& t : ns.tmps) Aged(t, FindingKind::kStaleTmp, "L81");
    for (const ScannedFile& p : ns.probes) Aged(p, FindingKind::kProbeLeftover, "L82");
    for (const std::string& s : ns.strays) Add(FindingKind::kStrayFile, s, "L90", RepairAction::kNone, "");
    for (const std::string& d : ns.empty_dirs) {
      const bool removed = o_.repair && rmdir((o_.root + "/" + d).c_str()) == 0;
      // A <hh>_g<g> directory was the last entry of its <hhh> parent: that
      // one is empty now too (rmdir fails harmlessly if a writer got there).
      if (removed && std::count(d.begin(), d.end(), '/') == 2) rmdir((o_.root + "/" + d.substr(0, d.rfind('/'))).c_str());
      Add(FindingKind::kEmptyDir, d, "L91", removed ? RepairAction::kRemoved : RepairAction::kNone, "");
    }
  }
  void RootStray(const std::string& name) { Add(FindingKind::kStrayFile, name, "L90", RepairAction::kNone, ""); }

 private:
  void Add(FindingKind kind, std::string path, const char* rule, RepairAction action, std::string detail) {
    std::lock_guard lock(mu_);
    report_->findings.push_back({kind, std::move(path), rule, action, std::move(detail)});
  }
  RepairAction Remove(const ScannedFile& f) {
    if (!o_.repair || !RemoveIfUnchanged(o_.root, f)) return RepairAction::kNone;
    // Shard directories the removal emptied go too, so one pass leaves a
    // clean tree (rmdir fails harmlessly on a directory that is not empty).
    const std::string dir2 = f.rel.substr(0, f.rel.rfind('/'));
    if (std::count(f.rel.begin(), f.rel.end(), '/') == 3 && rmdir((o_.root + "/" + dir2).c_str()) == 0) {
      rmdir((o_.root + "/" + dir2.substr(0, dir2.rfind('/'))).c_str());
    }
    return RepairAction::kRemoved;
  }
  void Aged(const ScannedFile& f, FindingKind kind, const char* rule) {
    if (now_ - f.mtime < static_cast<int64_t>(o_.tmp_grace_s)) return;  // may be a write in flight
    Add(kind, f.rel, rule, Remove(f), "age " + std::to_string(now_ - f.mtime) + " s");
  }

  void CheckConfig(const NsScan& ns) {
    const std::string path = ns.dir + "/config.json";
    if (!ns.has_config) {
      if (!ns.blocks.empty()) Add(FindingKind::kConfigMissing, path, "L78", RepairAction::kNone, "");
      return;
    }
    const ConfigInfo info = ParseConfig(ns);
    if (info.parses && info.digest_matches) return;
    const FindingKind kind = info.parses ? FindingKind::kConfigDigestMismatch : FindingKind::kConfigTorn;
    Add(kind, path, info.parses ? "L79" : "L77", Quarantine(ns.dir), "");
  }

  // Moves config.json aside (L77, L79): the next vLLM or kvtier start writes
  // a correct one; the old bytes stay under .kvtier/quarantine/.
  RepairAction Quarantine(const std::string& ns_dir) {
    if (!o_.repair) return RepairAction::kNone;
    const std::string dir = o_.root + "/" + ns_dir + "/.kvtier";
    mkdir(dir.c_str(), 0777);
    mkdir((dir + "/quarantine").c_str(), 0777);
    const std::string to = dir + "/quarantine/config.json." + std::to_string(now_);
    return rename((o_.root + "/" + ns_dir + "/config.json").c_str(), to.c_str()) == 0 ? RepairAction::kQuarantined
                                                                                       : RepairAction::kNone;
  }

  void CheckSizes(const NsScan& ns) {
    const uint64_t row = o_.row_bytes != 0 ? o_.row_bytes : MostCommonSize(ns);
    const std::string basis = o_.row_bytes != 0 ? "given row size " : "most common size ";
    std::vector<const ScannedFile*> sized;
    for (const ScannedFile& b : ns.blocks) {
      if (b.size == row) {
        sized.push_back(&b);
        continue;
      }
      // Short files are what vLLM itself deletes (L65); longer ones may be
      // rows of a 64 K-page host (L66) and are only reported.
      const RepairAction action = b.size < row ? Remove(b) : RepairAction::kNone;
      Add(FindingKind::kSizeMismatch, b.rel, "L80", action,
          std::to_string(b.size) + " bytes, " + basis + std::to_string(row));
    }
    report_->blocks_checked += ns.blocks.size();
    if (o_.verify_data) Verify(sized);
  }

  void Verify(const std::vector<const ScannedFile*>& blocks) {
    std::atomic<size_t> next{0};
    auto worker = [&] {
      for (size_t i; (i = next.fetch_add(1)) < blocks.size();) {
        const ScannedFile& b = *blocks[i];
        if (!CrcMatches(o_.root + "/" + b.rel, b.size)) {
          Add(FindingKind::kCrcMismatch, b.rel, "L67", Remove(b), "CRC32C attribute does not match the bytes");
        }
      }
    };
    std::vector<std::thread> threads;
    for (int t = 1; t < std::max(1, o_.jobs); ++t) threads.emplace_back(worker);
    worker();
    for (auto& t : threads) t.join();
    report_->blocks_verified += blocks.size();
  }

  const FsckOptions& o_;
  FsckReport* report_;
  int64_t now_;
  std::mutex mu_;
};

}  // namespace
}  // namespace internal

Result<FsckReport> Fsck(const FsckOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(internal::TreeScan scan, internal::ScanTree(options));
  FsckReport report;
  report.files_scanned = scan.files;
  internal::FsckRun run(options, &report);
  for (const auto& [name, ns] : scan.namespaces) run.Namespace(ns);
  for (const std::string& s : scan.root_strays) run.RootStray(s);
  return report;
}

}  // namespace kvtier
