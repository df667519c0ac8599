// Row layout arithmetic, layout validation and copy-segment merging.
#include "staging/row_layout.h"

#include <cstdint>
#include <string>

namespace kvtier::internal {
namespace {

std::string TensorName(size_t slot, size_t tensor) {
  return "devices[" + std::to_string(slot) + "].tensors[" + std::to_string(tensor) + "]";
}

// The rules one tensor must satisfy on its own (num_blocks agreement between
// tensors is checked by the caller, which sees them all).
Status CheckTensor(const KvTensorSpec& t, size_t slot, size_t tensor) {
  const std::string name = TensorName(slot, tensor);
  if (t.base_addr == 0) return InvalidArgument(name + ": base_addr is 0 (not a tensor)");
  if (t.page_bytes == 0) return InvalidArgument(name + ": page_bytes must be > 0");
  if (t.page_stride_bytes < t.page_bytes) {
    return InvalidArgument(name + ": page_stride_bytes " + std::to_string(t.page_stride_bytes) +
                           " is below page_bytes " + std::to_string(t.page_bytes));
  }
  if (t.num_blocks == 0) return InvalidArgument(name + ": num_blocks must be > 0");
  // The last page must be addressable: base + (num_blocks-1)*stride + page_bytes.
  uint64_t extent = 0;
  if (__builtin_mul_overflow(uint64_t{t.num_blocks} - 1, t.page_stride_bytes, &extent) ||
      __builtin_add_overflow(extent, t.page_bytes, &extent) ||
      __builtin_add_overflow(extent, t.base_addr, &extent)) {
    return InvalidArgument(name + ": base_addr + num_blocks x page_stride_bytes overflows 64 bits");
  }
  return Status::Ok();
}

Status CheckDevice(const DeviceKvCache& d, size_t slot) {
  const std::string name = "devices[" + std::to_string(slot) + "]";
  if (d.device < kHostStandInDevice) {
    return InvalidArgument(name + ": device " + std::to_string(d.device) +
                           " is neither a CUDA ordinal (>= 0) nor kHostStandInDevice (-1)");
  }
  if (d.tensors.empty()) return InvalidArgument(name + ": no tensors");
  for (size_t t = 0; t < d.tensors.size(); ++t) {
    KVTIER_RETURN_IF_ERROR(CheckTensor(d.tensors[t], slot, t));
    if (d.tensors[t].num_blocks != d.tensors[0].num_blocks) {
      return InvalidArgument(TensorName(slot, t) + ": num_blocks " +
                             std::to_string(d.tensors[t].num_blocks) + " differs from tensors[0]'s " +
                             std::to_string(d.tensors[0].num_blocks) +
                             " (every tensor of a device has the same num_blocks)");
    }
  }
  return Status::Ok();
}

// Appends one page copy, extending the last segment when the page follows it
// on both the device and the host side.
void AppendPage(uint64_t device_addr, uint8_t* host_ptr, uint64_t bytes,
                std::vector<CopySegment>* out) {
  if (!out->empty()) {
    CopySegment& last = out->back();
    // Compared as integers: two rows may be unrelated allocations.
    const uintptr_t last_host_end = reinterpret_cast<uintptr_t>(last.host_ptr) + last.bytes;
    if (last.device_addr + last.bytes == device_addr &&
        last_host_end == reinterpret_cast<uintptr_t>(host_ptr)) {
      last.bytes += bytes;
      return;
    }
  }
  out->push_back(CopySegment{device_addr, host_ptr, bytes});
}

}  // namespace

Result<RowLayout> RowLayout::Create(const std::vector<DeviceKvCache>& devices,
                                    uint32_t blocks_per_chunk) {
  if (devices.empty()) return InvalidArgument("no devices: a stager needs at least one worker slot");
  if (blocks_per_chunk == 0) return InvalidArgument("blocks_per_chunk must be > 0");
  RowLayout layout;
  layout.blocks_per_chunk_ = blocks_per_chunk;
  uint64_t offset = 0;
  for (size_t slot = 0; slot < devices.size(); ++slot) {
    KVTIER_RETURN_IF_ERROR(CheckDevice(devices[slot], slot));
    std::vector<uint64_t> offsets;
    for (size_t t = 0; t < devices[slot].tensors.size(); ++t) {
      offsets.push_back(offset);
      uint64_t region = 0;
      if (__builtin_mul_overflow(devices[slot].tensors[t].page_bytes, uint64_t{blocks_per_chunk}, &region) ||
          __builtin_add_overflow(offset, region, &offset)) {
        return InvalidArgument(TensorName(slot, t) + ": the row size overflows 64 bits");
      }
    }
    layout.tensor_offsets_.push_back(std::move(offsets));
    if (devices[slot].tensors[0].num_blocks < devices[layout.smallest_slot_].tensors[0].num_blocks) {
      layout.smallest_slot_ = slot;
    }
  }
  if (offset > UINT64_MAX - kRowAlignment) return InvalidArgument("the row size overflows 64 bits");
  layout.used_bytes_ = offset;
  layout.row_bytes_ = (offset + kRowAlignment - 1) / kRowAlignment * kRowAlignment;
  layout.devices_ = devices;
  return layout;
}

uint64_t RowLayout::SlotBytes(size_t slot) const {
  const uint64_t end =
      slot + 1 < devices_.size() ? tensor_offsets_[slot + 1].front() : used_bytes_;
  return end - SlotOffset(slot);
}

Status RowLayout::CheckBatch(std::span<uint8_t* const> rows,
                             std::span<const uint32_t> gpu_blocks) const {
  if (gpu_blocks.size() != rows.size() * blocks_per_chunk_) {
    return InvalidArgument("gpu_blocks has " + std::to_string(gpu_blocks.size()) + " ids, but " +
                           std::to_string(rows.size()) + " rows x blocks_per_chunk " +
                           std::to_string(blocks_per_chunk_) + " need " +
                           std::to_string(rows.size() * blocks_per_chunk_));
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] == nullptr) return InvalidArgument("rows[" + std::to_string(i) + "] is null");
  }
  const uint32_t limit = devices_[smallest_slot_].tensors[0].num_blocks;
  for (size_t k = 0; k < gpu_blocks.size(); ++k) {
    if (gpu_blocks[k] >= limit) {
      return InvalidArgument("gpu_blocks[" + std::to_string(k) + "] = " + std::to_string(gpu_blocks[k]) +
                             " is out of range: devices[" + std::to_string(smallest_slot_) + "] has " +
                             std::to_string(limit) + " blocks");
    }
  }
  return Status::Ok();
}

void RowLayout::AppendSegments(size_t slot, std::span<uint8_t* const> rows,
                               std::span<const uint32_t> gpu_blocks,
                               std::vector<CopySegment>* out) const {
  const DeviceKvCache& dev = devices_[slot];
  // Tensor-major, then chunk order: consecutive pages of one tensor are the
  // only candidates for merging, and this order visits them back to back.
  for (size_t t = 0; t < dev.tensors.size(); ++t) {
    const KvTensorSpec& spec = dev.tensors[t];
    const uint64_t region_offset = tensor_offsets_[slot][t];
    for (size_t i = 0; i < rows.size(); ++i) {
      uint8_t* host = rows[i] + region_offset;
      for (uint32_t j = 0; j < blocks_per_chunk_; ++j) {
        const uint32_t block = gpu_blocks[i * blocks_per_chunk_ + j];
        AppendPage(spec.base_addr + uint64_t{block} * spec.page_stride_bytes, host + j * spec.page_bytes,
                   spec.page_bytes, out);
      }
    }
  }
}

}  // namespace kvtier::internal
