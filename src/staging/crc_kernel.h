// A CUDA kernel that computes the CRC32C register (crc32c_hd.h: no initial
// value, no final xor) of many units of scattered device pieces in one
// launch (a unit: a run of a row's pages, wherever each lies on the device),
// so a row's CRC costs the CPU one product per unit (RowCrcPlan folds them)
// instead of a pass over the row.
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

// Pieces [first, first + count) of a LaunchCrcKernel call, in order.
struct KernelCrcUnit {
  uint32_t first = 0;
  uint32_t count = 0;  // 1 .. kCrcKernelUnitPiecesMax
};
inline constexpr uint32_t kCrcKernelUnitPiecesMax = 1024;

// False when kvtier was built without nvcc: LaunchCrcKernel then fails.
bool CrcKernelBuilt();

// Queues on `stream` the computation of raw_out[u] = the register CRC of the
// concatenation of units[u]'s pieces, for every u < unit_count (as few
// launches as the parameter space allows). raw_out must be writable by the
// device (device or mapped host memory) and stay valid until the stream has
// run the kernel. A warp takes one unit, its 32 lanes one piece at a time;
// pieces of 16-64 KiB keep every lane busy. cudaErrorInvalidValue (nothing
// queued) for a unit of no pieces or more than kCrcKernelUnitPiecesMax.
cudaError_t LaunchCrcKernel(const KernelCrc* pieces, const KernelCrcUnit* units, size_t unit_count,
                            uint32_t* raw_out, cudaStream_t stream);

}  // namespace kvtier::internal
