// Proves that a running fs tier keeps a lease gc counts (FORMAT.md L74, L156):
// its heartbeat lease, removed, or replaced by a symlink (to a file outside
// the volume) or a FIFO, is a regular file again within a few refresh
// periods, the symlink's target untouched and nothing opened through the
// FIFO; and the tier's close removes it.
// Method: a real namespace directory and Lease::Acquire with a 20 ms refresh
// period; each replacement is made by hand and the lease's name polled (a
// bounded wait: the assertion is on what is there, not on when).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "fs/lease.h"
#include "support/test_support.h"

namespace kvtier::internal {
namespace {

namespace fs = std::filesystem;

bool BecomesRegular(const fs::path& p) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    if (fs::is_regular_file(fs::symlink_status(p, ec))) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// Puts a FIFO at `p`: the heartbeat may write the lease anew between the
// removal and the mkfifo (EEXIST, seen under ASan), so that is retried.
bool PlaceFifo(const fs::path& p) {
  for (int i = 0; i < 1000; ++i) {
    std::error_code ec;
    fs::remove(p, ec);
    if (mkfifo(p.c_str(), 0644) == 0) return true;
    if (errno != EEXIST) return false;
  }
  return false;
}

TEST(TierLease, ALeaseRemovedOrReplacedByANonFileIsWrittenAnew) {
  testing::TempDir ns, outside;
  UniqueFd fd(open(ns.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  Result<std::unique_ptr<Lease>> lease = Lease::Acquire(fd.get(), ns.path().string(), 7, /*refresh_ms=*/20);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  const fs::path path = (*lease)->path(), target = outside.path() / "precious";
  ASSERT_TRUE(fs::is_regular_file(path));
  std::ofstream(target) << "precious bytes";

  fs::remove(path);
  EXPECT_TRUE(BecomesRegular(path)) << "a removed lease is written anew";

  const fs::path link = path.string() + ".link";
  fs::create_symlink(target, link);
  fs::rename(link, path);
  EXPECT_TRUE(BecomesRegular(path)) << "a symlinked lease is replaced";
  std::ifstream in(target);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "precious bytes");

  ASSERT_TRUE(PlaceFifo(path));
  EXPECT_TRUE(BecomesRegular(path)) << "a FIFO at the lease's name is replaced";

  lease->reset();  // the tier closes
  EXPECT_FALSE(fs::exists(fs::symlink_status(path)));
}

}  // namespace
}  // namespace kvtier::internal
