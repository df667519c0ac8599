// Proves checksummed staging (CopyChecksums) on the host stand-in, whose
// copy workers compute each piece's CRC on the "device" side: a store's
// row_crcs equal ISA-L's Crc32c of the whole row as it then is (padding
// included, zero or not), for rows of 4 KiB to 2 MiB from several slots and
// tensors, scattered or merged pages, rows adjacent in memory (a copy that
// runs from one row into the next); a load with the rows' expected CRCs
// reports a byte flipped in one row before the copy (in data or in padding)
// as that row's kCorruption and only that row's; bad checksum requests are
// refused before anything is copied. Also RowCrcPlan's cut at row
// boundaries, that a load's CRC is of the bytes that landed, and that a
// load may name one row twice (each occurrence checked on its own). Seeds
// are printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <numeric>
#include <random>

#include "staging/row_crc.h"
#include "staging/stager.h"
#include "support/stager_test_support.h"
#include "support/test_support.h"
#include "util/crc32c.h"

namespace kvtier::internal {
namespace {

// Stand-in "GPU" tensors in host memory and rows to stage them into.
class StagerCrc : public ::testing::Test {
 protected:
  void SetUp() override { rng_.seed(seed_ = testing::TestSeed()); }

  // `slots` slots of `tensors` tensors, pages of `page` bytes `stride` apart.
  void Make(size_t slots, size_t tensors, uint64_t page, uint64_t stride, uint32_t bpc, uint32_t blocks) {
    std::vector<DeviceKvCache> devices(slots);
    for (DeviceKvCache& d : devices) {
      for (size_t t = 0; t < tensors; ++t) {
        auto& mem = memory_.emplace_back(blocks * stride);
        for (auto& b : mem) b = static_cast<uint8_t>(rng_());
        d.tensors.push_back(KvTensorSpec{reinterpret_cast<uintptr_t>(mem.data()), page, stride, blocks});
      }
    }
    auto stager = Stager::Create(StagerOptions{devices, bpc, {}, GpuCopy::kAuto, {}});
    ASSERT_OK(stager.status());
    stager_ = std::move(stager).value();
    bpc_ = bpc;
    blocks_ = blocks;
  }

  // `n` rows in one buffer, `gap` rows apart (1: adjacent), random bytes.
  std::vector<uint8_t*> Rows(size_t n, size_t gap) {
    rows_mem_.assign(n * gap * stager_->row_bytes(), 0);
    for (auto& b : rows_mem_) b = static_cast<uint8_t>(rng_());
    std::vector<uint8_t*> rows;
    for (size_t i = 0; i < n; ++i) rows.push_back(rows_mem_.data() + i * gap * stager_->row_bytes());
    return rows;
  }

  // Distinct block ids (a load must not land two pages on one block).
  std::vector<uint32_t> Ids(size_t rows, bool consecutive) {
    std::vector<uint32_t> all(blocks_);
    std::iota(all.begin(), all.end(), 0u);
    if (!consecutive) std::shuffle(all.begin(), all.end(), rng_);
    all.resize(rows * bpc_);
    return all;
  }

  FinishedCopy Run(CopyDirection d, const std::vector<uint8_t*>& rows, const std::vector<uint32_t>& ids,
                   const CopyChecksums& crc) {
    return testing::RunTicket(stager_.get(), d, rows, ids, crc, 30000);
  }

