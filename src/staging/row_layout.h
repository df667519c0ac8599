// RowLayout: where each registered KV tensor's pages live inside a CPU row,
// and the copy segments that move a batch of rows (kv_cache.h gives the
// layout). Pure computation: no memory is touched, so every rule can be
// tested without a device.
//
// A batch becomes, per device slot, a list of {device_addr, host_ptr, bytes}
// copies. Pages are merged into one copy whenever they are adjacent on BOTH
// sides: on the GPU side that means consecutive block ids in a tensor whose
// page_stride_bytes == page_bytes; on the host side, consecutive pages of a
// row, or the end of one row's region and the start of the next row's when
// the rows themselves are adjacent in memory. The test is on addresses
// (end of the last copy == start of the page, on both sides), which within a
// tensor is exactly "consecutive ids and no stride gap". Fewer, larger copies
// is what lets the stager reach the bandwidth of one big copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvtier/kv_cache.h"
#include "kvtier/result.h"

namespace kvtier::internal {

struct CopySegment {
  uint64_t device_addr = 0;    // device pointer (a host address on the stand-in)
  uint8_t* host_ptr = nullptr; // inside a row
  uint64_t bytes = 0;
};

// Rows are padded to a multiple of this (vLLM's host rows are page aligned,
// which O_DIRECT and io_uring registered buffers rely on).
inline constexpr uint64_t kRowAlignment = 4096;

class RowLayout {
 public:
  // kInvalidArgument, naming devices[d].tensors[t] and the rule broken, for:
  // no devices, blocks_per_chunk 0, a device with no tensors, a bad device
  // ordinal, base_addr 0, page_bytes 0, page_stride_bytes < page_bytes,
  // num_blocks 0, tensors of one device with different num_blocks, or a
  // tensor / row whose extent overflows 64 bits.
  static Result<RowLayout> Create(const std::vector<DeviceKvCache>& devices,
                                  uint32_t blocks_per_chunk);

  // Bytes of one row: every tensor region, rounded up to kRowAlignment.
  uint64_t row_bytes() const { return row_bytes_; }
  // Bytes covered by tensor regions (the rest of a row is padding).
  uint64_t used_bytes() const { return used_bytes_; }
  uint32_t blocks_per_chunk() const { return blocks_per_chunk_; }
  size_t num_devices() const { return devices_.size(); }
  const DeviceKvCache& device(size_t slot) const { return devices_[slot]; }
  // Offset of slot `slot` within a row, and its size.
  uint64_t SlotOffset(size_t slot) const { return tensor_offsets_[slot].front(); }
  uint64_t SlotBytes(size_t slot) const;
  // Offset of devices[slot].tensors[tensor]'s region within a row; the region
  // is page_bytes x blocks_per_chunk bytes.
  uint64_t TensorOffset(size_t slot, size_t tensor) const { return tensor_offsets_[slot][tensor]; }

  // kInvalidArgument (nothing to copy) unless gpu_blocks.size() ==
  // rows.size() * blocks_per_chunk, no row is null and every block id is
  // below every device's num_blocks.
  [[nodiscard]] Status CheckBatch(std::span<uint8_t* const> rows,
                                  std::span<const uint32_t> gpu_blocks) const;

  // Appends device slot `slot`'s merged copies for a checked batch to `out`.
  void AppendSegments(size_t slot, std::span<uint8_t* const> rows,
                      std::span<const uint32_t> gpu_blocks,
                      std::vector<CopySegment>* out) const;

 private:
  RowLayout() = default;

  std::vector<DeviceKvCache> devices_;
  std::vector<std::vector<uint64_t>> tensor_offsets_;  // [slot][tensor]
  uint32_t blocks_per_chunk_ = 0;
  uint64_t used_bytes_ = 0;
  uint64_t row_bytes_ = 0;
  size_t smallest_slot_ = 0;  // the slot with the fewest blocks (bounds every id)
};

}  // namespace kvtier::internal
