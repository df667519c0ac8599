// DeviceCrc (device_crc.h). Built without CUDA, this file is empty.
#if KVTIER_HAVE_CUDA
#include "staging/device_crc.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "staging/crc_kernel.h"
#include "util/log.h"

namespace kvtier::internal {
namespace {

// The self-check's pieces of a 256 KiB pattern: aligned and not, one byte,
// a whole kernel piece, lengths that are no multiple of 8; units of one
// piece and of several, out of address order.
struct CheckPiece {
  uint64_t offset, bytes;
};
constexpr CheckPiece kCheckPieces[] = {{0, 65536}, {1, 4093}, {4096, 1}, {7, 65535}, {131072, 4096},
                                       {200003, 12345}, {65536, 8}, {250000, 12144}};
constexpr CrcUnit kCheckUnits[] = {{0, 1, 0, 0, 0}, {1, 3, 0, 0, 0}, {4, 1, 0, 0, 0}, {5, 3, 0, 0, 0}};
constexpr uint64_t kPatternBytes = 256 << 10;

std::string CudaText(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

}  // namespace

#if !KVTIER_HAVE_CUDA_KERNELS
// Built without nvcc: the CPU computes every CRC.
bool CrcKernelBuilt() { return false; }
cudaError_t LaunchCrcKernel(const KernelCrc* /*pieces*/, const KernelCrcUnit* /*units*/, size_t /*unit_count*/,
                            uint32_t* /*raw_out*/, cudaStream_t /*stream*/) {
  return cudaErrorNotSupported;
}
#endif

DeviceCrc::DeviceCrc(int ordinal, cudaStream_t stream) : ordinal_(ordinal) {
  if (!CrcKernelBuilt()) return;
  std::string why;
  if (SelfCheck(stream, &why)) {
    usable_.store(true, std::memory_order_relaxed);
    return;
  }
  static_cast<void>(cudaGetLastError());
  LogWarning("CUDA device " + std::to_string(ordinal_) + ": the device CRC32C failed its self-check (" + why +
             "); staged rows are checksummed on the CPU instead");
}

DeviceCrc::~DeviceCrc() {
  for (uint32_t* p : all_) static_cast<void>(cudaFreeHost(p));
}

bool DeviceCrc::SelfCheck(cudaStream_t stream, std::string* why) {
  std::vector<uint8_t> pattern(kPatternBytes);
  uint64_t x = 0x9e3779b97f4a7c15u;
  for (uint8_t& b : pattern) b = static_cast<uint8_t>((x = x * 6364136223846793005u + 1442695040888963407u) >> 56);
  void* dev = nullptr;
  cudaError_t e = cudaMalloc(&dev, pattern.size());
  if (e != cudaSuccess) return *why = "cudaMalloc: " + CudaText(e), false;
  std::vector<CrcPiece> pieces;
  for (const CheckPiece& c : kCheckPieces) {
    pieces.push_back(CrcPiece{reinterpret_cast<uintptr_t>(dev) + c.offset, pattern.data() + c.offset, c.bytes});
  }
  std::vector<uint32_t> raw(std::size(kCheckUnits), 0);
  const PartCrc part{kCheckUnits, pieces, raw.data()};
  // The copy goes on the kernel's own stream: a cudaMemcpy from pageable
  // memory may return before its DMA lands, and it runs on the legacy
  // default stream, which orders nothing on a non-blocking stream.
  e = cudaMemcpyAsync(dev, pattern.data(), pattern.size(), cudaMemcpyHostToDevice, stream);
  usable_.store(true, std::memory_order_relaxed);  // Launch runs only when usable
  const CrcSlot slot = e == cudaSuccess ? Launch(part, stream) : CrcSlot{};
  usable_.store(false, std::memory_order_relaxed);
  // Whatever was queued ends before `dev` and the pattern go.
  const cudaError_t synced = e == cudaSuccess ? cudaStreamSynchronize(stream) : cudaSuccess;
  if (synced == cudaSuccess && slot.host != nullptr) Collect(slot, part);
  const cudaError_t freed = cudaFree(dev);
  device_bytes_.store(0, std::memory_order_relaxed);
  if (e != cudaSuccess) return *why = "cudaMemcpyAsync: " + CudaText(e), false;
  if (synced != cudaSuccess) return *why = "cudaStreamSynchronize: " + CudaText(synced), false;
  if (slot.host == nullptr) return *why = "the kernel did not launch", false;
  if (freed != cudaSuccess) return *why = "cudaFree: " + CudaText(freed), false;
  return SameAsCpu(part, why);
}

bool DeviceCrc::SameAsCpu(const PartCrc& part, std::string* why) {
  std::vector<uint32_t> cpu(part.units.size(), 0);
  Collect(CrcSlot{}, PartCrc{part.units, part.pieces, cpu.data()});  // no slot: the CPU computes
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (part.raw[i] != cpu[i]) return *why = "unit " + std::to_string(i) + " differs from the CPU's", false;
  }
  return true;
}

CrcSlot DeviceCrc::Acquire(size_t count) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i].capacity < count) continue;
      const CrcSlot slot = free_[i];
      free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
      return slot;
    }
  }
  const size_t capacity = std::max<size_t>(count, 4096);
  void* p = nullptr;
  if (cudaHostAlloc(&p, capacity * sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return CrcSlot{};
  }
  std::lock_guard<std::mutex> lock(mu_);
  all_.push_back(static_cast<uint32_t*>(p));
  return CrcSlot{static_cast<uint32_t*>(p), capacity};
}

