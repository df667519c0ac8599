// RowCrcPlan: the CRC32C of each row of a staged batch, from CRCs the copy
// backends compute on the device side (the GPU's pages for a store, what
// landed on the GPU for a load), so the CPU never reads the row itself.
//
// A batch's copy segments (row_layout.h) are cut at row boundaries (a merged
// segment may run from one row into the next when the rows are adjacent) and
// into pieces of at most a given size; each piece remembers its row and
// offset. Consecutive pieces that continue each other in a row (a row's
// pages, wherever they lie on the device) form a unit of up to
// kCrcUnitBytesMax, and a backend computes one register CRC (crc32c_hd.h: no
// initial value, no final xor) per unit: the CPU then folds one value per
// unit, not per page. Bytes of a row that no unit covers (its padding,
// FORMAT.md L109) are taken from the row itself: all zero (the usual case,
// one scan of at most 4095 bytes) costs one shift; anything else is
// checksummed as is, so the result is always exactly Crc32c(row) as the fs
// tier would compute it (L60).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "staging/row_layout.h"

namespace kvtier::internal {

struct CrcPiece {
  uint64_t device_addr = 0;           // the bytes on the device (a host address on the stand-in)
  const uint8_t* host_ptr = nullptr;  // the same bytes in the row
  uint64_t bytes = 0;
};

// Pieces [first_piece, first_piece + pieces) of the plan, back to back in
// row `row` from row_offset on.
struct CrcUnit {
  uint32_t first_piece = 0;
  uint32_t pieces = 0;
  uint32_t row = 0;
  uint64_t row_offset = 0;
  uint64_t bytes = 0;
};

inline constexpr uint64_t kCrcUnitBytesMax = uint64_t{256} << 10;
inline constexpr uint32_t kCrcUnitPiecesMax = 64;

class RowCrcPlan {
 public:
  RowCrcPlan(std::span<uint8_t* const> rows, uint64_t row_bytes);

  // Appends `segments` (inside the rows) cut at row boundaries and into
  // pieces of at most piece_bytes_max, grouped into units; returns
  // [first, end) of the new units (their pieces are new too).
  std::pair<size_t, size_t> Add(std::span<const CopySegment> segments, uint64_t piece_bytes_max);
  const std::vector<CrcPiece>& pieces() const { return pieces_; }
  const std::vector<CrcUnit>& units() const { return units_; }
  // False when two rows overlap: a row's CRC would then mix two rows' pieces.
  // `allow_equal`: rows at the very same address are fine (a load: each
  // copy's pieces are told apart by which of them already covers the bytes,
  // and each is checked at its own destination); partial overlaps are not.
  bool RowsDisjoint(bool allow_equal = false) const;

  // Crc32c of each row, given raw[u] for every unit (raw.size() == units().size()).
  std::vector<uint32_t> RowCrcs(std::span<const uint32_t> raw) const;

 private:
  size_t RowOf(const uint8_t* p) const;
  size_t Claim(size_t row, uint64_t offset, uint64_t bytes);
  void AddPiece(const CrcPiece& piece, uint32_t row, uint64_t row_offset);

  std::vector<uint8_t*> rows_;
  uint64_t row_bytes_;
  std::vector<std::pair<const uint8_t*, uint32_t>> by_address_;  // (row start, index), sorted
  std::vector<CrcPiece> pieces_;
  std::vector<CrcUnit> units_;
  size_t open_from_ = 0;  // units before this are closed (Add starts a new run)
  bool has_equal_ = false;  // two rows share an address (Claim)
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> covered_;  // with has_equal_: per row, [from, to)
};

// The register CRC after the n bytes at p, from `reg`, on the CPU (ISA-L):
// the host stand-in's and the CUDA fallback's unit CRC.
uint32_t CpuRawCrc(uint32_t reg, const uint8_t* p, uint64_t n);

}  // namespace kvtier::internal
