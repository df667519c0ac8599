// store_crash_test's checks of a root after a kill: see store_crash_check.h.
#include "store_crash_check.h"

#include <gtest/gtest.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "crash_rows.h"
#include "problems.h"
#include "support/test_support.h"

namespace kvtier::storecrash {
namespace {

using Clock = std::chrono::steady_clock;
using testing::Problems;

constexpr const char* kCrcXattr = "user.vllm.kv_crc32c";

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

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Counts or notes one file of the root (C7 allows it or not).
void Classify(const fs::path& path, const FsTier& tier, ScanResult* scan, Problems* problems) {
  std::error_code sec;
  const std::string name = path.filename().string();
  if (path.parent_path().filename() == "leases" &&
      path.parent_path().parent_path().filename() == ".kvtier" && EndsWith(name, ".lease")) {
    ++scan->leases;  // a killed writer's heartbeat lease: it expires (L74)
  } else if (path.string().find("/.kvtier/") != std::string::npos) {
    ++scan->other_metadata;  // reserved for kvtier metadata, never read as blocks (L73)
  } else if (EndsWith(name, ".bin")) {
    const std::optional<uint64_t> index = crash::CrashKeyIndex(name);
    if (!index) {
      problems->Report() << "a .bin that no key of the writer names: " << path;
      return;
    }
    if (path.string() != tier.BlockPath(crash::CrashKey(*index))) {
      problems->Report() << "block file at the wrong path (L72): " << path;
    }
    scan->bins[*index] = path;
  } else if (EndsWith(name, ".tmp") && name.find(".bin_") != std::string::npos) {
    ++scan->block_tmp;  // C6: an orphan of a killed store, 0..row_bytes long
    const uintmax_t size = fs::file_size(path, sec);
    if (!sec && size > kRow) problems->Report() << "temp file longer than a row (C6): " << path;
  } else if ((name.rfind(".o_direct_probe_", 0) == 0 || name.rfind(".xattr_probe_", 0) == 0) && EndsWith(name, ".tmp")) {
    ++scan->probe_tmp;
  } else if (name.rfind("config.json_", 0) == 0 && EndsWith(name, ".tmp")) {
    ++scan->config_tmp;
  } else if (name == "config.json") {
    if (testing::ReadFileOrDie(path) != tier.ns().config_json()) {
      problems->Report() << "config.json is torn or foreign (L28): " << path;
    }
  } else {
    problems->Report() << "unexpected file left by a killed writer: " << path;
  }
}

// Walks the root: classifies every file, failing on anything C7 does not allow.
ScanResult Scan(const fs::path& root, const FsTier& tier, Problems* problems) {
  ScanResult scan;
  std::error_code ec;
  fs::recursive_directory_iterator it(root, ec), end;
  EXPECT_FALSE(ec) << ec.message();
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code sec;
    if (!it->is_regular_file(sec)) continue;  // directories (possibly empty: allowed, C6)
    Classify(it->path(), tier, &scan, problems);
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
                         << (r.status.ok() ? "" : std::string(" ") + r.status.ToString());
  }  // (Not `" " + string&&`: GCC 12 -Wrestrict false positive in Release.)
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

}  // namespace

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

}  // namespace kvtier::storecrash
