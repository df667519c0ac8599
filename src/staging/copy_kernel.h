// A CUDA kernel that copies many small segments between device memory and
// mapped pinned host memory in one launch.
//
// Why: the copy engines move large segments at the link's speed, but a KV
// cache's pages are scattered and often 4-64 KiB; per-page DMA (even batched
// with cudaMemcpyBatchAsync) then reaches a third of the link or less. SMs
// reading or writing host memory directly over the link do not pay a per-page
// cost (measured on an H100, PCIe 5 x16: 50-52 GB/s for 4-128 KiB pages, the
// plain 64 MiB copy probe 55 GB/s). The price is SM time: a launch occupies
// up to kCopyKernelBlocks thread blocks while it runs.
//
// C++17 (nvcc builds it as such). Only included where KVTIER_HAVE_CUDA is set; the kernel itself exists only
// where nvcc built it (KVTIER_HAVE_CUDA_KERNELS).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace kvtier::internal {

struct KernelCopy {
  const void* src = nullptr;  // device or mapped host memory
  void* dst = nullptr;
  uint64_t bytes = 0;
};

// Thread blocks per launch (of 256 threads): enough to keep ~50 GB/s of PCIe
// reads in flight on an H100, a quarter of its SMs at most.
inline constexpr int kCopyKernelBlocks = 32;

// False when kvtier was built without nvcc: LaunchCopyKernel then fails.
bool CopyKernelBuilt();

// Queues the copies on `stream` (as few launches as the parameter space
// allows), each launch on at most `blocks` thread blocks. Any alignment
// works; 16-byte aligned segments go fastest.
cudaError_t LaunchCopyKernel(const KernelCopy* copies, size_t count, cudaStream_t stream,
                             int blocks = kCopyKernelBlocks);

}  // namespace kvtier::internal