void DeviceCrc::Release(CrcSlot slot) {
  if (slot.host == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(slot);
}

CrcSlot DeviceCrc::Launch(const PartCrc& part, cudaStream_t stream) {
  if (part.units.empty() || !usable()) return CrcSlot{};
  CrcSlot slot = Acquire(part.units.size());
  uint32_t* device_out = nullptr;
  if (slot.host == nullptr ||
      cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_out), slot.host, 0) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    Release(slot);
    return CrcSlot{};
  }
  thread_local std::vector<KernelCrc> pieces;
  thread_local std::vector<KernelCrcUnit> units;
  pieces.clear(), units.clear();
  uint64_t bytes = 0;
  for (const CrcUnit& u : part.units) {
    units.push_back(KernelCrcUnit{static_cast<uint32_t>(pieces.size()), u.pieces});
    for (const CrcPiece& p : part.pieces.subspan(u.first_piece, u.pieces)) {
      pieces.push_back(KernelCrc{reinterpret_cast<const void*>(static_cast<uintptr_t>(p.device_addr)), p.bytes});
      bytes += p.bytes;
    }
  }
  if (LaunchCrcKernel(pieces.data(), units.data(), units.size(), device_out, stream) != cudaSuccess) {
    // A launch error is not sticky (no image for this GPU): the CPU takes
    // over for good. Launches already queued for this part finish harmlessly.
    static_cast<void>(cudaGetLastError());
    usable_.store(false, std::memory_order_relaxed);
    LogWarning("CUDA device " + std::to_string(ordinal_) + ": the CRC kernel failed to launch; staged rows are "
               "checksummed on the CPU instead");
    return CrcSlot{};  // the slot may still be written by a queued launch: never reused
  }
  device_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  return slot;
}

void DeviceCrc::Collect(CrcSlot slot, const PartCrc& part) {
  if (slot.host == nullptr) {  // the CPU computes, from the row
    for (size_t i = 0; i < part.units.size(); ++i) {
      uint32_t reg = 0;
      for (const CrcPiece& p : part.pieces.subspan(part.units[i].first_piece, part.units[i].pieces)) {
        reg = CpuRawCrc(reg, p.host_ptr, p.bytes);
      }
      part.raw[i] = reg;
    }
    return;
  }
  std::copy(slot.host, slot.host + part.units.size(), part.raw);
  Release(slot);
}

}  // namespace kvtier::internal
#endif  // KVTIER_HAVE_CUDA
