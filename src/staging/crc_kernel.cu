// The CRC kernel (crc_kernel.h). Each warp takes one unit and goes through
// its pieces in order: the 32 lanes each run slice-by-8 over a 1/32 share of
// the piece (crc32c_hd.h LaneRange) with the tables in shared memory, fold
// their registers together in five shuffle steps (Absorb), and lane 0 joins
// the piece to the unit's register (Shift). Descriptors travel in the
// launch's parameters, as in copy_kernel.cu.
#include "staging/crc_kernel.h"

#include <algorithm>

#include "staging/crc32c_hd.h"

namespace kvtier::internal {
namespace {

namespace hd = crc32c_hd;

constexpr int kThreads = 256;
constexpr int kBlocksMax = 132;  // an H100's SM count: reading device memory, every SM helps
constexpr uint32_t kPiecesPerLaunch = kCrcKernelUnitPiecesMax;
constexpr uint32_t kUnitsPerLaunch = 1024;

struct CrcBatch {
  uint32_t units;
  uint32_t* out;  // out[u] for the launch's unit u
  const void* src[kPiecesPerLaunch];
  uint32_t bytes[kPiecesPerLaunch];
  uint32_t unit_end[kUnitsPerLaunch];  // unit u's pieces: [u == 0 ? 0 : unit_end[u - 1], unit_end[u])
};
static_assert(sizeof(CrcBatch) <= 32764, "CUDA's limit on kernel parameters");

__device__ const hd::Tables kTables = hd::MakeTables();
__device__ const hd::Powers kPowers = hd::MakePowers();

// Lane 0 returns the piece's register; the other lanes, partial values.
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
  return reg;
}

__global__ void CrcUnits(const CrcBatch batch) {
  __shared__ hd::Tables tables;
  __shared__ hd::Powers powers;
  for (int i = threadIdx.x; i < 8 * 256; i += blockDim.x) tables.t[i / 256][i % 256] = kTables.t[i / 256][i % 256];
  for (int i = threadIdx.x; i < 64; i += blockDim.x) powers.x8_2k[i] = kPowers.x8_2k[i];
  __syncthreads();
  const unsigned lane = threadIdx.x % hd::kLanes;
  const unsigned warps = gridDim.x * (blockDim.x / hd::kLanes);
  for (uint32_t u = blockIdx.x * (blockDim.x / hd::kLanes) + threadIdx.x / hd::kLanes; u < batch.units; u += warps) {
    uint32_t unit = 0;
    for (uint32_t p = u == 0 ? 0 : batch.unit_end[u - 1]; p < batch.unit_end[u]; ++p) {
      const uint32_t reg = PieceRaw(tables, powers, static_cast<const uint8_t*>(batch.src[p]), batch.bytes[p], lane);
      if (lane == 0) unit = hd::Shift(powers, unit, batch.bytes[p]) ^ reg;
    }
    if (lane == 0) batch.out[u] = unit;
  }
}

cudaError_t Launch(const CrcBatch& batch, cudaStream_t stream) {
  const int warps_per_block = kThreads / static_cast<int>(hd::kLanes);
  const int blocks = std::min<int>(kBlocksMax, (static_cast<int>(batch.units) + warps_per_block - 1) / warps_per_block);
  CrcUnits<<<blocks, kThreads, 0, stream>>>(batch);
  return cudaGetLastError();
}

}  // namespace

bool CrcKernelBuilt() { return true; }

cudaError_t LaunchCrcKernel(const KernelCrc* pieces, const KernelCrcUnit* units, size_t unit_count,
                            uint32_t* raw_out, cudaStream_t stream) {
  for (size_t u = 0; u < unit_count; ++u) {
    if (units[u].count == 0 || units[u].count > kCrcKernelUnitPiecesMax) return cudaErrorInvalidValue;
  }
  static thread_local CrcBatch batch;  // 32 KB: not on the stack
  uint32_t used = 0;  // pieces in the batch
  batch.units = 0;
  for (size_t u = 0; u < unit_count; ++u) {
    if (batch.units == kUnitsPerLaunch || used + units[u].count > kPiecesPerLaunch) {
      if (const cudaError_t e = Launch(batch, stream); e != cudaSuccess) return e;
      raw_out += batch.units;
      batch.units = 0;
      used = 0;
    }
    for (uint32_t k = 0; k < units[u].count; ++k, ++used) {
      batch.src[used] = pieces[units[u].first + k].src;
      batch.bytes[used] = static_cast<uint32_t>(pieces[units[u].first + k].bytes);
    }
    batch.out = raw_out;
    batch.unit_end[batch.units++] = used;
  }
  return batch.units == 0 ? cudaSuccess : Launch(batch, stream);
}

}  // namespace kvtier::internal
