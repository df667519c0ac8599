// RowRegion (front/row_region.h).
#include "front/row_region.h"

namespace kvtier::internal {

Result<RowRegion> RowRegion::Make(std::span<uint8_t> region, uint64_t row_bytes, const std::string& who) {
  if (region.empty() || row_bytes == 0 || region.size() % row_bytes != 0) {
    return InvalidArgument(who + ": the row region (" + std::to_string(region.size()) +
                           " bytes) must be a non-empty whole number of rows of " + std::to_string(row_bytes) +
                           " bytes");
  }
  return RowRegion(region, row_bytes);
}

Result<std::vector<std::span<uint8_t>>> RowRegion::Rows(std::span<const int64_t> slots, const std::string& what) const {
  const uint64_t n_rows = region_.size() / row_bytes_;
  std::vector<std::span<uint8_t>> rows;
  rows.reserve(slots.size());
  for (int64_t slot : slots) {
    if (slot < 0 || static_cast<uint64_t>(slot) >= n_rows) {
      return InvalidArgument(what + ": slot " + std::to_string(slot) + " is outside the " + std::to_string(n_rows) +
                             " rows");
    }
    rows.push_back(region_.subspan(static_cast<uint64_t>(slot) * row_bytes_, row_bytes_));
  }
  return rows;
}

}  // namespace kvtier::internal
