// HostRegion: cudaHostAlloc'd (pinned, portable, mapped: the copy kernel
// reads and writes it from the GPU) memory when a CUDA device is
// present, else an anonymous mapping with transparent huge pages requested.
// The mapping is left untouched, so a large CPU tier costs memory only as
// rows are first written.
#include "cpu_tier/host_region.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

#include "staging/stager.h"

#if KVTIER_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kvtier::internal {
namespace {

constexpr uint64_t kHugePageBytes = uint64_t{2} << 20;

std::string SizeText(uint64_t bytes) {
  char gib[32];
  std::snprintf(gib, sizeof gib, "%.2f", static_cast<double>(bytes) / (uint64_t{1} << 30));
  return std::to_string(bytes) + " bytes (" + gib + " GiB)";
}

class MappedRegion final : public HostRegion {
 public:
  MappedRegion(uint8_t* data, uint64_t map_bytes, uint64_t bytes)
      : data_(data), map_bytes_(map_bytes), bytes_(bytes) {}
  ~MappedRegion() override { munmap(data_, map_bytes_); }
  std::span<uint8_t> bytes() override { return {data_, bytes_}; }
  bool cuda_pinned() const override { return false; }

 private:
  uint8_t* data_;
  uint64_t map_bytes_;  // whole pages
  uint64_t bytes_;
};

Result<std::unique_ptr<HostRegion>> MapAnonymous(uint64_t bytes) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t len = (bytes + page - 1) / page * page;
  // Over-map by one huge page and trim, so the region starts on a 2 MiB
  // boundary and THP can back it from its first byte.
  const uint64_t slack = len >= kHugePageBytes ? kHugePageBytes : 0;
  void* map = mmap(nullptr, len + slack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) {
    return Status(StatusCode::kUnavailable, "mmap of " + SizeText(bytes) + " for the CPU tier failed", errno);
  }
  const uintptr_t start = reinterpret_cast<uintptr_t>(map);
  const uintptr_t aligned = slack == 0 ? start : (start + slack - 1) / slack * slack;
  if (aligned > start) munmap(map, aligned - start);
  if (start + slack > aligned) munmap(reinterpret_cast<void*>(aligned + len), start + slack - aligned);
  auto* data = reinterpret_cast<uint8_t*>(aligned);
  // Best effort: THP may be disabled, and small pages work as well (slower).
  madvise(data, len, MADV_HUGEPAGE);
  return std::unique_ptr<HostRegion>(std::make_unique<MappedRegion>(data, len, bytes));
}

#if KVTIER_HAVE_CUDA
class PinnedRegion final : public HostRegion {
 public:
  PinnedRegion(uint8_t* data, uint64_t bytes) : data_(data), bytes_(bytes) {}
  ~PinnedRegion() override { static_cast<void>(cudaFreeHost(data_)); }
  std::span<uint8_t> bytes() override { return {data_, bytes_}; }
  bool cuda_pinned() const override { return true; }

 private:
  uint8_t* data_;
  uint64_t bytes_;
};

Result<std::unique_ptr<HostRegion>> AllocatePinned(uint64_t bytes) {
  void* data = nullptr;
  // Portable: pinned for every device, since one region serves all slots.
  const cudaError_t e = cudaHostAlloc(&data, bytes, cudaHostAllocPortable | cudaHostAllocMapped);
  if (e != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return Status(StatusCode::kUnavailable, "cudaHostAlloc of " + SizeText(bytes) +
                                                " for the CPU tier failed: " + cudaGetErrorString(e));
  }
  return std::unique_ptr<HostRegion>(std::make_unique<PinnedRegion>(static_cast<uint8_t*>(data), bytes));
}
#endif

}  // namespace

Result<std::unique_ptr<HostRegion>> HostRegion::Allocate(uint64_t bytes) {
  if (bytes == 0) return InvalidArgument("a host region needs bytes > 0");
  if (bytes > (uint64_t{1} << 62)) {
    return Status(StatusCode::kUnavailable, "a host region of " + SizeText(bytes) + " exceeds the address space");
  }
#if KVTIER_HAVE_CUDA
  if (CudaDevicePresent()) return AllocatePinned(bytes);
#endif
  return MapAnonymous(bytes);
}

}  // namespace kvtier::internal
