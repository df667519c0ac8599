// Shared benchmark pieces (see bench_common.h).
#include "bench/bench_common.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "format/block_hashes.h"

namespace kvtier::internal {

AlignedBuffer::AlignedBuffer(size_t bytes) : size_(bytes) {
  const size_t rounded = (bytes + 4095) / 4096 * 4096;
  void* p = std::aligned_alloc(4096, rounded == 0 ? 4096 : rounded);
  if (p == nullptr) std::abort();
  std::memset(p, 0, rounded == 0 ? 4096 : rounded);
  data_.reset(static_cast<uint8_t*>(p));
}

void AlignedBuffer::Free::operator()(uint8_t* p) const { std::free(p); }

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

BenchRows::BenchRows(uint64_t seed, uint64_t row_bytes)
    : seed_(seed), row_bytes_(row_bytes), base_(row_bytes / 8) {
  // xorshift64* over a seeded state: fast, and good enough for content.
  uint64_t s = SplitMix64(seed ^ 0x6b76746965722d62ull) | 1;
  for (uint64_t& w : base_) {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    w = s * 0x2545f4914f6cdd1dull;
  }
}

uint64_t BenchRows::WordKey(uint64_t row) const {
  // Never 0, so no row equals the base row.
  return SplitMix64(seed_ * 0x100000001b3ull + row) | 1;
}

OffloadKey BenchRows::Key(uint64_t row) const {
  uint8_t bytes[32];
  for (int i = 0; i < 4; ++i) {
    const uint64_t w =
        SplitMix64(SplitMix64(seed_ ^ 0x6b65792d62656e63ull) + row * 4 + static_cast<uint64_t>(i));
    std::memcpy(bytes + 8 * i, &w, 8);
  }
  OffloadKey key;
  key.hash = *BlockHash::FromBytes(bytes);
  key.group_idx = 0;
  return key;
}

std::vector<BlockHash> BenchRows::BlockHashes(uint64_t row, size_t n) const {
  std::vector<BlockHash> hashes;
  for (size_t b = 0; b + 1 < n; ++b) {
    uint8_t bytes[kKeyBytes];
    for (size_t i = 0; i < kKeyBytes / 8; ++i) {
      const uint64_t w = SplitMix64(SplitMix64(seed_ ^ 0x626c6f636b2d6863ull ^ row) + b * 4 + i);
      std::memcpy(bytes + 8 * i, &w, 8);
    }
    hashes.push_back(*BlockHash::FromBytes(bytes));
  }
  hashes.push_back(Key(row).hash);
  return hashes;
}

Result<size_t> BenchHashesPerFile(const NamespaceSpec& spec) {
  const size_t n = format::HashesPerFile(spec, 0),
               most = format::kBlockHashesBytesMax / BenchRows::kKeyBytes;
  if (n <= most) return n;
  return InvalidArgument("--blocks-per-file: files of " + std::to_string(n) +
                         " blocks: a record holds at most " + std::to_string(most) +
                         " of the benchmark's 32-byte hashes");
}

void BenchRows::Fill(uint64_t row, std::span<uint8_t> out) const {
  const uint64_t k = WordKey(row);
  const size_t n = std::min<size_t>(out.size() / 8, base_.size());
  uint8_t* p = out.data();
  for (size_t i = 0; i < n; ++i) {
    const uint64_t w = base_[i] ^ k;
    std::memcpy(p + 8 * i, &w, 8);
  }
}

bool BenchRows::Verify(uint64_t row, std::span<const uint8_t> in) const {
  if (in.size() != row_bytes_) return false;
  const uint64_t k = WordKey(row);
  const uint8_t* p = in.data();
  uint64_t diff = 0;
  for (size_t i = 0; i < base_.size(); ++i) {
    uint64_t w;
    std::memcpy(&w, p + 8 * i, 8);
    diff |= w ^ base_[i] ^ k;
  }
  return diff == 0;
}

double ProcessCpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

uint64_t ProcessContextSwitches() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_nvcsw + ru.ru_nivcsw);
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

uint64_t BenchNowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

