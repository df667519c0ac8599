// The parallel walk behind du, fsck and gc. Every directory is entered
// through its parent's fd with O_NOFOLLOW, names are classified by the exact
// parsers of format/layout_names.h, and nothing but config.json (capped) is
// read.
#include "ops/scan.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>

#include "format/layout_names.h"
#include "io/io_watch.h"
#include "ops/ops_internal.h"
#include "ops/use_time.h"

namespace kvtier::internal {
namespace {

std::string ErrText(const char* what, int err) { return std::string(what) + ": " + std::strerror(err); }

ScannedFile Scanned(std::string rel, const struct stat& st) {
  ScannedFile f;
  f.rel = std::move(rel);
  f.size = static_cast<uint64_t>(st.st_size);
  f.bytes = std::min(f.size, static_cast<uint64_t>(st.st_blocks) * 512);  // L109: holes hold nothing
  f.mtime = st.st_mtim.tv_sec;
  f.atime = st.st_atim.tv_sec;
  f.ino = st.st_ino;
  f.dev = st.st_dev;
  f.mode = st.st_mode;
  return f;
}

// Enters a directory the listing showed: 0, or the errno after recording it.
// ENOENT (another instance's gc) is silent; a directory swapped for a symlink
// or a file since the listing is a stray; anything else cannot be read.
int EnterDir(int parent, const std::string& name, const std::string& rel, NsScan* out, UniqueFd* fd) {
  IoScope io(rel);
  const int err = io.cancelled() ? ECANCELED : OpenDirAt(parent, name, fd);
  if (err == ELOOP || err == ENOTDIR) out->strays.push_back(rel);
  else if (err != 0 && err != ENOENT) out->unreadable.push_back({rel, ErrText("open", err)});
  return err;
}

using Batch = std::vector<DirEntry>;

// Lists a directory entered with EnterDir, kListChunkEntries entries at a
// time into on_batch (bounded memory whatever the directory holds), after
// recording those that could not be stat'ed; one that listed nothing at all
// is empty. False after recording an error (the batches before it were
// handed on). Each batch is a call of its own for the hang watch, and an
// abandoned walk reads no further.
bool ListInto(int fd, const std::string& rel, NsScan* out, const std::function<void(const Batch&)>& on_batch,
              bool report_empty = true) {
  IoScope io(rel);
  bool any = false;
  const int err = io.cancelled() ? ECANCELED : ListDirChunks(fd, kListChunkEntries, [&](Batch& batch) {
    any = true;
    for (const DirEntry& e : batch) {
      if (e.stat_errno != 0 && e.stat_errno != ENOENT) out->unreadable.push_back({rel + "/" + e.name, ErrText("stat", e.stat_errno)});
    }
    on_batch(batch);
    IoScope next(rel);  // leaving it restarts io's clock for the next batch
    return !next.cancelled();
  });
  if (err != 0) {
    out->unreadable.push_back({rel, ErrText("read directory", err)});
    return false;
  }
  if (report_empty && !any) out->empty_dirs.push_back(rel);
  return true;
}

// Whether a temp or probe file is stale: older than tmp_grace_s (at the scan).
struct Staleness {
  int64_t now;
  uint64_t grace_s;
  bool operator()(const ScannedFile& f) const { return AgeAtLeast(now, f.mtime, grace_s); }
};

// A temp file (L81) or a probe file (L82): listed when stale, else counted.
void AddTmp(NsScan* ns, ScannedFile f, const Staleness& stale, bool probe = false) {
  if (!probe) ns->tmps_newest = std::max(ns->tmps_newest, f.mtime);
  if (!stale(f)) return (void)++(probe ? ns->young_probes : ns->young_tmps);
  (void)(probe ? ns->probes : ns->tmps).push_back(std::move(f));
}

struct Counters {
  std::atomic<uint64_t> files{0}, bytes{0};
};

// What one walker thread needs to classify a shard directory's files.
struct ShardCtx {
  const std::string& ns;
  const ScanVisitors& visit;
  Counters* counters;
  Staleness stale;
};

// One file of a <hhh>/<hh>_g<g> directory (L6, L7, L55): whether a visitor
// removed it.
bool ClassifyShardFile(const DirEntry& f, const std::string& rel2, std::string_view shard1, std::string_view hh,
                       int dir_fd, NsScan* out, const ShardCtx& ctx) {
  if (f.st.st_mode == 0) return true;  // vanished, or recorded as unreadable
  std::string rel3 = rel2 + "/" + f.name;
  const auto tmp_hex = format::BlockTmpHex(f.name);
  const auto hex = tmp_hex ? tmp_hex : format::BlockFileHex(f.name);
  if (hex && !format::BlockInShard(*hex, shard1, hh)) {
    out->bad_names.emplace_back(std::move(rel3), "in the wrong shard directory");
  } else if (hex && !tmp_hex) {
    if (!S_ISREG(f.st.st_mode)) return out->non_files.push_back(Scanned(std::move(rel3), f.st)), false;
    const ScannedFile block = Scanned(std::move(rel3), f.st);
    out->blocks.Add(block, ctx.stale.now);
    ++ctx.counters->files;
    ctx.counters->bytes += block.bytes;
    return ctx.visit.block && ctx.visit.block(ctx.ns, block, dir_fd);
  } else if (hex && S_ISREG(f.st.st_mode)) {
    AddTmp(out, Scanned(std::move(rel3), f.st), ctx.stale);
  } else if (S_ISLNK(f.st.st_mode)) {
    out->strays.push_back(std::move(rel3));
  } else {
    out->bad_names.emplace_back(std::move(rel3), S_ISREG(f.st.st_mode) ? "not <hex>.bin" : "not a regular file");
  }
  return false;
}

// One shard-1 directory of a block directory: the unit of parallel work.
struct ShardWork {
  std::string ns, rel;  // rel: "<ns>_r<rank>/<hhh>"
  std::string shard1;
  struct stat st;  // its lstat, from the block directory's listing
  std::shared_ptr<UniqueFd> block_dir;
};

// A <hh>_g<g> directory: whether it is gone afterwards.
bool ScanShard2(const ShardWork& w, int s1, const DirEntry& e2, std::string_view hh, NsScan* out, const ShardCtx& ctx) {
  const std::string rel2 = w.rel + "/" + e2.name;
  UniqueFd s2;
  if (EnterDir(s1, e2.name, rel2, out, &s2) != 0) return false;
  // Visitors may remove files while the directory is still being read: those
  // already listed, which readdir does not return again.
  size_t left = 0;
  const auto classify = [&](const Batch& files) {
    for (const DirEntry& f : files) left += !ClassifyShardFile(f, rel2, w.shard1, hh, s2.get(), out, ctx);
  };
  if (!ListInto(s2.get(), rel2, out, classify)) return false;
  return ctx.visit.shard_dir && ctx.visit.shard_dir(ctx.ns, Scanned(rel2, e2.st), left, s1);
}

void ScanShard(const ShardWork& w, const ScanVisitors& visit, Counters* counters, const Staleness& stale, NsScan* out) {
  const ShardCtx ctx{w.ns, visit, counters, stale};
  UniqueFd s1;
  if (EnterDir(w.block_dir->get(), w.shard1, w.rel, out, &s1) != 0) return;
  size_t left = 0;
  const auto level2 = [&](const Batch& batch) {
    for (const DirEntry& e2 : batch) {
      const std::string rel2 = w.rel + "/" + e2.name;
      const auto shard2 = format::ParseShard2Name(e2.name);
      if (S_ISLNK(e2.st.st_mode)) {
        out->strays.push_back(rel2);
      } else if (e2.st.st_mode != 0 && (!S_ISDIR(e2.st.st_mode) || !shard2)) {
        out->bad_names.emplace_back(rel2, "not a <hh>_g<group> shard directory");
      } else if (e2.st.st_mode == 0 || (shard2 && ScanShard2(w, s1.get(), e2, shard2->hh, out, ctx))) {
        continue;  // gone
      }
      ++left;
    }
  };
  if (!ListInto(s1.get(), w.rel, out, level2)) return;
  if (visit.shard_dir) visit.shard_dir(w.ns, Scanned(w.rel, w.st), left, w.block_dir->get());
}

// config.json (L24): read only if it is a regular file, and at most
// kConfigBytesMax bytes of it.
void ReadConfig(int ns_fd, const DirEntry& e, const std::string& rel, NsScan* ns) {
  if (!S_ISREG(e.st.st_mode)) return (void)ns->non_files.push_back(Scanned(rel, e.st));
  ns->has_config = true;
  ns->config = Scanned(rel, e.st);
  if (static_cast<uint64_t>(e.st.st_size) > kConfigBytesMax) {
    ns->config_error = "larger than " + std::to_string(kConfigBytesMax) + " bytes: not read";
    ns->config_oversize = true;
    return;
  }
  IoScope io(rel);  // before the fd: its close is a call too
  UniqueFd fd;
  struct stat st;
  if (const int err = io.cancelled() ? ECANCELED : OpenRegularAt(ns_fd, e.name, /*no_atime=*/false, &fd, &st)) {
    ns->has_config = err != ENOENT;
    ns->config_error = err == EINVAL ? "not a regular file" : ErrText("open", err);
    if (err != ENOENT && err != EINVAL) ns->unreadable.push_back({rel, ns->config_error});
    return;
  }
  char buf[65536];
  ssize_t n;
  while ((n = read(fd.get(), buf, sizeof buf)) > 0 && ns->config_text.size() <= kConfigBytesMax) {
    ns->config_text.append(buf, static_cast<size_t>(n));
    io.Step();
  }
  if (n < 0) ns->config_error = ErrText("read", errno);
  if (ns->config_text.size() > kConfigBytesMax) {
    ns->config_error = "grew past " + std::to_string(kConfigBytesMax) + " bytes: not read";
    ns->config_oversize = true;
  }
  if (!ns->config_error.empty()) ns->config_text.clear();
}

// .kvtier/leases (L73, L74). Any error here leaves the leases unknown, and
// gc then keeps the namespace (fail closed).
// .kvtier/root_slot.json (L100): recorded for gc, which removes it with its
// namespace, and for the tools over several roots, which check it. Read
// capped; anything but a regular file is left alone.
void ScanRootMarker(int meta_fd, const std::string& rel, NsScan* ns) {
  const std::string name(format::kRootMarkerName);
  IoScope io(rel + "/" + name);  // before the fd: its close is a call too
  UniqueFd fd;
  struct stat st;
  if (io.cancelled() || OpenRegularAt(meta_fd, name, /*no_atime=*/false, &fd, &st) != 0) return;
  ns->root_marker = Scanned(rel + "/" + name, st);
  std::string body(format::kRootMarkerBytesMax + 1, '\0');
  const ssize_t n = pread(fd.get(), body.data(), body.size(), 0);
  if (n > 0) ns->root_slot = format::ParseRootMarker(body.substr(0, static_cast<size_t>(n)));
}

// One entry of .kvtier/leases: a lease (its mtime counted even when the
// list is full: gc's "live" test), a stray, or unreadable.
void AddLeaseEntry(const DirEntry& l, const std::string& dir, NsScan* ns) {
  const bool named = format::IsLeaseName(l.name) || format::IsLeaseTmpName(l.name);
  if (l.stat_errno != 0 && l.stat_errno != ENOENT) {
    ns->leases_known = false;
    ns->unreadable.push_back({dir + "/" + l.name, ErrText("stat", l.stat_errno)});
  } else if (named && S_ISREG(l.st.st_mode)) {
    ns->leases_newest = std::max<int64_t>(ns->leases_newest, l.st.st_mtim.tv_sec);
    ns->leases.push_back(Scanned(dir + "/" + l.name, l.st));
  } else if (l.st.st_mode != 0) {
    ns->strays.push_back(dir + "/" + l.name);
  }
}

void ScanLeases(int ns_fd, const std::string& rel, NsScan* ns) {
  IoScope io(rel);
  UniqueFd meta, leases;
  int err = io.cancelled() ? ECANCELED : OpenDirAt(ns_fd, std::string(format::kMetaDirName), &meta);
  if (err == 0) ScanRootMarker(meta.get(), rel, ns);
  const std::string dir = rel + "/" + std::string(format::kLeaseDirName);
  IoScope io_leases(dir);
  if (err == 0) err = io_leases.cancelled() ? ECANCELED : OpenDirAt(meta.get(), std::string(format::kLeaseDirName), &leases);
  if (err == ENOENT) return;  // no lease was ever taken here
  if (err == 0) {
    err = ListDirChunks(leases.get(), kListChunkEntries, [&](Batch& batch) {
      for (const DirEntry& l : batch) AddLeaseEntry(l, dir, ns);
      IoScope next(dir);
      return !next.cancelled();
    });
  }
  if (err != 0) {
    ns->leases_known = false;
    const bool swapped = err == ELOOP || err == ENOTDIR;
    ns->unreadable.push_back({swapped ? rel : dir, swapped ? "not a directory (a symlink or a file): leases cannot be read"
                                                           : ErrText("leases", err)});
    return;
  }
}

// Non-shard entries of a namespace directory: config.json, temp and probe
// files, leases; everything else is a stray.
void ScanNsDir(int root_fd, const Staleness& stale, NsScan* ns) {
  UniqueFd fd;
  const auto entries = [&](const Batch& batch) {
    for (const DirEntry& e : batch) {
      const std::string rel = ns->dir + "/" + e.name;
      const bool reg = S_ISREG(e.st.st_mode);
      if (e.st.st_mode == 0) continue;  // vanished, or recorded as unreadable
      if (e.name == format::kConfigName) {
        ReadConfig(fd.get(), e, rel, ns);
      } else if (reg && format::IsConfigTmpName(e.name)) {
        AddTmp(ns, Scanned(rel, e.st), stale);
      } else if (reg && format::IsProbeName(e.name)) {
        AddTmp(ns, Scanned(rel, e.st), stale, /*probe=*/true);
      } else if (e.name == format::kMetaDirName) {
        ScanLeases(fd.get(), rel, ns);
      } else {
        ns->strays.push_back(rel);
      }
    }
  };
  const int err = EnterDir(root_fd, ns->dir, ns->dir, ns, &fd);
  // An empty namespace directory is not reported as empty_dir (L91 is
  // about the directories writers create on demand).
  if (err != 0 || !ListInto(fd.get(), ns->dir, ns, entries, /*report_empty=*/false)) {
    ns->leases_known = err == ENOENT;
    return;
  }
}

// A shard directory's part into its namespace: what overflows the lists
// is counted.
void Merge(NsScan* into, NsScan&& from) {
  into->blocks.Merge(from.blocks);
  into->non_files.Merge(std::move(from.non_files));
  into->tmps.Merge(std::move(from.tmps));
  into->young_tmps += from.young_tmps;
  into->tmps_newest = std::max(into->tmps_newest, from.tmps_newest);
  into->empty_dirs.Merge(std::move(from.empty_dirs));
  into->bad_names.Merge(std::move(from.bad_names));
  into->strays.Merge(std::move(from.strays));
  into->unreadable.Merge(std::move(from.unreadable));
}

}  // namespace
}  // namespace kvtier::internal