  uint32_t RowCrc(const uint8_t* row) const { return Crc32c({row, stager_->row_bytes()}); }

  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  std::deque<std::vector<uint8_t>> memory_;
  std::vector<uint8_t> rows_mem_;
  std::unique_ptr<Stager> stager_;
  uint32_t bpc_ = 1, blocks_ = 1;
};

TEST_F(StagerCrc, StoreCrcsEqualIsalOnRowsOfEverySize) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  // {slots, tensors, page, stride, bpc}: 4 KiB to 2 MiB rows, padded or not.
  struct Shape { size_t slots, tensors; uint64_t page, stride; uint32_t bpc; };
  const Shape shapes[] = {{1, 1, 4096, 4096, 1},     {1, 2, 1000, 1024, 2},      {2, 3, 2048, 2560, 4},
                          {1, 1, 65536, 65536, 2},   {2, 2, 16384, 16384, 16},   {1, 4, 131072, 131072, 4},
                          {3, 1, 12345, 12400, 5},   {1, 1, 1 << 20, 1 << 20, 2}};
  for (const Shape& s : shapes) {
    memory_.clear();
    Make(s.slots, s.tensors, s.page, s.stride, s.bpc, std::max<uint32_t>(8, 3 * s.bpc));
    for (size_t gap : {size_t{1}, size_t{2}}) {
      const std::vector<uint8_t*> rows = Rows(3, gap);
      const FinishedCopy done = Run(CopyDirection::kDeviceToHost, rows, Ids(3, gap == 1), {true, {}});
      ASSERT_OK(done.status);
      ASSERT_EQ(done.row_crcs.size(), rows.size());
      EXPECT_TRUE(done.row_status.empty());
      for (size_t r = 0; r < rows.size(); ++r) {
        ASSERT_EQ(done.row_crcs[r], RowCrc(rows[r])) << "row " << r << " of " << stager_->row_bytes() << " bytes";
      }
    }
  }
}

TEST_F(StagerCrc, LoadReportsAFlippedByteAsThatRowsCorruption) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  Make(2, 2, 3000, 3072, 3, 32);  // 36,000 bytes used of a 36,864-byte row: padding exists
  for (bool in_padding : {false, true}) {
    const std::vector<uint8_t*> rows = Rows(4, 1);
    for (uint8_t* row : rows) std::memset(row + 36000, 0, stager_->row_bytes() - 36000);
    std::vector<uint32_t> expected;
    for (uint8_t* row : rows) expected.push_back(RowCrc(row));
    const size_t bad = rng_() % rows.size();
    const uint64_t at = in_padding ? 36000 + rng_() % 864 : rng_() % 36000;
    rows[bad][at] ^= static_cast<uint8_t>(1u << (rng_() % 8));
    const FinishedCopy done = Run(CopyDirection::kHostToDevice, rows, Ids(4, false), {false, expected});
    ASSERT_OK(done.status);
    ASSERT_EQ(done.row_status.size(), rows.size());
    for (size_t r = 0; r < rows.size(); ++r) {
      if (r == bad) {
        EXPECT_EQ(done.row_status[r].code(), StatusCode::kCorruption) << "row " << r << " byte " << at;
        EXPECT_NE(done.row_status[r].message().find("row " + std::to_string(r)), std::string::npos);
      } else {
        EXPECT_OK(done.row_status[r]);
        EXPECT_EQ(done.row_crcs[r], expected[r]);
      }
    }
  }
}

// The load's CRC is of what landed on the "device", not of the row: two rows
// loaded into the same block (one piece, so one worker copies them in
// order) leave the second row's bytes there, and the first row is reported.
TEST_F(StagerCrc, LoadChecksWhatLandedNotTheRow) {
  Make(1, 1, 4096, 4096, 1, 8);
  const std::vector<uint8_t*> rows = Rows(2, 1);
  const uint32_t expected[] = {RowCrc(rows[0]), RowCrc(rows[1])};
  const std::vector<uint32_t> same_block = {5, 5};
  const FinishedCopy done = Run(CopyDirection::kHostToDevice, rows, same_block, {false, expected});
  ASSERT_OK(done.status);
  ASSERT_EQ(done.row_status.size(), 2u);
  EXPECT_EQ(done.row_status[0].code(), StatusCode::kCorruption) << "row 0's bytes were overwritten on the device";
  EXPECT_OK(done.row_status[1]);
}

// A load may name one row twice (each copy is checked at its destination):
// over several slots, tensors and pieces, each occurrence gets its own CRC,
// and a fault in one destination is that occurrence's alone. A store of one
// row twice stays refused (BadRequestsAreRefusedBeforeAnyCopy).
TEST_F(StagerCrc, ALoadMayNameOneRowTwice) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  Make(2, 2, 3000, 3072, 3, 32);
  const std::vector<uint8_t*> two = Rows(2, 1);
  for (uint8_t* row : two) std::memset(row + 36000, 0, stager_->row_bytes() - 36000);
  const std::vector<uint8_t*> rows = {two[0], two[1], two[0]};
  const std::vector<uint32_t> expected = {RowCrc(two[0]), RowCrc(two[1]), RowCrc(two[0])};
  FinishedCopy done = Run(CopyDirection::kHostToDevice, rows, Ids(3, false), {false, expected});
  ASSERT_OK(done.status);
  ASSERT_EQ(done.row_status.size(), 3u);
  for (size_t r = 0; r < 3; ++r) EXPECT_TRUE(done.row_status[r].ok()) << r << ": " << done.row_status[r].ToString();
  // Row 0's copy into the blocks of index 1 lands over index 1's pages
  // (one piece: one worker, in order), so index 1 holds row 0's bytes.
  Make(1, 1, 4096, 4096, 1, 8);
  const std::vector<uint8_t*> small = Rows(2, 1);
  const std::vector<uint8_t*> again = {small[0], small[1], small[0]};
  const uint32_t want[] = {RowCrc(small[0]), RowCrc(small[1]), RowCrc(small[0])};
  done = Run(CopyDirection::kHostToDevice, again, {3, 5, 5}, {false, want});
  ASSERT_OK(done.status);
  ASSERT_EQ(done.row_status.size(), 3u);
  EXPECT_OK(done.row_status[0]);
  EXPECT_EQ(done.row_status[1].code(), StatusCode::kCorruption) << "index 1's destination was overwritten";
  EXPECT_OK(done.row_status[2]);
}

