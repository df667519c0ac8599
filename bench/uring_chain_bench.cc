// uring_chain_bench: what would linked SQE chains with direct descriptors
// save on the store path? (docs/performance.md)
//
// The same store work, vLLM's publication (open a temp file O_CREAT|O_EXCL|
// O_DIRECT, write the row, close, rename it to its block name), four ways:
//   threads: DEPTH plain threads doing the syscalls (the vllm_baseline shape);
//   steps:   one io_uring, DEPTH stores in flight, one SQE per step, the next
//            step prepared when the previous one completes (kvtier's I/O loop
//            today; the rename runs on the ring's thread, as inline_metadata);
//   handoff: one dispatching thread hands each whole store to a pool of
//            DEPTH threads and collects its completion (a design where the
//            I/O thread hands store ops, not syscalls, to workers);
//   chain:   one io_uring, DEPTH stores in flight, open -> write -> close as
//            one linked chain through a registered file slot (direct
//            descriptors: no fd in the process table), the open and write
//            completions skipped on success; one CQE per store, then the rename.
// The shard directories are made before the clock starts (their cost is the
// same for all four), so the figures compare only the hand-offs.
// Rounds run the four interleaved, each into a directory of its own, and the
// table prints each one's median GB per CPU-second (process CPU: the io_uring
// workers are threads of the process) and the ratios.
#include <fcntl.h>
#include <liburing.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Args {
  std::string root;
  int rows = 2000;
  unsigned row_bytes = 1 << 20;
  int depth = 16;
  int rounds = 3;
};

struct Figures {
  double gbps = 0, gb_per_cpu_s = 0;
};

[[noreturn]] void Die(const std::string& what, int err) {
  std::fprintf(stderr, "uring_chain_bench: %s: %s\n", what.c_str(), std::strerror(err));
  std::exit(1);
}

double ProcessCpuS() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

// Row i's directory and file names under `dir`, sharded 16 x 16 as a stand-in
// for vLLM's <hhh>/<hh>_g0 (spread rows over many directories, as it does).
std::string RowDir(const std::string& dir, int i) {
  const unsigned h = static_cast<unsigned>(i) * 2654435761u;
  char name[32];
  std::snprintf(name, sizeof name, "/%x/%x", h >> 28, (h >> 24) & 0xf);
  return dir + name;
}
std::string RowFile(const std::string& dir, int i) { return RowDir(dir, i) + "/" + std::to_string(i) + ".bin"; }

void MakeDirs(const std::string& dir) {
  if (mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) Die("mkdir " + dir, errno);
  for (int a = 0; a < 16; ++a) {
    char top[16];
    std::snprintf(top, sizeof top, "/%x", a);
    if (mkdir((dir + top).c_str(), 0777) != 0 && errno != EEXIST) Die("mkdir", errno);
    for (int b = 0; b < 16; ++b) {
      char sub[16];
      std::snprintf(sub, sizeof sub, "/%x", b);
      if (mkdir((dir + top + sub).c_str(), 0777) != 0 && errno != EEXIST) Die("mkdir", errno);
    }
  }
}

void* AlignedRow(unsigned bytes) {
  void* row = nullptr;
  if (posix_memalign(&row, 4096, bytes) != 0) Die("posix_memalign", ENOMEM);
  std::memset(row, 0x5a, bytes);
  return row;
}

void Publish(const std::string& tmp, const std::string& dest) {
  if (rename(tmp.c_str(), dest.c_str()) != 0) Die("rename " + tmp, errno);
}

// One store, start to finish, with plain syscalls.
void StoreSync(const std::string& dest, void* row, unsigned bytes) {
  const std::string tmp = dest + ".tmp";
  const int fd = open(tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_DIRECT | O_CLOEXEC, 0644);
  if (fd < 0) Die("open " + tmp, errno);
  if (pwrite(fd, row, bytes, 0) != static_cast<ssize_t>(bytes)) Die("write", errno);
  if (close(fd) != 0) Die("close", errno);
  Publish(tmp, dest);
}

// A queue of row indices with a blocking pop; -1 ends a worker.
class IndexQueue {
 public:
  void Push(int i) {
    {
      std::lock_guard lock(mu_);
      q_.push_back(i);
    }
    cv_.notify_one();
  }
  int Pop() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !q_.empty(); });
    const int i = q_.front();
    q_.pop_front();
    return i;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<int> q_;
};

