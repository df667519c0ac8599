// Open shard directories ("<ns>_r<rank>/<hhh>/<hh>_g<g>") that the ops name
// their files relative to, so that a store or a load names one component
// instead of walking root_dir's tree: on a network filesystem each component
// the client has not cached is a round trip (FORMAT.md L145-L147). Used on
// network and FUSE volumes only (TierShared::hold_shard_dirs).
//
// Entries are O_PATH directory fds opened as kResolveInTree says (no symlink
// on the way), bounded in number (least recently used goes first) and in age:
// an entry older than its time to live is dropped at the next Find, so a
// directory moved or replaced under the tier is followed for at most that
// long. An op holds its entry (a shared_ptr) until it is freed, which is only
// after the kernel returned its last request: an evicted fd is closed once no
// request can still resolve a name from it. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "util/dir_fd.h"

namespace kvtier::internal {

class ShardDirs {
 public:
  // One open shard directory.
  struct Dir {
    UniqueFd fd;
    uint64_t opened_ns = 0;  // CLOCK_MONOTONIC
  };
  using Ref = std::shared_ptr<const Dir>;

  // Defaults: a few hundred fds per root, and 2 s, the window FORMAT.md
  // L146 allows. Processes often run with a soft limit of 1024 fds, so all
  // instances of a process (several roots, several tiers) cache at most
  // kProcessEntriesMax together: past it a Put first evicts its own least
  // recently used, and with none to evict returns the entry uncached.
  static constexpr size_t kEntriesMax = 256;
  static constexpr size_t kProcessEntriesMax = 512;
  static constexpr uint64_t kTtlNs = 2'000'000'000;

  explicit ShardDirs(size_t entries_max = kEntriesMax, uint64_t ttl_ns = kTtlNs)
      : entries_max_(entries_max), ttl_ns_(ttl_ns) {}
  ~ShardDirs();
  ShardDirs(const ShardDirs&) = delete;
  ShardDirs& operator=(const ShardDirs&) = delete;
  // Entries cached by every instance of this process.
  static size_t ProcessEntries();

  // The entry of `key` (the directory's path relative to root_dir) if it is
  // younger than the time to live, else nullptr (an expired one is dropped).
  Ref Find(const std::string& key, uint64_t now_ns);
  // Caches `fd` (taken) as `key`'s directory, replacing an older entry and
  // evicting the least recently used beyond entries_max; returns the entry.
  Ref Put(const std::string& key, int fd, uint64_t now_ns);
  // Drops `key`'s entry if it is still `which` (a request through it found
  // the directory gone); a newer entry put meanwhile stays.
  void Drop(const std::string& key, const Dir* which);
  size_t size() const;

  // What the tier has seen of first-level shard directories
  // ("<ns>_r<rank>/<hhh>"), for how a store into a shard directory it does
  // not hold begins. Making a directory takes its parent's lock exclusively
  // (a lookup and a mkdir), and the kernel serializes those in one parent:
  // in a fresh tree every new <hhh> queues on the namespace directory. An
  // open-first store adds lookups of the missing <hhh> there, which take the
  // same lock shared and so wait between the mkdirs; making <hhh> first
  // (EEXIST is fine) adds none. Where <hhh> mostly exists (a restarted
  // instance on a full volume) a mkdir that finds it would take that lock
  // for nothing, so the choice follows what unknown <hhh> lately were.
  // Hints only: a store that guessed wrong still ends right (FORMAT.md L157).
  bool ParentKnown(const std::string& parent) const;
  // Whether a store into an unknown <hhh> makes it before opening.
  bool MakeParentFirst() const;
  // `parent` exists now; `probed`: its store did not know it, and `existed`
  // says whether it was there already (else the store made it).
  void SawParent(const std::string& parent, bool existed, bool probed);
  static constexpr size_t kParentsMax = 65536;  // 4096 per block directory

  // Directories (relative to root_dir) whose entry in their parent this
  // process has made durable: an fsync of the parent succeeded while the
  // directory was there. A store with durability full fsyncs the parent of
  // each directory on its path that is not in here, made by it or not: the
  // maker may never sync it (another store whose write then fails, an
  // engine, an instance with durability none), and a block it acknowledges
  // must survive a power loss (CRASH_INVARIANTS.md C1). Used on every volume
  // kind. Bounded like the parents above: when full it starts over, which
  // costs a sync of some parents again, never a missed one.
  bool EntrySynced(const std::string& dir) const;
  void NoteEntrySynced(const std::string& dir);
  // `dir` was made just now (again, after gc removed it): its entry is new.
  void ForgetEntrySynced(const std::string& dir);
  static constexpr size_t kSyncedMax = 65536;

  // Rounds of shard-directory creation after a lost race: at least
  // kMkdirRoundsMin, and more while the first lost race is under
  // kMkdirRetryNs old, up to kMkdirRoundsMax. A count alone is not enough on
  // a network filesystem: GlusterFS kept saying ENOENT inside a directory
  // that the other client had just made for longer than 4 fast rounds took.
  static constexpr int kMkdirRoundsMin = 4;
  static constexpr int kMkdirRoundsMax = 64;
  static constexpr uint64_t kMkdirRetryNs = 2'000'000'000;
  // Whether a store that has run `rounds` rounds, the first lost race at
  // `first_ns`, may run another at `now_ns`.
  static bool MkdirRoundLeft(int rounds, uint64_t first_ns, uint64_t now_ns) {
    if (rounds < kMkdirRoundsMin) return true;
    return rounds < kMkdirRoundsMax && now_ns - first_ns < kMkdirRetryNs;
  }

 private:
  using Lru = std::list<std::pair<std::string, Ref>>;  // most recently used first
  void EraseLocked(Lru::iterator it);

  const size_t entries_max_;
  const uint64_t ttl_ns_;
  mutable std::mutex mu_;
  Lru lru_;
  std::unordered_map<std::string, Lru::iterator> index_;
  std::unordered_set<std::string> parents_;  // first-level shard directories seen to exist
  std::unordered_set<std::string> synced_;   // directories whose entry is durable (EntrySynced)
  int missing_score_ = 0;  // + for each unknown <hhh> found missing, - found present (bounded)
};

}  // namespace kvtier::internal
