// RowCrcPlan (row_crc.h).
#include "staging/row_crc.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <numeric>

#include "staging/crc32c_hd.h"
#include "util/crc32c.h"

namespace kvtier::internal {
namespace {

namespace hd = crc32c_hd;

const hd::Powers& Powers() {
  static const hd::Powers powers = hd::MakePowers();
  return powers;
}

// The register after the row bytes [from, to) that no piece covered.
uint32_t ExtendUncovered(uint32_t reg, const uint8_t* row, uint64_t from, uint64_t to) {
  if (from >= to) return reg;
  const uint8_t* p = row + from;
  const uint64_t n = to - from;
  const bool zero = p[0] == 0 && std::equal(p, p + n - 1, p + 1);
  return zero ? hd::Shift(Powers(), reg, n) : CpuRawCrc(reg, p, n);
}

}  // namespace

uint32_t CpuRawCrc(uint32_t reg, const uint8_t* p, uint64_t n) {
  // Crc32cExtend works on standard CRCs; undo its initial and final xor.
  return Crc32cExtend(reg ^ 0xffffffffu, {p, n}) ^ 0xffffffffu;
}

RowCrcPlan::RowCrcPlan(std::span<uint8_t* const> rows, uint64_t row_bytes)
    : rows_(rows.begin(), rows.end()), row_bytes_(row_bytes) {
  for (size_t i = 0; i < rows_.size(); ++i) by_address_.emplace_back(rows_[i], static_cast<uint32_t>(i));
  std::sort(by_address_.begin(), by_address_.end());
  for (size_t i = 1; i < by_address_.size(); ++i) has_equal_ |= by_address_[i - 1].first == by_address_[i].first;
  if (has_equal_) covered_.resize(rows_.size());
}

bool RowCrcPlan::RowsDisjoint(bool allow_equal) const {
  for (size_t i = 1; i < by_address_.size(); ++i) {
    const uintptr_t from = reinterpret_cast<uintptr_t>(by_address_[i - 1].first);
    const uintptr_t gap = reinterpret_cast<uintptr_t>(by_address_[i].first) - from;
    if (gap < row_bytes_ && !(allow_equal && gap == 0)) return false;
  }
  return true;
}

// Which of the rows at rows_[row]'s address the bytes [offset, offset+bytes)
// belong to: segments come in row order for each tensor (RowLayout), so the
// first row whose pieces do not cover those bytes yet.
size_t RowCrcPlan::Claim(size_t row, uint64_t offset, uint64_t bytes) {
  if (!has_equal_) return row;
  using Entry = std::pair<const uint8_t*, uint32_t>;
  const auto first = std::lower_bound(by_address_.begin(), by_address_.end(), Entry(rows_[row], 0));
  const auto last = std::upper_bound(first, by_address_.end(), Entry(rows_[row], UINT32_MAX));
  size_t pick = row;
  for (auto it = first; it != last; ++it) {
    const auto& spans = covered_[it->second];
    const bool free = std::none_of(spans.begin(), spans.end(),
                                   [&](const auto& c) { return c.first < offset + bytes && offset < c.second; });
    if (free) {
      pick = it->second;
      break;
    }
  }
  covered_[pick].emplace_back(offset, offset + bytes);
  return pick;
}

size_t RowCrcPlan::RowOf(const uint8_t* p) const {
  auto it = std::upper_bound(by_address_.begin(), by_address_.end(), std::make_pair(p, UINT32_MAX));
  return it == by_address_.begin() ? 0 : std::prev(it)->second;  // segments lie inside rows
}

std::pair<size_t, size_t> RowCrcPlan::Add(std::span<const CopySegment> segments, uint64_t piece_bytes_max) {
  const size_t first = units_.size();
  open_from_ = first;  // a unit never spans two backends' parts
  for (CopySegment s : segments) {
    while (s.bytes > 0) {
      const size_t row = RowOf(s.host_ptr);
      const uint64_t offset = static_cast<uint64_t>(s.host_ptr - rows_[row]);
      const uint64_t take = std::min({s.bytes, row_bytes_ - offset, piece_bytes_max});
      AddPiece(CrcPiece{s.device_addr, s.host_ptr, take}, static_cast<uint32_t>(Claim(row, offset, take)), offset);
      s.device_addr += take;
      s.host_ptr += take;
      s.bytes -= take;
    }
  }
  return {first, units_.size()};
}

// Joins the last unit when the piece continues it in the same row and the
// unit has room; else opens a unit.
void RowCrcPlan::AddPiece(const CrcPiece& piece, uint32_t row, uint64_t row_offset) {
  if (units_.size() > open_from_) {
    CrcUnit& u = units_.back();
    if (u.row == row && u.row_offset + u.bytes == row_offset && u.bytes + piece.bytes <= kCrcUnitBytesMax &&
        u.pieces < kCrcUnitPiecesMax) {
      pieces_.push_back(piece);
      ++u.pieces;
      u.bytes += piece.bytes;
      return;
    }
  }
  units_.push_back(CrcUnit{static_cast<uint32_t>(pieces_.size()), 1, row, row_offset, piece.bytes});
  pieces_.push_back(piece);
}

std::vector<uint32_t> RowCrcPlan::RowCrcs(std::span<const uint32_t> raw) const {
  std::vector<size_t> order(units_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::pair(units_[a].row, units_[a].row_offset) < std::pair(units_[b].row, units_[b].row_offset);
  });
  std::vector<uint32_t> out(rows_.size());
  size_t k = 0;
  for (size_t row = 0; row < rows_.size(); ++row) {
    uint32_t reg = 0xffffffffu;
    uint64_t pos = 0;
    for (; k < order.size() && units_[order[k]].row == row; ++k) {
      const CrcUnit& u = units_[order[k]];
      reg = ExtendUncovered(reg, rows_[row], pos, u.row_offset);
      reg = hd::Shift(Powers(), reg, u.bytes) ^ raw[order[k]];
      pos = u.row_offset + u.bytes;
    }
    out[row] = ExtendUncovered(reg, rows_[row], pos, row_bytes_) ^ 0xffffffffu;
  }
  return out;
}

}  // namespace kvtier::internal
