// vllm_baseline: the thread-pool baseline of the fs tier's benchmark
// (bench/fio_compare.sh).
//
// N plain threads each take the next row and do exactly vLLM's per-block
// syscalls (layout-spec/FORMAT.md L54-L59, L64-L65; vLLM's fs_io_C
// extension, PRs #46713 / #49152: batch_store_block / batch_load_block, one
// block per task):
//   store: access(dest, F_OK) -> create_directories(shard dirs)
//          -> open(tmp, O_CREAT|O_EXCL|O_WRONLY|O_TRUNC[|O_DIRECT], 0644)
//          -> write(full row) -> close -> rename(tmp, dest)   [unlink(tmp) on failure]
//   load:  open(path, O_RDONLY[|O_DIRECT]) -> read(full row) -> close
// With --crc, also the integrity that kvtier always does (and vLLM PR #57912
// proposes): CRC32C of the row into the xattr user.vllm.kv_crc32c before the
// close / fgetxattr after the open, the row's CRC32C checked after the read
// (a mismatch unlinks the file). The ratio against this baseline compares
// the two I/O paths doing the same work.
// The temp suffix is drawn once per thread, as vLLM does; O_DIRECT is used
// after vLLM's start-up probe. Files use kvtier's (= vLLM's) hash-sharded
// layout under --root, in their own namespace, with the same keys and row
// content as `kvtier bench fs`, and the figures are computed and printed the
// same way (tools/bench/bench_common.h), so the two can be compared line by line.
//
// Latency here is the wall time of one row's syscalls on its thread (no
// queueing: a thread takes a row only when it is free).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_common.h"
#include "kvtier/layout.h"
#include "util/crc32c.h"

namespace kvtier::internal {
namespace {

struct Flags {
  std::string root;
  uint64_t row_bytes = 0;
  uint64_t rows = 0;
  int threads = 32;
  uint64_t seed = 1;
  bool no_direct = false;
  bool crc = false;
  bool json = false;
  bool keep = false;
};

struct PhaseStats {
  std::vector<uint64_t> latencies_ns;
  uint64_t ok = 0, skipped = 0, errors = 0, corrupt = 0, missing = 0;
  double harness_cpu_s = 0;
  double thread_cpu_s = 0;  // the pool threads' own CPU clocks
  uint64_t checksum_ns = 0;  // --crc: time spent computing CRC32C
  std::string first_error;
};

class Baseline {
 public:
  Baseline(const Flags& f, Namespace ns)
      : f_(f),
        ns_(std::move(ns)),
        rows_(f.seed, f.row_bytes),
        block_dir_(JoinRoot(f.root, ns_.block_dir_name())) {}

  // vLLM's tier construction: makedirs, config.json when absent, the O_DIRECT probe.
  Status Setup() {
    const std::string ns_dir = JoinRoot(f_.root, ns_.dir_name());
    std::error_code ec;
    std::filesystem::create_directories(ns_dir, ec);
    if (ec) return ErrnoToStatus(ec.value(), "create " + ns_dir);
    const std::string config = ns_dir + "/config.json";
    if (access(config.c_str(), F_OK) != 0) {
      int fd = open(config.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) return ErrnoToStatus(errno, "create " + config);
      const std::string& text = ns_.config_json();
      const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
      close(fd);
      if (!written) return ErrnoToStatus(EIO, "write " + config);
    }
    o_direct_ = false;
    if (!f_.no_direct) {
      const std::string probe =
          ns_dir + "/.o_direct_probe_" + std::to_string(RandomSuffix()) + ".tmp";
      int fd = open(probe.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_DIRECT | O_CLOEXEC, 0644);
      if (fd >= 0) {
        AlignedBuffer page(4096);
        o_direct_ = write(fd, page.data(), 4096) == 4096;
        close(fd);
      }
      unlink(probe.c_str());
      if (!o_direct_)
        std::fprintf(stderr, "vllm_baseline: O_DIRECT is not usable under %s: buffered I/O\n",
                     ns_dir.c_str());
    }
    return Status::Ok();
  }

  bool o_direct() const { return o_direct_; }