ThreadCpuSnapshot SnapshotThreadCpu() {
  ThreadCpuSnapshot s;
  const pid_t self = gettid();
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    const pid_t tid = static_cast<pid_t>(std::strtol(entry.path().filename().c_str(), nullptr, 10));
    if (tid <= 0) continue;
    // MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED), as the kernel defines it.
    const clockid_t clock = static_cast<clockid_t>((~static_cast<unsigned>(tid) << 3) | 2 | 4);
    timespec ts{};
    if (clock_gettime(clock, &ts) != 0) continue;  // the thread has exited
    std::string comm;
    std::ifstream(entry.path() / "comm") >> comm;
    ThreadCpuSnapshot::Thread t;
    t.cls = tid == self                     ? ThreadCpuSnapshot::kCaller
            : comm.rfind("iou-wrk", 0) == 0 ? ThreadCpuSnapshot::kIoWq
                                            : ThreadCpuSnapshot::kOther;
    t.cpu_s = static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
    s.threads[tid] = t;
  }
  return s;
}

void SetThreadCpuBreakdown(const ThreadCpuSnapshot& before, const ThreadCpuSnapshot& after,
                           DirectionFigures* f) {
  double by_class[3] = {0, 0, 0};
  for (const auto& [tid, t] : after.threads) {
    auto it = before.threads.find(tid);
    const double start = it == before.threads.end() ? 0 : it->second.cpu_s;
    by_class[t.cls] += std::max(0.0, t.cpu_s - start);
  }
  f->caller_thread_cpu_s = by_class[ThreadCpuSnapshot::kCaller];
  f->io_wq_cpu_s = by_class[ThreadCpuSnapshot::kIoWq];
  f->other_threads_cpu_s = by_class[ThreadCpuSnapshot::kOther];
}

bool DropPageCache(std::string* why) {
  sync();
  int fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    *why = e == EACCES || e == EPERM || e == EROFS
               ? "page cache not dropped (not root)"
               : std::string("page cache not dropped (") + std::strerror(e) + ")";
    return false;
  }
  const ssize_t w = write(fd, "1", 1);
  const int e = errno;
  close(fd);
  if (w != 1) {
    *why = e == EACCES || e == EPERM
               ? "page cache not dropped (not root)"
               : std::string("page cache not dropped (") + std::strerror(e) + ")";
    return false;
  }
  why->clear();
  return true;
}

double PercentileUs(std::vector<uint64_t> latencies_ns, double p) {
  if (latencies_ns.empty()) return 0;
  const size_t n = latencies_ns.size();
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(n)));
  rank = std::clamp<size_t>(rank, 1, n);
  std::nth_element(latencies_ns.begin(), latencies_ns.begin() + static_cast<ptrdiff_t>(rank - 1),
                   latencies_ns.end());
  return static_cast<double>(latencies_ns[rank - 1]) / 1000.0;
}

double Round(double v, int digits) {
  const double m = std::pow(10.0, digits);
  return std::round(v * m) / m;
}

nlohmann::json FiguresJson(const DirectionFigures& f) {
  return {{"gbps", Round(f.gbps(), 4)},
          {"rows_per_s", Round(f.rows_per_s(), 1)},
          {"p50_us", Round(f.p50_us, 1)},
          {"p99_us", Round(f.p99_us, 1)},
          {"cpu_s_per_gb", Round(f.cpu_s_per_gb(), 4)}};
}

nlohmann::json FiguresDetailJson(const DirectionFigures& f) {
  return {{"rows", f.rows},
          {"bytes", f.bytes},
          {"wall_s", Round(f.wall_s, 4)},
          {"cpu_s", Round(f.cpu_s, 4)},
          {"harness_cpu_s", Round(f.harness_cpu_s, 4)},
          {"poll_wait_cpu_s", Round(f.poll_wait_cpu_s, 4)},
          {"context_switches", f.context_switches},
          {"checksum_s", Round(f.checksum_s, 4)},
          {"checksum_s_per_gb", Round(f.checksum_s_per_gb(), 4)},
          {"cpu_breakdown_s",
           {{"caller_thread", Round(f.caller_thread_cpu_s, 4)},
            {"io_wq_workers", Round(f.io_wq_cpu_s, 4)},
            {"other_threads", Round(f.other_threads_cpu_s, 4)}}}};
}

