// The CRC kernel (crc_kernel.h). Each warp takes one piece: its 32 lanes
// each run slice-by-8 over a 1/32 share (crc32c_hd.h LaneRange) with the
// tables in shared memory, then fold their registers together in five
// shuffle steps (Absorb). Descriptors travel in the launch's parameters, as
// in copy_kernel.cu.
#include "staging/crc_kernel.h"

#include <algorithm>

#include "staging/crc32c_hd.h"

namespace kvtier::internal {
namespace {

namespace hd = crc32c_hd;

constexpr int kThreads = 256;
constexpr int kBlocksMax = 132;  // an H100's SM count: reading device memory, every SM helps
constexpr uint32_t kPiecesPerLaunch = 1600;  // 32,000 bytes of descriptors

struct CrcBatch {
  uint32_t count;
  uint32_t* out;  // out[i] for descriptor i
  const void* src[kPiecesPerLaunch];
  uint32_t bytes[kPiecesPerLaunch];
  uint32_t index[kPiecesPerLaunch];  // where in `out` piece i's register goes
};
static_assert(sizeof(CrcBatch) <= 32764, "CUDA's limit on kernel parameters");

__device__ const hd::Tables kTables = hd::MakeTables();
__device__ const hd::Powers kPowers = hd::MakePowers();

__device__ uint32_t PieceRaw(const hd::Tables& tables, const hd::Powers& powers, const uint8_t* src,
                             uint64_t bytes, unsigned lane) {
  uint64_t begin = 0, len = 0;
  hd::LaneRange(bytes, lane, &begin, &len);
  uint32_t reg = hd::UpdateRaw(tables, 0, src + begin, len);
  for (unsigned step = 1; step < hd::kLanes; step *= 2) {
    const uint32_t reg_b = __shfl_down_sync(0xffffffffu, reg, step);
    const uint64_t len_b = __shfl_down_sync(0xffffffffu, len, step);
    if (lane % (2 * step) == 0 && lane + step < hd::kLanes) hd::Absorb(powers, &reg, &len, reg_b, len_b);
  }
  return reg;  // lane 0 holds the piece's
}

__global__ void CrcPieces(const CrcBatch batch) {
  __shared__ hd::Tables tables;
  __shared__ hd::Powers powers;
  for (int i = threadIdx.x; i < 8 * 256; i += blockDim.x) tables.t[i / 256][i % 256] = kTables.t[i / 256][i % 256];
  for (int i = threadIdx.x; i < 64; i += blockDim.x) powers.x8_2k[i] = kPowers.x8_2k[i];
  __syncthreads();
  const unsigned lane = threadIdx.x % hd::kLanes;
  const unsigned warps = gridDim.x * (blockDim.x / hd::kLanes);
  for (uint32_t s = blockIdx.x * (blockDim.x / hd::kLanes) + threadIdx.x / hd::kLanes; s < batch.count;
       s += warps) {
    const uint32_t reg = PieceRaw(tables, powers, static_cast<const uint8_t*>(batch.src[s]), batch.bytes[s], lane);
    if (lane == 0) batch.out[batch.index[s]] = reg;
  }
}

}  // namespace

bool CrcKernelBuilt() { return true; }

cudaError_t LaunchCrcKernel(const KernelCrc* pieces, size_t count, uint32_t* raw_out, cudaStream_t stream) {
  static thread_local CrcBatch batch;  // 32 KB: not on the stack
  const int warps_per_block = kThreads / static_cast<int>(hd::kLanes);
  for (size_t first = 0; first < count; first += kPiecesPerLaunch) {
    batch.count = static_cast<uint32_t>(std::min<size_t>(kPiecesPerLaunch, count - first));
    batch.out = raw_out;
    for (uint32_t i = 0; i < batch.count; ++i) {
      batch.src[i] = pieces[first + i].src;
      batch.bytes[i] = static_cast<uint32_t>(pieces[first + i].bytes);
      batch.index[i] = static_cast<uint32_t>(first + i);
    }
    const int blocks = std::min<int>(kBlocksMax, (static_cast<int>(batch.count) + warps_per_block - 1) / warps_per_block);
    CrcPieces<<<blocks, kThreads, 0, stream>>>(batch);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace kvtier::internal
