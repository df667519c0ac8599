// The checks of store_crash_test after each kill (CRASH_INVARIANTS.md C7 and
// C11 on the whole root; see the test's comment): the keys' expected rows
// (Oracle), what the checks count (Totals) and found (ScanResult), and
// CheckRoot, which also plants the corrupt blocks the next check must reject.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <vector>

#include "crash_rows.h"
#include "kvtier/fs_tier.h"

namespace kvtier::storecrash {

namespace fs = std::filesystem;

constexpr uint64_t kRow = 65536;      // the writer's default row size
constexpr uint64_t kKeySpace = 2048;  // keys i in [0, kKeySpace): at most 128 MiB of blocks
// Keys kKeySpace .. kKeySpace+3, which the writer never uses, hold corrupt
// blocks the test plants after every check (short, bit-flipped under a valid
// CRC, malformed CRC attribute, longer than a row), so every check also sees
// the reader reject bad files in the same tree (C11).
constexpr uint64_t kPlantedKinds = 4;
constexpr bool IsPlanted(uint64_t index) { return index >= kKeySpace && index < kKeySpace + kPlantedKinds; }

// The expected row of each key, and its CRC, computed once.
class Oracle {
 public:
  explicit Oracle(uint64_t seed) : seed_(seed) {}
  const std::vector<uint8_t>& Row(uint64_t i) {
    auto it = rows_.find(i);
    if (it == rows_.end()) {
      std::vector<uint8_t> row(kRow);
      crash::FillCrashRow(seed_, i, row);
      it = rows_.emplace(i, std::move(row)).first;
      crcs_[i] = crash::OracleCrc32c(it->second);
    }
    return it->second;
  }
  uint32_t Crc(uint64_t i) {
    Row(i);
    return crcs_.at(i);
  }

 private:
  uint64_t seed_;
  std::map<uint64_t, std::vector<uint8_t>> rows_;
  std::map<uint64_t, uint32_t> crcs_;
};

struct Totals {
  int rounds = 0, uring_rounds = 0, syscall_rounds = 0, direct_rounds = 0;
  int rounds_with_acks = 0, rounds_leaving_tmp = 0;
  uint64_t acks = 0, nacks = 0;
  uint64_t blocks_checked = 0, loads_ok = 0, loads_corrupt = 0, loads_miss = 0;
  uint64_t bad_files = 0;         // .bin files the raw check rejected (C7 violations)
  uint64_t planted_rejected = 0;  // planted corrupt blocks the reader refused
  uint64_t evicted = 0;
  uint64_t block_tmp = 0, probe_tmp = 0, config_tmp = 0;  // leftovers after the last round
  uint64_t leases = 0, other_metadata = 0;
};

struct ScanResult {
  std::map<uint64_t, fs::path> bins;  // key index -> path
  uint64_t block_tmp = 0, probe_tmp = 0, config_tmp = 0;
  uint64_t leases = 0, other_metadata = 0;  // files under <NS>/.kvtier/ (L73, L74)
};

// C7 and C11 on the whole root through a fresh tier on `backend`; `acked` are
// the keys whose blocks must exist. Then plants the corrupt blocks (see
// kPlantedKinds). *scan_out: what the walk found (left as it was when a fatal
// failure stops the check).
void CheckRoot(const fs::path& root, IoBackendKind backend, bool xattrs,
               const std::set<uint64_t>& acked, Oracle* oracle, Totals* totals,
               ScanResult* scan_out);

}  // namespace kvtier::storecrash
