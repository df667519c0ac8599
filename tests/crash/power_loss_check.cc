// The check of one recovered crash image (see power_loss_check.h): a raw
// read of every block file, independent of the library, then a load of every
// block through the real tier's load path, each judged against the ledger.
#include "power_loss_check.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "crash_rows.h"
#include "problems.h"
#include "support/test_support.h"

namespace kvtier::powerloss {
namespace fs = std::filesystem;

FsTierOpenOptions CheckOptions(const fs::path& root) {
  return crash::CrashTierOptions(root, kRow, IoBackendKind::kAuto);
}

namespace {

constexpr const char* kCrcXattr = "user.vllm.kv_crc32c";

using testing::Problems;

// A block file as read raw, without the library.
struct Raw {
  enum class Attr { kNone, kMatches, kBad };
  bool present = false;
  uint64_t size = 0;
  bool content_ok = false;
  bool zeros = false;  // the bytes read are all zero
  Attr attr = Attr::kNone;

  bool Whole() const { return present && size == kRow && content_ok && attr != Attr::kBad; }
  Fate fate() const {
    if (!present) return Fate::kAbsent;
    if (size == 0) return Fate::kEmpty;
    if (size != kRow) return Fate::kShort;
    return Whole() ? Fate::kIntact : Fate::kWrong;
  }
  std::string Describe() const {
    std::ostringstream s;
    s << "size " << size
      << (content_ok ? ", right bytes"
          : zeros    ? ", bytes all zero"
                     : ", wrong bytes")
      << (attr == Attr::kNone      ? ", no CRC attribute"
          : attr == Attr::kMatches ? ", matching CRC"
                                   : ", wrong CRC attribute");
    return s.str();
  }
};

Raw ReadRaw(const fs::path& path, const std::vector<uint8_t>& want) {
  Raw raw;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return raw;
  raw.present = true;
  std::vector<uint8_t> bytes(kRow + 1);
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  raw.size = got;
  raw.content_ok = got == kRow && std::memcmp(bytes.data(), want.data(), kRow) == 0;
  raw.zeros = got > 0 && std::all_of(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(got),
                                     [](uint8_t b) { return b == 0; });
  uint8_t crc[8];
  const ssize_t n = fgetxattr(fd, kCrcXattr, crc, sizeof crc);
  ::close(fd);
  if (n < 0) return raw;  // no attribute (ENODATA)
  const uint32_t want_crc = crash::OracleCrc32c(want);
  const bool match = n == 4 && (uint32_t{crc[0]} << 24 | uint32_t{crc[1]} << 16 |
                                uint32_t{crc[2]} << 8 | crc[3]) == want_crc;
  raw.attr = match ? Raw::Attr::kMatches : Raw::Attr::kBad;
  return raw;
}

struct Scan {
  std::map<uint64_t, fs::path> bins;
  std::vector<std::string> config_texts;  // every config.json found
};

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Scan ScanImage(const fs::path& root, Figures* figures, Problems* problems) {
  Scan scan;
  std::error_code ec;
  if (!fs::exists(root, ec)) return scan;  // cut before the writer made it
  fs::recursive_directory_iterator it(root, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code sec;
    if (!it->is_regular_file(sec)) continue;
    const std::string name = it->path().filename().string();
    if (name == "config.json") {
      scan.config_texts.push_back(testing::ReadFileOrDie(it->path()));
    } else if (EndsWith(name, ".tmp")) {
      ++figures->tmp_files;  // C8: temp files may survive in any state
    } else if (EndsWith(name, ".bin")) {
      const std::optional<uint64_t> key = crash::CrashKeyIndex(name);
      if (!key) {
        problems->Report() << "a .bin that no key of the writer names: " << it->path();
      } else {
        scan.bins[*key] = it->path();
      }
    }
  }
  if (ec) problems->Report() << "walking " << root << ": " << ec.message();
  return scan;
}

struct Verdict {
  const Plan* plan = nullptr;
  const Acked* acked = nullptr;  // null: never acknowledged
  int cut_round = 0;
  Raw raw;
};

// C9/C10 on the file itself, before any load.
void JudgeRaw(uint64_t key, const Verdict& v, const fs::path& path, Problems* problems) {
  if (!v.raw.present || v.plan->mode == Durability::kNone || v.raw.Whole()) return;
  problems->Report() << (v.plan->mode == Durability::kFile ? "C9" : "C10") << ": a `"
                     << ModeName(v.plan->mode)
                     << "` block survived the power cut but is not whole (" << v.raw.Describe()
                     << "), key " << key << " of round " << v.plan->round
                     << (v.acked ? v.acked->before_cut || v.acked->round < v.cut_round
                                       ? ", acknowledged before the cut"
                                       : ", acknowledged after the cut"
                                 : ", never acknowledged")
                     << ": " << path;
}

// C10 and C11 on what the tier's load returned.
void JudgeLoad(uint64_t key, const Verdict& v, const KeyResult& r, bool bytes_ok, Figures* figures,
               Problems* problems) {
  const Durability mode = v.plan->mode;
  ++figures->loads;
  switch (r.outcome) {
    case KeyOutcome::kOk:
      ++figures->loads_ok;
      if (!v.raw.present) problems->Report() << "key " << key << " loaded kOk with no file found";
      if (bytes_ok) break;
      if (mode == Durability::kNone && v.raw.size == kRow && v.raw.attr == Raw::Attr::kNone) {
        ++figures->accepted_wrong;  // C8 case 3 without the attribute: the C12 residual risk
      } else {
        problems->Report() << "C11: key " << key << " loaded kOk with bytes that are not its row ("
                           << v.raw.Describe() << ", written in `" << ModeName(mode) << "`)";
      }
      break;
    case KeyOutcome::kCorrupt:
      ++figures->loads_corrupt;
      if (!v.raw.present || v.raw.Whole())
        problems->Report() << "key " << key
                           << ": a whole block was rejected: " << r.status.ToString();
      break;
    case KeyOutcome::kMiss:
      ++figures->loads_miss;
      if (v.raw.present)
        problems->Report() << "key " << key << ": its .bin is there but the load missed";
      break;
    default:
      problems->Report() << "key " << key << ": load " << KeyOutcomeName(r.outcome) << ": "
                         << r.status.ToString();
  }
  const bool required = v.acked != nullptr && !v.acked->evicted && mode == Durability::kFull &&
                        (v.acked->before_cut || v.acked->round < v.cut_round);
  if (!required) return;
  ++figures->required;
  if (r.outcome != KeyOutcome::kOk || !bytes_ok) {
    ++figures->required_lost;
    problems->Report()
        << "C10: key " << key << " of round " << v.acked->round
        << " was acknowledged in `full` mode before the power cut but did not survive: "
        << (v.raw.present ? v.raw.Describe() : "no file") << ", load " << KeyOutcomeName(r.outcome);
  }
}

void Tally(const Verdict& v, int inner, Figures* figures) {
  const int mode = ModeIndex(v.plan->mode);
  if (v.raw.Whole() && v.raw.attr == Raw::Attr::kNone) ++figures->attr_lost[mode];
  if (v.acked == nullptr) {
    if (v.raw.Whole()) ++figures->unacked_whole[mode];
    return;
  }
  if (v.acked->evicted) return;
  const bool earlier = v.acked->round < v.cut_round;
  if (!earlier && !v.acked->before_cut)
    return;  // acknowledged after the cut: no promise, no figure
  ++figures->fates[mode][inner][earlier ? 1 : 0][static_cast<int>(v.raw.fate())];
  if (v.raw.fate() == Fate::kWrong && figures->wrong_examples.size() < 4) {
    std::ostringstream s;
    s << ModeName(v.plan->mode) << " round " << v.plan->round << " ("
      << (v.plan->direct ? "O_DIRECT" : "buffered") << ", "
      << (v.plan->uring ? "io_uring" : "syscall") << "): " << v.raw.Describe();
    figures->wrong_examples.push_back(s.str());
  }
}

// Reads every block file raw, on 4 threads: the recovered image is cold, and
// every read goes through two loop devices.
std::map<uint64_t, Raw> ReadAllRaw(const std::map<uint64_t, fs::path>& bins,
                                   uint64_t content_seed) {
  std::vector<std::pair<uint64_t, fs::path>> todo(bins.begin(), bins.end());
  std::vector<Raw> raws(todo.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    std::vector<uint8_t> row(kRow);
    for (size_t i = next++; i < todo.size(); i = next++) {
      crash::FillCrashRow(content_seed, todo[i].first, row);
      raws[i] = ReadRaw(todo[i].second, row);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back(work);
  for (std::thread& t : threads) t.join();
  std::map<uint64_t, Raw> out;
  for (size_t i = 0; i < todo.size(); ++i) out[todo[i].first] = raws[i];
  return out;
}

// The verdict of every block on the image and every acknowledged key not
// evicted since, judged raw (C9, C10) and tallied.
std::map<uint64_t, Verdict> JudgeAllRaw(const Scan& scan, int cut_round, const Ledger& ledger,
                                        uint64_t content_seed, Figures* figures,
                                        Problems* problems) {
  const size_t inner = ledger.plans[cut_round].inner;
  std::set<uint64_t> keys;
  for (const auto& [key, path] : scan.bins) keys.insert(key);
  for (const auto& [key, acked] : ledger.acked) {
    if (!acked.evicted && ledger.plans[acked.round].inner == inner) keys.insert(key);
  }
  const std::map<uint64_t, Raw> raws = ReadAllRaw(scan.bins, content_seed);
  std::map<uint64_t, Verdict> verdicts;
  for (uint64_t key : keys) {
    const int round = RoundOfKey(key);
    if (round < 0 || round > cut_round || ledger.plans[round].inner != inner) {
      problems->Report() << "a block this filesystem never stored: key " << key;
      continue;
    }
    Verdict& v = verdicts[key];
    v.plan = &ledger.plans[round];
    v.cut_round = cut_round;
    if (const auto acked = ledger.acked.find(key); acked != ledger.acked.end())
      v.acked = &acked->second;
    if (const auto raw = raws.find(key); raw != raws.end()) {
      v.raw = raw->second;
      JudgeRaw(key, v, scan.bins.at(key), problems);
    }
    Tally(v, static_cast<int>(inner), figures);
  }
  return verdicts;
}

void CheckConfigAndPaths(const FsTier& tier, const Scan& scan, Figures* figures,
                         Problems* problems) {
  for (const std::string& text : scan.config_texts) {
    if (text.empty()) {
      ++figures->config_empty;
    } else if (text != tier.ns().config_json()) {
      ++figures->config_wrong;
    }
  }
  if (scan.config_texts.empty()) ++figures->config_missing;
  for (const auto& [key, path] : scan.bins) {
    if (path.string() != tier.BlockPath(crash::CrashKey(key)))
      problems->Report() << "block file at the wrong path (L72): " << path;
  }
}

// Loads every key of `verdicts` through the tier, 32 at a time, and judges
// each result (C10, C11).
void LoadAll(FsTier* tier, const std::map<uint64_t, Verdict>& verdicts, uint64_t content_seed,
             Figures* figures, Problems* problems) {
  constexpr size_t kChunk = 32;
  std::vector<std::unique_ptr<uint8_t, decltype(&std::free)>> bufs;
  for (size_t k = 0; k < kChunk; ++k)
    bufs.emplace_back(static_cast<uint8_t*>(std::aligned_alloc(4096, kRow)), &std::free);
  std::vector<uint64_t> order;
  for (const auto& entry : verdicts) order.push_back(entry.first);
  std::vector<uint8_t> row(kRow);
  for (size_t at = 0; at < order.size(); at += kChunk) {
    const size_t n = std::min(kChunk, order.size() - at);
    std::vector<OffloadKey> keys;
    std::vector<std::span<uint8_t>> spans;
    for (size_t k = 0; k < n; ++k) {
      keys.push_back(crash::CrashKey(order[at + k]));
      std::memset(bufs[k].get(), 0xa5, kRow);  // poison: a load that returns nothing cannot pass
      spans.emplace_back(bufs[k].get(), kRow);
    }
    auto id = tier->SubmitLoad(keys, spans);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    const JobResult result = testing::WaitForJob(tier, id.value());
    ASSERT_EQ(result.keys.size(), n);
    for (size_t k = 0; k < n; ++k) {
      const uint64_t key = order[at + k];
      crash::FillCrashRow(content_seed, key, row);
      const bool bytes_ok = std::memcmp(bufs[k].get(), row.data(), kRow) == 0;
      JudgeLoad(key, verdicts.at(key), result.keys[k], bytes_ok, figures, problems);
    }
  }
}

}  // namespace

void CheckCrashImage(const fs::path& root, int cut_round, const Ledger& ledger,
                     uint64_t content_seed, Figures* figures) {
  Problems problems;
  const Scan scan = ScanImage(root, figures, &problems);
  // Raw first: a load unlinks the short and bad-CRC files it rejects (L65, L67).
  const std::map<uint64_t, Verdict> verdicts =
      JudgeAllRaw(scan, cut_round, ledger, content_seed, figures, &problems);
  // Then the real tier's load path, on the recovered image.
  auto opened = FsTier::Open(CheckOptions(root));
  ASSERT_TRUE(opened.ok()) << "opening the tier on the recovered image: "
                           << opened.status().ToString();
  std::unique_ptr<FsTier> tier = std::move(opened).value();
  CheckConfigAndPaths(*tier, scan, figures, &problems);
  LoadAll(tier.get(), verdicts, content_seed, figures, &problems);
}

}  // namespace kvtier::powerloss
