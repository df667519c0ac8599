// One CUDA device's share of checksummed staging (CopyChecksums): launches
// the CRC kernel (crc_kernel.h) for a part's pieces on the copy's own stream,
// into small mapped pinned buffers the completion thread reads once the
// stream has passed the kernel.
//
// At creation it checks itself: the kernel's CRCs of a known pattern (odd
// lengths and offsets) must equal the CPU's. If they differ, or the kernel
// cannot run on this GPU, it logs a warning once and the CPU computes the
// CRCs from the row instead (after the copy), so a bad kernel can never put
// a wrong CRC on disk or refuse a good row.
//
// Only included where KVTIER_HAVE_CUDA is set.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "staging/stager_internal.h"

namespace kvtier::internal {

// A mapped pinned buffer the kernel writes a part's registers into.
struct CrcSlot {
  uint32_t* host = nullptr;  // null: no kernel ran (the CPU computes the part)
  size_t capacity = 0;
};

class DeviceCrc {
 public:
  // `ordinal` must be current; `stream` is used for the self-check only.
  DeviceCrc(int ordinal, cudaStream_t stream);
  ~DeviceCrc();
  DeviceCrc(const DeviceCrc&) = delete;
  DeviceCrc& operator=(const DeviceCrc&) = delete;

  bool usable() const { return usable_.load(std::memory_order_relaxed); }
  uint64_t device_bytes() const { return device_bytes_.load(std::memory_order_relaxed); }

  // Queues the kernel for `part` on `stream` (the device current). A slot
  // with host == nullptr when it did not: Collect then uses the CPU.
  CrcSlot Launch(const PartCrc& part, cudaStream_t stream);
  // Once the stream has passed Launch's kernel (its event synchronized):
  // fills part.raw and recycles the slot.
  void Collect(CrcSlot slot, const PartCrc& part);

 private:
  bool SelfCheck(cudaStream_t stream, std::string* why);
  // Whether the CRCs in part.raw are those the CPU computes from the pieces.
  bool SameAsCpu(const PartCrc& part, std::string* why);
  CrcSlot Acquire(size_t count);
  void Release(CrcSlot slot);

  const int ordinal_;
  std::atomic<bool> usable_{false};
  std::atomic<uint64_t> device_bytes_{0};
  std::mutex mu_;
  std::vector<CrcSlot> free_;
  std::vector<uint32_t*> all_;  // freed with the object
};

}  // namespace kvtier::internal
