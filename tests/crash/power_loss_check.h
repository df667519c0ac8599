// What power_loss_test holds each crash image to (CRASH_INVARIANTS.md C8 to
// C11), and the figures it reports: the test's ledger of rounds and
// acknowledged keys, and the check of one recovered image against it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "kvtier/fs_tier.h"

namespace kvtier::powerloss {

inline constexpr uint64_t kRow = 16384;  // small rows: cheap rounds, many files
inline constexpr int kModes = 3;         // Durability none, file, full
inline constexpr int kInners = 2;        // ext4, xfs

inline int ModeIndex(Durability d) { return static_cast<int>(d); }
inline const char* ModeName(Durability d) {
  return d == Durability::kNone ? "none" : d == Durability::kFile ? "file" : "full";
}

// One round: a writer stores on inner filesystem `inner` until the power cut,
// `cut_after_us` after it is ready (or until it has stored `max_rows`).
struct Plan {
  int round = 0;
  size_t inner = 0;
  Durability mode = Durability::kNone;
  bool uring = true;
  bool direct = true;  // O_DIRECT (else buffered)
  uint64_t batch = 1;
  uint64_t max_rows = 0;
  uint32_t cut_after_us = 0;
  // Every round stores its own keys, so a block found in any later image
  // names the round, and so the durability mode, that wrote it.
  uint64_t FirstKey() const { return (static_cast<uint64_t>(round) + 1) << 20; }
};
inline int RoundOfKey(uint64_t key) { return static_cast<int>(key >> 20) - 1; }

struct Acked {
  int round = 0;
  bool before_cut = false;  // its ACK was read before its round's power cut
  bool evicted = false;     // unlinked from the live filesystem since, as gc may (L71)
};

struct Ledger {
  std::vector<Plan> plans;          // by round
  std::map<uint64_t, Acked> acked;  // every acknowledged key
};

// What a crash image held for an acknowledged block.
// kShort: shorter (or longer) than a row but not empty; kWrong: a row's length
// with wrong bytes or a wrong CRC attribute.
enum class Fate { kIntact, kAbsent, kEmpty, kShort, kWrong, kCount };
inline constexpr int kFates = static_cast<int>(Fate::kCount);

struct Figures {
  // [mode][inner][0: acknowledged in the round that was cut, 1: earlier][fate]
  uint64_t fates[kModes][kInners][2][kFates] = {};
  uint64_t attr_lost[kModes] = {};      // whole blocks without their CRC attribute (C9)
  uint64_t unacked_whole[kModes] = {};  // whole blocks of stores never acknowledged
  uint64_t required = 0;                // `full` blocks that had to survive (C10)
  uint64_t required_lost = 0;           // ... and did not (each one a test failure)
  uint64_t accepted_wrong = 0;          // `none` blocks of wrong content loaded kOk (C12)
  uint64_t loads = 0, loads_ok = 0, loads_corrupt = 0, loads_miss = 0;
  // config.json after the cut: absent, empty, or other than the one written.
  uint64_t config_missing = 0, config_empty = 0, config_wrong = 0;
  uint64_t tmp_files = 0;
  std::vector<std::string> wrong_examples;  // the first few blocks of Fate::kWrong
};

// Checks the image recovered from the power cut of round `cut_round`, whose
// tier root is `root`: every violation of C9, C10 or C11 is a test failure
// (C8 allows everything else of `none`, which only goes into `figures`).
void CheckCrashImage(const std::filesystem::path& root, int cut_round, const Ledger& ledger,
                     uint64_t content_seed, Figures* figures);

// The options the checks open a tier on a recovered image with.
FsTierOpenOptions CheckOptions(const std::filesystem::path& root);

}  // namespace kvtier::powerloss
