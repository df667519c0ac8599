// Proves the CPU tier's staging path without a GPU: the row layout (row
// bytes and per-(device, tensor) offsets of multi-device, multi-tensor
// layouts, checked against hand-computed values), every validation rule,
// copy-segment merging (contiguous vs scattered block ids, strided tensors,
// rows adjacent in memory), the host pool's batch splitting, HostRegion
// allocation, and byte-exact round trips through the host stand-in: random
// "GPU" tensors with stride gaps that must never be written, stores of random
// blocks into rows whose padding must stay untouched, loads into other
// blocks, many tickets from several threads at once, PollFinished/WaitIdle
// semantics and the on_finished callback (run outside the stager's locks).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "support/test_support.h"
#include "cpu_tier/host_region.h"
#include "staging/row_layout.h"
#include "staging/stager.h"
#include "staging/stager_internal.h"

namespace kvtier::internal {
namespace {

constexpr uint8_t kGapSentinel = 0xA5;  // stride gaps of the fake GPU tensors
constexpr uint8_t kRowSentinel = 0x5A;  // row bytes before any copy

KvTensorSpec Tensor(uint64_t base, uint64_t page, uint64_t stride, uint32_t blocks) {
  return KvTensorSpec{base, page, stride, blocks};
}

// ---------------------------------------------------------------------------
// Layout arithmetic.

TEST(RowLayout, MultiDeviceMultiTensorOffsetsAreHandComputed) {
  // bpc 3. Slot 0: pages 256 and 512 -> regions 768 and 1536 (slot 2304).
  // Slot 1: pages 128, 128, 1024 -> regions 384, 384, 3072 (slot 3840).
  // Used 6144 bytes -> row 8192 (2048 bytes of padding).
  std::vector<DeviceKvCache> devices(2);
  devices[0].tensors = {Tensor(0x1000, 256, 256, 10), Tensor(0x9000, 512, 640, 10)};
  devices[1].tensors = {Tensor(0x1000, 128, 128, 7), Tensor(0x2000, 128, 4096, 7),
                        Tensor(0x100000, 1024, 1024, 7)};
  ASSERT_OK_AND_ASSIGN(RowLayout layout, RowLayout::Create(devices, 3));
  EXPECT_EQ(layout.used_bytes(), 6144u);
  EXPECT_EQ(layout.row_bytes(), 8192u);
  EXPECT_EQ(layout.TensorOffset(0, 0), 0u);
  EXPECT_EQ(layout.TensorOffset(0, 1), 768u);
  EXPECT_EQ(layout.TensorOffset(1, 0), 2304u);
  EXPECT_EQ(layout.TensorOffset(1, 1), 2688u);
  EXPECT_EQ(layout.TensorOffset(1, 2), 3072u);
  EXPECT_EQ(layout.SlotOffset(1), 2304u);
  EXPECT_EQ(layout.SlotBytes(0), 2304u);
  EXPECT_EQ(layout.SlotBytes(1), 3840u);

  StagerOptions options{devices, 3, {}, GpuCopy::kAuto, {}};
  ASSERT_OK_AND_ASSIGN(auto stager, Stager::Create(options));
  EXPECT_EQ(stager->row_bytes(), 8192u);
  EXPECT_EQ(stager->backend_name(), "host");
}

TEST(RowLayout, ExactMultipleOf4096HasNoPadding) {
  // Three slots, one tensor each, 16 blocks per chunk: 3 x 1024 x 16 = 48 KiB.
  std::vector<DeviceKvCache> devices(3);
  for (auto& d : devices) d.tensors = {Tensor(0x1000, 1024, 1024, 64)};
  ASSERT_OK_AND_ASSIGN(RowLayout layout, RowLayout::Create(devices, 16));
  EXPECT_EQ(layout.row_bytes(), 3u * 16384u);
  EXPECT_EQ(layout.used_bytes(), layout.row_bytes());
  EXPECT_EQ(layout.TensorOffset(2, 0), 32768u);
  // One tiny page still takes a whole 4096-byte row.
  std::vector<DeviceKvCache> tiny(1);
  tiny[0].tensors = {Tensor(0x1000, 8, 8, 1)};
  ASSERT_OK_AND_ASSIGN(RowLayout small, RowLayout::Create(tiny, 1));
  EXPECT_EQ(small.row_bytes(), 4096u);
}

// ---------------------------------------------------------------------------
// Validation.

struct LayoutCase {
  const char* what;
  std::function<void(std::vector<DeviceKvCache>*, uint32_t*)> mutate;
  const char* expected;  // a substring of the message
};

TEST(RowLayout, RejectsEveryBrokenRuleNamingTheTensor) {
  const std::vector<LayoutCase> cases = {
      {"no devices", [](auto* d, auto*) { d->clear(); }, "no devices"},
      {"bpc 0", [](auto*, uint32_t* bpc) { *bpc = 0; }, "blocks_per_chunk must be > 0"},
      {"no tensors", [](auto* d, auto*) { (*d)[1].tensors.clear(); }, "devices[1]: no tensors"},
      {"bad ordinal", [](auto* d, auto*) { (*d)[1].device = -2; }, "devices[1]: device -2"},
      {"null base", [](auto* d, auto*) { (*d)[1].tensors[1].base_addr = 0; },
       "devices[1].tensors[1]: base_addr is 0"},
      {"page 0", [](auto* d, auto*) { (*d)[0].tensors[1].page_bytes = 0; },
       "devices[0].tensors[1]: page_bytes must be > 0"},
      {"stride < page", [](auto* d, auto*) { (*d)[1].tensors[0].page_stride_bytes = 100; },
       "devices[1].tensors[0]: page_stride_bytes 100 is below page_bytes 128"},
      {"no blocks", [](auto* d, auto*) { (*d)[0].tensors[0].num_blocks = 0; },
       "devices[0].tensors[0]: num_blocks must be > 0"},
      {"num_blocks differ", [](auto* d, auto*) { (*d)[1].tensors[1].num_blocks = 9; },
       "devices[1].tensors[1]: num_blocks 9 differs from tensors[0]'s 8"},
      {"extent overflow", [](auto* d, auto*) { (*d)[0].tensors[0].page_stride_bytes = uint64_t{1} << 62; },
       "devices[0].tensors[0]: base_addr + num_blocks x page_stride_bytes overflows"},
      {"row overflow",
       [](auto* d, auto* bpc) {
         (*d)[0].tensors[0] = Tensor(0x1000, uint64_t{1} << 40, uint64_t{1} << 40, 8);
         *bpc = 1u << 30;
       },
       "the row size overflows 64 bits"},
  };
  for (const LayoutCase& c : cases) {
    SCOPED_TRACE(c.what);
    std::vector<DeviceKvCache> devices(2);
    devices[0].tensors = {Tensor(0x1000, 256, 256, 8), Tensor(0x9000, 64, 64, 8)};
    devices[1].tensors = {Tensor(0x1000, 128, 128, 8), Tensor(0x2000, 128, 256, 8)};
    uint32_t bpc = 2;
    c.mutate(&devices, &bpc);
    auto layout = RowLayout::Create(devices, bpc);
    ASSERT_FALSE(layout.ok());
    EXPECT_EQ(layout.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(layout.status().message().find(c.expected), std::string::npos) << layout.status().ToString();
    auto stager = Stager::Create(StagerOptions{devices, bpc, {}, GpuCopy::kAuto, {}});
    ASSERT_FALSE(stager.ok());
    EXPECT_EQ(stager.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(Stager, SubmitRejectsBadBatchesAndCopiesNothing) {
  std::vector<uint8_t> gpu0(8 * 64, 1), gpu1(5 * 64, 2);
  std::vector<DeviceKvCache> devices(2);
  devices[0].tensors = {Tensor(reinterpret_cast<uintptr_t>(gpu0.data()), 64, 64, 8)};
  devices[1].tensors = {Tensor(reinterpret_cast<uintptr_t>(gpu1.data()), 64, 64, 5)};
  ASSERT_OK_AND_ASSIGN(auto stager, Stager::Create(StagerOptions{devices, 2, {}, GpuCopy::kAuto, {}}));
  std::vector<uint8_t> row(stager->row_bytes(), kRowSentinel);
  uint8_t* rows[] = {row.data()};

  const uint32_t three[] = {0, 1, 2};
  auto r = stager->Submit(CopyDirection::kDeviceToHost, rows, three);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("gpu_blocks has 3 ids, but 1 rows x blocks_per_chunk 2 need 2"),
            std::string::npos)
      << r.status().ToString();

  const uint32_t out_of_range[] = {0, 5};  // fine for device 0 (8 blocks), not device 1 (5)
  r = stager->Submit(CopyDirection::kDeviceToHost, rows, out_of_range);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("gpu_blocks[1] = 5 is out of range: devices[1] has 5 blocks"),
            std::string::npos)
      << r.status().ToString();

  uint8_t* null_rows[] = {nullptr};
  const uint32_t ok_ids[] = {0, 1};
  r = stager->Submit(CopyDirection::kHostToDevice, null_rows, ok_ids);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("rows[0] is null"), std::string::npos);

  ASSERT_OK(stager->WaitIdle(1000));
  std::vector<FinishedCopy> done;
  EXPECT_EQ(stager->PollFinished(&done), 0u) << "a rejected batch opens no ticket";
  EXPECT_TRUE(std::all_of(row.begin(), row.end(), [](uint8_t b) { return b == kRowSentinel; }));
}

TEST(Stager, CudaDeviceWithoutAGpuIsUnavailable) {
  if (CudaDevicePresent()) GTEST_SKIP() << "a CUDA device is present; gpu_stager_test covers it";
  std::vector<DeviceKvCache> devices(2);
  devices[0].tensors = {Tensor(0x1000, 64, 64, 4)};
  devices[1].device = 0;
  devices[1].tensors = {Tensor(0x1000, 64, 64, 4)};
  auto stager = Stager::Create(StagerOptions{devices, 1, {}, GpuCopy::kAuto, {}});
  ASSERT_FALSE(stager.ok());
  EXPECT_EQ(stager.status().code(), StatusCode::kUnavailable);
  // Built with CUDA (no driver or no GPU here) or without it.
  const std::string m = stager.status().message();
  EXPECT_TRUE(m.find("CUDA device 0 not present (cudaGetDeviceCount: ") != std::string::npos ||
              m.find("CUDA device 0 requested, but kvtier was built without CUDA") != std::string::npos)
      << stager.status().ToString();
}

// ---------------------------------------------------------------------------
// Segment merging (addresses only; nothing is copied).

class Segments : public ::testing::Test {
 protected:
  // One slot, one tensor of `page`-byte pages `stride` apart, 4 blocks a chunk.
  RowLayout Layout(uint64_t page, uint64_t stride, size_t tensors = 1) {
    std::vector<DeviceKvCache> devices(1);
    for (size_t t = 0; t < tensors; ++t) devices[0].tensors.push_back(Tensor(kBase + t * kTensorGap, page, stride, 64));
    auto layout = RowLayout::Create(devices, 4);
    EXPECT_TRUE(layout.ok()) << layout.status().ToString();
    return std::move(layout).value();
  }
  std::vector<CopySegment> Build(const RowLayout& layout, std::vector<uint8_t*> rows,
                                 std::vector<uint32_t> ids) {
    EXPECT_OK(layout.CheckBatch(rows, ids));
    std::vector<CopySegment> out;
    layout.AppendSegments(0, rows, ids, &out);
    return out;
  }
  static constexpr uint64_t kBase = 0x7f0000000000;
  static constexpr uint64_t kTensorGap = 0x100000000;
  std::vector<uint8_t> host_ = std::vector<uint8_t>(64 * 4096);
  uint8_t* Row(size_t i) { return host_.data() + i * 4096; }
};

TEST_F(Segments, ContiguousIdsAndAdjacentRowsMergeIntoOneCopy) {
  const RowLayout layout = Layout(1024, 1024);  // a 4096-byte row, no padding
  auto segs = Build(layout, {Row(0), Row(1)}, {0, 1, 2, 3, 4, 5, 6, 7});
  ASSERT_EQ(segs.size(), 1u) << "rows adjacent in memory and blocks 0..7 consecutive: one copy";
  EXPECT_EQ(segs[0].device_addr, kBase);
  EXPECT_EQ(segs[0].host_ptr, Row(0));
  EXPECT_EQ(segs[0].bytes, 8192u);
}

TEST_F(Segments, RowsApartInMemoryStayApart) {
  const RowLayout layout = Layout(1024, 1024);
  auto segs = Build(layout, {Row(0), Row(2)}, {0, 1, 2, 3, 4, 5, 6, 7});
  ASSERT_EQ(segs.size(), 2u);
  EXPECT_EQ(segs[1].device_addr, kBase + 4096);
  EXPECT_EQ(segs[1].host_ptr, Row(2));
  EXPECT_EQ(segs[1].bytes, 4096u);
  // Adjacent rows, but the second chunk's blocks do not follow the first's.
  EXPECT_EQ(Build(layout, {Row(0), Row(1)}, {0, 1, 2, 3, 10, 11, 12, 13}).size(), 2u);
}

TEST_F(Segments, ScatteredIdsOrAStrideGapGiveOneCopyPerPage) {
  const RowLayout packed = Layout(1024, 1024);
  EXPECT_EQ(Build(packed, {Row(0), Row(1)}, {7, 5, 3, 1, 6, 4, 2, 0}).size(), 8u);
  EXPECT_EQ(Build(packed, {Row(0), Row(1)}, {0, 1, 9, 10, 11, 3, 4, 20}).size(), 4u);
  const RowLayout strided = Layout(1024, 1536);
  auto segs = Build(strided, {Row(0), Row(1)}, {0, 1, 2, 3, 4, 5, 6, 7});
  ASSERT_EQ(segs.size(), 8u) << "a stride gap separates every page on the GPU side";
  EXPECT_EQ(segs[3].device_addr, kBase + 3 * 1536);
  EXPECT_EQ(segs[3].host_ptr, Row(0) + 3 * 1024);
}

TEST_F(Segments, MultiTensorRowsMergeWithinARegionOnly) {
  // Two tensors of 512-byte pages: regions of 2048 bytes at 0 and 2048.
  const RowLayout layout = Layout(512, 512, 2);
  auto segs = Build(layout, {Row(0), Row(1)}, {0, 1, 2, 3, 4, 5, 6, 7});
  ASSERT_EQ(segs.size(), 4u) << "per tensor, one copy per row: the other tensor's region sits between";
  EXPECT_EQ(segs[2].device_addr, kBase + kTensorGap);
  EXPECT_EQ(segs[2].host_ptr, Row(0) + 2048);
  EXPECT_EQ(segs[2].bytes, 2048u);
}

TEST_F(Segments, RandomBatchesCoverEveryPageExactlyOnce) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 50; ++round) {
    const RowLayout layout = Layout(1024, rng() % 2 ? 1024 : 2048);
    std::vector<uint8_t*> rows;
    std::vector<uint32_t> ids;
    const size_t n = 1 + rng() % 8;
    for (size_t i = 0; i < n; ++i) rows.push_back(Row(rng() % 64));
    uint32_t next = static_cast<uint32_t>(rng() % 32);
    for (size_t k = 0; k < n * 4; ++k) ids.push_back(next = rng() % 3 ? (next + 1) % 64 : rng() % 64);
    // Expand the merged copies back into (device page, host page) pairs.
    std::multiset<std::pair<uint64_t, uintptr_t>> got, want;
    for (const CopySegment& s : Build(layout, rows, ids)) {
      ASSERT_EQ(s.bytes % 1024, 0u);
      const uint64_t stride = layout.device(0).tensors[0].page_stride_bytes;
      if (s.bytes > 1024) {
        ASSERT_EQ(stride, 1024u) << "only an unstrided tensor merges pages";
      }
      for (uint64_t off = 0; off < s.bytes; off += 1024) {
        got.emplace(s.device_addr + off, reinterpret_cast<uintptr_t>(s.host_ptr) + off);
      }
    }
    for (size_t k = 0; k < ids.size(); ++k) {
      want.emplace(kBase + ids[k] * layout.device(0).tensors[0].page_stride_bytes,
                   reinterpret_cast<uintptr_t>(rows[k / 4]) + (k % 4) * 1024);
    }
    ASSERT_EQ(got, want) << "round " << round;
  }
}

TEST(HostCopyPool, SplitsLargeBatchesIntoEqualPiecesOnly) {
  std::vector<uint8_t> host(5 << 20);
  const std::vector<CopySegment> segs = {{0x10000, host.data(), 3 << 20},
                                         {0x900000, host.data() + (3 << 20), 2 << 20}};
  auto pieces = HostCopyPool::Split(segs, 2, 1 << 20);
  ASSERT_EQ(pieces.size(), 2u);
  uint64_t expect_addr = 0x10000, total = 0;
  for (const auto& piece : pieces) {
    uint64_t bytes = 0;
    for (const CopySegment& s : piece) {
      if (s.device_addr == 0x900000) expect_addr = 0x900000;
      EXPECT_EQ(s.device_addr, expect_addr) << "pieces cover the batch in order, without gaps";
      EXPECT_EQ(s.host_ptr, host.data() + total);
      expect_addr += s.bytes;
      total += s.bytes;
      bytes += s.bytes;
    }
    EXPECT_NEAR(static_cast<double>(bytes), 2.5 * (1 << 20), 4096);
  }
  EXPECT_EQ(total, uint64_t{5} << 20);
  EXPECT_EQ(HostCopyPool::Split({segs.data(), 1}, 2, uint64_t{8} << 20).size(), 1u) << "3 MiB < 8 MiB minimum";
  auto empty = HostCopyPool::Split({}, 2, 1 << 20);
  ASSERT_EQ(empty.size(), 1u);
  EXPECT_TRUE(empty[0].empty());
}

// ---------------------------------------------------------------------------
// HostRegion.

TEST(HostRegion, AllocatesPageAlignedMemoryOrSaysWhyNot) {
  auto zero = HostRegion::Allocate(0);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().code(), StatusCode::kInvalidArgument);

