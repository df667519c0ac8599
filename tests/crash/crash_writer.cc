// crash_writer: the child process of store_crash_test and power_loss_test.
// It opens an FsTier and stores rows in a loop until it is killed, announcing
// on stdout:
//
//   READY <backend> <o_direct 0|1> <xattrs 0|1>   once the tier is open
//   ACK <i>                                       key i is stored (kOk or kSkippedExists)
//   NACK <i> <outcome>                            key i was not stored (error, dropped)
//
// Each job's lines go out in one write(2), after PollFinished returned the
// job, so an ACK is printed only once the store is complete (C1: after the
// rename, or the directory fsync in `full` mode). Key i and its row are the
// pure functions of crash_rows.h, so the test can rebuild them from i alone.
//
// Usage: crash_writer --root DIR --seed N [--row-bytes B] [--backend uring|syscall|auto]
//          [--durability none|file|full] [--first-key K] [--keys N] [--batch N]
//          [--jobs N] [--threads N] [--o-direct 0|1] [--max-rows N]
// Keys run first-key, first-key+1, ... modulo --keys; --max-rows (0: forever)
// makes it exit 0 after that many rows (manual runs; power_loss_test bounds
// each round with it).
// Exit codes: 0 done (--max-rows), 2 bad usage or open failure, 77 the
// requested io_uring backend is unavailable.
//
// Fault injection, for proving that power_loss_test can fail (honoured only
// by this test binary; the library has no such switch):
// KVTIER_CRASH_WRITER_FAULT=skip_fdatasync opens `--durability file` as
// `none`, which drops exactly C1 step 5 (the temp file's fdatasync);
// KVTIER_CRASH_WRITER_FAULT=skip_dirsync opens `full` as `file`, which drops
// exactly step 9 (the directory fsync). The writer still calls its stores by
// the requested mode, so the test holds them to that mode's promises.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "crash_rows.h"
#include "kvtier/fs_tier.h"

namespace {

using kvtier::crash::CrashKey;

struct Args {
  std::string root;
  uint64_t seed = 0;
  bool have_seed = false;
  uint64_t row_bytes = 65536;
  kvtier::IoBackendKind backend = kvtier::IoBackendKind::kAuto;
  kvtier::Durability durability = kvtier::Durability::kNone;
  uint64_t first_key = 0;
  uint64_t keys = uint64_t{1} << 40;
  size_t batch = 8;
  size_t jobs = 4;
  int threads = 4;
  uint64_t max_rows = 0;
  bool o_direct = true;
};

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(
      stderr,
      "crash_writer: %s\nusage: crash_writer --root DIR --seed N [--row-bytes B] "
      "[--backend uring|syscall|auto] [--durability none|file|full] [--first-key K] [--keys N] "
      "[--batch N] [--jobs N] [--threads N] [--o-direct 0|1] [--max-rows N]\n",
      why.c_str());
  std::exit(2);
}

uint64_t ParseU64(const std::string& flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 0);
  if (errno != 0 || end == text || *end != '\0') Usage("bad number for " + flag + ": " + text);
  return v;
}

kvtier::IoBackendKind ParseBackend(const std::string& s) {
  if (s == "uring") return kvtier::IoBackendKind::kUring;
  if (s == "syscall") return kvtier::IoBackendKind::kSyscall;
  if (s == "auto") return kvtier::IoBackendKind::kAuto;
  Usage("bad --backend " + s);
}

kvtier::Durability ParseDurability(const std::string& s) {
  if (s == "none") return kvtier::Durability::kNone;
  if (s == "file") return kvtier::Durability::kFile;
  if (s == "full") return kvtier::Durability::kFull;
  Usage("bad --durability " + s);
}

// The flags' required values and bounds (usage errors otherwise).
void CheckArgs(const Args& a) {
  if (a.root.empty()) Usage("--root is required");
  if (!a.have_seed) Usage("--seed is required");
  if (a.row_bytes == 0 || a.row_bytes % 4096 != 0)
    Usage("--row-bytes must be a positive multiple of 4096");
  if (a.keys == 0 || a.batch == 0 || a.jobs == 0 || a.threads < 1)
    Usage("--keys, --batch, --jobs, --threads must be >= 1");
}

