// Pieces shared by `kvtier bench fs` and the vLLM syscall baseline
// (bench/vllm_baseline.cc), so both move the same rows under the same keys
// and report the same figures the same way.
//
// Row content: row i is a seeded random base row XORed, word by word, with a
// 64-bit key derived from (seed, i). Every row is distinct (a row read back
// under the wrong name, a torn or stale row all fail verification), yet
// filling or checking a row is a single vectorised pass over memory, which
// the benchmarks time on their own threads and exclude from the CPU figures.
//
// Units: GB = 1e9 bytes; latencies in microseconds; percentiles are
// nearest-rank over every row of the phase.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "kvtier/hashing.h"
#include "kvtier/layout.h"
#include "kvtier/result.h"

namespace kvtier::internal {

// A 4096-aligned, zeroed buffer (O_DIRECT needs page-aligned rows).
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes);
  std::span<uint8_t> span() { return {data_.get(), size_}; }
  std::span<const uint8_t> span() const { return {data_.get(), size_}; }
  uint8_t* data() { return data_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, Free> data_;
  size_t size_ = 0;
};

// The rows and keys of a benchmark run; immutable after construction, so
// Fill/Verify may run on many threads at once.
class BenchRows {
 public:
  BenchRows(uint64_t seed, uint64_t row_bytes);  // row_bytes: a multiple of 8
  uint64_t row_bytes() const { return row_bytes_; }
  static constexpr size_t kKeyBytes = 32;
  // A 32-byte key (the size of a SHA-256 block hash), group 0.
  OffloadKey Key(uint64_t row) const;
  // The n block hashes of row `row`'s file (n >= 1), as a store gives them
  // (FsTier::SubmitStore's block_hashes): the last is Key(row)'s hash, the
  // others derived from the row and their place.
  std::vector<BlockHash> BlockHashes(uint64_t row, size_t n) const;
  void Fill(uint64_t row, std::span<uint8_t> out) const;
  bool Verify(uint64_t row, std::span<const uint8_t> in) const;

 private:
  uint64_t WordKey(uint64_t row) const;
  uint64_t seed_;
  uint64_t row_bytes_;
  std::vector<uint64_t> base_;
};

// The block hashes each store of `spec`'s files gives (FORMAT.md L197's
// HashesPerFile, group 0; 1: the key alone); kInvalidArgument (naming
// --blocks-per-file) when a record could not hold that many BenchRows keys.
Result<size_t> BenchHashesPerFile(const NamespaceSpec& spec);

uint64_t SplitMix64(uint64_t x);

// user+sys CPU seconds of the whole process (every thread, io_uring workers
// included) and of the calling thread.
double ProcessCpuSeconds();
double ThreadCpuSeconds();
// Voluntary + involuntary context switches of the whole process.
uint64_t ProcessContextSwitches();
// CLOCK_MONOTONIC in nanoseconds.
uint64_t BenchNowNs();

struct DirectionFigures;

// CPU seconds of every live thread of this process by class, read from the
// threads' CPU clocks (/proc/self/task lists them).
struct ThreadCpuSnapshot {
  enum Class { kCaller, kIoWq, kOther };
  struct Thread {
    Class cls = kOther;
    double cpu_s = 0;
  };
  std::map<int, Thread> threads;  // by tid
};
ThreadCpuSnapshot SnapshotThreadCpu();
// after - before per class into f's *_thread_cpu_s / io_wq_cpu_s.
void SetThreadCpuBreakdown(const ThreadCpuSnapshot& before, const ThreadCpuSnapshot& after,
                           DirectionFigures* f);

// sync(), then "1" into /proc/sys/vm/drop_caches. False (with the reason in
// *why) when that is not allowed, e.g. "page cache not dropped (not root)".
bool DropPageCache(std::string* why);

// Nearest-rank percentile (0 < p <= 100) of latencies in ns, in µs; 0 when empty.
double PercentileUs(std::vector<uint64_t> latencies_ns, double p);

// The figures of one direction (store or load).
struct DirectionFigures {
  uint64_t rows = 0;           // rows moved successfully
  uint64_t bytes = 0;          // their bytes
  double wall_s = 0;           // first submit to last completion
  double cpu_s = 0;            // process CPU over the phase, harness excluded
  double harness_cpu_s = 0;    // the benchmark's own fill/verify CPU (excluded)
  double poll_wait_cpu_s = 0;  // the benchmark's sleeps between polls (excluded)
  // Where the process CPU went (thread CPU clocks; threads that exited during
  // the phase are missing, so the parts may sum to less than the total).
  double caller_thread_cpu_s = 0;  // the thread that submits and polls
  double io_wq_cpu_s = 0;          // io_uring's iou-wrk-* workers
  double other_threads_cpu_s = 0;  // everything else (I/O, pool threads)
  uint64_t context_switches = 0;   // voluntary + involuntary, whole process
  double checksum_s = 0;  // of cpu_s, time spent computing CRC32C (integrity: one pass over each row)
  double p50_us = 0, p99_us = 0;

  double gbps() const { return wall_s > 0 ? bytes / wall_s / 1e9 : 0; }
  double rows_per_s() const { return wall_s > 0 ? rows / wall_s : 0; }
  double cpu_s_per_gb() const { return bytes > 0 ? cpu_s / (bytes / 1e9) : 0; }
  double checksum_s_per_gb() const { return bytes > 0 ? checksum_s / (bytes / 1e9) : 0; }
};

// Exactly {"gbps", "rows_per_s", "p50_us", "p99_us", "cpu_s_per_gb"}.
nlohmann::json FiguresJson(const DirectionFigures& f);
// wall_s, cpu_s, harness_cpu_s, rows, bytes: the raw inputs of the figures;
// checksum_s and checksum_s_per_gb: the CRC32C share of cpu_s.
nlohmann::json FiguresDetailJson(const DirectionFigures& f);
// Rounds to `digits` decimals (keeps the JSON readable).
double Round(double v, int digits);

// Checks shared by both benchmarks (kInvalidArgument): root is an existing
// directory, rows > 0, row_bytes a positive multiple of 4096, depth in
// [1, 4096]; and (kNoSpace) that the filesystem has room for `bytes_needed`.
Status CheckBenchArgs(const std::string& root, uint64_t row_bytes, uint64_t rows, int depth);
Status CheckFreeSpace(const std::string& root, uint64_t bytes_needed);
// kInvalidArgument when the row buffers (`rows_in_memory` rows) would take
// more than half of the machine's memory.
Status CheckBufferMemory(uint64_t row_bytes, uint64_t rows_in_memory);

// Row outcomes of one run, as both benchmarks count them.
struct RowCounts {
  uint64_t stored = 0, skipped = 0, store_errors = 0;
  uint64_t verified = 0, corrupt = 0, missing = 0, load_errors = 0;
};

// The text both benchmarks print: the per-direction table, then the row
// counts (and the first error, when there is one).
std::string FormatFiguresTable(const DirectionFigures& store, const DirectionFigures& load);
// The same table with a "rows" column (the rows each direction moved) after
// the direction, for benchmarks whose directions may move different counts.
std::string FormatFiguresTableWithRows(const DirectionFigures& store, const DirectionFigures& load);
std::string FormatRowCounts(const RowCounts& c, const std::string& first_error);

// "1 MiB", "256 KiB", "1000000 B".
std::string HumanBytes(uint64_t bytes);

}  // namespace kvtier::internal
