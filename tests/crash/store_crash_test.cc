// Proves CRASH_INVARIANTS.md C7 and C11 under SIGKILL (the crash test of C14):
// a child process (crash_writer) storing rows in a loop is SIGKILLed at a
// seeded random moment, >= 100 rounds (KVTIER_CRASH_ROUNDS overrides), on one
// root directory kept across rounds, so later rounds run over the debris of
// earlier kills (orphan temp files, half-made shard directories, blocks
// already present). Rounds alternate the io_uring and syscall backends and
// cycle the durability modes none / file / full, with and without O_DIRECT.
// After every round, with the child reaped:
//  * C7: every `.bin` in the tree is a CrashKey at its computed path (L72)
//    and, read raw, is exactly row_bytes long, holds the bytes its key
//    determines and carries a 4-byte CRC32C attribute equal to the CRC of
//    those bytes (computed here, independently of the library); the only
//    other files are block temp files of at most row_bytes, probe and
//    config.json temp files, a config.json that is byte-exact (L28), and
//    kvtier metadata under <NS>/.kvtier/ (killed writers' leases, L73, L74);
//  * C11: a fresh FsTier loads every key with a `.bin` plus every key the
//    child acknowledged; a kOk is always byte-exact and never comes from a
//    file the raw check rejected; every acknowledged key loads kOk (SIGKILL
//    keeps the page cache, so an ACKed store must have survived).
// Every check also loads four corrupt blocks the test planted after the
// previous check, under keys the writer never uses (short, a bit flip under a
// valid CRC, a 3-byte CRC attribute, longer than a row): they must load
// kCorrupt, so the reader's rejection is exercised on the same debris-laden
// tree. Then about half of the writer's blocks are evicted (unlinked, as gc
// or another instance may do, L71) so that later rounds keep writing.
// Reported as test properties and on stdout: rounds, ACKs, leftover temp
// files and leases (allowed: gc's job, L81), corrupt files found (must be 0).
// Seed printed; replay with KVTIER_TEST_SEED=<seed>. ~10-20 s on 2 cores.
#include <gtest/gtest.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "crash_rows.h"
#include "problems.h"
#include "store_crash_child.h"
#include "kvtier/fs_tier.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kRow = 65536;      // the writer's default row size
constexpr uint64_t kKeySpace = 2048;  // keys i in [0, kKeySpace): at most 128 MiB of blocks
constexpr int kDefaultRounds = 120;
// Keys kKeySpace .. kKeySpace+3, which the writer never uses, hold corrupt
// blocks the test plants after every check (short, bit-flipped under a valid
// CRC, malformed CRC attribute, longer than a row), so every check also sees
// the reader reject bad files in the same tree (C11).
constexpr uint64_t kPlantedKinds = 4;
bool IsPlanted(uint64_t index) { return index >= kKeySpace && index < kKeySpace + kPlantedKinds; }
constexpr uint32_t kKillWindowUs = 30000;  // SIGKILL 0-30 ms after READY
constexpr const char* kCrcXattr = "user.vllm.kv_crc32c";

using crash::OracleCrc32c;

struct AlignedBuf {
  explicit AlignedBuf(size_t n)
      : size(n), data(static_cast<uint8_t*>(std::aligned_alloc(4096, n))) {}
  ~AlignedBuf() { std::free(data); }
  AlignedBuf(const AlignedBuf&) = delete;
  AlignedBuf& operator=(const AlignedBuf&) = delete;
  std::span<uint8_t> span() { return {data, size}; }
  size_t size;
  uint8_t* data;
};

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
      crcs_[i] = OracleCrc32c(it->second);
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

// ---- The child (store_crash_child.h) -----------------------------------------

using storecrash::ChildRun;
using storecrash::RunAndKill;

// ---- The checks ----------------------------------------------------------------

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

using testing::Problems;