namespace kvtier::internal {
namespace {

// A block directory "<NS>_r<rank>" (L2): its <hhh> directories become work.
void ScanBlockDir(int root_fd, const std::string& name, NsScan* n, std::vector<ShardWork>* work) {
  auto fd = std::make_shared<UniqueFd>();
  if (EnterDir(root_fd, name, name, n, fd.get()) != 0) return;
  // At most 4096 <hhh> names become work; any other entry is a finding.
  (void)ListInto(fd->get(), name, n, [&](const Batch& shards) {
    for (const DirEntry& s : shards) {
      const std::string rel = name + "/" + s.name;
      if (S_ISLNK(s.st.st_mode)) {
        n->strays.push_back(rel);
      } else if (s.st.st_mode != 0 && (!S_ISDIR(s.st.st_mode) || !format::IsShard1Name(s.name))) {
        n->bad_names.emplace_back(rel, "not a <hhh> shard directory");
      } else if (s.st.st_mode != 0) {
        work->push_back({n->dir, rel, s.name, s.st, fd});
      }
    }
  });
}

NsScan& NamespaceOf(TreeScan* scan, std::string_view ns) {
  NsScan& n = scan->namespaces[std::string(ns)];
  n.dir = std::string(ns);
  n.digest = std::string(*format::NamespaceDigest(ns));
  return n;
}

// What the root's listing showed, batch after batch.
struct RootSeen {
  uint64_t entries = 0;
  bool layout = false;  // a namespace or block directory
  bool meta = false;    // .kvtier (L120)
};

// A batch of the root's entries: namespace and block directories; the rest
// are strays.
void ScanRoot(const Batch& top, TreeScan* scan, std::vector<ShardWork>* work, RootSeen* seen) {
  seen->entries += top.size();
  bool& layout_seen = seen->layout;
  for (const DirEntry& e : top) {
    seen->meta = seen->meta || e.name == format::kMetaDirName;
    const bool dir = S_ISDIR(e.st.st_mode);
    if (const auto bd = dir ? format::ParseBlockDirName(e.name) : std::nullopt) {
      NsScan& n = NamespaceOf(scan, bd->ns);
      n.ranks.push_back(bd->rank);
      ScanBlockDir(scan->root_fd->get(), e.name, &n, work);
      layout_seen = true;
    } else if (dir && format::NamespaceDigest(e.name)) {
      NamespaceOf(scan, e.name).has_ns_dir = true;
      layout_seen = true;
    } else if (!(dir && e.name == format::kMetaDirName)) {  // L120: the volume's collector lease
      scan->root_strays.push_back(e.name);
    }
  }
}

void RunShards(const ScanOptions& o, const ScanVisitors& visit, const std::vector<ShardWork>& work, const Staleness& stale,
               TreeScan* scan) {
  Counters counters;
  std::atomic<uint64_t> next{0};
  std::atomic<bool> done{false};
  std::mutex mu;  // guards scan->namespaces
  // Each directory's result is merged as soon as it is walked: memory holds
  // one shard directory's listing per thread, never the whole tree's.
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < work.size();) {
      NsScan part;
      ScanShard(work[i], visit, &counters, stale, &part);
      std::lock_guard lock(mu);
      Merge(&scan->namespaces[work[i].ns], std::move(part));
    }
  };
  // Walker threads report their calls to the watch of the thread that starts them.
  auto watched_worker = [&, watch = CurrentIoWatch(), root = CurrentIoRoot()] {
    IoThreadBinding bind(watch, root);
    worker();
  };
  std::vector<std::thread> threads;
  std::thread reporter;
  if (o.progress) {
    reporter = std::thread([&] {
      while (!done) {
        o.progress({counters.files.load(), counters.bytes.load()});
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  }
  StartThreads(o.jobs - 1, watched_worker, &threads);
  worker();
  for (auto& t : threads) t.join();
  done = true;
  if (reporter.joinable()) reporter.join();
  if (o.progress) o.progress({counters.files.load(), counters.bytes.load()});
}

}  // namespace

std::pair<std::string, std::string> SplitRel(const std::string& rel) {
  const size_t slash = rel.rfind('/');
  if (slash == std::string::npos) return {"", rel};
  return {rel.substr(0, slash), rel.substr(slash + 1)};
}

void StartThreads(int n, const std::function<void()>& fn, std::vector<std::thread>* threads) {
  for (int t = 0; t < n; ++t) {
    try {
      threads->emplace_back(fn);
    } catch (const std::system_error&) {
      return;  // out of threads (a ulimit): the calling thread and those started do the work
    }
  }
}

// Opens the root (followed as the operator named it).
static Status OpenRoot(const std::string& root, TreeScan* scan) {
  IoScope io("");
  if (io.cancelled()) return Status(StatusCode::kTimedOut, "abandoned: " + root);
  scan->root = root;
  scan->root_fd = std::make_shared<UniqueFd>();
  if (const int err = OpenDirAt(AT_FDCWD, root, scan->root_fd.get())) return ErrnoToStatus(err, "open " + root);
  return Status::Ok();
}

namespace {

// Lists the root, a batch at a time, into namespaces and shard work (the
// block directories' listings included).
Status ListRoot(TreeScan* scan, std::vector<ShardWork>* work, RootSeen* seen) {
  IoScope io("");
  if (io.cancelled()) return Status(StatusCode::kTimedOut, "abandoned: " + scan->root);
  const int err = ListDirChunks(scan->root_fd->get(), kListChunkEntries, [&](Batch& batch) {
    ScanRoot(batch, scan, work, seen);
    IoScope next("");
    return !next.cancelled();
  });
  if (err != 0) return ErrnoToStatus(err, "read directory " + scan->root);
  return Status::Ok();
}

// The walk of the open root.
Result<TreeScan> Walk(const ScanOptions& o, const ScanVisitors& visit, TreeScan scan) {
  std::vector<ShardWork> work;
  RootSeen seen;
  KVTIER_RETURN_IF_ERROR(ListRoot(&scan, &work, &seen));
  const bool only_meta = seen.entries == 1 && seen.meta;  // L120: a fresh volume
  if (!seen.layout && seen.entries != 0 && !only_meta && !o.force) {
    return InvalidArgument(o.root + " does not look like a kvtier/vLLM root_dir (no <model>_<digest> directories); "
                           "pass --force to scan it anyway");
  }
  const Staleness stale{std::time(nullptr), o.tmp_grace_s};
  for (auto& [name, ns] : scan.namespaces) {
    if (ns.has_ns_dir) ScanNsDir(scan.root_fd->get(), stale, &ns);
  }
  RunShards(o, visit, work, stale, &scan);
  for (auto& [name, ns] : scan.namespaces) {
    std::sort(ns.ranks.begin(), ns.ranks.end());
    const uint64_t tmps = ns.tmps.total() + ns.young_tmps + ns.probes.total() + ns.young_probes;
    scan.files += ns.blocks.count + tmps + ns.leases.total() + (ns.has_config ? 1 : 0);
  }
  return scan;
}

}  // namespace

Result<TreeScan> ScanTree(const ScanOptions& o, const ScanVisitors& visit) {
  if (o.root.empty()) return InvalidArgument("a root directory is required");
  IoRootScope io_root(o.root);
  TreeScan scan;
  KVTIER_RETURN_IF_ERROR(OpenRoot(o.root, &scan));
  return Walk(o, visit, std::move(scan));
}

Result<TreeScan> ScanAgain(const ScanOptions& o, const TreeScan& first, const ScanVisitors& visit) {
  IoRootScope io_root(first.root);
  IoScope io("");
  if (io.cancelled()) return Status(StatusCode::kTimedOut, "abandoned: " + first.root);
  TreeScan scan;
  scan.root = first.root;
  scan.root_fd = first.root_fd;
  ScanOptions again = o;
  again.force = true;  // the first walk decided
  return Walk(again, visit, std::move(scan));
}

}  // namespace kvtier::internal

namespace kvtier::internal {

void SizeSummary::Add(uint64_t size, uint64_t n) {
  counts_[size] += n;
  if (counts_.size() > kTracked) Shrink();
}

void SizeSummary::Merge(const SizeSummary& other) {
  for (const auto& [size, n] : other.counts_) counts_[size] += n;
  exact_ = exact_ && other.exact_;
  if (counts_.size() > kTracked) Shrink();
}

// Misra-Gries: take the (kTracked+1)-th largest count off every counter and
// drop those left at zero, so at most kTracked remain.
void SizeSummary::Shrink() {
  std::vector<uint64_t> ns;
  ns.reserve(counts_.size());
  for (const auto& [size, n] : counts_) ns.push_back(n);
  std::nth_element(ns.begin(), ns.begin() + kTracked, ns.end(), std::greater<>());
  const uint64_t cut = ns[kTracked];
  for (auto it = counts_.begin(); it != counts_.end();) {
    it->second = it->second > cut ? it->second - cut : 0;
    it = it->second == 0 ? counts_.erase(it) : std::next(it);
  }
  exact_ = false;
}

uint64_t SizeSummary::Mode() const {
  uint64_t best = 0, best_count = 0;
  for (auto [size, count] : counts_) {  // ascending: on a tie the larger size wins
    if (count >= best_count) best = size, best_count = count;
  }
  return best;
}

void BlockStats::Add(const ScannedFile& b, int64_t now) {
  ++count;
  newest_counted = std::max(newest_counted, CountedUse(now, b.activity()));
  far_future += FarFuture(now, b.activity()) ? 1 : 0;
  bytes += b.bytes;
  newest = std::max(newest, b.activity());
  oldest = oldest == 0 ? b.activity() : std::min(oldest, b.activity());
  if (b.size > kBlockBytesMax) ++oversize;
  else sizes.Add(b.size);
}

void BlockStats::Merge(const BlockStats& o) {
  count += o.count;
  bytes += o.bytes;
  newest = std::max(newest, o.newest);
  newest_counted = std::max(newest_counted, o.newest_counted);
  far_future += o.far_future;
  if (o.oldest != 0) oldest = oldest == 0 ? o.oldest : std::min(oldest, o.oldest);
  oversize += o.oversize;
  sizes.Merge(o.sizes);
}

}  // namespace kvtier::internal