  ASSERT_OK_AND_ASSIGN(auto region, HostRegion::Allocate((uint64_t{6} << 20) + 100));
  EXPECT_EQ(region->bytes().size(), (uint64_t{6} << 20) + 100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(region->bytes().data()) % 4096, 0u);
  EXPECT_EQ(region->cuda_pinned(), CudaDevicePresent());
  std::memset(region->bytes().data(), 0x11, region->bytes().size());  // all of it is usable
  EXPECT_EQ(region->bytes().back(), 0x11);

  auto huge = HostRegion::Allocate(uint64_t{1} << 61);  // 2 EiB: no machine maps that
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(huge.status().message().find(std::to_string(uint64_t{1} << 61) + " bytes"), std::string::npos)
      << huge.status().ToString();
}

// ---------------------------------------------------------------------------
// Round trips through the host stand-in.

// (page_bytes, page_stride_bytes) of each tensor of one device.
using TensorShapes = std::vector<std::pair<uint64_t, uint64_t>>;

class RoundTrip : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = testing::TestSeed();
    rng_.seed(seed_);
  }

  // One stand-in slot per entry of `slots`, its tensors filled at random with
  // kGapSentinel in every stride gap; `rows` rows filled with kRowSentinel.
  void Build(const std::vector<TensorShapes>& slots, uint32_t num_blocks, uint32_t bpc, size_t rows,
             std::function<void()> on_finished = {}) {
    StagerOptions options{{}, bpc, std::move(on_finished), GpuCopy::kAuto, {}};
    buffers_.assign(slots.size(), {});
    for (size_t w = 0; w < slots.size(); ++w) {
      DeviceKvCache dev;
      for (auto [page, stride] : slots[w]) {
        std::vector<uint8_t>& buf = buffers_[w].emplace_back(num_blocks * stride, kGapSentinel);
        for (uint32_t b = 0; b < num_blocks; ++b) {
          for (uint64_t i = 0; i < page; ++i) buf[b * stride + i] = static_cast<uint8_t>(rng_());
        }
        dev.tensors.push_back(Tensor(reinterpret_cast<uintptr_t>(buf.data()), page, stride, num_blocks));
      }
      options.devices.push_back(std::move(dev));
    }
    auto layout = RowLayout::Create(options.devices, bpc);
    ASSERT_TRUE(layout.ok()) << layout.status().ToString();
    layout_.emplace(std::move(layout).value());
    ASSERT_OK_AND_ASSIGN(stager_, Stager::Create(std::move(options)));
    ASSERT_OK_AND_ASSIGN(region_, HostRegion::Allocate(rows * stager_->row_bytes()));
    std::memset(region_->bytes().data(), kRowSentinel, region_->bytes().size());
  }

  uint8_t* Row(size_t r) { return region_->bytes().data() + r * layout_->row_bytes(); }
  const KvTensorSpec& Spec(size_t w, size_t t) const { return layout_->device(w).tensors[t]; }
  static const uint8_t* Page(const KvTensorSpec& s, uint32_t block) {
    return reinterpret_cast<const uint8_t*>(s.base_addr + uint64_t{block} * s.page_stride_bytes);
  }

  // Submits one batch, waits and checks its ticket finished OK.
  void Copy(CopyDirection direction, const std::vector<uint8_t*>& rows, const std::vector<uint32_t>& ids) {
    ASSERT_OK_AND_ASSIGN(uint64_t ticket, stager_->Submit(direction, rows, ids));
    ASSERT_OK(stager_->WaitIdle(30000));
    std::vector<FinishedCopy> done;
    ASSERT_EQ(stager_->PollFinished(&done), 1u);
    EXPECT_EQ(done[0].ticket, ticket);
    EXPECT_OK(done[0].status);
  }

  // The row holds the chunk's pages in layout order; its padding is untouched.
  void ExpectRowHolds(const uint8_t* row, std::span<const uint32_t> ids) {
    const uint32_t bpc = layout_->blocks_per_chunk();
    for (size_t w = 0; w < layout_->num_devices(); ++w) {
      for (size_t t = 0; t < layout_->device(w).tensors.size(); ++t) {
        const KvTensorSpec& s = Spec(w, t);
        for (uint32_t j = 0; j < bpc; ++j) {
          ASSERT_EQ(std::memcmp(row + layout_->TensorOffset(w, t) + j * s.page_bytes, Page(s, ids[j]), s.page_bytes), 0)
              << "slot " << w << " tensor " << t << " page " << j << " (block " << ids[j] << ")";
        }
      }
    }
    for (uint64_t i = layout_->used_bytes(); i < layout_->row_bytes(); ++i) {
      ASSERT_EQ(row[i], kRowSentinel) << "padding byte " << i << " was written";
    }
  }

  // `count` distinct block ids in random order.
  std::vector<uint32_t> DistinctIds(size_t count, uint32_t num_blocks) {
    std::vector<uint32_t> ids(num_blocks);
    std::iota(ids.begin(), ids.end(), 0u);
    std::shuffle(ids.begin(), ids.end(), rng_);
    ids.resize(count);
    return ids;
  }

  // Stores `n` chunks of distinct random blocks into random rows, checks the
  // rows, loads them into other distinct blocks and checks every tensor byte:
  // loaded pages equal the stored originals, everything else (other blocks,
  // stride gaps) is unchanged.
  void StoreThenLoadElsewhere(size_t n, size_t region_rows, uint32_t num_blocks) {
    const uint32_t bpc = layout_->blocks_per_chunk();
    std::vector<size_t> row_ids(region_rows);
    std::iota(row_ids.begin(), row_ids.end(), size_t{0});
    std::shuffle(row_ids.begin(), row_ids.end(), rng_);
    std::vector<uint8_t*> rows;
    for (size_t i = 0; i < n; ++i) rows.push_back(Row(row_ids[i]));
    const std::vector<uint32_t> stored = DistinctIds(n * bpc, num_blocks);
    ASSERT_NO_FATAL_FAILURE(Copy(CopyDirection::kDeviceToHost, rows, stored));
    for (size_t i = 0; i < n; ++i) ASSERT_NO_FATAL_FAILURE(ExpectRowHolds(rows[i], {&stored[i * bpc], bpc}));

    auto expected = buffers_;
    const std::vector<uint32_t> loaded = DistinctIds(n * bpc, num_blocks);
    for (size_t w = 0; w < buffers_.size(); ++w) {
      for (size_t t = 0; t < buffers_[w].size(); ++t) {
        const KvTensorSpec& s = Spec(w, t);
        for (size_t k = 0; k < loaded.size(); ++k) {
          std::memcpy(&expected[w][t][loaded[k] * s.page_stride_bytes],
                      &buffers_[w][t][stored[k] * s.page_stride_bytes], s.page_bytes);
        }
      }
    }
    ASSERT_NO_FATAL_FAILURE(Copy(CopyDirection::kHostToDevice, rows, loaded));
    for (size_t w = 0; w < buffers_.size(); ++w) {
      for (size_t t = 0; t < buffers_[w].size(); ++t) {
        ASSERT_TRUE(buffers_[w][t] == expected[w][t]) << "slot " << w << " tensor " << t;
      }
    }
    for (size_t i = 0; i < n; ++i) ASSERT_NO_FATAL_FAILURE(ExpectRowHolds(rows[i], {&loaded[i * bpc], bpc}));
  }

  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  std::vector<std::vector<std::vector<uint8_t>>> buffers_;  // [slot][tensor]
  std::optional<RowLayout> layout_;
  std::unique_ptr<Stager> stager_;
  std::unique_ptr<HostRegion> region_;
};

