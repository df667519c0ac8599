// Start-up checks of a multi-root tier (root_set.h).
#include "fs/root_set.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <map>

#include "format/layout_names.h"
#include "fs/tier_dirs.h"

namespace kvtier::internal {
namespace {

// Directories listed per root while sampling: bounds the start-up cost on a
// huge or hostile tree whatever its shape.
constexpr size_t kSampleDirsMax = 256;
// Names taken from one shard directory, so the sample spans several.
constexpr size_t kSamplePerDir = 4;

std::string Quoted(const std::string& s) { return "\"" + s + "\""; }

std::string RootName(const std::vector<std::string>& roots, size_t i) {
  return "root_dir[" + std::to_string(i) + "] " + Quoted(roots[i]);
}

// Opens dir/name as a directory: false when absent; an error for a symlink
// (never followed below a root, L98) or anything unreadable.
Result<bool> OpenIfPresent(int dir, const std::string& name, const std::string& display, UniqueFd* out) {
  const int err = OpenDirAt(dir, name, out);
  if (err == ENOENT) return false;
  if (err == ELOOP) return ErrnoToStatus(err, display + " is a symlink: refused (kvtier follows no symlink below root_dir)");
  if (err != 0) return ErrnoToStatus(err, "open " + display);
  return true;
}

// L100: the marker of <NS>/.kvtier, if any. An empty file (what a power cut
// leaves of an unsynced write) counts as none and is written again.
Result<std::optional<format::RootSlot>> ReadMarker(int ns_fd, const std::string& ns_display) {
  const std::string meta_display = ns_display + "/" + std::string(format::kMetaDirName);
  UniqueFd meta, fd;
  KVTIER_ASSIGN_OR_RETURN(bool meta_found, OpenIfPresent(ns_fd, std::string(format::kMetaDirName), meta_display, &meta));
  if (!meta_found) return std::optional<format::RootSlot>();
  const std::string display = meta_display + "/" + std::string(format::kRootMarkerName);
  struct stat st;
  const int err = OpenRegularAt(meta.get(), std::string(format::kRootMarkerName), false, &fd, &st);
  if (err == ENOENT) return std::optional<format::RootSlot>();
  if (err != 0) return ErrnoToStatus(err, "open " + display + (err == EINVAL ? " (not a regular file)" : ""));
  std::string body(format::kRootMarkerBytesMax + 1, '\0');
  const ssize_t n = pread(fd.get(), body.data(), body.size(), 0);
  if (n < 0) return ErrnoToStatus(errno, "read " + display);
  if (n == 0) return std::optional<format::RootSlot>();
  body.resize(static_cast<size_t>(n));
  std::optional<format::RootSlot> slot = format::ParseRootMarker(body);
  if (!slot) {
    return Corruption(display + " is not a valid root marker (FORMAT.md L100); if the roots of root_dir are "
                                "listed in their original order, remove it and start again");
  }
  return slot;
}

// Appends to `out` the block names (L6, L7) of one listed directory level.
void TakeBlocks(const std::vector<DirEntry>& files, std::string_view shard1, std::string_view hh,
                std::vector<std::string>* out) {
  size_t taken = 0;
  for (const DirEntry& f : files) {
    const auto hex = format::BlockFileHex(f.name);
    if (!hex || !S_ISREG(f.st.st_mode) || !format::BlockInShard(*hex, shard1, hh)) continue;
    out->emplace_back(*hex);
    if (++taken == kSamplePerDir || out->size() == kRootSampleBlocks) return;
  }
}

// Up to kRootSampleBlocks block names from <NS>_r<rank>, listing at most
// kSampleDirsMax directories. Directories that vanish meanwhile are skipped.
void SampleBlocks(int root_fd, const std::string& block_dir, std::vector<std::string>* out) {
  UniqueFd bd;
  std::vector<DirEntry> level1;
  if (OpenDirAt(root_fd, block_dir, &bd) != 0 || ListDir(bd.get(), &level1) != 0) return;
  size_t listed = 1;
  for (const DirEntry& e1 : level1) {
    UniqueFd s1;
    std::vector<DirEntry> level2;
    if (!format::IsShard1Name(e1.name) || OpenDirAt(bd.get(), e1.name, &s1) != 0) continue;
    if (++listed > kSampleDirsMax || ListDir(s1.get(), &level2) != 0) return;
    for (const DirEntry& e2 : level2) {
      UniqueFd s2;
      std::vector<DirEntry> files;
      const auto shard2 = format::ParseShard2Name(e2.name);
      if (!shard2 || OpenDirAt(s1.get(), e2.name, &s2) != 0) continue;
      if (++listed > kSampleDirsMax || ListDir(s2.get(), &files) != 0) return;
      TakeBlocks(files, e1.name, shard2->hh, out);
      if (out->size() == kRootSampleBlocks) return;
    }
  }
}

Result<RootState> ExamineRoot(const std::string& root, const Namespace& ns) {
  RootState state;
  UniqueFd root_fd, ns_fd;
  const int err = OpenDirAt(AT_FDCWD, root, &root_fd);
  if (err == ENOENT) return state;
  if (err != 0) return ErrnoToStatus(err, "open " + root + (err == ENOTDIR ? " (not a directory)" : ""));
  state.exists = true;
  std::vector<DirEntry> top;
  if (const int list_err = ListDir(root_fd.get(), &top)) return ErrnoToStatus(list_err, "read directory " + root);
  state.empty = top.empty();
  const std::string ns_display = JoinRoot(root, ns.dir_name());
  KVTIER_ASSIGN_OR_RETURN(state.has_ns, OpenIfPresent(root_fd.get(), ns.dir_name(), ns_display, &ns_fd));
  if (state.has_ns) {
    KVTIER_ASSIGN_OR_RETURN(state.marker, ReadMarker(ns_fd.get(), ns_display));
  }
  SampleBlocks(root_fd.get(), ns.block_dir_name(), &state.sample);
  return state;
}

// L100: a marker must give this position and this count.
Status CheckMarker(const std::vector<std::string>& roots, const Namespace& ns, size_t i, format::RootSlot slot) {
  const std::string where = RootName(roots, i) + " holds root " + std::to_string(slot.index) + " of " +
                            std::to_string(slot.count) + " of namespace " + ns.dir_name() + " (its " +
                            std::string(format::kMetaDirName) + "/" + std::string(format::kRootMarkerName) + ")";
  if (slot.count != roots.size()) {
    return InvalidArgument(where + ", but root_dir now lists " + std::to_string(roots.size()) +
                           " roots: a block's root is its hash mod the number of roots (FORMAT.md L99), so "
                           "changing the number remaps every block. List the " + std::to_string(slot.count) +
                           " original roots, or remove the namespace from every root to start afresh");
  }
  if (slot.index != i) {
    return InvalidArgument(where + ", but root_dir lists it at position " + std::to_string(i) +
                           ": the roots were reordered, and blocks would be looked up on the wrong root "
                           "(FORMAT.md L99). List the roots in their original order");
  }
  return Status::Ok();
}

// L99 for trees without markers (vLLM writes none): most of the sampled
// blocks of a root must be ones the formula puts there. A quarter is the
// bar, so a few planted or stray files cannot stop the tier, while a
// reordered list (no block in place) or a changed count (about 1/count in
// place) is caught.
Status CheckSample(const std::vector<std::string>& roots, size_t i, const std::vector<std::string>& sample) {
  std::map<size_t, size_t> elsewhere;  // root -> sampled blocks that belong there
  size_t misplaced = 0;
  for (const std::string& hex : sample) {
    const Result<BlockHash> hash = BlockHash::FromHex(hex);
    if (!hash.ok()) continue;
    const size_t want = format::RootIndexOf(hash->bytes(), roots.size());
    if (want != i) ++elsewhere[want], ++misplaced;
  }
  if (misplaced == 0 || misplaced * 4 < sample.size()) return Status::Ok();
  std::string msg = std::to_string(misplaced) + " of " + std::to_string(sample.size()) + " blocks sampled on " +
                    RootName(roots, i) + " belong on another root by the placement rule (hash mod " +
                    std::to_string(roots.size()) + ", FORMAT.md L99)";
  if (elsewhere.size() == 1) msg += ": all on root_dir[" + std::to_string(elsewhere.begin()->first) + "]";
  return InvalidArgument(msg + ". The roots were reordered, or their number changed, since these blocks were "
                               "written (by kvtier or vLLM); list the roots as they were");
}

// A root that is absent or empty while another holds the namespace is a
// drive that is not mounted (or was replaced): creating it would put blocks
// on the filesystem below the mount point.
Status CheckPresent(const std::vector<std::string>& roots, const Namespace& ns, const std::vector<RootState>& states,
                    size_t i, size_t holder) {
  const RootState& s = states[i];
  if (s.exists && !s.empty) return Status::Ok();
  const std::string what = s.exists ? " is an empty directory" : " does not exist";
  return Status(StatusCode::kNotFound,
                RootName(roots, i) + what + ", while " + RootName(roots, holder) + " holds namespace " +
                    ns.dir_name() + ": a drive that is not mounted? kvtier does not start on it, as its blocks "
                    "would be written below the mount point. Mount it; or, if this root is new and empty on "
                    "purpose, create the directory " + JoinRoot(roots[i], ns.dir_name()) + " and start again");
}

}  // namespace

Result<std::vector<RootState>> ExamineRoots(const std::vector<std::string>& roots, const Namespace& ns) {
  std::vector<RootState> states;
  for (const std::string& root : roots) {
    Result<RootState> state = ExamineRoot(root, ns);
    if (!state.ok()) return state.status().WithContext("root_dir[" + std::to_string(states.size()) + "]");
    states.push_back(std::move(*state));
  }
  return states;
}

Status CheckRootSet(const std::vector<std::string>& roots, const Namespace& ns, const std::vector<RootState>& states) {
  for (size_t i = 0; i < roots.size(); ++i) {
    if (states[i].marker) KVTIER_RETURN_IF_ERROR(CheckMarker(roots, ns, i, *states[i].marker));
  }
  for (size_t i = 0; i < roots.size(); ++i) KVTIER_RETURN_IF_ERROR(CheckSample(roots, i, states[i].sample));
  size_t holder = roots.size();
  for (size_t i = 0; i < roots.size() && holder == roots.size(); ++i) {
    if (states[i].has_ns) holder = i;
  }
  if (holder == roots.size()) return Status::Ok();  // a fresh set: every root is created
  for (size_t i = 0; i < roots.size(); ++i) KVTIER_RETURN_IF_ERROR(CheckPresent(roots, ns, states, i, holder));
  return Status::Ok();
}

Status WriteRootMarker(const std::string& root, const Namespace& ns, format::RootSlot slot, uint64_t suffix) {
  const std::string ns_display = JoinRoot(root, ns.dir_name());
  const std::string meta_display = ns_display + "/" + std::string(format::kMetaDirName);
  KVTIER_ASSIGN_OR_RETURN(UniqueFd root_fd, OpenRootDir(root));
  KVTIER_ASSIGN_OR_RETURN(UniqueFd ns_fd, MakeTierDir(root_fd.get(), ns.dir_name(), ns_display, false));
  KVTIER_ASSIGN_OR_RETURN(UniqueFd meta, MakeTierDir(ns_fd.get(), std::string(format::kMetaDirName), meta_display, false));
  const std::string tmp = format::RootMarkerTmpName(suffix), body = format::RootMarkerBody(slot);
  const std::string display = meta_display + "/" + tmp;
  const int fd = openat(meta.get(), tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, "create " + display);
  Status s;
  errno = 0;
  if (write(fd, body.data(), body.size()) != static_cast<ssize_t>(body.size())) s = ErrnoToStatus(errno ? errno : EIO, "write " + display);
  if (s.ok() && fdatasync(fd) != 0) s = ErrnoToStatus(errno, "fdatasync " + display);
  if (close(fd) != 0 && s.ok()) s = ErrnoToStatus(errno, "close " + display);
  const std::string name(format::kRootMarkerName);
  if (s.ok() && renameat(meta.get(), tmp.c_str(), meta.get(), name.c_str()) != 0) s = ErrnoToStatus(errno, "rename " + display);
  if (!s.ok()) unlinkat(meta.get(), tmp.c_str(), 0);
  return s;
}

}  // namespace kvtier::internal