  // Runs one phase on f_.threads threads; returns the process CPU it took.
  DirectionFigures Run(bool store, PhaseStats* stats) {
    std::atomic<uint64_t> next{0};
    std::mutex mu;
    const ThreadCpuSnapshot threads0 = SnapshotThreadCpu();
    const uint64_t switches0 = ProcessContextSwitches();
    const double cpu0 = ProcessCpuSeconds();
    const uint64_t t0 = BenchNowNs();
    std::vector<std::thread> threads;
    for (int t = 0; t < f_.threads; ++t) {
      threads.emplace_back([&] {
        const PhaseStats mine = Work(store, &next);
        std::lock_guard lock(mu);
        Merge(mine, stats);
      });
    }
    for (auto& t : threads) t.join();
    const uint64_t t1 = BenchNowNs();
    const double cpu1 = ProcessCpuSeconds();
    const uint64_t switches1 = ProcessContextSwitches();
    const ThreadCpuSnapshot threads1 = SnapshotThreadCpu();
    DirectionFigures f;
    SetThreadCpuBreakdown(threads0, threads1, &f);
    f.other_threads_cpu_s += stats->thread_cpu_s;  // the pool threads have exited
    f.context_switches = switches1 - switches0;
    f.rows = stats->ok;
    f.bytes = stats->ok * f_.row_bytes;
    f.wall_s = static_cast<double>(t1 - t0) * 1e-9;
    f.harness_cpu_s = stats->harness_cpu_s;
    f.cpu_s = std::max(0.0, cpu1 - cpu0 - stats->harness_cpu_s);
    f.checksum_s = static_cast<double>(stats->checksum_ns) * 1e-9;
    f.p50_us = PercentileUs(stats->latencies_ns, 50);
    f.p99_us = PercentileUs(stats->latencies_ns, 99);
    return f;
  }

  void Remove() {
    std::error_code ec;
    std::filesystem::remove_all(block_dir_, ec);
    std::filesystem::remove_all(JoinRoot(f_.root, ns_.dir_name()), ec);
  }

 private:
  static uint64_t RandomSuffix() {
    static std::mutex mu;
    static std::mt19937_64 gen{std::random_device{}()};
    std::lock_guard lock(mu);
    return gen() & ((uint64_t{1} << 63) - 1);
  }

  // One pool thread's share of a phase: the next free row until none is left.
  PhaseStats Work(bool store, std::atomic<uint64_t>* next) const {
    PhaseStats mine;
    AlignedBuffer buf(f_.row_bytes);
    const uint64_t suffix = RandomSuffix();  // once per thread, as vLLM
    while (true) {
      const uint64_t row = next->fetch_add(1);
      if (row >= f_.rows) break;
      const std::string dest = JoinRoot(f_.root, ns_.BlockRelPath(rows_.Key(row)));
      if (store) {
        StoreRow(row, dest, suffix, buf, &mine);
      } else {
        LoadRow(row, dest, &buf, &mine);
      }
    }
    mine.thread_cpu_s = ThreadCpuSeconds();  // a fresh thread: its whole life
    mine.checksum_ns = checksum_ns_;          // likewise
    return mine;
  }

  void StoreRow(uint64_t row, const std::string& dest, uint64_t suffix, AlignedBuffer& buf,
                PhaseStats* mine) const {
    const double c0 = ThreadCpuSeconds();
    rows_.Fill(row, buf.span());
    mine->harness_cpu_s += ThreadCpuSeconds() - c0;
    const uint64_t s = BenchNowNs();
    const int rc = StoreBlock(dest, dest + "_" + std::to_string(suffix) + ".tmp", buf);
    const uint64_t e = BenchNowNs();
    if (rc == 0) {
      ++mine->ok;
      mine->latencies_ns.push_back(e - s);
    } else if (rc == 1) {
      ++mine->skipped;
    } else {
      ++mine->errors;
      if (mine->first_error.empty())
        mine->first_error = "store " + dest + ": " + std::strerror(-rc);
    }
  }

  void LoadRow(uint64_t row, const std::string& dest, AlignedBuffer* buf, PhaseStats* mine) const {
    const uint64_t s = BenchNowNs();
    const int rc = LoadBlock(dest, buf);
    const uint64_t e = BenchNowNs();
    if (rc == 0) {
      const double c0 = ThreadCpuSeconds();
      const bool good = rows_.Verify(row, buf->span());
      mine->harness_cpu_s += ThreadCpuSeconds() - c0;
      if (good) {
        ++mine->ok;
        mine->latencies_ns.push_back(e - s);
      } else {
        ++mine->corrupt;
        if (mine->first_error.empty()) mine->first_error = "load " + dest + ": bytes differ";
      }
    } else if (rc == -ENOENT) {
      ++mine->missing;
    } else {
      ++(rc == -EIO ? mine->corrupt : mine->errors);
      if (mine->first_error.empty())
        mine->first_error = "load " + dest + ": " + std::strerror(-rc);
    }
  }

  // One thread's figures into the phase's (under the phase's lock).
  static void Merge(const PhaseStats& mine, PhaseStats* stats) {
    stats->thread_cpu_s += mine.thread_cpu_s;
    stats->checksum_ns += mine.checksum_ns;
    stats->latencies_ns.insert(stats->latencies_ns.end(), mine.latencies_ns.begin(),
                               mine.latencies_ns.end());
    stats->ok += mine.ok;
    stats->skipped += mine.skipped;
    stats->errors += mine.errors;
    stats->corrupt += mine.corrupt;
    stats->missing += mine.missing;
    stats->harness_cpu_s += mine.harness_cpu_s;
    if (stats->first_error.empty()) stats->first_error = mine.first_error;
  }