Args ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) Usage("missing value for " + flag);
    const char* v = argv[++i];
    if (flag == "--root") {
      a.root = v;
    } else if (flag == "--seed") {
      a.seed = ParseU64(flag, v);
      a.have_seed = true;
    } else if (flag == "--row-bytes") {
      a.row_bytes = ParseU64(flag, v);
    } else if (flag == "--backend") {
      a.backend = ParseBackend(v);
    } else if (flag == "--durability") {
      a.durability = ParseDurability(v);
    } else if (flag == "--first-key") {
      a.first_key = ParseU64(flag, v);
    } else if (flag == "--keys") {
      a.keys = ParseU64(flag, v);
    } else if (flag == "--batch") {
      a.batch = ParseU64(flag, v);
    } else if (flag == "--jobs") {
      a.jobs = ParseU64(flag, v);
    } else if (flag == "--threads") {
      a.threads = static_cast<int>(ParseU64(flag, v));
    } else if (flag == "--o-direct") {
      a.o_direct = ParseU64(flag, v) != 0;
    } else if (flag == "--max-rows") {
      a.max_rows = ParseU64(flag, v);
    } else {
      Usage("unknown flag " + flag);
    }
  }
  CheckArgs(a);
  return a;
}

// The durability the tier is really opened with (see the fault injection above).
kvtier::Durability WithInjectedFault(kvtier::Durability asked) {
  const char* fault = std::getenv("KVTIER_CRASH_WRITER_FAULT");
  if (fault == nullptr || *fault == '\0') return asked;
  const std::string f = fault;
  if (f == "skip_fdatasync" && asked == kvtier::Durability::kFile) return kvtier::Durability::kNone;
  if (f == "skip_dirsync" && asked == kvtier::Durability::kFull) return kvtier::Durability::kFile;
  if (f != "skip_fdatasync" && f != "skip_dirsync") Usage("unknown KVTIER_CRASH_WRITER_FAULT " + f);
  return asked;
}

// Writes all of `text` to stdout with write(2): no stdio buffer that could be
// lost or torn by the kill except for the line being written at that moment.
void Emit(const std::string& text) {
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(STDOUT_FILENO, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) std::exit(3);  // the reader is gone
    p += n;
    left -= static_cast<size_t>(n);
  }
}

// One in-flight store job: `batch` page-aligned rows and their keys.
struct Slot {
  std::vector<uint8_t*> rows;
  std::vector<uint64_t> indices;
  std::vector<kvtier::OffloadKey> keys;
  uint64_t job_id = 0;
  bool busy = false;
};

// The tier as asked for, announced with READY; null with the exit status in *exit_code when it
// does not open (77 and UNAVAILABLE: the io_uring backend asked for is not there).
std::unique_ptr<kvtier::FsTier> OpenTier(const Args& args, int* exit_code) {
  kvtier::FsTierOpenOptions o;
  o.tier.root_dir = args.root;
  o.ns = kvtier::crash::CrashSpec();
  o.row_bytes = args.row_bytes;
  o.tier.n_read_threads = 2;
  o.tier.n_write_threads = args.threads;
  o.tier.durability = WithInjectedFault(args.durability);
  o.tier.io_backend = args.backend;
  o.tier.o_direct = args.o_direct;
  auto opened = kvtier::FsTier::Open(o);
  if (!opened.ok()) {
    std::fprintf(stderr, "crash_writer: open: %s\n", opened.status().ToString().c_str());
    if (args.backend == kvtier::IoBackendKind::kUring &&
        opened.status().code() == kvtier::StatusCode::kUnavailable) {
      Emit("UNAVAILABLE\n");
      *exit_code = 77;
    } else {
      *exit_code = 2;
    }
    return nullptr;
  }
  std::unique_ptr<kvtier::FsTier> tier = std::move(opened).value();
  Emit("READY " + std::string(tier->backend_name()) + " " + (tier->o_direct() ? "1" : "0") + " " +
       (tier->xattrs_supported() ? "1" : "0") + "\n");
  return tier;
}

