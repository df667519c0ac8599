// Proves checksummed staging on a real GPU: the CRC kernel's register CRCs of
// random units of random device pieces (every length up to 64 KiB and
// beyond, odd offsets, more than one launch) equal the CPU's (ISA-L); the stager's start-up self-check passed; a
// store's row_crcs equal Crc32c of the pinned row for rows of every
// supported size (4 KiB to 2 MiB) and through every copy path (copy
// engines, copy kernel, staging buffer, auto), with the bytes counted as
// computed on the device; a load with the blocks' CRCs passes every intact
// row and reports a byte flipped in one row as that row's kCorruption only.
//
// Without a CUDA device (or in a build without CUDA) every test is skipped.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "cpu_tier/host_region.h"
#include "staging/stager.h"
#include "support/stager_test_support.h"
#include "support/test_support.h"
#include "util/crc32c.h"

#if KVTIER_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "staging/crc_kernel.h"
#include "staging/row_crc.h"
#endif

namespace kvtier::internal {
namespace {

#if KVTIER_HAVE_CUDA

TEST(GpuCrcKernel, PiecesEqualTheCpu) {
  KVTIER_REQUIRE_GPU("device CRC32C");
  if (!CrcKernelBuilt()) GTEST_SKIP() << "kvtier was built without nvcc: no CRC kernel";
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> host(4 << 20);
  for (auto& b : host) b = static_cast<uint8_t>(rng());
  void* dev = nullptr;
  ASSERT_CUDA(cudaMalloc(&dev, host.size()));
  ASSERT_CUDA(cudaMemcpy(dev, host.data(), host.size(), cudaMemcpyHostToDevice));
  std::vector<KernelCrc> pieces;
  std::vector<uint64_t> offsets;
  std::vector<KernelCrcUnit> units;
  for (int i = 0; i < 3000; ++i) {  // more than one launch's descriptors
    const uint64_t len = i < 300 ? static_cast<uint64_t>(i) : 1 + rng() % (i % 10 == 0 ? (2 << 20) : 65536);
    const uint64_t off = rng() % (host.size() - len);
    offsets.push_back(off);
    pieces.push_back(KernelCrc{static_cast<uint8_t*>(dev) + off, len});
    if (units.empty() || units.back().count == 1 + units.size() % 7) {
      units.push_back(KernelCrcUnit{static_cast<uint32_t>(i), 0});
    }
    ++units.back().count;
  }
  void* managed = nullptr;
  ASSERT_CUDA(cudaMallocManaged(&managed, units.size() * sizeof(uint32_t)));
  auto* out = static_cast<uint32_t*>(managed);
  ASSERT_CUDA(LaunchCrcKernel(pieces.data(), units.data(), units.size(), out, nullptr));
  ASSERT_CUDA(cudaDeviceSynchronize());
  for (size_t u = 0; u < units.size(); ++u) {
    uint32_t cpu = 0;
    for (uint32_t k = units[u].first; k < units[u].first + units[u].count; ++k) {
      cpu = CpuRawCrc(cpu, host.data() + offsets[k], pieces[k].bytes);
    }
    ASSERT_EQ(out[u], cpu) << "seed " << seed << " unit " << u << " of " << units[u].count << " pieces from "
                           << units[u].first;
  }
  static_cast<void>(cudaFree(out));
  static_cast<void>(cudaFree(dev));
}

// One GPU tensor of random pages and a pinned, mapped region of rows.
class GpuCrc : public ::testing::Test {
 protected:
  void SetUp() override { rng_.seed(seed_ = testing::TestSeed()); }
  void TearDown() override {
    stager_.reset();
    for (void* p : dev_) static_cast<void>(cudaFree(p));
    dev_.clear();
  }

  void Create(std::vector<uint64_t> pages, uint32_t bpc, uint32_t blocks, GpuCopy mode) {
    StagerOptions options{{DeviceKvCache{0, {}}}, bpc, {}, mode, {}};
    for (uint64_t page : pages) {
      std::vector<uint8_t> host(page * blocks);
      for (auto& b : host) b = static_cast<uint8_t>(rng_());
      void* dev = nullptr;
      ASSERT_CUDA(cudaMalloc(&dev, host.size()));
      ASSERT_CUDA(cudaMemcpy(dev, host.data(), host.size(), cudaMemcpyHostToDevice));
      dev_.push_back(dev);
      options.devices[0].tensors.push_back(KvTensorSpec{reinterpret_cast<uintptr_t>(dev), page, page, blocks});
    }
    bpc_ = bpc;
    blocks_ = blocks;
    ASSERT_OK_AND_ASSIGN(const RowLayout layout, RowLayout::Create(options.devices, bpc));
    ASSERT_OK_AND_ASSIGN(region_, HostRegion::Allocate(4 * layout.row_bytes()));
    for (auto& b : region_->bytes()) b = static_cast<uint8_t>(rng_());  // padding included
    options.host_ranges = {region_->bytes()};
    ASSERT_OK_AND_ASSIGN(stager_, Stager::Create(std::move(options)));
    EXPECT_TRUE(stager_->gpu_copy_counts().crc_on_device) << "the device CRC failed its self-check (see the log)";
  }