  static constexpr const char* kCrcXattr = "user.vllm.kv_crc32c";
  // Crc32c, timed as kvtier times its own (FsTierMetrics::checksum_ns).
  static uint32_t TimedCrc(std::span<const uint8_t> row) {
    const uint64_t t0 = BenchNowNs();
    const uint32_t crc = Crc32c(row);
    checksum_ns_ += BenchNowNs() - t0;
    return crc;
  }
  static std::array<uint8_t, 4> BigEndian(uint32_t v) {
    return {static_cast<uint8_t>(v >> 24), static_cast<uint8_t>(v >> 16), static_cast<uint8_t>(v >> 8),
            static_cast<uint8_t>(v)};
  }

  // 0 stored, 1 skipped (exists), -errno on failure (vLLM's steps 2-7).
  int StoreBlock(const std::string& dest, const std::string& tmp, AlignedBuffer& buf) const {
    if (access(dest.c_str(), F_OK) == 0) return 1;
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(dest).parent_path(), ec);
    if (ec) return -ec.value();
    const int fd =
        open(tmp.c_str(),
             O_CREAT | O_EXCL | O_WRONLY | O_TRUNC | O_CLOEXEC | (o_direct_ ? O_DIRECT : 0), 0644);
    if (fd < 0) return -errno;
    const ssize_t w = write(fd, buf.data(), f_.row_bytes);
    int err = w < 0 ? errno : (static_cast<uint64_t>(w) != f_.row_bytes ? EIO : 0);
    if (err == 0 && f_.crc) {
      const std::array<uint8_t, 4> be = BigEndian(TimedCrc(buf.span()));
      if (fsetxattr(fd, kCrcXattr, be.data(), be.size(), 0) != 0) err = errno;
    }
    if (close(fd) != 0 && err == 0) err = errno;
    if (err == 0 && rename(tmp.c_str(), dest.c_str()) != 0) err = errno;
    if (err != 0) {
      unlink(tmp.c_str());
      return -err;
    }
    return 0;
  }

  // 0 loaded, -errno on failure; a short read is -EIO (vLLM unlinks the file).
  int LoadBlock(const std::string& path, AlignedBuffer* buf) const {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | (o_direct_ ? O_DIRECT : 0));
    if (fd < 0) return -errno;
    std::array<uint8_t, 4> want{};
    const bool has_crc = f_.crc && fgetxattr(fd, kCrcXattr, want.data(), want.size()) == 4;
    const ssize_t r = read(fd, buf->data(), f_.row_bytes);
    const int err = r < 0 ? errno : 0;
    close(fd);
    if (err != 0) return -err;
    if (static_cast<uint64_t>(r) < f_.row_bytes || (has_crc && BigEndian(TimedCrc(buf->span())) != want)) {
      unlink(path.c_str());
      return -EIO;
    }
    return 0;
  }

  static thread_local uint64_t checksum_ns_;
  const Flags& f_;
  Namespace ns_;
  BenchRows rows_;
  std::string block_dir_;
  bool o_direct_ = false;
};

thread_local uint64_t Baseline::checksum_ns_ = 0;

// What a run measured: both phases' figures and counts, and how the load phase began.
struct Outcome {
  DirectionFigures store, load;
  PhaseStats store_stats, load_stats;
  bool o_direct = false;
  bool dropped = false;  // the page cache, before the load phase
  std::string why;       // why it was not dropped
  std::string first_error;
};

void PrintJson(const Flags& f, const Outcome& o) {
  nlohmann::json j;
  j["store"] = FiguresJson(o.store);
  j["load"] = FiguresJson(o.load);
  j["backend"] = f.crc ? "vllm-syscall-threads+crc32c" : "vllm-syscall-threads";
  j["crc"] = f.crc;
  j["threads"] = f.threads;
  j["o_direct"] = o.o_direct;
  j["row_bytes"] = f.row_bytes;
  j["rows"] = f.rows;
  j["page_cache_dropped"] = o.dropped;
  if (!o.dropped) j["page_cache_note"] = o.why;
  j["rows_stored"] = o.store_stats.ok;
  j["rows_skipped_exists"] = o.store_stats.skipped;
  j["store_errors"] = o.store_stats.errors;
  j["rows_verified"] = o.load_stats.ok;
  j["rows_corrupt"] = o.load_stats.corrupt;
  j["rows_missing"] = o.load_stats.missing;
  j["load_errors"] = o.load_stats.errors;
  if (!o.first_error.empty()) j["first_error"] = o.first_error;
  j["details"] = {
      {"store", FiguresDetailJson(o.store)},
      {"load", FiguresDetailJson(o.load)},
      {"latency", "per row, the wall time of its syscalls on its thread"},
      {"cpu",
       "getrusage(RUSAGE_SELF) user+sys over the phase, minus fill/verify (harness_cpu_s)"},
      {"units", "GB = 1e9 bytes"}};
  std::cout << j.dump(2) << "\n";
}