TEST_F(RoundTrip, StridedMultiDeviceTensorsAreByteExactAndGapsUntouched) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  // Used 4352 bytes of an 8192-byte row: lots of padding that must stay put.
  ASSERT_NO_FATAL_FAILURE(Build({{{256, 288}, {96, 96}}, {{160, 224}, {64, 64}, {512, 520}}}, 48, 4, 16));
  EXPECT_EQ(layout_->used_bytes(), 4352u);
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    ASSERT_NO_FATAL_FAILURE(StoreThenLoadElsewhere(1 + rng_() % 12, 16, 48));
  }
}

TEST_F(RoundTrip, LargeBatchesSplitAcrossThreadsStayExact) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  // 16 rows x 8 pages x (64 + 32) KiB = 12 MiB a batch: split over the pool.
  ASSERT_NO_FATAL_FAILURE(Build({{{64 << 10, 64 << 10}, {32 << 10, 40 << 10}}}, 256, 8, 16));
  ASSERT_NO_FATAL_FAILURE(StoreThenLoadElsewhere(16, 16, 256));
  // Consecutive ids into adjacent rows merge into large copies; still exact.
  std::vector<uint8_t*> rows;
  std::vector<uint32_t> ids(16 * 8);
  for (size_t i = 0; i < 16; ++i) rows.push_back(Row(i));
  std::iota(ids.begin(), ids.end(), 100u);
  ASSERT_NO_FATAL_FAILURE(Copy(CopyDirection::kDeviceToHost, rows, ids));
  for (size_t i = 0; i < 16; ++i) ASSERT_NO_FATAL_FAILURE(ExpectRowHolds(rows[i], {&ids[i * 8], 8}));
}