// The dispatcher keeps DEPTH stores handed out, one hand-off each way per store.
void RunHandoff(const Args& a, const std::string& dir) {
  IndexQueue work, done;
  std::vector<std::thread> pool;
  for (int t = 0; t < a.depth; ++t) {
    pool.emplace_back([&] {
      void* row = AlignedRow(a.row_bytes);
      for (int i; (i = work.Pop()) >= 0;) {
        StoreSync(RowFile(dir, i), row, a.row_bytes);
        done.Push(i);
      }
      free(row);
    });
  }
  int next = 0;
  for (; next < std::min(a.depth, a.rows); ++next) work.Push(next);
  for (int finished = 0; finished < a.rows; ++finished) {
    done.Pop();
    if (next < a.rows) work.Push(next++);
  }
  for (int t = 0; t < a.depth; ++t) work.Push(-1);
  for (auto& t : pool) t.join();
}

void RunThreads(const Args& a, const std::string& dir) {
  std::atomic<int> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < a.depth; ++t) {
    pool.emplace_back([&] {
      void* row = AlignedRow(a.row_bytes);
      for (int i; (i = next.fetch_add(1)) < a.rows;) StoreSync(RowFile(dir, i), row, a.row_bytes);
      free(row);
    });
  }
  for (auto& t : pool) t.join();
}

// One store in flight on the ring: its names and the step it waits for.
struct Slot {
  std::string tmp, dest;
  int step = 0;  // steps mode: 0 open, 1 write, 2 close
  int fd = -1;
};

io_uring InitRing(const Args& a, bool direct) {
  io_uring ring{};
  const int rc = io_uring_queue_init(static_cast<unsigned>(4 * a.depth), &ring, 0);
  if (rc < 0) Die("io_uring_queue_init", -rc);
  if (direct) {
    const int reg = io_uring_register_files_sparse(&ring, static_cast<unsigned>(a.depth));
    if (reg < 0) Die("io_uring_register_files_sparse", -reg);
  }
  return ring;
}

io_uring_sqe* Sqe(io_uring* ring) {
  io_uring_sqe* sqe = io_uring_get_sqe(ring);
  if (sqe == nullptr) {
    io_uring_submit(ring);
    sqe = io_uring_get_sqe(ring);
  }
  return sqe;
}

// Steps mode: queues slot s's next step.
void QueueStep(io_uring* ring, Slot& slot, int s, void* row, unsigned bytes) {
  io_uring_sqe* sqe = Sqe(ring);
  switch (slot.step) {
    case 0:
      io_uring_prep_openat(sqe, AT_FDCWD, slot.tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_DIRECT | O_CLOEXEC, 0644);
      break;
    case 1: io_uring_prep_write(sqe, slot.fd, row, bytes, 0); break;
    default: io_uring_prep_close(sqe, slot.fd); break;
  }
  io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(s));
}

// Chain mode: queues slot s's whole open -> write -> close chain on file slot s.
void QueueChain(io_uring* ring, Slot& slot, int s, void* row, unsigned bytes) {
  io_uring_sqe* open = Sqe(ring);
  io_uring_prep_openat_direct(open, AT_FDCWD, slot.tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_DIRECT, 0644,
                              static_cast<unsigned>(s));
  open->flags |= IOSQE_IO_LINK | IOSQE_CQE_SKIP_SUCCESS;
  io_uring_sqe_set_data64(open, static_cast<uint64_t>(s));
  io_uring_sqe* write = Sqe(ring);
  io_uring_prep_write(write, s, row, bytes, 0);
  write->flags |= IOSQE_FIXED_FILE | IOSQE_IO_LINK | IOSQE_CQE_SKIP_SUCCESS;
  io_uring_sqe_set_data64(write, static_cast<uint64_t>(s));
  io_uring_sqe* close = Sqe(ring);
  io_uring_prep_close_direct(close, static_cast<unsigned>(s));
  io_uring_sqe_set_data64(close, static_cast<uint64_t>(s));
}

