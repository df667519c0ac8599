// Proves the Stager's CUDA backend on a real GPU: random KV tensors in
// cudaMalloc'd memory (page_stride > page_bytes, with the stride gaps holding
// a sentinel), stores of random blocks into pinned rows, loads into other
// blocks, then every device byte read back and compared: loaded pages equal
// the stored originals, other blocks and the gaps are unchanged, row padding
// is never written. Also a ticket that spans a GPU slot and a host stand-in
// slot, many tickets from several threads, and that Submit leaves the
// caller's current CUDA device alone. Each copy path (the copy engines, the
// copy kernel over the link, the device staging buffer, including unaligned
// pages, pages cut into pieces and tickets larger than the buffer) is proven
// on its own, auto's choice between them is checked, and rows outside the
// mapped ranges never reach the kernel.
//
// Without a CUDA device (or in a build without CUDA) every test is skipped.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <numeric>
#include <random>
#include <thread>

#include "support/stager_test_support.h"
#include "support/test_support.h"
#include "cpu_tier/host_region.h"
#include "staging/stager.h"

#if KVTIER_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "staging/copy_kernel.h"
#include "staging/row_layout.h"
#endif

namespace kvtier::internal {
namespace {

constexpr uint8_t kGapSentinel = 0xA5;
constexpr uint8_t kRowSentinel = 0x5A;

#if KVTIER_HAVE_CUDA

// One KV tensor: device memory plus the host copy the test expects it to hold.
struct GpuTensor {
  int device = 0;
  void* dev = nullptr;
  std::vector<uint8_t> host;  // expected device contents
  KvTensorSpec spec;
};

class GpuStager : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = testing::TestSeed();
    rng_.seed(seed_);
  }
  void TearDown() override {
    stager_.reset();  // drains copies before the memory goes
    for (GpuTensor& t : tensors_) {
      if (t.dev != nullptr && t.device >= 0) static_cast<void>(cudaFree(t.dev));
    }
  }

  // A tensor on `device` (kHostStandInDevice: plain host memory).
  void AddTensor(int device, uint64_t page, uint64_t stride, uint32_t blocks) {
    GpuTensor& t = tensors_.emplace_back();
    t.device = device;
    t.host.assign(blocks * stride, kGapSentinel);
    for (uint32_t b = 0; b < blocks; ++b) {
      for (uint64_t i = 0; i < page; ++i) t.host[b * stride + i] = static_cast<uint8_t>(rng_());
    }
    if (device >= 0) {
      ASSERT_CUDA(cudaSetDevice(device));
      ASSERT_CUDA(cudaMalloc(&t.dev, t.host.size()));
      ASSERT_CUDA(cudaMemcpy(t.dev, t.host.data(), t.host.size(), cudaMemcpyHostToDevice));
    } else {
      stand_in_.emplace_back(t.host);
      t.dev = stand_in_.back().data();
    }
    t.spec = KvTensorSpec{reinterpret_cast<uintptr_t>(t.dev), page, stride, blocks};
  }

  // Slots in order of first appearance of each tensor's device. The rows'
  // region is given to the stager as mapped memory unless `map_rows` is false.
  void Create(uint32_t bpc, size_t rows, GpuCopy mode = GpuCopy::kAuto, bool map_rows = true) {
    StagerOptions options{{}, bpc, {}, mode, {}};
    for (const GpuTensor& t : tensors_) {
      if (options.devices.empty() || options.devices.back().device != t.device) {
        options.devices.push_back(DeviceKvCache{t.device, {}});
      }
      options.devices.back().tensors.push_back(t.spec);
    }
    bpc_ = bpc;
    ASSERT_OK_AND_ASSIGN(const RowLayout layout, RowLayout::Create(options.devices, bpc));
    ASSERT_OK_AND_ASSIGN(region_, HostRegion::Allocate(rows * layout.row_bytes()));
    EXPECT_TRUE(region_->cuda_pinned());
    std::memset(region_->bytes().data(), kRowSentinel, region_->bytes().size());
    if (map_rows) options.host_ranges = {region_->bytes()};
    ASSERT_OK_AND_ASSIGN(stager_, Stager::Create(std::move(options)));
    EXPECT_EQ(stager_->backend_name(), "cuda");
  }

  uint8_t* Row(size_t r) { return region_->bytes().data() + r * stager_->row_bytes(); }

  void Copy(CopyDirection d, const std::vector<uint8_t*>& rows, const std::vector<uint32_t>& ids) {
    ASSERT_OK_AND_ASSIGN(uint64_t ticket, stager_->Submit(d, rows, ids));
    ASSERT_OK(stager_->WaitIdle(60000));
    std::vector<FinishedCopy> done;
    ASSERT_EQ(stager_->PollFinished(&done), 1u);
    EXPECT_EQ(done[0].ticket, ticket);
    ASSERT_OK(done[0].status);
  }