// The store loop: every free slot takes the next `batch` keys, and each finished job's
// outcomes are announced (ACK / NACK lines) in one write.
class Writer {
 public:
  Writer(const Args& args, kvtier::FsTier* tier) : args_(args), tier_(tier), slots_(args.jobs) {}

  // Exit status: 0 after --max-rows rows, 2 when a row cannot be allocated or a job submitted
  // (the rows are then left to the exit: a job in flight may still read them).
  int Run() {
    if (!AllocateRows()) return 2;
    std::vector<kvtier::JobResult> done;
    while (args_.max_rows == 0 || finished_rows_ < args_.max_rows) {
      for (Slot& s : slots_) {
        if (s.busy || (args_.max_rows != 0 && submitted_ >= args_.max_rows)) continue;
        if (!Submit(&s)) return 2;
      }
      done.clear();
      if (tier_->PollFinished(&done) == 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        continue;
      }
      for (const kvtier::JobResult& job : done) Announce(job);
    }
    for (Slot& s : slots_) {
      for (uint8_t* row : s.rows) std::free(row);
    }
    return 0;
  }

 private:
  bool AllocateRows() {
    for (Slot& s : slots_) {
      for (size_t r = 0; r < args_.batch; ++r) {
        auto* row = static_cast<uint8_t*>(std::aligned_alloc(4096, args_.row_bytes));
        if (row == nullptr) return false;
        s.rows.push_back(row);
      }
    }
    return true;
  }

  bool Submit(Slot* s) {
    s->indices.clear();
    s->keys.clear();
    std::vector<std::span<const uint8_t>> spans;
    for (size_t r = 0; r < args_.batch; ++r) {
      const uint64_t i = (args_.first_key + next_++) % args_.keys;
      kvtier::crash::FillCrashRow(args_.seed, i, {s->rows[r], args_.row_bytes});
      s->indices.push_back(i);
      s->keys.push_back(CrashKey(i));
      spans.emplace_back(s->rows[r], args_.row_bytes);
    }
    auto id = tier_->SubmitStore(s->keys, spans);
    if (!id.ok()) {
      std::fprintf(stderr, "crash_writer: submit: %s\n", id.status().ToString().c_str());
      return false;
    }
    s->job_id = id.value();
    s->busy = true;
    by_job_[s->job_id] = s;
    submitted_ += args_.batch;
    return true;
  }

  void Announce(const kvtier::JobResult& job) {
    auto it = by_job_.find(job.job_id);
    if (it == by_job_.end()) return;
    Slot* s = it->second;
    by_job_.erase(it);
    std::string lines;
    for (size_t k = 0; k < job.keys.size(); ++k) {
      const kvtier::KeyOutcome outcome = job.keys[k].outcome;
      if (outcome == kvtier::KeyOutcome::kOk || outcome == kvtier::KeyOutcome::kSkippedExists) {
        lines += "ACK " + std::to_string(s->indices[k]) + "\n";
      } else {
        lines += "NACK " + std::to_string(s->indices[k]) + " " +
                 std::string(kvtier::KeyOutcomeName(outcome)) + "\n";
        std::fprintf(stderr, "crash_writer: key %llu: %s\n",
                     static_cast<unsigned long long>(s->indices[k]),
                     job.keys[k].status.ToString().c_str());
      }
    }
    Emit(lines);
    finished_rows_ += job.keys.size();
    s->busy = false;
  }

  const Args& args_;
  kvtier::FsTier* tier_;
  std::vector<Slot> slots_;
  std::unordered_map<uint64_t, Slot*> by_job_;
  uint64_t next_ = 0, submitted_ = 0, finished_rows_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  const Args args = ParseArgs(argc, argv);
  int exit_code = 0;
  std::unique_ptr<kvtier::FsTier> tier = OpenTier(args, &exit_code);
  if (tier == nullptr) return exit_code;
  return Writer(args, tier.get()).Run();
}
