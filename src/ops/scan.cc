// The parallel walk behind du, fsck and gc.
#include "ops/scan.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <thread>

namespace kvtier::internal {
namespace {

struct Entry {
  std::string name;
  unsigned char type;  // DT_*
};

// Lists a directory without following symlinks. ENOENT (vanished) is an
// empty listing; other errors are returned.
Result<std::vector<Entry>> List(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::vector<Entry>();
    return ErrnoToStatus(errno, "open " + path);
  }
  DIR* dir = fdopendir(fd);
  if (dir == nullptr) {
    close(fd);
    return ErrnoToStatus(errno, "fdopendir " + path);
  }
  std::vector<Entry> out;
  while (dirent* e = readdir(dir)) {
    std::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    unsigned char type = e->d_type;
    if (type == DT_UNKNOWN) {  // some filesystems do not fill d_type
      struct stat st;
      type = fstatat(dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ? DT_UNKNOWN
             : S_ISDIR(st.st_mode) ? DT_DIR : S_ISLNK(st.st_mode) ? DT_LNK : S_ISREG(st.st_mode) ? DT_REG : DT_UNKNOWN;
    }
    out.push_back({std::string(name), type});
  }
  closedir(dir);
  return out;
}

bool Stat(const std::string& root, const std::string& rel, ScannedFile* f) {
  struct stat st;
  if (fstatat(AT_FDCWD, (root + "/" + rel).c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return false;
  f->rel = rel;
  f->size = static_cast<uint64_t>(st.st_size);
  f->mtime = st.st_mtim.tv_sec;
  f->atime = st.st_atim.tv_sec;
  f->ino = st.st_ino;
  f->dev = st.st_dev;
  return true;
}

bool IsDecimal(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// "<64 or 32 hex>.bin_<decimal>.tmp"
bool IsBlockTmp(std::string_view name) {
  const size_t at = name.find(".bin_");
  if (at == std::string_view::npos || !name.ends_with(".tmp")) return false;
  return IsDecimal(name.substr(at + 5, name.size() - at - 5 - 4));
}

// One shard-1 directory of a block directory: the unit of parallel work.
struct ShardWork {
  std::string ns, rel;  // rel: "<ns>_r<rank>/<hhh>"
  std::string shard1;
  NsScan result;        // only the block-tree fields are filled
};

void ScanShard(const std::string& root, ShardWork* w, std::atomic<uint64_t>* files, std::atomic<uint64_t>* bytes) {
  NsScan& out = w->result;
  auto level2 = List(root + "/" + w->rel);
  if (!level2.ok()) {
    out.bad_names.emplace_back(w->rel, level2.status().ToString());
    return;
  }
  if (level2->empty()) out.empty_dirs.push_back(w->rel);
  for (const Entry& e2 : *level2) {
    const std::string rel2 = w->rel + "/" + e2.name;
    const size_t g = e2.name.find("_g");
    if (e2.type == DT_LNK) { out.strays.push_back(rel2); continue; }
    if (e2.type != DT_DIR || g != 2 || !IsLowerHex(std::string_view(e2.name).substr(0, 2), 2) ||
        !IsDecimal(std::string_view(e2.name).substr(4))) {
      out.bad_names.emplace_back(rel2, "not a <hh>_g<group> shard directory");
      continue;
    }
    auto files3 = List(root + "/" + rel2);
    if (!files3.ok()) { out.bad_names.emplace_back(rel2, files3.status().ToString()); continue; }
    if (files3->empty()) out.empty_dirs.push_back(rel2);
    for (const Entry& f : *files3) {
      const std::string rel3 = rel2 + "/" + f.name;
      if (f.type == DT_LNK) { out.strays.push_back(rel3); continue; }
      ScannedFile sf;
      if (f.type == DT_REG && IsBlockTmp(f.name)) {
        if (Stat(root, rel3, &sf)) out.tmps.push_back(sf);
        continue;
      }
      std::string_view stem = f.name;
      const bool bin = stem.ends_with(".bin");
      if (bin) stem.remove_suffix(4);
      const bool hex_ok = bin && (IsLowerHex(stem, 64) || IsLowerHex(stem, 32));
      if (f.type != DT_REG || !hex_ok) {
        out.bad_names.emplace_back(rel3, f.type == DT_REG ? "not <hex>.bin" : "not a regular file");
        continue;
      }
      if (stem.substr(0, 3) != w->shard1 || stem.substr(3, 2) != std::string_view(e2.name).substr(0, 2)) {
        out.bad_names.emplace_back(rel3, "in the wrong shard directory");
        continue;
      }
      if (!Stat(root, rel3, &sf)) continue;  // vanished: another instance's gc
      out.blocks.push_back(sf);
      ++*files;
      *bytes += sf.size;
    }
  }
}

// Non-shard entries of a namespace directory: config.json, temp and probe
// files, leases; everything else is a stray.
void ScanNsDir(const std::string& root, NsScan* ns) {
  auto entries = List(root + "/" + ns->dir);
  if (!entries.ok()) {
    ns->bad_names.emplace_back(ns->dir, entries.status().ToString());
    return;
  }
  for (const Entry& e : *entries) {
    const std::string rel = ns->dir + "/" + e.name;
    ScannedFile sf;
    if (e.type == DT_REG && e.name == "config.json") {
      int fd = open((root + "/" + rel).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) continue;
      char buf[65536];
      ssize_t n;
      while ((n = read(fd, buf, sizeof buf)) > 0) ns->config_text.append(buf, static_cast<size_t>(n));
      close(fd);
      ns->has_config = true;
    } else if (e.type == DT_REG && e.name.starts_with("config.json_") && e.name.ends_with(".tmp")) {
      if (Stat(root, rel, &sf)) ns->tmps.push_back(sf);
    } else if (e.type == DT_REG && e.name.starts_with(".o_direct_probe_")) {
      if (Stat(root, rel, &sf)) ns->probes.push_back(sf);
    } else if (e.type == DT_DIR && e.name == ".kvtier") {
      auto leases = List(root + "/" + rel + "/leases");
      if (!leases.ok()) continue;
      for (const Entry& l : *leases) {
        if (l.type == DT_REG && l.name.ends_with(".lease") && Stat(root, rel + "/leases/" + l.name, &sf)) {
          ns->leases.push_back(sf);
        }
      }
    } else {
      ns->strays.push_back(rel);
    }
  }
}

void Merge(NsScan* into, NsScan&& from) {
  auto move_all = [](auto& dst, auto& src) { dst.insert(dst.end(), std::make_move_iterator(src.begin()), std::make_move_iterator(src.end())); };
  move_all(into->blocks, from.blocks);
  move_all(into->tmps, from.tmps);
  move_all(into->empty_dirs, from.empty_dirs);
  move_all(into->bad_names, from.bad_names);
  move_all(into->strays, from.strays);
}

}  // namespace

bool IsLowerHex(std::string_view s, size_t len) {
  if (s.size() != len) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::optional<std::string> NamespaceDigest(std::string_view name) {
  if (name.size() < 14 || name[name.size() - 13] != '_') return std::nullopt;
  std::string_view digest = name.substr(name.size() - 12);
  if (!IsLowerHex(digest, 12)) return std::nullopt;
  return std::string(digest);
}

std::optional<std::pair<std::string, int64_t>> BlockDirOf(std::string_view name) {
  const size_t r = name.rfind("_r");
  if (r == std::string_view::npos || !IsDecimal(name.substr(r + 2)) || name.size() - r - 2 > 9) return std::nullopt;
  std::string_view ns = name.substr(0, r);
  if (!NamespaceDigest(ns)) return std::nullopt;
  return std::make_pair(std::string(ns), std::stoll(std::string(name.substr(r + 2))));
}

Result<TreeScan> ScanTree(const ScanOptions& o) {
  if (o.root.empty()) return InvalidArgument("a root directory is required");
  KVTIER_ASSIGN_OR_RETURN(std::vector<Entry> top, List(o.root));
  struct stat st;
  if (stat(o.root.c_str(), &st) != 0) return ErrnoToStatus(errno, "stat " + o.root);
  TreeScan scan;
  std::vector<ShardWork> work;
  bool layout_seen = false;
  for (const Entry& e : top) {
    if (e.type == DT_DIR && BlockDirOf(e.name)) {
      auto [ns, rank] = *BlockDirOf(e.name);
      NsScan& n = scan.namespaces[ns];
      n.dir = ns;
      n.digest = *NamespaceDigest(ns);
      n.ranks.push_back(rank);
      layout_seen = true;
      auto shards = List(o.root + "/" + e.name);
      if (!shards.ok()) return shards.status();
      if (shards->empty()) n.empty_dirs.push_back(e.name);
      for (const Entry& s : *shards) {
        const std::string rel = e.name + "/" + s.name;
        if (s.type == DT_LNK) {
          n.strays.push_back(rel);
        } else if (s.type != DT_DIR || !IsLowerHex(s.name, 3)) {
          n.bad_names.emplace_back(rel, "not a <hhh> shard directory");
        } else {
          work.push_back({ns, rel, s.name, {}});
        }
      }
    } else if (e.type == DT_DIR && NamespaceDigest(e.name)) {
      NsScan& n = scan.namespaces[e.name];
      n.dir = e.name;
      n.digest = *NamespaceDigest(e.name);
      n.has_ns_dir = true;
      layout_seen = true;
    } else {
      scan.root_strays.push_back(e.name);
    }
  }
  if (!layout_seen && !top.empty() && !o.force) {
    return InvalidArgument(o.root + " does not look like a kvtier/vLLM root_dir (no <model>_<digest> directories); "
                           "pass --force to scan it anyway");
  }
  for (auto& [name, ns] : scan.namespaces) {
    if (ns.has_ns_dir) ScanNsDir(o.root, &ns);
  }
  std::atomic<uint64_t> files{0}, bytes{0}, next{0};
  std::atomic<bool> done{false};
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < work.size();) ScanShard(o.root, &work[i], &files, &bytes);
  };
  std::thread reporter;
  if (o.progress) {
    reporter = std::thread([&] {
      while (!done) {
        o.progress({files.load(), bytes.load()});
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  }
  std::vector<std::thread> threads;
  for (int t = 1; t < std::max(1, o.jobs); ++t) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  done = true;
  if (reporter.joinable()) reporter.join();
  for (ShardWork& w : work) Merge(&scan.namespaces[w.ns], std::move(w.result));
  for (auto& [name, ns] : scan.namespaces) {
    std::sort(ns.ranks.begin(), ns.ranks.end());
    scan.files += ns.blocks.size() + ns.tmps.size() + ns.probes.size() + ns.leases.size() + (ns.has_config ? 1 : 0);
  }
  if (o.progress) o.progress({files.load(), bytes.load()});
  return scan;
}

}  // namespace kvtier::internal