TEST_F(RoundTrip, ManyTicketsFromSeveralThreads) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  constexpr int kThreads = 4, kTicketsEach = 25, kRowsPerTicket = 2;
  constexpr uint32_t kBlocks = 512, kBpc = 2;
  ASSERT_NO_FATAL_FAILURE(Build({{{128, 192}}, {{64, 64}, {256, 256}}}, kBlocks, kBpc, kThreads * kTicketsEach * kRowsPerTicket));
  const std::vector<uint32_t> stored = DistinctIds(kThreads * kTicketsEach * kRowsPerTicket * kBpc, kBlocks);
  const std::vector<uint32_t> loaded = DistinctIds(stored.size(), kBlocks);
  std::vector<std::vector<uint8_t>> before;
  for (auto& tensors : buffers_) before.insert(before.end(), tensors.begin(), tensors.end());

  for (CopyDirection direction : {CopyDirection::kDeviceToHost, CopyDirection::kHostToDevice}) {
    const std::vector<uint32_t>& ids = direction == CopyDirection::kDeviceToHost ? stored : loaded;
    std::mutex mu;
    std::set<uint64_t> submitted, polled;
    std::atomic<bool> submitting{true};
    std::thread poller([&] {  // polls while the submitters run
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      std::vector<FinishedCopy> done;
      for (;;) {
        done.clear();
        stager_->PollFinished(&done);
        {
          std::lock_guard<std::mutex> lock(mu);
          for (const FinishedCopy& f : done) {
            EXPECT_OK(f.status);
            EXPECT_TRUE(polled.insert(f.ticket).second) << "ticket " << f.ticket << " polled twice";
          }
          if (!submitting.load() && polled.size() >= submitted.size()) return;
        }
        if (std::chrono::steady_clock::now() > deadline) {
          ADD_FAILURE() << "tickets still unpolled after 60 s";
          return;
        }
        if (done.empty()) std::this_thread::yield();
      }
    });
    std::vector<std::thread> threads;
    for (int th = 0; th < kThreads; ++th) {
      threads.emplace_back([&, th] {
        for (int i = 0; i < kTicketsEach; ++i) {
          const size_t first = (size_t{static_cast<size_t>(th)} * kTicketsEach + i) * kRowsPerTicket;
          std::vector<uint8_t*> rows = {Row(first), Row(first + 1)};
          auto ticket = stager_->Submit(direction, rows, {&ids[first * kBpc], kRowsPerTicket * kBpc});
          ASSERT_TRUE(ticket.ok()) << ticket.status().ToString();
          std::lock_guard<std::mutex> lock(mu);
          EXPECT_TRUE(submitted.insert(*ticket).second);
        }
      });
    }
    for (std::thread& t : threads) t.join();
    submitting = false;
    poller.join();
    ASSERT_OK(stager_->WaitIdle(30000));
    EXPECT_EQ(submitted.size(), size_t{kThreads * kTicketsEach});
    EXPECT_EQ(polled, submitted);
  }
  for (size_t r = 0; r < stored.size() / kBpc; ++r) {
    ASSERT_NO_FATAL_FAILURE(ExpectRowHolds(Row(r), {&loaded[r * kBpc], kBpc}));
  }
  size_t k = 0;  // loaded pages match the stored ones (rows checked above); others keep their bytes
  for (auto& tensors : buffers_) {
    for (size_t t = 0; t < tensors.size(); ++t, ++k) {
      const KvTensorSpec& s = Spec(&tensors - buffers_.data(), t);
      std::vector<uint8_t> expect = before[k];
      for (size_t i = 0; i < loaded.size(); ++i) {
        std::memcpy(&expect[loaded[i] * s.page_stride_bytes], &before[k][stored[i] * s.page_stride_bytes], s.page_bytes);
      }
      EXPECT_TRUE(tensors[t] == expect) << "tensor buffer " << k;
    }
  }
}