TEST_F(StagerCrc, BadRequestsAreRefusedBeforeAnyCopy) {
  Make(1, 1, 4096, 4096, 1, 8);
  const std::vector<uint8_t*> rows = Rows(2, 1);
  const std::vector<uint8_t> before = rows_mem_;
  const uint32_t two[] = {1, 2}, one[] = {1};
  auto r = stager_->Submit(CopyDirection::kDeviceToHost, rows, Ids(2, true), {false, two});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << "expected CRCs on a store";
  r = stager_->Submit(CopyDirection::kHostToDevice, rows, Ids(2, true), {false, one});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << "one CRC for two rows";
  const std::vector<uint8_t*> same = {rows[0], rows[0]};
  r = stager_->Submit(CopyDirection::kDeviceToHost, same, Ids(2, true), {true, {}});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << "overlapping rows";
  ASSERT_OK(stager_->WaitIdle(1000));
  std::vector<FinishedCopy> done;
  EXPECT_EQ(stager_->PollFinished(&done), 0u);
  EXPECT_TRUE(rows_mem_ == before);
  // Without checksums, nothing is reported.
  EXPECT_TRUE(Run(CopyDirection::kDeviceToHost, rows, Ids(2, true), {}).row_crcs.empty());
}

// One segment across three adjacent rows (given out of address order), cut
// into 1000-byte pieces: units never cross a row, hold at most
// kCrcUnitBytesMax, and their pieces continue each other in the row.
TEST(RowCrcPlan, CutsAtRowBoundariesGroupsUnitsAndFoldsToIsal) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  constexpr uint64_t kRow = 300 << 10;  // more than one unit's worth
  std::vector<uint8_t> mem(3 * kRow);
  for (auto& b : mem) b = static_cast<uint8_t>(rng());
  uint8_t* const rows[] = {mem.data() + kRow, mem.data(), mem.data() + 2 * kRow};
  RowCrcPlan plan(rows, kRow);
  const CopySegment seg{reinterpret_cast<uintptr_t>(mem.data() + 100), mem.data() + 100, 3 * kRow - 5000};
  const auto [first, end] = plan.Add({&seg, 1}, 1000);
  ASSERT_EQ(first, 0u);
  ASSERT_EQ(end, plan.units().size());
  std::vector<uint32_t> raw;
  for (const CrcUnit& u : plan.units()) {
    ASSERT_LE(u.row_offset + u.bytes, kRow) << "a unit crosses a row boundary";
    ASSERT_LE(u.bytes, kCrcUnitBytesMax);
    uint32_t reg = 0;
    const uint8_t* at = rows[u.row] + u.row_offset;
    for (const CrcPiece& p : std::span(plan.pieces()).subspan(u.first_piece, u.pieces)) {
      ASSERT_EQ(p.host_ptr, at) << "pieces of a unit continue each other";
      reg = CpuRawCrc(reg, p.host_ptr, p.bytes);
      at += p.bytes;
    }
    raw.push_back(reg);
  }
  EXPECT_GT(plan.units().size(), 3u);
  EXPECT_LT(plan.units().size(), plan.pieces().size()) << "pieces were grouped";
  const std::vector<uint32_t> crcs = plan.RowCrcs(raw);
  for (size_t r = 0; r < 3; ++r) EXPECT_EQ(crcs[r], Crc32c({rows[r], kRow})) << "seed " << seed << " row " << r;
}

}  // namespace
}  // namespace kvtier::internal