  // Row r holds ids' pages of every tensor back to back; the rest is padding.
  void ExpectRow(const uint8_t* row, const uint32_t* ids) {
    uint64_t off = 0;
    for (const GpuTensor& t : tensors_) {
      for (uint32_t j = 0; j < bpc_; ++j, off += t.spec.page_bytes) {
        ASSERT_EQ(std::memcmp(row + off, &t.host[ids[j] * t.spec.page_stride_bytes], t.spec.page_bytes), 0)
            << "page " << j << " of block " << ids[j];
      }
    }
    for (uint64_t i = off; i < stager_->row_bytes(); ++i) ASSERT_EQ(row[i], kRowSentinel) << "padding byte " << i;
  }

  // Reads every tensor back and compares it with the expected host copy.
  void ExpectDevicesMatch() {
    for (const GpuTensor& t : tensors_) {
      std::vector<uint8_t> got(t.host.size());
      if (t.device >= 0) {
        ASSERT_CUDA(cudaMemcpy(got.data(), t.dev, got.size(), cudaMemcpyDeviceToHost));
      } else {
        std::memcpy(got.data(), t.dev, got.size());
      }
      ASSERT_TRUE(got == t.host) << "tensor on device " << t.device << " differs (a page or a stride gap)";
    }
  }

  std::vector<uint32_t> DistinctIds(size_t n, uint32_t blocks) {
    std::vector<uint32_t> ids(blocks);
    std::iota(ids.begin(), ids.end(), 0u);
    std::shuffle(ids.begin(), ids.end(), rng_);
    ids.resize(n);
    return ids;
  }

  // Store n chunks of random blocks, check the rows, load them into other
  // blocks, update the expected copies and compare every device byte.
  void RoundTrip(size_t n, uint32_t blocks) {
    std::vector<uint8_t*> rows;
    for (size_t i = 0; i < n; ++i) rows.push_back(Row(i * 2));  // every other row: not adjacent
    const auto stored = DistinctIds(n * bpc_, blocks);
    ASSERT_NO_FATAL_FAILURE(Copy(CopyDirection::kDeviceToHost, rows, stored));
    for (size_t i = 0; i < n; ++i) ASSERT_NO_FATAL_FAILURE(ExpectRow(rows[i], &stored[i * bpc_]));
    const auto loaded = DistinctIds(n * bpc_, blocks);
    for (GpuTensor& t : tensors_) {
      const std::vector<uint8_t> before = t.host;
      const uint64_t stride = t.spec.page_stride_bytes;
      for (size_t k = 0; k < loaded.size(); ++k) {
        std::memcpy(&t.host[loaded[k] * stride], &before[stored[k] * stride], t.spec.page_bytes);
      }
    }
    ASSERT_NO_FATAL_FAILURE(Copy(CopyDirection::kHostToDevice, rows, loaded));
    ASSERT_NO_FATAL_FAILURE(ExpectDevicesMatch());
  }

  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  uint32_t bpc_ = 1;
  std::vector<GpuTensor> tensors_;
  std::deque<std::vector<uint8_t>> stand_in_;  // host "device" memory (stable addresses)
  std::unique_ptr<Stager> stager_;
  std::unique_ptr<HostRegion> region_;
};

TEST_F(GpuStager, StridedTensorsRoundTripByteExact) {
  KVTIER_REQUIRE_GPU("GPU staging");
  SCOPED_TRACE("seed " + std::to_string(seed_));
  ASSERT_NO_FATAL_FAILURE(AddTensor(0, 4096, 4096 + 512, 128));
  ASSERT_NO_FATAL_FAILURE(AddTensor(0, 2048, 2048, 128));  // unstrided: merges where ids allow
  ASSERT_NO_FATAL_FAILURE(AddTensor(0, 96, 160, 128));
  ASSERT_NO_FATAL_FAILURE(Create(4, 32));
  for (int round = 0; round < 3; ++round) ASSERT_NO_FATAL_FAILURE(RoundTrip(8 + round * 4, 128));
}