  std::vector<uint8_t*> Rows() {
    std::vector<uint8_t*> rows;
    for (size_t i = 0; i < 4; i += 2) rows.push_back(region_->bytes().data() + i * stager_->row_bytes());
    rows.push_back(region_->bytes().data() + 3 * stager_->row_bytes());
    return rows;
  }
  std::vector<uint32_t> Ids(size_t rows) {
    std::vector<uint32_t> ids(blocks_);
    std::iota(ids.begin(), ids.end(), 0u);
    std::shuffle(ids.begin(), ids.end(), rng_);
    ids.resize(rows * bpc_);
    return ids;
  }
  FinishedCopy Run(CopyDirection d, const std::vector<uint8_t*>& rows, const std::vector<uint32_t>& ids,
                   const CopyChecksums& crc) {
    return testing::RunTicket(stager_.get(), d, rows, ids, crc, 60000);
  }

  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  uint32_t bpc_ = 1, blocks_ = 1;
  std::vector<void*> dev_;
  std::unique_ptr<HostRegion> region_;
  std::unique_ptr<Stager> stager_;
};

TEST_F(GpuCrc, StoreAndLoadCrcsEqualTheCpuAtEveryRowSizeAndPath) {
  KVTIER_REQUIRE_GPU("device CRC32C");
  SCOPED_TRACE("seed " + std::to_string(seed_));
  for (GpuCopy mode : {GpuCopy::kAuto, GpuCopy::kDma, GpuCopy::kKernel, GpuCopy::kStaged}) {
    for (uint64_t row : {uint64_t{4} << 10, uint64_t{16} << 10, uint64_t{64} << 10, uint64_t{256} << 10,
                         uint64_t{1} << 20, uint64_t{2} << 20}) {
      // Two tensors of pages of row/16 (and one odd-sized), 8 blocks a row.
      const uint64_t page = row / 16;
      TearDown();
      ASSERT_NO_FATAL_FAILURE(Create({page, page - 8}, 8, 64, mode));
      const std::vector<uint8_t*> rows = Rows();
      const uint64_t before = stager_->gpu_copy_counts().crc_device_bytes;
      const FinishedCopy stored = Run(CopyDirection::kDeviceToHost, rows, Ids(rows.size()), {true, {}});
      ASSERT_OK(stored.status);
      ASSERT_EQ(stored.row_crcs.size(), rows.size());
      std::vector<uint32_t> cpu;
      for (uint8_t* r : rows) cpu.push_back(Crc32c({r, stager_->row_bytes()}));
      ASSERT_EQ(stored.row_crcs, cpu) << "row " << row << " mode " << static_cast<int>(mode);
      EXPECT_EQ(stager_->gpu_copy_counts().crc_device_bytes - before, rows.size() * 8 * (2 * page - 8));
      const size_t bad = rng_() % rows.size();
      rows[bad][rng_() % (8 * (2 * page - 8))] ^= 0x10;
      const FinishedCopy loaded = Run(CopyDirection::kHostToDevice, rows, Ids(rows.size()), {false, cpu});
      ASSERT_OK(loaded.status);
      ASSERT_EQ(loaded.row_status.size(), rows.size());
      for (size_t r = 0; r < rows.size(); ++r) {
        EXPECT_EQ(loaded.row_status[r].code(), r == bad ? StatusCode::kCorruption : StatusCode::kOk)
            << "row " << r << " of " << row << " bytes, mode " << static_cast<int>(mode);
      }
    }
  }
}

#else  // !KVTIER_HAVE_CUDA

TEST(GpuCrcKernel, PiecesEqualTheCpu) { KVTIER_REQUIRE_GPU("device CRC32C"); }
TEST(GpuCrc, StoreAndLoadCrcsEqualTheCpuAtEveryRowSizeAndPath) { KVTIER_REQUIRE_GPU("device CRC32C"); }

#endif  // KVTIER_HAVE_CUDA

}  // namespace
}  // namespace kvtier::internal