// Both ring modes: DEPTH slots, each running one store after another.
void RunRing(const Args& a, const std::string& dir, bool chain) {
  io_uring ring = InitRing(a, chain);
  void* row = AlignedRow(a.row_bytes);
  std::vector<Slot> slots(static_cast<size_t>(a.depth));
  int next = 0, done = 0;
  auto start = [&](int s) {
    if (next >= a.rows) return;
    slots[s].dest = RowFile(dir, next++);
    slots[s].tmp = slots[s].dest + ".tmp";
    slots[s].step = 0;
    chain ? QueueChain(&ring, slots[s], s, row, a.row_bytes) : QueueStep(&ring, slots[s], s, row, a.row_bytes);
  };
  for (int s = 0; s < a.depth; ++s) start(s);
  while (done < a.rows) {
    io_uring_cqe* cqe = nullptr;
    const int rc = io_uring_submit_and_wait(&ring, 1);
    if (rc < 0 && rc != -EINTR) Die("io_uring_submit_and_wait", -rc);
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&ring, head, cqe) {
      ++seen;
      const int s = static_cast<int>(io_uring_cqe_get_data64(cqe));
      Slot& slot = slots[static_cast<size_t>(s)];
      if (cqe->res < 0) Die((chain ? "chain " : "step ") + std::to_string(slot.step) + " " + slot.tmp, -cqe->res);
      if (!chain && slot.step < 2) {
        if (slot.step == 0) slot.fd = cqe->res;
        ++slot.step;
        QueueStep(&ring, slot, s, row, a.row_bytes);
        continue;
      }
      Publish(slot.tmp, slot.dest);
      ++done;
      start(s);
    }
    io_uring_cq_advance(&ring, seen);
  }
  free(row);
  io_uring_queue_exit(&ring);
}

Figures Measure(const Args& a, const std::string& mode, const std::string& dir) {
  MakeDirs(dir);
  sync();
  const double cpu0 = ProcessCpuS();
  const auto t0 = std::chrono::steady_clock::now();
  if (mode == "threads") {
    RunThreads(a, dir);
  } else if (mode == "handoff") {
    RunHandoff(a, dir);
  } else {
    RunRing(a, dir, mode == "chain");
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = ProcessCpuS() - cpu0;
  const double gb = static_cast<double>(a.rows) * a.row_bytes / 1e9;
  return {gb / wall, gb / cpu};
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--root") a.root = v;
    else if (k == "--rows") a.rows = std::atoi(v);
    else if (k == "--row-bytes") a.row_bytes = static_cast<unsigned>(std::atol(v));
    else if (k == "--depth") a.depth = std::atoi(v);
    else if (k == "--rounds") a.rounds = std::atoi(v);
    else Die("unknown option " + k, EINVAL);
  }
  if (a.root.empty() || a.rows < 1 || a.depth < 1 || a.rounds < 1 || a.row_bytes % 4096 != 0 || a.row_bytes == 0) {
    std::fprintf(stderr,
                 "usage: uring_chain_bench --root DIR [--rows 2000] [--row-bytes 1048576 (x 4096)] [--depth 16] "
                 "[--rounds 3]\n");
    std::exit(2);
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = Parse(argc, argv);
  if (mkdir(a.root.c_str(), 0777) != 0 && errno != EEXIST) Die("mkdir " + a.root, errno);
  const char* modes[] = {"threads", "steps", "chain", "handoff"};
  constexpr int kModes = 4;
  std::vector<double> gbps[kModes], eff[kModes];
  for (int r = 0; r < a.rounds; ++r) {
    for (int m = 0; m < kModes; ++m) {
      const std::string dir = a.root + "/r" + std::to_string(r) + "-" + modes[m];
      const Figures f = Measure(a, modes[m], dir);
      gbps[m].push_back(f.gbps);
      eff[m].push_back(f.gb_per_cpu_s);
      std::fprintf(stderr, "  round %d %-7s %.3f GB/s %.2f GB/CPU-s\n", r + 1, modes[m], f.gbps, f.gb_per_cpu_s);
    }
  }
  std::printf("%d stores of %u bytes, depth %d, median of %d interleaved rounds\n", a.rows, a.row_bytes, a.depth,
              a.rounds);
  for (int m = 0; m < kModes; ++m) {
    std::printf("%-8s %8.3f GB/s %8.2f GB/CPU-s\n", modes[m], Median(gbps[m]), Median(eff[m]));
  }
  std::printf("GB per CPU-second: steps / threads %.2f, chain / threads %.2f, chain / steps %.2f, "
              "handoff / threads %.2f, handoff / steps %.2f\n",
              Median(eff[1]) / Median(eff[0]), Median(eff[2]) / Median(eff[0]), Median(eff[2]) / Median(eff[1]),
              Median(eff[3]) / Median(eff[0]), Median(eff[3]) / Median(eff[1]));
  return 0;
}