struct ScanResult {
  std::map<uint64_t, fs::path> bins;  // key index -> path
  uint64_t block_tmp = 0, probe_tmp = 0, config_tmp = 0;
  uint64_t leases = 0, other_metadata = 0;  // files under <NS>/.kvtier/ (L73, L74)
};

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Walks the root: classifies every file, failing on anything C7 does not allow.
ScanResult Scan(const fs::path& root, const FsTier& tier, Problems* problems) {
  ScanResult scan;
  std::error_code ec;
  fs::recursive_directory_iterator it(root, ec), end;
  EXPECT_FALSE(ec) << ec.message();
  for (; !ec && it != end; it.increment(ec)) {
    const fs::path path = it->path();
    std::error_code sec;
    if (!it->is_regular_file(sec)) continue;  // directories (possibly empty: allowed, C6)
    const std::string name = path.filename().string();
    if (path.parent_path().filename() == "leases" &&
        path.parent_path().parent_path().filename() == ".kvtier" && EndsWith(name, ".lease")) {
      ++scan.leases;  // a killed writer's heartbeat lease: it expires (L74)
    } else if (path.string().find("/.kvtier/") != std::string::npos) {
      ++scan.other_metadata;  // reserved for kvtier metadata, never read as blocks (L73)
    } else if (EndsWith(name, ".bin")) {
      const std::optional<uint64_t> index = crash::CrashKeyIndex(name);
      if (!index) {
        problems->Report() << "a .bin that no key of the writer names: " << path;
        continue;
      }
      if (path.string() != tier.BlockPath(crash::CrashKey(*index))) {
        problems->Report() << "block file at the wrong path (L72): " << path;
      }
      scan.bins[*index] = path;
    } else if (EndsWith(name, ".tmp") && name.find(".bin_") != std::string::npos) {
      ++scan.block_tmp;  // C6: an orphan of a killed store, 0..row_bytes long
      const uintmax_t size = fs::file_size(path, sec);
      if (!sec && size > kRow) problems->Report() << "temp file longer than a row (C6): " << path;
    } else if ((name.rfind(".o_direct_probe_", 0) == 0 || name.rfind(".xattr_probe_", 0) == 0) && EndsWith(name, ".tmp")) {
      ++scan.probe_tmp;
    } else if (name.rfind("config.json_", 0) == 0 && EndsWith(name, ".tmp")) {
      ++scan.config_tmp;
    } else if (name == "config.json") {
      if (testing::ReadFileOrDie(path) != tier.ns().config_json()) {
        problems->Report() << "config.json is torn or foreign (L28): " << path;
      }
    } else {
      problems->Report() << "unexpected file left by a killed writer: " << path;
    }
  }
  EXPECT_FALSE(ec) << "walking " << root << ": " << ec.message();
  return scan;
}

// Reads a .bin raw; empty string when it is whole (C7), else what is wrong.
std::string RawProblem(const fs::path& path, uint64_t index, bool xattrs, Oracle* oracle) {
  const std::string bytes = testing::ReadFileOrDie(path);
  const std::vector<uint8_t>& want = oracle->Row(index);
  if (bytes.size() != want.size())
    return "size " + std::to_string(bytes.size()) + " != " + std::to_string(want.size());
  if (std::memcmp(bytes.data(), want.data(), want.size()) != 0)
    return "content differs from the key's row";
  uint8_t crc[16];
  const ssize_t n = getxattr(path.c_str(), kCrcXattr, crc, sizeof crc);
  if (n < 0) {
    if (!xattrs && (errno == ENODATA || errno == ENOTSUP || errno == EOPNOTSUPP)) return "";
    return std::string("no CRC attribute (") + std::strerror(errno) +
           "), though kvtier sets it before the rename (C3)";
  }
  if (n != 4) return "CRC attribute of " + std::to_string(n) + " bytes";
  const uint32_t got =
      uint32_t{crc[0]} << 24 | uint32_t{crc[1]} << 16 | uint32_t{crc[2]} << 8 | crc[3];
  if (got != oracle->Crc(index)) return "CRC attribute does not match the bytes";
  return "";
}

