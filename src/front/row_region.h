// RowRegion: one region of equal rows that an engine addresses by slot (vLLM's
// host KV cache: row i is slot i), for a front end that turns slots into the
// row spans an FsTier job takes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvtier/result.h"

namespace kvtier::internal {

class RowRegion {
 public:
  // kInvalidArgument "<who>: ..." unless `region` is a non-empty whole
  // number of rows of row_bytes.
  static Result<RowRegion> Make(std::span<uint8_t> region, uint64_t row_bytes, const std::string& who);

  // The rows at `slots`, in order; kInvalidArgument "<what>: slot N is
  // outside the M rows" for the first slot that is not a row.
  Result<std::vector<std::span<uint8_t>>> Rows(std::span<const int64_t> slots, const std::string& what) const;
  uint64_t row_bytes() const { return row_bytes_; }

 private:
  RowRegion(std::span<uint8_t> region, uint64_t row_bytes) : region_(region), row_bytes_(row_bytes) {}
  std::span<uint8_t> region_;
  uint64_t row_bytes_;
};

}  // namespace kvtier::internal
