// The candidate buffer of gc's one-walk capacity path (gc_candidates.h).
#include "ops/gc_candidates.h"

#include <algorithm>
#include <new>

#include "format/layout_names.h"

namespace kvtier::internal {
namespace {

int HexValue(char c) { return c <= '9' ? c - '0' : c - 'a' + 10; }

}  // namespace

CandidateBuffer::CandidateBuffer(uint64_t bytes_max) : entries_max_(bytes_max / kEntryBytes) {
  if (entries_max_ == 0) youngest_ = INT64_MIN;  // holds nothing: every offer is dropped at once
  // Address space only: pages count once entries fill them, and the heap
  // never moves (no second copy while it grows).
  try {
    heap_.reserve(entries_max_);
  } catch (const std::bad_alloc&) {
    // a budget beyond the address space: the heap grows as it fills instead
  }
}

bool CandidateBuffer::Older(const Entry& a, const Entry& b) {
  if (a.activity != b.activity) return a.activity < b.activity;
  if (a.dir != b.dir) return a.dir < b.dir;
  if (a.hash != b.hash) return a.hash < b.hash;
  return a.group < b.group;
}

// Its rel, "<NS>_r<rank>/<hhh>/<hh>_g<g>/<hex>.bin", as compact parts; false
// where File() would not rebuild the very same rel.
bool CandidateBuffer::Parse(const ScannedFile& b, int64_t use, Entry* e, std::string* block_dir_out) {
  const auto [dir2, file] = SplitRel(b.rel);
  const auto [dir1, shard2] = SplitRel(dir2);
  const auto block_dir = SplitRel(dir1).first;
  const auto hex = format::BlockFileHex(file);
  const auto parsed = format::ParseShard2Name(shard2);
  if (!hex || !parsed || parsed->group < 0 || parsed->group > UINT32_MAX || hex->size() % 2 != 0 || hex->size() > 64 ||
      format::Shard2Name(*hex, parsed->group) != shard2 || SplitRel(dir1).second != hex->substr(0, 3)) {
    return false;  // not the rel File() rebuilds: never guess a path
  }
  for (size_t i = 0; i < hex->size(); i += 2) {
    e->hash[i / 2] = static_cast<uint8_t>(HexValue((*hex)[i]) << 4 | HexValue((*hex)[i + 1]));
  }
  e->hex_chars = static_cast<uint8_t>(hex->size());
  e->group = static_cast<uint32_t>(parsed->group);
  e->activity = use;
  e->bytes = b.bytes, e->ino = b.ino, e->dev = b.dev;
  e->mode = b.mode;
  *block_dir_out = block_dir;
  return true;
}

void CandidateBuffer::Offer(const ScannedFile& b, int64_t now) {
  const int64_t use = CountedUse(now, b.activity());
  if (use > youngest_.load(std::memory_order_relaxed)) {
    dropped_ = true;  // full, and younger than all held
    return;
  }
  Entry e;
  std::string block_dir;
  if (entries_max_ == 0) {
    dropped_ = true;
    return;
  }
  if (!Parse(b, use, &e, &block_dir)) {  // outside the lock: the walker threads parse at once
    dropped_ = unparsed_ = true;
    return;
  }
  std::lock_guard lock(mu_);
  auto it = dir_index_.find(block_dir);
  if (it == dir_index_.end()) {
    it = dir_index_.emplace(block_dir, static_cast<uint32_t>(dirs_.size())).first;
    dirs_.push_back(block_dir);
  }
  e.dir = it->second;
  if (heap_.size() == entries_max_) {
    dropped_ = true;
    if (!Older(e, heap_.front())) return;
    std::pop_heap(heap_.begin(), heap_.end(), Older);
    held_bytes_ -= heap_.back().bytes;
    heap_.pop_back();
  }
  heap_.push_back(e);
  std::push_heap(heap_.begin(), heap_.end(), Older);
  held_bytes_ += e.bytes;
  if (heap_.size() == entries_max_) youngest_ = heap_.front().activity;
}

std::vector<CandidateBuffer::Entry> CandidateBuffer::TakeOldestFirst() {
  std::sort_heap(heap_.begin(), heap_.end(), Older);  // ascending: oldest first
  held_bytes_ = 0;
  return std::move(heap_);
}

std::string CandidateBuffer::DirOf(const Entry& e) const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex5(5, '0');
  for (size_t i = 0; i < 5; ++i) hex5[i] = kDigits[(e.hash[i / 2] >> (i % 2 == 0 ? 4 : 0)) & 15];
  return dirs_[e.dir] + "/" + hex5.substr(0, 3) + "/" + format::Shard2Name(hex5, e.group);
}

ScannedFile CandidateBuffer::File(const Entry& e) const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex(e.hex_chars, '0');
  for (size_t i = 0; i < hex.size(); ++i) hex[i] = kDigits[(e.hash[i / 2] >> (i % 2 == 0 ? 4 : 0)) & 15];
  ScannedFile f;
  f.rel = DirOf(e) + "/" + format::BlockFileName(hex);
  f.bytes = f.size = e.bytes;
  f.mtime = f.atime = e.activity;  // as counted: UsedSinceWalk counts the file's times alike
  f.ino = e.ino, f.dev = e.dev;
  f.mode = static_cast<mode_t>(e.mode);
  return f;
}

}  // namespace kvtier::internal