Status CheckBenchArgs(const std::string& root, uint64_t row_bytes, uint64_t rows, int depth) {
  if (root.empty()) return InvalidArgument("--root DIR is required");
  struct stat st {};
  if (stat(root.c_str(), &st) != 0) {
    return InvalidArgument("--root " + root + ": " + std::strerror(errno) +
                           " (create the directory first)");
  }
  if (!S_ISDIR(st.st_mode)) return InvalidArgument("--root " + root + " is not a directory");
  if (rows == 0) return InvalidArgument("--rows must be at least 1");
  if (row_bytes == 0 || row_bytes % 4096 != 0) {
    return InvalidArgument(
        "--row-bytes must be a positive multiple of 4096 (vLLM rows are page multiples), got " +
        std::to_string(row_bytes));
  }
  if (row_bytes > (uint64_t{1} << 31)) return InvalidArgument("--row-bytes must be at most 2 GiB");
  if (depth < 1 || depth > 4096)
    return InvalidArgument("--queue-depth must be in [1, 4096], got " + std::to_string(depth));
  return Status::Ok();
}

Status CheckFreeSpace(const std::string& root, uint64_t bytes_needed) {
  struct statvfs vfs {};
  if (statvfs(root.c_str(), &vfs) != 0) return ErrnoToStatus(errno, "statvfs " + root);
  const uint64_t avail = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  // Leave a margin for directories, temp files and the filesystem itself.
  if (bytes_needed + bytes_needed / 20 + (uint64_t{256} << 20) > avail) {
    return Status(StatusCode::kNoSpace, "the benchmark needs about " + HumanBytes(bytes_needed) +
                                            " under " + root + " but only " + HumanBytes(avail) +
                                            " is free (lower --rows)");
  }
  return Status::Ok();
}

Status CheckBufferMemory(uint64_t row_bytes, uint64_t rows_in_memory) {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return Status::Ok();
  const uint64_t mem = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  const uint64_t need = row_bytes * rows_in_memory;
  if (need > mem / 2) {
    return InvalidArgument("the row buffers (" + std::to_string(rows_in_memory) + " x " +
                           HumanBytes(row_bytes) + " = " + HumanBytes(need) +
                           ") would take more than half of the memory (" + HumanBytes(mem) +
                           "): lower --row-bytes or the queue depth");
  }
  return Status::Ok();
}

std::string HumanBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = static_cast<double>(bytes);
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[64];
  if (v == std::floor(v)) {
    std::snprintf(buf, sizeof buf, "%.0f %s", v, kUnits[u]);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[u]);
  }
  return buf;
}

namespace {

// The figures table, optionally with a rows column after the direction.
std::string FiguresTable(const DirectionFigures& store, const DirectionFigures& load,
                         bool with_rows) {
  char line[256];
  char rows[32] = "";
  if (with_rows) std::snprintf(rows, sizeof rows, " %10s", "rows");
  std::snprintf(line, sizeof line, "%-10s%s %9s %10s %10s %10s %11s\n", "direction", rows, "GB/s",
                "rows/s", "p50 us", "p99 us", "CPU s/GB");
  std::string out = line;
  for (const auto& [name, f] : {std::pair{"store", &store}, std::pair{"load", &load}}) {
    if (with_rows)
      std::snprintf(rows, sizeof rows, " %10llu", static_cast<unsigned long long>(f->rows));
    std::snprintf(line, sizeof line, "%-10s%s %9.3f %10.1f %10.1f %10.1f %11.4f\n", name, rows,
                  f->gbps(), f->rows_per_s(), f->p50_us, f->p99_us, f->cpu_s_per_gb());
    out += line;
  }
  return out;
}

}  // namespace

std::string FormatFiguresTable(const DirectionFigures& store, const DirectionFigures& load) {
  return FiguresTable(store, load, /*with_rows=*/false);
}

std::string FormatFiguresTableWithRows(const DirectionFigures& store,
                                       const DirectionFigures& load) {
  return FiguresTable(store, load, /*with_rows=*/true);
}

std::string FormatRowCounts(const RowCounts& c, const std::string& first_error) {
  char line[256];
  std::snprintf(line, sizeof line,
                "rows stored %llu (skipped %llu, errors %llu); verified %llu, corrupt %llu, "
                "missing %llu, load errors %llu\n",
                static_cast<unsigned long long>(c.stored), static_cast<unsigned long long>(c.skipped),
                static_cast<unsigned long long>(c.store_errors), static_cast<unsigned long long>(c.verified),
                static_cast<unsigned long long>(c.corrupt), static_cast<unsigned long long>(c.missing),
                static_cast<unsigned long long>(c.load_errors));
  std::string out = line;
  if (!first_error.empty()) out += "first error: " + first_error + "\n";
  return out;
}

}  // namespace kvtier::internal