void PrintText(const Flags& f, const Outcome& o) {
  std::printf("vllm_baseline: %llu rows x %s under %s, %d threads, O_DIRECT %s, CRC32C %s\n",
              static_cast<unsigned long long>(f.rows), HumanBytes(f.row_bytes).c_str(),
              f.root.c_str(), f.threads, o.o_direct ? "on" : "off", f.crc ? "on" : "off");
  std::printf("%s\n\n", o.dropped ? "page cache dropped before the load phase" : o.why.c_str());
  std::fputs(FormatFiguresTable(o.store, o.load).c_str(), stdout);
  const PhaseStats& ss = o.store_stats;
  const PhaseStats& ls = o.load_stats;
  const std::string counts = FormatRowCounts(
      {ss.ok, ss.skipped, ss.errors, ls.ok, ls.corrupt, ls.missing, ls.errors}, o.first_error);
  std::fputs(("\n" + counts).c_str(), stdout);
}

// The namespace of this run's files (its own, per row size), or exit status 1 with a message.
Result<Namespace> BaselineNamespace(const Flags& f) {
  NamespaceSpec spec;
  spec.model_name = "kvtier-bench/vllm-baseline-" + std::to_string(f.row_bytes);
  Result<Namespace> ns = Namespace::Create(spec);
  if (!ns.ok()) std::fprintf(stderr, "vllm_baseline: %s\n", ns.status().ToString().c_str());
  return ns;
}

int Main(const Flags& f) {
  Status args = CheckBenchArgs(f.root, f.row_bytes, f.rows, f.threads);
  if (args.ok()) args = CheckBufferMemory(f.row_bytes, static_cast<uint64_t>(f.threads) + 1);
  if (!args.ok()) {
    std::fprintf(stderr, "vllm_baseline: %s\n", args.message().c_str());
    return 2;
  }
  Result<Namespace> ns = BaselineNamespace(f);
  if (!ns.ok()) return 1;
  Baseline b(f, *ns);
  b.Remove();  // an earlier --keep run's files would be skipped, not stored
  if (Status s = CheckFreeSpace(f.root, f.row_bytes * f.rows); !s.ok()) {
    std::fprintf(stderr, "vllm_baseline: %s\n", s.ToString().c_str());
    return 1;
  }
  if (Status s = b.Setup(); !s.ok()) {
    std::fprintf(stderr, "vllm_baseline: %s\n", s.ToString().c_str());
    return 1;
  }
  Outcome o;
  o.store = b.Run(true, &o.store_stats);
  o.dropped = DropPageCache(&o.why);
  o.load = b.Run(false, &o.load_stats);
  if (!f.keep) b.Remove();
  o.o_direct = b.o_direct();
  o.first_error =
      !o.store_stats.first_error.empty() ? o.store_stats.first_error : o.load_stats.first_error;
  if (f.json) {
    PrintJson(f, o);
  } else {
    PrintText(f, o);
  }
  const bool ok = o.store_stats.errors == 0 && o.load_stats.ok == f.rows;
  if (!ok)
    std::fprintf(stderr, "vllm_baseline: %s\n",
                 o.first_error.empty() ? "rows did not round-trip" : o.first_error.c_str());
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace kvtier::internal

int main(int argc, char** argv) {
  kvtier::internal::Flags f;
  CLI::App app{"vLLM's fs-tier syscalls on N plain threads: the baseline of `kvtier bench fs`",
               "vllm_baseline"};
  app.add_option("--root", f.root, "An existing directory")->required();
  app.add_option("--row-bytes", f.row_bytes, "Bytes per row / block file (a multiple of 4096)")
      ->required()
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--rows", f.rows, "Rows to store and load")->required();
  app.add_option("--threads", f.threads, "Threads (vLLM's n_read_threads / n_write_threads)")
      ->capture_default_str();
  app.add_option("--seed", f.seed, "Seed of the keys and the row content (as kvtier bench fs)")
      ->capture_default_str();
  app.add_flag("--no-direct", f.no_direct, "Buffered I/O (no O_DIRECT)");
  app.add_flag("--crc", f.crc, "Also kvtier's integrity work: CRC32C xattr on store, checked on load");
  app.add_flag("--json", f.json, "Machine-readable output");
  app.add_flag("--keep", f.keep, "Leave the files in place");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "vllm_baseline: %s\nRun 'vllm_baseline --help' for usage.\n", e.what());
    return 2;
  }
  return kvtier::internal::Main(f);
}
