#include "fs/shard_dirs.h"

#include <algorithm>
#include <atomic>

namespace kvtier::internal {
namespace {

std::atomic<size_t> g_cached{0};  // entries in every instance's lru_

}  // namespace

ShardDirs::~ShardDirs() { g_cached.fetch_sub(lru_.size()); }

size_t ShardDirs::ProcessEntries() { return g_cached.load(); }

ShardDirs::Ref ShardDirs::Find(const std::string& key, uint64_t now_ns) {
  std::lock_guard lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  const Lru::iterator entry = it->second;
  if (now_ns - entry->second->opened_ns >= ttl_ns_) {
    EraseLocked(entry);
    return nullptr;
  }
  lru_.splice(lru_.begin(), lru_, entry);
  return entry->second;
}

ShardDirs::Ref ShardDirs::Put(const std::string& key, int fd, uint64_t now_ns) {
  auto dir = std::make_shared<Dir>();
  dir->fd = UniqueFd(fd);
  dir->opened_ns = now_ns;
  std::lock_guard lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) EraseLocked(it->second);
  if (entries_max_ == 0) return dir;
  while (!lru_.empty() && (lru_.size() >= entries_max_ || g_cached.load() >= kProcessEntriesMax)) {
    EraseLocked(std::prev(lru_.end()));
  }
  if (g_cached.fetch_add(1) >= kProcessEntriesMax) {  // other instances hold the process's budget
    g_cached.fetch_sub(1);
    return dir;
  }
  lru_.emplace_front(key, dir);
  index_.emplace(key, lru_.begin());
  return dir;
}

void ShardDirs::Drop(const std::string& key, const Dir* which) {
  std::lock_guard lock(mu_);
  auto it = index_.find(key);
  if (it != index_.end() && it->second->second.get() == which) EraseLocked(it->second);
}

size_t ShardDirs::size() const {
  std::lock_guard lock(mu_);
  return lru_.size();
}

bool ShardDirs::ParentKnown(const std::string& parent) const {
  std::lock_guard lock(mu_);
  return parents_.count(parent) != 0;
}

bool ShardDirs::MakeParentFirst() const {
  std::lock_guard lock(mu_);
  return missing_score_ > 0;
}

void ShardDirs::SawParent(const std::string& parent, bool existed, bool probed) {
  constexpr int kScoreMax = 8;  // a few outcomes turn the choice around
  std::lock_guard lock(mu_);
  if (probed) missing_score_ = std::clamp(missing_score_ + (existed ? -1 : 1), -kScoreMax, kScoreMax);
  if (parents_.size() >= kParentsMax) parents_.clear();
  parents_.insert(parent);
}

bool ShardDirs::EntrySynced(const std::string& dir) const {
  std::lock_guard lock(mu_);
  return synced_.count(dir) != 0;
}

void ShardDirs::NoteEntrySynced(const std::string& dir) {
  std::lock_guard lock(mu_);
  if (synced_.size() >= kSyncedMax) synced_.clear();
  synced_.insert(dir);
}

void ShardDirs::ForgetEntrySynced(const std::string& dir) {
  std::lock_guard lock(mu_);
  synced_.erase(dir);
}

// The fd itself closes when the last op holding the entry lets go of it.
void ShardDirs::EraseLocked(Lru::iterator it) {
  index_.erase(it->first);
  lru_.erase(it);
  g_cached.fetch_sub(1);
}

}  // namespace kvtier::internal