TEST_F(RoundTrip, OnFinishedRunsOutsideLocksAfterTheTicketIsPollable) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  std::atomic<Stager*> self{nullptr};
  std::mutex mu;
  std::vector<FinishedCopy> seen;  // what the callbacks polled
  std::atomic<int> calls{0}, wait_idle_refused{0};
  ASSERT_NO_FATAL_FAILURE(Build({{{512, 512}}}, 64, 2, 8, [&] {
    Stager* s = self.load();
    std::vector<FinishedCopy> done;
    s->PollFinished(&done);  // would deadlock if the stager held its lock here
    if (s->WaitIdle(1000).code() == StatusCode::kInternal) ++wait_idle_refused;
    std::lock_guard<std::mutex> lock(mu);
    seen.insert(seen.end(), done.begin(), done.end());
    ++calls;
  }));
  self = stager_.get();
  std::set<uint64_t> tickets;
  for (uint32_t i = 0; i < 8; ++i) {
    uint8_t* rows[] = {Row(i)};
    const uint32_t ids[] = {2 * i, 2 * i + 1};
    ASSERT_OK_AND_ASSIGN(uint64_t t, stager_->Submit(CopyDirection::kDeviceToHost, rows, ids));
    tickets.insert(t);
  }
  ASSERT_OK_AND_ASSIGN(uint64_t empty, stager_->Submit(CopyDirection::kHostToDevice, {}, {}));
  tickets.insert(empty);
  ASSERT_OK(stager_->WaitIdle(30000));
  EXPECT_EQ(calls.load(), 9) << "one call per ticket, all returned before WaitIdle did";
  EXPECT_EQ(wait_idle_refused.load(), 9) << "WaitIdle from on_finished fails instead of deadlocking";
  std::vector<FinishedCopy> rest;
  stager_->PollFinished(&rest);
  std::lock_guard<std::mutex> lock(mu);
  seen.insert(seen.end(), rest.begin(), rest.end());
  std::set<uint64_t> got;
  for (const FinishedCopy& f : seen) {
    EXPECT_OK(f.status);
    EXPECT_TRUE(got.insert(f.ticket).second);
  }
  EXPECT_EQ(got, tickets) << "every ticket, the empty batch's included, is polled exactly once";
  EXPECT_EQ(tickets.count(0), 0u) << "0 is never a ticket";
}

TEST_F(RoundTrip, WaitIdleTimesOutWhileACopyIsUnfinished) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  ASSERT_NO_FATAL_FAILURE(Build({{{512, 512}}}, 64, 1, 2, [released] { released.wait(); }));
  EXPECT_OK(stager_->WaitIdle(0));  // nothing in flight
  uint8_t* rows[] = {Row(0)};
  const uint32_t ids[] = {3};
  ASSERT_OK_AND_ASSIGN(uint64_t ticket, stager_->Submit(CopyDirection::kDeviceToHost, rows, ids));
  const Status waited = stager_->WaitIdle(50);
  EXPECT_EQ(waited.code(), StatusCode::kTimedOut) << waited.ToString();
  EXPECT_NE(waited.message().find("1 copy ticket(s) still in flight after 50 ms"), std::string::npos);
  std::vector<FinishedCopy> done;
  for (int i = 0; i < 3000 && done.empty(); ++i) {  // pollable before on_finished returns
    stager_->PollFinished(&done);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].ticket, ticket);
  release.set_value();
  EXPECT_OK(stager_->WaitIdle(30000));
  EXPECT_NO_FATAL_FAILURE(ExpectRowHolds(Row(0), ids));
}

}  // namespace
}  // namespace kvtier::internal
