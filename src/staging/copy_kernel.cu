// The copy kernel (copy_kernel.h). Descriptors travel in the launch's
// parameters (up to 32 KiB on sm_70+ with CUDA 12.1+), so a launch needs no
// device-side buffer and no extra copy ahead of it.
#include "staging/copy_kernel.h"

#include <algorithm>
#include <vector>

namespace kvtier::internal {
namespace {

constexpr int kThreads = 256;
constexpr uint32_t kCopiesPerLaunch = 1600;  // 32,000 bytes of descriptors
// Larger segments are cut (a warp copies one piece) so that a few big pages
// still spread over every warp.
constexpr uint64_t kPieceBytesMax = uint64_t{16} << 10;

struct LaunchBatch {
  uint32_t count;
  const void* src[kCopiesPerLaunch];
  void* dst[kCopiesPerLaunch];
  uint32_t bytes[kCopiesPerLaunch];  // <= kPieceBytesMax
};
static_assert(sizeof(LaunchBatch) <= 32764, "CUDA's limit on kernel parameters");

constexpr unsigned kWarp = 32;

// One warp copies one piece: four 16-byte loads in flight per lane before
// the stores (reads of host memory cross the link, so latency, not issue
// rate, bounds a lane). A warp per piece rather than a block per piece keeps
// small pages (4 KiB = 8 vectors a lane) from leaving most lanes idle.
__device__ void CopyVectors(const uint4* src, uint4* dst, uint64_t n, unsigned lane) {
  uint64_t i = lane;
  for (; i + 3 * kWarp < n; i += 4 * kWarp) {
    const uint4 a = src[i], b = src[i + kWarp], c = src[i + 2 * kWarp], d = src[i + 3 * kWarp];
    dst[i] = a;
    dst[i + kWarp] = b;
    dst[i + 2 * kWarp] = c;
    dst[i + 3 * kWarp] = d;
  }
  for (; i < n; i += kWarp) dst[i] = src[i];
}

__global__ void CopySegments(const LaunchBatch batch) {
  const unsigned lane = threadIdx.x % kWarp;
  const unsigned warps = gridDim.x * (blockDim.x / kWarp);
  for (uint32_t s = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp; s < batch.count; s += warps) {
    const uint64_t bytes = batch.bytes[s];
    const auto* src = static_cast<const unsigned char*>(batch.src[s]);
    auto* dst = static_cast<unsigned char*>(batch.dst[s]);
    if (((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) | bytes) & 15) == 0) {
      CopyVectors(reinterpret_cast<const uint4*>(src), reinterpret_cast<uint4*>(dst), bytes / 16, lane);
    } else {
      for (uint64_t i = lane; i < bytes; i += kWarp) dst[i] = src[i];
    }
  }
}

cudaError_t Launch(const LaunchBatch& batch, cudaStream_t stream, int blocks_max) {
  const int warps_per_block = kThreads / static_cast<int>(kWarp);
  const int blocks = std::min<int>(blocks_max, (static_cast<int>(batch.count) + warps_per_block - 1) / warps_per_block);
  CopySegments<<<blocks, kThreads, 0, stream>>>(batch);
  return cudaGetLastError();
}

}  // namespace

bool CopyKernelBuilt() { return true; }

cudaError_t LaunchCopyKernel(const KernelCopy* copies, size_t count, cudaStream_t stream, int blocks) {
  // Cut into pieces first, then into launches of equal size: a last launch
  // of a few pieces would leave most thread blocks idle.
  thread_local std::vector<KernelCopy> pieces;
  pieces.clear();
  for (size_t k = 0; k < count; ++k) {
    const KernelCopy& c = copies[k];
    for (uint64_t off = 0; off < c.bytes; off += kPieceBytesMax) {
      pieces.push_back({static_cast<const unsigned char*>(c.src) + off, static_cast<unsigned char*>(c.dst) + off,
                        std::min(kPieceBytesMax, c.bytes - off)});
    }
  }
  const size_t launches = (pieces.size() + kCopiesPerLaunch - 1) / kCopiesPerLaunch;
  const size_t per_launch = launches == 0 ? 0 : (pieces.size() + launches - 1) / launches;
  static thread_local LaunchBatch batch;  // 32 KB: not on the stack
  for (size_t first = 0; first < pieces.size(); first += per_launch) {
    batch.count = static_cast<uint32_t>(std::min(per_launch, pieces.size() - first));
    for (uint32_t i = 0; i < batch.count; ++i) {
      const KernelCopy& p = pieces[first + i];
      batch.src[i] = p.src;
      batch.dst[i] = p.dst;
      batch.bytes[i] = static_cast<uint32_t>(p.bytes);
    }
    const cudaError_t e = Launch(batch, stream, blocks);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace kvtier::internal
