// CandidateBuffer: the least recently used blocks gc's first walk saw, as
// many as a fixed memory budget holds, whatever the volume holds. When what the capacity
// bound asks fits in them, gc removes them in exact LRU order without a
// second walk; otherwise it falls back to the histogram (gc_histogram.h).
//
// It is a max-heap keyed by (use time, then a fixed order of names): a block
// older than the youngest held replaces it once the buffer is full, a younger
// one is dropped. So after the walk the buffer holds exactly the oldest
// entries() blocks seen, and everything dropped is younger than all of them.
// Entries are compact (kEntryBytes each: the block directory interned, the
// hash in binary), so the default 32 MiB holds ~400k blocks.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ops/scan.h"
#include "ops/use_time.h"

namespace kvtier::internal {

class CandidateBuffer {
 public:
  struct Entry {
    int64_t activity = 0;  // CountedUse(now, ScannedFile::activity()): what gc orders by
    uint64_t bytes = 0, ino = 0, dev = 0;
    uint32_t mode = 0;
    uint32_t dir = 0;    // index into dirs_: "<NS>_r<rank>"
    uint32_t group = 0;  // the <hh>_g<group> directory's group
    uint8_t hex_chars = 0;  // 32 or 64 (FORMAT.md L7)
    std::array<uint8_t, 32> hash{};
  };
  static constexpr size_t kEntryBytes = sizeof(Entry);

  // bytes_max: the budget for entries; 0 holds nothing (every capacity run
  // falls back to the histogram).
  explicit CandidateBuffer(uint64_t bytes_max);

  // A block (its rel as the walk gives it), seen at `now` (unix seconds: its
  // use time counted by CountedUse, FORMAT.md L155). Thread-safe: the
  // walker threads offer at once.
  void Offer(const ScannedFile& b, int64_t now);

  // After the walk (not thread-safe): the entries, oldest first.
  std::vector<Entry> TakeOldestFirst();
  // Whether any block offered is not held (evicted, dropped, or not parsed).
  bool dropped() const { return dropped_.load(); }
  // Whether every block dropped was younger than all held (false once a
  // block's name could not be held, whatever its age): the buffer is the
  // oldest set only while this holds.
  bool oldest_set() const { return !unparsed_.load(); }
  uint64_t entries_max() const { return entries_max_; }
  uint64_t held_bytes() const { return held_bytes_; }
  size_t entries() const { return heap_.size(); }
  // The block's ScannedFile again (rel rebuilt from the entry).
  ScannedFile File(const Entry& e) const;
  // The directory holding the block ("<NS>_r<rank>/<hhh>/<hh>_g<g>").
  std::string DirOf(const Entry& e) const;

 private:
  // Fills e but e->dir, and block_dir with the rel's "<NS>_r<rank>".
  static bool Parse(const ScannedFile& b, int64_t use, Entry* e, std::string* block_dir);
  static bool Older(const Entry& a, const Entry& b);  // heap order: the youngest on top

  uint64_t entries_max_;
  std::mutex mu_;  // guards all below but dropped_ and youngest_
  std::vector<Entry> heap_;
  std::vector<std::string> dirs_;
  std::map<std::string, uint32_t, std::less<>> dir_index_;
  uint64_t held_bytes_ = 0;
  std::atomic<bool> dropped_{false}, unparsed_{false};
  // The youngest activity held once full: younger blocks are dropped
  // without the lock (most blocks of a large tree).
  std::atomic<int64_t> youngest_{INT64_MAX};
};

}  // namespace kvtier::internal
