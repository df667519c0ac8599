// HostRegion: the CPU tier's memory, one allocation carved into rows.
// Pinned with cudaHostAlloc when a CUDA device is present (so DMA copies run
// at full PCIe speed); otherwise page-aligned anonymous memory (transparent
// huge pages requested). Either way it is handed to the fs tiers to register
// with io_uring.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "kvtier/result.h"

namespace kvtier::internal {

class HostRegion {
 public:
  // `bytes` > 0. kUnavailable when the allocation fails.
  static Result<std::unique_ptr<HostRegion>> Allocate(uint64_t bytes);
  virtual ~HostRegion() = default;

  virtual std::span<uint8_t> bytes() = 0;
  // True when the memory is CUDA-pinned (page-locked and device-mapped).
  virtual bool cuda_pinned() const = 0;
};

}  // namespace kvtier::internal
