// Proves the library's collector (kvtier/collector.h), as an embedder uses it:
// - CollectOnce with a capacity bound and no other collector takes the
//   volume's lease, trims to the bound and gives the lease up before it
//   returns (FORMAT.md L124); beside a live Collector holding the lease it
//   removes nothing for capacity (capacity_skipped names the other
//   collector, exit 0) and the holder keeps its lease; ignore_lease trims;
//   a lease that cannot be made (a file at <root>/.kvtier) fails the bound
//   (capacity_lease_failed, exit 4); a bad root is refused before any
//   .kvtier is made.
// - A Collector started on its own thread takes the lease, trims to its
//   bound in passes, keeps metrics and a status, says what it does through
//   the log callback, and on Stop gives the lease up (Wait: ok). Open
//   refuses a directory that is not a root, and a dry run, creating nothing.
//
// Method: blocks written in the layout (FORMAT.md L2-L8), each with its own
// use time; collectors with a 1 s TTL; waits poll a condition under a
// generous deadline (nothing asserts a duration).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kvtier/collector.h"
#include "support/test_support.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
constexpr uint64_t kRow = 4096;
constexpr uint64_t kTtlMs = 1000;
constexpr const char* kNs = "m_0123456789ab";

// n blocks under root, block i last used (n - i) hours ago.
void MakeBlocks(const fs::path& root, int n) {
  fs::create_directories(root / kNs);
  const std::time_t now = std::time(nullptr);
  for (int i = 0; i < n; ++i) {
    char name[65];
    std::snprintf(name, sizeof name, "%056d%08x", 0, i);
    const std::string h(name);
    const fs::path dir = root / (std::string(kNs) + "_r0") / h.substr(0, 3) / (h.substr(3, 2) + "_g0");
    fs::create_directories(dir);
    const fs::path file = dir / (h + ".bin");
    std::ofstream(file) << std::string(kRow, 'x');
    const struct timespec t[2] = {{now - 3600 * (n - i), 0}, {now - 3600 * (n - i), 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, file.c_str(), t, 0), 0);
  }
}

size_t Blocks(const fs::path& root) {
  size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(root)) n += e.path().extension() == ".bin" ? 1 : 0;
  return n;
}

bool WaitFor(const std::function<bool()>& cond) {
  for (int i = 0; i < 3000 && !cond(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return cond();
}

CollectOnceOptions Once(const fs::path& root, uint64_t max_blocks) {
  CollectOnceOptions o;
  o.root = root.string();
  o.max_bytes = max_blocks * kRow;
  o.collector_ttl_ms = kTtlMs;
  return o;
}

// A Collector with short periods whose log lines are kept.
struct Watch {
  std::mutex mu;
  std::vector<std::string> lines;
  std::unique_ptr<Collector> c;

  Status Open(const fs::path& root, std::optional<uint64_t> max_blocks) {
    CollectorOptions o;
    o.gc.root = root.string();
    if (max_blocks) o.gc.max_bytes = *max_blocks * kRow;
    o.interval_ms = 300;
    o.check_ms = 50;
    o.collector_ttl_ms = kTtlMs;
    o.log = [this](std::string_view line) {
      std::lock_guard lock(mu);
      lines.emplace_back(line);
    };
    Result<std::unique_ptr<Collector>> r = Collector::Open(std::move(o));
    if (r.ok()) c = std::move(*r);
    return r.status();
  }
  bool Said(const std::string& what) {
    std::lock_guard lock(mu);
    for (const std::string& l : lines) {
      if (l.find(what) != std::string::npos) return true;
    }
    return false;
  }
};

TEST(Collector, CollectOnceTakesTheLeaseTrimsAndGivesItUp) {
  TempDir dir;
  MakeBlocks(dir.path(), 20);
  Result<GcReport> r = CollectOnce(Once(dir.path(), 8));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->files_reclaimed, 12u);
  EXPECT_EQ(r->capacity_skipped, "");
  EXPECT_EQ(r->ExitCode(), 0);
  EXPECT_EQ(Blocks(dir.path()), 8u);
  EXPECT_TRUE(fs::is_directory(dir.path() / ".kvtier"));
  EXPECT_FALSE(fs::exists(dir.path() / ".kvtier" / "gc.lease")) << "given up before returning";
}

TEST(Collector, CollectOnceDefersToALiveCollector) {
  TempDir dir;
  MakeBlocks(dir.path(), 20);
  Watch w;
  ASSERT_TRUE(w.Open(dir.path(), std::nullopt).ok());  // holds the lease, no bound of its own
  ASSERT_TRUE(w.c->Start().ok());
  ASSERT_TRUE(WaitFor([&] { return w.c->status().holding; }));
  Result<GcReport> r = CollectOnce(Once(dir.path(), 8));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->files_reclaimed, 0u);
  EXPECT_NE(r->capacity_skipped.find("another collector"), std::string::npos) << r->capacity_skipped;
  EXPECT_FALSE(r->capacity_lease_failed);
  EXPECT_EQ(r->ExitCode(), 0);
  EXPECT_EQ(Blocks(dir.path()), 20u);
  EXPECT_TRUE(w.c->status().holding) << "the holder keeps its lease";
  CollectOnceOptions ignore = Once(dir.path(), 15);
  ignore.ignore_lease = true;
  r = CollectOnce(ignore);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->files_reclaimed, 5u);
  w.c->Stop();
  EXPECT_TRUE(w.c->Wait().ok());
  EXPECT_FALSE(fs::exists(dir.path() / ".kvtier" / "gc.lease"));
}