TEST_F(GpuStager, CopyEnginesAloneRoundTripByteExact) {
  KVTIER_REQUIRE_GPU("GPU staging");
  SCOPED_TRACE("seed " + std::to_string(seed_));
  ASSERT_NO_FATAL_FAILURE(AddTensor(0, 4096, 4096 + 512, 128));
  ASSERT_NO_FATAL_FAILURE(AddTensor(0, 100, 103, 128));
  ASSERT_NO_FATAL_FAILURE(Create(4, 32, GpuCopy::kDma));
  for (int round = 0; round < 3; ++round) ASSERT_NO_FATAL_FAILURE(RoundTrip(8 + round * 4, 128));
  EXPECT_EQ(stager_->gpu_copy_counts().kernel_segments, 0u);
  EXPECT_GT(stager_->gpu_copy_counts().dma_segments, 0u);
}

TEST_F(GpuStager, CopyKernelAloneRoundTripsByteExact) {
  KVTIER_REQUIRE_GPU("GPU staging");
  if (!CopyKernelBuilt()) GTEST_SKIP() << "kvtier was built without nvcc: no copy kernel";
  SCOPED_TRACE("seed " + std::to_string(seed_));
  ASSERT_NO_FATAL_FAILURE(AddTensor(0, 4096, 4096 + 512, 128));
  ASSERT_NO_FATAL_FAILURE(AddTensor(0, 100, 103, 128));       // unaligned: the byte path
  ASSERT_NO_FATAL_FAILURE(AddTensor(0, 200704, 200704, 128));  // > 64 KiB: cut into pieces
  ASSERT_NO_FATAL_FAILURE(Create(2, 32, GpuCopy::kKernel));
  for (int round = 0; round < 3; ++round) ASSERT_NO_FATAL_FAILURE(RoundTrip(4 + round * 4, 128));
  EXPECT_GT(stager_->gpu_copy_counts().kernel_segments, 0u);
  EXPECT_EQ(stager_->gpu_copy_counts().dma_segments, 0u);
}

TEST_F(GpuStager, StagingBufferAloneRoundTripsByteExact) {
  KVTIER_REQUIRE_GPU("GPU staging");
  if (!CopyKernelBuilt()) GTEST_SKIP() << "kvtier was built without nvcc: no copy kernel";
  SCOPED_TRACE("seed " + std::to_string(seed_));
  ASSERT_NO_FATAL_FAILURE(AddTensor(0, 4096, 4096 + 512, 128));
  ASSERT_NO_FATAL_FAILURE(AddTensor(0, 100, 103, 128));       // unaligned pages and staging offsets
  ASSERT_NO_FATAL_FAILURE(AddTensor(0, 200704, 200704, 128));  // cut into pieces by the kernel
  ASSERT_NO_FATAL_FAILURE(Create(2, 32, GpuCopy::kStaged, /*map_rows=*/false));  // staging needs no mapping
  for (int round = 0; round < 3; ++round) ASSERT_NO_FATAL_FAILURE(RoundTrip(4 + round * 4, 128));
  EXPECT_GT(stager_->gpu_copy_counts().staged_segments, 0u);
  EXPECT_EQ(stager_->gpu_copy_counts().kernel_segments + stager_->gpu_copy_counts().dma_segments, 0u);
}

// More than kStagingBytes in one ticket: the batch moves in several rounds
// through the one buffer, and tickets from several threads share it.
TEST_F(GpuStager, StagedBatchesLargerThanTheBufferMoveInRounds) {
  KVTIER_REQUIRE_GPU("GPU staging");
  if (!CopyKernelBuilt()) GTEST_SKIP() << "kvtier was built without nvcc: no copy kernel";
  SCOPED_TRACE("seed " + std::to_string(seed_));
  // 48 rows of 16 pages of 120 KiB (never merged: strided) = 90 MiB a ticket.
  ASSERT_NO_FATAL_FAILURE(AddTensor(0, 122880, 131072, 2048));
  ASSERT_NO_FATAL_FAILURE(Create(16, 96, GpuCopy::kStaged));
  ASSERT_NO_FATAL_FAILURE(RoundTrip(48, 2048));
  ASSERT_NO_FATAL_FAILURE(RoundTrip(40, 2048));
  EXPECT_GT(stager_->gpu_copy_counts().staged_segments, 0u);
}

