// Staged GPU copies: small scattered pages moved at the copy engines' speed.
//
// A load DMAs the rows' contiguous host runs into a device staging buffer
// (large copies: the copy engines reach ~0.96 of the link), then a copy
// kernel scatters the pages from the staging buffer into the KV blocks at
// device-memory speed; a store gathers first, then DMAs. This beats both
// per-page DMA (a third of the link or less for 4-16 KiB pages) and the
// kernel reading host memory over the link (~0.88-0.91), and it holds SMs
// only for the short device-to-device pass. It costs kStagingBytes of device
// memory per stream, allocated on first use.
//
// Only compiled with CUDA (KVTIER_HAVE_CUDA); C++20, CUDA types allowed.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "staging/row_layout.h"

namespace kvtier::internal {

// Device staging memory per stream. A batch larger than this moves in rounds.
inline constexpr uint64_t kStagingBytes = uint64_t{64} << 20;

// cudaMemcpyBatchAsync of count copies (in calls of at most 4096), copies
// in stream order. *what names the failed call.
cudaError_t BatchMemcpy(void* const* dsts, const void* const* srcs, const size_t* sizes, size_t count,
                        cudaStream_t stream, std::string* what);

// One stream's staging buffer. Issue is thread-safe: rounds of two callers
// never interleave on the buffer.
class StagedCopier {
 public:
  StagedCopier() = default;
  ~StagedCopier();
  StagedCopier(const StagedCopier&) = delete;
  StagedCopier& operator=(const StagedCopier&) = delete;

  // Whether a batch can go this way: nothing failed before and no segment is
  // larger than the buffer.
  bool Accepts(std::span<const CopySegment> segments) const;
  // True once the buffer could not be allocated or a kernel not launched.
  bool failed() const { return failed_.load(std::memory_order_relaxed); }
  // Queues the batch on `stream`; the caller's current device is the stream's.
  // On an error, *what names the call; copies queued before it still run.
  cudaError_t Issue(bool to_host, std::span<const CopySegment> segments, cudaStream_t stream, std::string* what);

 private:
  struct Run {  // a contiguous host range and where it lies in the buffer
    uint8_t* host;
    uint8_t* staged;
    uint64_t bytes;
  };
  cudaError_t Round(bool to_host, std::span<const CopySegment> segments, cudaStream_t stream, std::string* what);

  std::mutex mu_;
  uint8_t* buffer_ = nullptr;  // cudaMalloc'd on first use
  std::atomic<bool> failed_{false};  // the allocation or a launch failed: never again
  std::vector<Run> runs_;
};

}  // namespace kvtier::internal
