// Staged GPU copies (staged_copy.h). Empty without CUDA.
#if KVTIER_HAVE_CUDA
#include "staging/staged_copy.h"

#include <algorithm>

#include "staging/copy_kernel.h"

namespace kvtier::internal {
namespace {

// The device-to-device pass may use many SMs: it is short.
constexpr int kStagedKernelBlocks = 4 * kCopyKernelBlocks;
constexpr size_t kBatchCallMax = 4096;

}  // namespace

cudaError_t BatchMemcpy(void* const* dsts, const void* const* srcs, const size_t* sizes, size_t count,
                        cudaStream_t stream, std::string* what) {
  cudaMemcpyAttributes attr{};
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
  size_t attr_index = 0;
  for (size_t i = 0; i < count; i += kBatchCallMax) {
    const size_t n = std::min(kBatchCallMax, count - i);
    const cudaError_t e = cudaMemcpyBatchAsync(dsts + i, srcs + i, sizes + i, n, &attr, &attr_index, 1, stream);
    if (e != cudaSuccess) {
      *what = "cudaMemcpyBatchAsync of " + std::to_string(n) + " copies";
      return e;
    }
  }
  return cudaSuccess;
}

StagedCopier::~StagedCopier() {
  if (buffer_ != nullptr) static_cast<void>(cudaFree(buffer_));
}

bool StagedCopier::Accepts(std::span<const CopySegment> segments) const {
  if (failed() || !CopyKernelBuilt()) return false;
  return std::all_of(segments.begin(), segments.end(), [](const CopySegment& s) { return s.bytes <= kStagingBytes; });
}

cudaError_t StagedCopier::Issue(bool to_host, std::span<const CopySegment> segments, cudaStream_t stream,
                                std::string* what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (buffer_ == nullptr) {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, kStagingBytes);
    if (e != cudaSuccess) {
      failed_ = true;
      *what = "cudaMalloc of the staging buffer";
      return e;
    }
    buffer_ = static_cast<uint8_t*>(p);
  }
  // Rounds of whole segments that fit the buffer; stream order keeps a
  // round's use of the buffer ahead of the next round's.
  size_t first = 0;
  while (first < segments.size()) {
    uint64_t bytes = 0;
    size_t end = first;
    while (end < segments.size() && bytes + segments[end].bytes <= kStagingBytes) bytes += segments[end++].bytes;
    const cudaError_t e = Round(to_host, segments.subspan(first, end - first), stream, what);
    if (e != cudaSuccess) return e;
    first = end;
  }
  return cudaSuccess;
}

cudaError_t StagedCopier::Round(bool to_host, std::span<const CopySegment> segments, cudaStream_t stream,
                                std::string* what) {
  thread_local std::vector<KernelCopy> pages;
  thread_local std::vector<void*> dsts;
  thread_local std::vector<const void*> srcs;
  thread_local std::vector<size_t> sizes;
  pages.clear(), runs_.clear(), dsts.clear(), srcs.clear(), sizes.clear();
  uint64_t offset = 0;
  for (const CopySegment& s : segments) {
    uint8_t* staged = buffer_ + offset;
    auto* device = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(s.device_addr));
    pages.push_back(to_host ? KernelCopy{device, staged, s.bytes} : KernelCopy{staged, device, s.bytes});
    if (!runs_.empty() && runs_.back().host + runs_.back().bytes == s.host_ptr) {
      runs_.back().bytes += s.bytes;  // host-contiguous: staged right after, too
    } else {
      runs_.push_back({s.host_ptr, staged, s.bytes});
    }
    offset += s.bytes;
  }
  for (const Run& r : runs_) {
    dsts.push_back(to_host ? static_cast<void*>(r.host) : r.staged);
    srcs.push_back(to_host ? r.staged : r.host);
    sizes.push_back(r.bytes);
  }
  if (to_host) {
    const cudaError_t e = LaunchCopyKernel(pages.data(), pages.size(), stream, kStagedKernelBlocks);
    if (e != cudaSuccess) {
      static_cast<void>(cudaGetLastError());  // launch errors are not sticky
      failed_ = true;
      *what = "the gather kernel launch";
      return e;
    }
    return BatchMemcpy(dsts.data(), srcs.data(), sizes.data(), dsts.size(), stream, what);
  }
  const cudaError_t e = BatchMemcpy(dsts.data(), srcs.data(), sizes.data(), dsts.size(), stream, what);
  if (e != cudaSuccess) return e;
  const cudaError_t k = LaunchCopyKernel(pages.data(), pages.size(), stream, kStagedKernelBlocks);
  if (k != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    failed_ = true;
    *what = "the scatter kernel launch";
  }
  return k;
}

}  // namespace kvtier::internal
#endif  // KVTIER_HAVE_CUDA