JobResult WaitJob(FsTier* tier, uint64_t id) {
  std::vector<JobResult> done;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline) {
    done.clear();
    tier->PollFinished(&done);
    for (JobResult& r : done) {
      if (r.job_id == id) return std::move(r);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ADD_FAILURE() << "load job " << id << " never finished";
  return {};
}

// Writes the planted corrupt blocks (see kPlantedKinds) at their paths.
void PlantCorruptBlocks(const FsTier& tier, bool xattrs, Oracle* oracle) {
  for (uint64_t kind = 0; kind < kPlantedKinds; ++kind) {
    const uint64_t index = kKeySpace + kind;
    const fs::path path = tier.BlockPath(crash::CrashKey(index));
    const std::vector<uint8_t>& row = oracle->Row(index);
    std::string bytes(reinterpret_cast<const char*>(row.data()), row.size());
    size_t crc_len = 4;
    switch (kind) {
      case 0:
        bytes.resize(kRow / 2);
        break;  // torn: short (L65)
      case 1:
        if (!xattrs) continue;  // undetectable without the attribute (L68)
        bytes[1234] = static_cast<char>(bytes[1234] ^ 0x40);  // bit flip under the row's CRC (L67)
        break;
      case 2:
        if (!xattrs) continue;
        crc_len = 3;  // a malformed attribute (L67)
        break;
      default:
        bytes.append(4096, '\0');
        break;  // longer than a row (L66)
    }
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    testing::WriteFileOrDie(path, bytes);
    if (xattrs) {
      const uint32_t crc = oracle->Crc(index);
      const uint8_t be[4] = {static_cast<uint8_t>(crc >> 24), static_cast<uint8_t>(crc >> 16),
                             static_cast<uint8_t>(crc >> 8), static_cast<uint8_t>(crc)};
      EXPECT_EQ(setxattr(path.c_str(), kCrcXattr, be, crc_len, 0), 0)
          << path << ": " << std::strerror(errno);
    }
  }
}

// C7 on every .bin found: index -> what is wrong with it read raw ("" when it is whole).
std::map<uint64_t, std::string> CheckRaw(const ScanResult& scan, bool xattrs, Oracle* oracle,
                                         Totals* totals, Problems* problems) {
  std::map<uint64_t, std::string> raw_problem;
  for (const auto& [index, path] : scan.bins) {
    std::string problem = RawProblem(path, index, xattrs, oracle);
    if (IsPlanted(index)) {
      if (problem.empty())
        problems->Report() << "test bug: planted block " << path << " reads as whole";
    } else if (!problem.empty()) {
      ++totals->bad_files;
      problems->Report() << "C7: a killed writer left a bad block " << path << ": " << problem;
    }
    raw_problem[index] = std::move(problem);
  }
  return raw_problem;
}

// What judging one check's loads takes (C11).
struct LoadJudge {
  FsTier* tier;
  const std::set<uint64_t>& acked;
  const std::map<uint64_t, std::string>& raw_problem;  // from CheckRaw
  Oracle* oracle;
  Totals* totals;
  Problems* problems;
};

// The load's outcome against what the raw check found (found: a .bin of the key was in the
// tree; rejected: the raw check refused it).
void JudgeOutcome(const LoadJudge& j, uint64_t index, const KeyResult& r, const uint8_t* bytes,
                  bool found, bool rejected) {
  switch (r.outcome) {
    case KeyOutcome::kOk:
      ++j.totals->loads_ok;
      if (std::memcmp(bytes, j.oracle->Row(index).data(), kRow) != 0) {
        j.problems->Report() << "C11: key " << index
                             << " loaded kOk with bytes that are not its row";
      }
      if (rejected) {
        j.problems->Report() << "C11: key " << index
                             << " loaded kOk from a file the raw check rejected";
      }
      break;
    case KeyOutcome::kCorrupt:
      ++j.totals->loads_corrupt;
      if (!rejected) {
        j.problems->Report() << "key " << index
                             << ": a whole block was rejected: " << r.status.ToString();
      }
      break;
    case KeyOutcome::kMiss:
      ++j.totals->loads_miss;
      if (found)
        j.problems->Report() << "key " << index
                             << ": its .bin was in the tree but the load missed";
      break;
    default:
      j.problems->Report() << "key " << index << ": load " << KeyOutcomeName(r.outcome) << ": "
                           << r.status.ToString();
  }
}

// A planted corrupt block must load kCorrupt, and be removed unless it is only longer.
void JudgePlanted(const LoadJudge& j, uint64_t index, const KeyResult& r) {
  if (r.outcome == KeyOutcome::kCorrupt) {
    ++j.totals->planted_rejected;
  } else {
    j.problems->Report() << "C11: planted corrupt block " << index << " loaded "
                         << KeyOutcomeName(r.outcome);
  }
  // Short and bad-CRC files are removed (L65, L67); a longer one stays (L66).
  const bool longer = index - kKeySpace == 3;
  if (fs::exists(j.tier->BlockPath(crash::CrashKey(index))) != longer) {
    j.problems->Report() << "planted block " << index
                         << (longer ? " was removed" : " was not removed");
  }
}

void JudgeLoad(const LoadJudge& j, uint64_t index, const KeyResult& r, const uint8_t* bytes) {
  const auto raw = j.raw_problem.find(index);
  const bool found = raw != j.raw_problem.end();
  ++j.totals->blocks_checked;
  JudgeOutcome(j, index, r, bytes, found, found && !raw->second.empty());
  if (IsPlanted(index)) JudgePlanted(j, index, r);
  if (j.acked.count(index) != 0 && r.outcome != KeyOutcome::kOk) {
    j.problems->Report() << "C7: acknowledged key " << index
                         << " did not survive the SIGKILL: load " << KeyOutcomeName(r.outcome)
                         << (r.status.ok() ? "" : " " + r.status.ToString());
  }
}

// Loads `indices` (at most bufs.size()) in one job and judges each key.
void LoadChunk(const LoadJudge& j, std::span<const uint64_t> indices,
               const std::vector<std::unique_ptr<AlignedBuf>>& bufs) {
  const size_t n = indices.size();
  std::vector<OffloadKey> keys;
  std::vector<std::span<uint8_t>> spans;
  for (size_t k = 0; k < n; ++k) {
    keys.push_back(crash::CrashKey(indices[k]));
    std::memset(bufs[k]->data, 0xa5, kRow);  // poison: a load that returns nothing cannot pass
    spans.push_back(bufs[k]->span());
  }
  auto id = j.tier->SubmitLoad(keys, spans);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  const JobResult result = WaitJob(j.tier, id.value());
  ASSERT_EQ(result.keys.size(), n);
  for (size_t k = 0; k < n; ++k) JudgeLoad(j, indices[k], result.keys[k], bufs[k]->data);
}

// Loads every acknowledged key and every key with a .bin, 32 to a job.
void LoadEveryKey(const LoadJudge& j, const ScanResult& scan) {
  std::set<uint64_t> to_load(j.acked.begin(), j.acked.end());
  for (const auto& entry : scan.bins) to_load.insert(entry.first);
  const std::vector<uint64_t> keys_in_order(to_load.begin(), to_load.end());
  constexpr size_t kChunk = 32;
  std::vector<std::unique_ptr<AlignedBuf>> bufs;
  for (size_t k = 0; k < kChunk; ++k) bufs.push_back(std::make_unique<AlignedBuf>(kRow));
  for (size_t at = 0; at < keys_in_order.size(); at += kChunk) {
    const size_t n = std::min(kChunk, keys_in_order.size() - at);
    LoadChunk(j, std::span<const uint64_t>(keys_in_order).subspan(at, n), bufs);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// C7 and C11 on the whole root; `acked` are the keys whose blocks must exist.
void CheckRoot(const fs::path& root, IoBackendKind backend, bool xattrs,
               const std::set<uint64_t>& acked, Oracle* oracle, Totals* totals,
               ScanResult* scan_out) {
  auto opened = FsTier::Open(crash::CrashTierOptions(root, kRow, backend));
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<FsTier> tier = std::move(opened).value();
  Problems problems;
  ScanResult scan = Scan(root, *tier, &problems);
  const std::map<uint64_t, std::string> raw_problem =
      CheckRaw(scan, xattrs, oracle, totals, &problems);
  LoadEveryKey({tier.get(), acked, raw_problem, oracle, totals, &problems}, scan);
  if (::testing::Test::HasFatalFailure()) return;
  *scan_out = std::move(scan);
  PlantCorruptBlocks(*tier, xattrs, oracle);
}

int Rounds() {
  if (const char* env = std::getenv("KVTIER_CRASH_ROUNDS"); env != nullptr && *env != '\0') {
    return std::max(1, std::atoi(env));
  }
  return kDefaultRounds;
}

const char* DurabilityName(int d) { return d == 0 ? "none" : d == 1 ? "file" : "full"; }

// One round's writer: its backend, durability and O_DIRECT by the round number, the rest
// drawn from the test's seeded generator.
struct RoundPlan {
  int round = 0;
  bool uring = false;
  int durability = 0;  // 0 none, 1 file, 2 full
  bool direct = false;
  uint64_t first_key = 0, batch = 0;
  uint32_t kill_after_us = 0;

  std::string What() const {
    std::ostringstream what;
    what << "round " << round << ": backend " << (uring ? "uring" : "syscall") << ", durability "
         << DurabilityName(durability) << (direct ? ", O_DIRECT" : ", buffered") << ", first key "
         << first_key << ", batch " << batch << ", kill after " << kill_after_us << " us";
    return what.str();
  }

  std::vector<std::string> WriterArgv(const fs::path& root, uint64_t content_seed) const {
    std::vector<std::string> argv = {KVTIER_CRASH_WRITER_PATH};
    auto flag = [&argv](const char* name, const std::string& value) {
      argv.push_back(name);
      argv.push_back(value);
    };
    flag("--root", root.string());
    flag("--seed", std::to_string(content_seed));
    flag("--row-bytes", std::to_string(kRow));
    flag("--backend", uring ? "uring" : "syscall");
    flag("--durability", DurabilityName(durability));
    flag("--o-direct", direct ? "1" : "0");
    flag("--first-key", std::to_string(first_key));
    flag("--keys", std::to_string(kKeySpace));
    flag("--batch", std::to_string(batch));
    flag("--jobs", "4");
    flag("--threads", "4");
    return argv;
  }
};

RoundPlan PlanRound(int round, bool uring_ok, std::mt19937_64* rng) {
  RoundPlan p;
  p.round = round;
  p.uring = uring_ok && round % 2 == 0;
  p.durability = (round / 2) % 3;
  // Every backend x durability combination, with and without O_DIRECT.
  p.direct = (round / 6) % 2 == 0;
  p.first_key = (*rng)() % kKeySpace;
  p.batch = 1 + (*rng)() % 16;
  p.kill_after_us = static_cast<uint32_t>((*rng)() % (kKillWindowUs + 1));
  return p;
}

// READY <backend> <o_direct 0|1> <xattrs 0|1>: the backend asked for, O_DIRECT off when asked;
// no user xattrs here clears *xattrs (no CRC attribute to check).
void CheckReadyLine(const std::string& line, const RoundPlan& plan, Totals* totals, bool* xattrs) {
  std::istringstream ready(line);
  std::string word, backend_name;
  int o_direct = 0, has_xattrs = 0;
  ready >> word >> backend_name >> o_direct >> has_xattrs;
  ASSERT_FALSE(ready.fail()) << "bad READY line '" << line << "'";
  EXPECT_EQ(backend_name, plan.uring ? "io_uring" : "syscall-threads");
  if (!plan.direct) {
    EXPECT_EQ(o_direct, 0) << "--o-direct 0 was ignored";
  }
  if (plan.direct && o_direct) ++totals->direct_rounds;
  if (!has_xattrs) *xattrs = false;
}

void CountRun(const ChildRun& run, bool uring, Totals* totals) {
  ++totals->rounds;
  ++(uring ? totals->uring_rounds : totals->syscall_rounds);
  totals->acks += run.acks.size();
  totals->nacks += run.nacks.size();
  if (!run.acks.empty()) ++totals->rounds_with_acks;
  for (const std::string& nack : run.nacks) ADD_FAILURE() << "the writer could not store: " << nack;
}

// Evicts about half of the blocks, as gc or another instance may (L71),
// so that later rounds keep storing rather than finding every key present.
void EvictAboutHalf(const ScanResult& scan, std::mt19937_64* rng, std::set<uint64_t>* acked,
                    Totals* totals) {
  for (const auto& [index, path] : scan.bins) {
    if (IsPlanted(index) || (*rng)() % 2 != 0) continue;
    std::error_code ec;
    if (fs::remove(path, ec)) {
      ++totals->evicted;
      acked->erase(index);
    }
  }
}

void ReportTotals(const Totals& totals, double seconds) {
  ::testing::Test::RecordProperty("rounds", totals.rounds);
  ::testing::Test::RecordProperty("uring_rounds", totals.uring_rounds);
  ::testing::Test::RecordProperty("acks", std::to_string(totals.acks));
  ::testing::Test::RecordProperty("rounds_with_acks", totals.rounds_with_acks);
  ::testing::Test::RecordProperty("rounds_leaving_tmp", totals.rounds_leaving_tmp);
  ::testing::Test::RecordProperty("blocks_checked", std::to_string(totals.blocks_checked));
  ::testing::Test::RecordProperty("corrupt_files", std::to_string(totals.bad_files));
  ::testing::Test::RecordProperty("planted_rejected", std::to_string(totals.planted_rejected));
  ::testing::Test::RecordProperty("tmp_left", std::to_string(totals.block_tmp));
  ::testing::Test::RecordProperty("leases_left", std::to_string(totals.leases));
  std::ostringstream report;
  report << "[ crash    ] " << totals.rounds << " rounds (" << totals.uring_rounds << " io_uring, "
         << totals.syscall_rounds << " syscall, " << totals.direct_rounds << " O_DIRECT) in "
         << std::fixed << std::setprecision(1) << seconds << " s; " << totals.acks << " ACKs ("
         << totals.rounds_with_acks << " rounds with ACKs), " << totals.nacks << " NACKs\n"
         << "[ crash    ] " << totals.blocks_checked << " loads checked: " << totals.loads_ok
         << " ok, " << totals.loads_corrupt << " corrupt (" << totals.planted_rejected
         << " planted), " << totals.loads_miss << " miss; " << totals.bad_files
         << " bad .bin files found; " << totals.evicted << " evicted\n"
         << "[ crash    ] left: " << totals.block_tmp << " block temp files ("
         << totals.rounds_leaving_tmp << " rounds added some), " << totals.probe_tmp
         << " probe files, " << totals.config_tmp << " config temp files, " << totals.leases
         << " leases, " << totals.other_metadata << " other .kvtier files\n";
  std::fputs(report.str().c_str(), stdout);
}

// The crash test's state across rounds: one root, its debris, and what was acknowledged.
struct CrashRun {
  explicit CrashRun(uint64_t seed)
      : rng(seed),
        content_seed(rng()),
        root(root_dir.path() / "root"),
        err_log(log_dir.path() / "crash_writer.stderr"),
        oracle(content_seed) {
    fs::create_directories(root);
  }

  // After a round's writer was killed: count its run, check the root, evict.
  void CheckAndEvict(int round, const ChildRun& run, bool uring) {
    CountRun(run, uring, &totals);
    acked.insert(run.acks.begin(), run.acks.end());
    CheckRoot(root, round % 3 == 0 ? IoBackendKind::kSyscall : IoBackendKind::kAuto, xattrs, acked,
              &oracle, &totals, &scan);
    if (scan.block_tmp > tmp_before) ++totals.rounds_leaving_tmp;
    tmp_before = scan.block_tmp;
    EvictAboutHalf(scan, &rng, &acked, &totals);
  }

  // The leftovers the last check found, the totals' expectations, and the report.
  void Finish(int rounds, double seconds) {
    totals.block_tmp = scan.block_tmp;
    totals.probe_tmp = scan.probe_tmp;
    totals.config_tmp = scan.config_tmp;
    totals.leases = scan.leases;
    totals.other_metadata = scan.other_metadata;
    if (!::testing::Test::HasFailure()) {
      EXPECT_EQ(totals.rounds, rounds);
    }
    EXPECT_GT(totals.acks, 0u) << "the writer never acknowledged a store: the kills tested nothing";
    if (totals.rounds > 1) {
      EXPECT_GE(totals.planted_rejected,
                static_cast<uint64_t>(totals.rounds - 1) * (xattrs ? kPlantedKinds : 2));
    }
    ReportTotals(totals, seconds);
  }

  std::mt19937_64 rng;
  const uint64_t content_seed;
  testing::TempDir root_dir, log_dir;
  const fs::path root;
  const fs::path err_log;
  Oracle oracle;
  Totals totals;
  std::set<uint64_t> acked;  // acknowledged and not evicted since
  bool uring_ok = true;
  bool xattrs = true;
  uint64_t tmp_before = 0;
  ScanResult scan;
};

TEST(StoreCrash, SigkilledWritersLeaveOnlyWholeBlocks) {
  const uint64_t seed = testing::TestSeed();
  CrashRun c(seed);
  const int rounds = Rounds();
  const auto start = Clock::now();
  for (int round = 0; round < rounds && !HasFailure(); ++round) {
    const RoundPlan plan = PlanRound(round, c.uring_ok, &c.rng);
    SCOPED_TRACE(plan.What());
    ChildRun run = RunAndKill(plan.WriterArgv(c.root, c.content_seed), c.err_log, plan.kill_after_us);
    if (run.unavailable) {
      std::printf(
          "[ crash    ] io_uring is unavailable here: every round uses the syscall backend\n");
      c.uring_ok = false;
      --round;  // the round is run again with the syscall backend
      continue;
    }
    ASSERT_EQ(run.problem, "");
    CheckReadyLine(run.ready_line, plan, &c.totals, &c.xattrs);
    if (HasFatalFailure()) return;  // a bad READY line
    c.CheckAndEvict(round, run, plan.uring);
  }
  c.Finish(rounds, std::chrono::duration<double>(Clock::now() - start).count());
}

}  // namespace
}  // namespace kvtier
