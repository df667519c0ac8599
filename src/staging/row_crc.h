// RowCrcPlan: the CRC32C of each row of a staged batch, from the CRCs of the
// pieces the copy backends compute on the device side (the GPU's pages for a
// store, what landed on the GPU for a load), so the CPU never reads the row
// itself.
//
// A batch's copy segments (row_layout.h) are cut at row boundaries (a merged
// segment may run from one row into the next when the rows are adjacent) and
// into pieces of at most a given size; each piece remembers its row and
// offset. A backend fills raw[i], the register CRC (crc32c_hd.h: no initial
// value, no final xor) of piece i; RowCrcs folds them in row order. Bytes of
// a row that no piece covers (its padding, FORMAT.md L109) are taken from
// the row itself: all zero (the usual case, one scan of at most 4095 bytes)
// costs one shift; anything else is checksummed as is, so the result is
// always exactly Crc32c(row) as the fs tier would compute it (L60).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "staging/row_layout.h"

namespace kvtier::internal {

struct CrcPiece {
  uint64_t device_addr = 0;         // the bytes on the device (a host address on the stand-in)
  const uint8_t* host_ptr = nullptr;  // the same bytes in the row
  uint64_t bytes = 0;
  uint32_t row = 0;         // index into the batch's rows
  uint64_t row_offset = 0;  // host_ptr - rows[row]
};

class RowCrcPlan {
 public:
  RowCrcPlan(std::span<uint8_t* const> rows, uint64_t row_bytes);

  // Appends `segments` (inside the rows) cut at row boundaries and into
  // pieces of at most piece_bytes_max; returns [first, end) of the new pieces.
  std::pair<size_t, size_t> Add(std::span<const CopySegment> segments, uint64_t piece_bytes_max);
  const std::vector<CrcPiece>& pieces() const { return pieces_; }
  size_t num_rows() const { return rows_.size(); }
  // False when two rows overlap: a row's CRC would then mix two rows' pieces.
  bool RowsDisjoint() const;

  // Crc32c of each row, given raw[i] for every piece (raw.size() == pieces().size()).
  std::vector<uint32_t> RowCrcs(std::span<const uint32_t> raw) const;

 private:
  size_t RowOf(const uint8_t* p) const;

  std::vector<uint8_t*> rows_;
  uint64_t row_bytes_;
  std::vector<std::pair<const uint8_t*, uint32_t>> by_address_;  // (row start, index), sorted
  std::vector<CrcPiece> pieces_;
};

// The register CRC of n bytes at p on the CPU (ISA-L): the host stand-in's
// and the CUDA fallback's piece CRC.
uint32_t CpuRawCrc(const uint8_t* p, uint64_t n);

}  // namespace kvtier::internal
