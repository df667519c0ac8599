// A CUDA kernel that computes the CRC32C register (crc32c_hd.h: no initial
// value, no final xor) of many scattered device segments in one launch, so a
// row's CRC costs the CPU one product per piece (RowCrcPlan puts the pieces
// back together) instead of a pass over the row.
//
// C++17. Only included where KVTIER_HAVE_CUDA is set; the kernel exists only
// where nvcc built it (KVTIER_HAVE_CUDA_KERNELS).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace kvtier::internal {

struct KernelCrc {
  const void* src = nullptr;  // device memory (or mapped host memory)
  uint64_t bytes = 0;         // < 4 GiB
};

// False when kvtier was built without nvcc: LaunchCrcKernel then fails.
bool CrcKernelBuilt();

// Queues on `stream` the computation of raw_out[i] = the register CRC of
// pieces[i] for every i < count (as few launches as the parameter space
// allows). raw_out must be writable by the device (device or mapped host
// memory) and stay valid until the stream has run the kernel. A warp takes
// one piece; pieces of 16-64 KiB keep every lane busy.
cudaError_t LaunchCrcKernel(const KernelCrc* pieces, size_t count, uint32_t* raw_out, cudaStream_t stream);

}  // namespace kvtier::internal
