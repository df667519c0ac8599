// The engine's KV cache as kvtier sees it: per device (worker slot), the
// registered KV tensors in order, each an array of equally spaced pages (one
// page per GPU block).
//
// A CPU row (one offloaded chunk; layout-spec/FORMAT.md L47-L49) is laid out as
//   [ slot 0 | slot 1 | ... | slot W-1 | padding to a multiple of 4096 ]
// where slot w holds, for each of device w's tensors in order,
//   page_bytes x blocks_per_chunk bytes: the chunk's GPU pages back to back.
#pragma once

#include <cstdint>
#include <vector>

namespace kvtier {

// One registered KV tensor: num_blocks pages of page_bytes each, page i at
// base_addr + i * page_stride_bytes.
struct KvTensorSpec {
  uint64_t base_addr = 0;          // device pointer (a host address on the stand-in)
  uint64_t page_bytes = 0;         // meaningful bytes per block that are copied, > 0
  uint64_t page_stride_bytes = 0;  // distance between blocks, >= page_bytes
  uint32_t num_blocks = 0;         // blocks in the tensor, > 0
};

// Host-memory stand-in for a GPU: tensors live in host memory and copies run
// on a kvtier worker thread. Every test and the CPU-only main job use it.
inline constexpr int kHostStandInDevice = -1;

// The KV tensors of one worker (one GPU).
struct DeviceKvCache {
  // CUDA device ordinal, or kHostStandInDevice.
  int device = kHostStandInDevice;
  // In the engine's registration order; every tensor has the same num_blocks.
  std::vector<KvTensorSpec> tensors;
};

}  // namespace kvtier