TEST(Collector, CollectOnceWithoutALeaseFailsTheBound) {
  TempDir dir;
  MakeBlocks(dir.path(), 10);
  testing::WriteFileOrDie(dir.path() / ".kvtier", "a file where the lease directory goes");
  Result<GcReport> r = CollectOnce(Once(dir.path(), 5));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->files_reclaimed, 0u);
  EXPECT_TRUE(r->capacity_lease_failed);
  EXPECT_NE(r->capacity_skipped.find("collector lease"), std::string::npos) << r->capacity_skipped;
  EXPECT_EQ(r->ExitCode() & 4, 4);
  EXPECT_EQ(Blocks(dir.path()), 10u);
}

TEST(Collector, CollectOnceRefusesABadRootBeforeTheLease) {
  TempDir dir;
  MakeBlocks(dir.path(), 4);
  CollectOnceOptions o = Once(dir.path(), 0);
  o.root += std::string("\0/elsewhere", 11);
  Result<GcReport> r = CollectOnce(o);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  o = Once(dir.path(), 0);
  o.collector_ttl_ms = 0;
  EXPECT_EQ(CollectOnce(o).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(dir.path() / ".kvtier"));
  EXPECT_EQ(Blocks(dir.path()), 4u);
}

TEST(Collector, AnEmbeddedWatchTrimsAndStops) {
  TempDir dir;
  MakeBlocks(dir.path(), 20);
  Watch w;
  ASSERT_TRUE(w.Open(dir.path(), 8).ok());
  ASSERT_TRUE(w.c->Start().ok());
  EXPECT_EQ(w.c->Start().code(), StatusCode::kInvalidArgument) << "runs once";
  ASSERT_TRUE(WaitFor([&] { return w.c->status().passes >= 1 && Blocks(dir.path()) == 8; }));
  const CollectorStatus s = w.c->status();
  EXPECT_TRUE(s.running);
  EXPECT_TRUE(s.holding);
  EXPECT_EQ(s.files_reclaimed, 12u);
  EXPECT_EQ(s.bytes_reclaimed, 12 * kRow);
  EXPECT_EQ(s.lease_acquisitions, 1u);
  EXPECT_TRUE(fs::is_regular_file(dir.path() / ".kvtier" / "gc.lease"));
  EXPECT_NE(w.c->MetricsText().find("kvtier_gc_reclaimed_files_total{reason=\"capacity\"} 12"), std::string::npos);
  w.c->Stop();
  EXPECT_TRUE(w.c->Wait().ok());
  EXPECT_FALSE(w.c->status().running);
  EXPECT_FALSE(w.c->status().holding);
  EXPECT_FALSE(fs::exists(dir.path() / ".kvtier" / "gc.lease")) << "given up at stop";
  EXPECT_TRUE(w.Said("holding the collector lease"));
  EXPECT_TRUE(w.Said("pass 1 (interval): removed 12 files"));
  EXPECT_TRUE(w.Said("stopped"));
}

TEST(Collector, OpenRefusesWhatItMustNotWatch) {
  TempDir dir;
  testing::WriteFileOrDie(dir.path() / "notes.txt", "mine");
  Watch w;
  const Status s = w.Open(dir.path(), std::nullopt);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("does not look like"), std::string::npos) << s.ToString();
  CollectorOptions o;
  o.gc.root = dir.path().string();
  o.gc.force = true;
  o.gc.dry_run = true;
  EXPECT_EQ(Collector::Open(o).status().code(), StatusCode::kInvalidArgument);
  o.gc.dry_run = false;
  o.interval_ms = 0;
  EXPECT_EQ(Collector::Open(o).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(dir.path() / ".kvtier"));
}

}  // namespace
}  // namespace kvtier