// Small pages: the store (one round trip's first half) by the kernel, the
// load staged; large pages: the copy engines both ways.
TEST_F(GpuStager, AutoPicksThePathByDirectionAndPageSize) {
  KVTIER_REQUIRE_GPU("GPU staging");
  if (!CopyKernelBuilt()) GTEST_SKIP() << "kvtier was built without nvcc: no copy kernel";
  SCOPED_TRACE("seed " + std::to_string(seed_));
  ASSERT_NO_FATAL_FAILURE(AddTensor(0, 16384, 16384 + 4096, 64));
  ASSERT_NO_FATAL_FAILURE(Create(1, 32, GpuCopy::kAuto));
  ASSERT_NO_FATAL_FAILURE(RoundTrip(8, 64));
  EXPECT_EQ(stager_->gpu_copy_counts().kernel_segments, 8u);  // strided pages never merge
  EXPECT_EQ(stager_->gpu_copy_counts().staged_segments, 8u);
  EXPECT_EQ(stager_->gpu_copy_counts().dma_segments, 0u);
  TearDown();
  tensors_.clear();
  ASSERT_NO_FATAL_FAILURE(AddTensor(0, 262144, 262144 + 4096, 16));
  ASSERT_NO_FATAL_FAILURE(Create(1, 8, GpuCopy::kAuto));
  ASSERT_NO_FATAL_FAILURE(RoundTrip(4, 16));
  EXPECT_EQ(stager_->gpu_copy_counts().kernel_segments + stager_->gpu_copy_counts().staged_segments, 0u);
  EXPECT_GT(stager_->gpu_copy_counts().dma_segments, 0u);
}

TEST_F(GpuStager, RowsOutsideTheMappedRangesNeverReachTheKernel) {
  KVTIER_REQUIRE_GPU("GPU staging");
  SCOPED_TRACE("seed " + std::to_string(seed_));
  ASSERT_NO_FATAL_FAILURE(AddTensor(0, 4096, 4096, 64));
  ASSERT_NO_FATAL_FAILURE(Create(1, 32, GpuCopy::kKernel, /*map_rows=*/false));
  ASSERT_NO_FATAL_FAILURE(RoundTrip(8, 64));
  EXPECT_EQ(stager_->gpu_copy_counts().kernel_segments, 0u);
  EXPECT_GT(stager_->gpu_copy_counts().dma_segments, 0u);
}

TEST_F(GpuStager, OneTicketSpansEveryGpuAndTheHostStandIn) {
  KVTIER_REQUIRE_GPU("GPU staging");
  SCOPED_TRACE("seed " + std::to_string(seed_));
  int count = 0;
  ASSERT_CUDA(cudaGetDeviceCount(&count));
  for (int d = 0; d < std::min(count, 2); ++d) ASSERT_NO_FATAL_FAILURE(AddTensor(d, 8192, 8192 + 256, 64));
  ASSERT_NO_FATAL_FAILURE(AddTensor(kHostStandInDevice, 1024, 1100, 64));
  ASSERT_NO_FATAL_FAILURE(Create(2, 32));
  ASSERT_NO_FATAL_FAILURE(RoundTrip(12, 64));
}

TEST_F(GpuStager, ManyTicketsFromSeveralThreadsLeaveTheCallersDeviceAlone) {
  KVTIER_REQUIRE_GPU("GPU staging");
  SCOPED_TRACE("seed " + std::to_string(seed_));
  constexpr int kThreads = 4, kTickets = 32;
  ASSERT_NO_FATAL_FAILURE(AddTensor(0, 16384, 16384, 1024));
  ASSERT_NO_FATAL_FAILURE(AddTensor(0, 16384, 20480, 1024));
  ASSERT_NO_FATAL_FAILURE(Create(1, kThreads * kTickets));
  const auto ids = DistinctIds(kThreads * kTickets, 1024);
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      int count = 0, before = -1, after = -2;
      if (cudaGetDeviceCount(&count) == cudaSuccess && count > 1) {
        static_cast<void>(cudaSetDevice(count - 1));  // Submit must not move us to device 0
      }
      static_cast<void>(cudaGetDevice(&before));
      for (int i = 0; i < kTickets; ++i) {
        const size_t r = static_cast<size_t>(th * kTickets + i);
        uint8_t* rows[] = {Row(r)};
        ASSERT_TRUE(stager_->Submit(CopyDirection::kDeviceToHost, rows, {&ids[r], 1}).ok());
      }
      static_cast<void>(cudaGetDevice(&after));
      EXPECT_EQ(before, after) << "Submit changed the calling thread's current device";
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_OK(stager_->WaitIdle(60000));
  std::vector<FinishedCopy> done;
  EXPECT_EQ(stager_->PollFinished(&done), size_t{kThreads * kTickets});
  for (const FinishedCopy& f : done) EXPECT_OK(f.status);
  for (size_t r = 0; r < ids.size(); ++r) ASSERT_NO_FATAL_FAILURE(ExpectRow(Row(r), &ids[r]));
}

#else  // !KVTIER_HAVE_CUDA

TEST(GpuStager, SkippedWithoutCuda) { KVTIER_REQUIRE_GPU("GPU staging"); }

#endif  // KVTIER_HAVE_CUDA

}  // namespace
}  // namespace kvtier::internal
