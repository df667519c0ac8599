// CudaKvCache (cuda_kv_cache.h). Built without CUDA, Create says so.
#include "staging/cuda_kv_cache.h"

#include <cstring>
#include <string>

#include "staging/stager.h"

#if KVTIER_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kvtier::internal {

#if KVTIER_HAVE_CUDA
namespace {

Status CudaFailure(StatusCode code, int device, const std::string& what, cudaError_t e) {
  static_cast<void>(cudaGetLastError());
  return Status(code, "CUDA device " + std::to_string(device) + ": " + what + ": " + cudaGetErrorString(e));
}

}  // namespace

Result<std::unique_ptr<CudaKvCache>> CudaKvCache::Create(int device, std::vector<HostKvTensorShape> tensors,
                                                         uint32_t num_blocks) {
  if (device < 0 || !CudaDevicePresent()) {
    return Status(StatusCode::kUnavailable, "CUDA device " + std::to_string(device) + " not present");
  }
  std::unique_ptr<CudaKvCache> cache(new CudaKvCache(device, std::move(tensors), num_blocks));
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) return CudaFailure(StatusCode::kUnavailable, device, "cudaSetDevice", e);
  for (HostKvTensorShape& shape : cache->shapes_) {
    if (shape.page_stride_bytes == 0) shape.page_stride_bytes = shape.page_bytes;
    const uint64_t bytes = shape.page_stride_bytes * num_blocks;
    void* p = nullptr;
    e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) return CudaFailure(StatusCode::kUnavailable, device, "cudaMalloc", e);
    cache->memory_.push_back(p);
    e = cudaMemset(p, 0, bytes);
    if (e != cudaSuccess) return CudaFailure(StatusCode::kIoError, device, "cudaMemset", e);
  }
  return cache;
}

CudaKvCache::~CudaKvCache() {
  for (void* p : memory_) static_cast<void>(cudaFree(p));
  if (staging_ != nullptr) static_cast<void>(cudaFreeHost(staging_));
}

uint64_t CudaKvCache::PageAddr(size_t tensor, uint32_t block) const {
  return reinterpret_cast<uint64_t>(memory_[tensor]) + shapes_[tensor].page_stride_bytes * block;
}

DeviceKvCache CudaKvCache::Registration() const {
  DeviceKvCache device;
  device.device = device_;
  for (size_t t = 0; t < shapes_.size(); ++t) {
    device.tensors.push_back(
        KvTensorSpec{PageAddr(t, 0), shapes_[t].page_bytes, shapes_[t].page_stride_bytes, num_blocks_});
  }
  return device;
}

// Fill and Matches go through a pinned page: pageable cudaMemcpy runs at a
// few GB/s and would dominate the benchmark's wall time.
Result<std::span<uint8_t>> CudaKvCache::Staging(uint64_t bytes) {
  if (staging_bytes_ < bytes) {
    if (staging_ != nullptr) static_cast<void>(cudaFreeHost(staging_));
    staging_ = nullptr;
    staging_bytes_ = 0;
    const cudaError_t e = cudaMallocHost(&staging_, bytes);
    if (e != cudaSuccess) return CudaFailure(StatusCode::kUnavailable, device_, "cudaMallocHost", e);
    staging_bytes_ = bytes;
  }
  return std::span<uint8_t>(static_cast<uint8_t*>(staging_), bytes);
}

Status CudaKvCache::Fill(uint32_t block, uint64_t seed) {
  for (size_t t = 0; t < shapes_.size(); ++t) {
    KVTIER_ASSIGN_OR_RETURN(const std::span<uint8_t> page, Staging(shapes_[t].page_bytes));
    GenerateKvPage(page, seed, t);
    const cudaError_t e = cudaMemcpy(reinterpret_cast<void*>(PageAddr(t, block)), page.data(), page.size(),
                                     cudaMemcpyHostToDevice);
    if (e != cudaSuccess) return CudaFailure(StatusCode::kIoError, device_, "filling a block", e);
  }
  return Status::Ok();
}

Result<bool> CudaKvCache::Matches(uint32_t block, uint64_t seed) {
  std::vector<uint8_t> expected;
  for (size_t t = 0; t < shapes_.size(); ++t) {
    KVTIER_ASSIGN_OR_RETURN(const std::span<uint8_t> got, Staging(shapes_[t].page_bytes));
    expected.resize(got.size());
    GenerateKvPage(expected, seed, t);
    const cudaError_t e = cudaMemcpy(got.data(), reinterpret_cast<const void*>(PageAddr(t, block)), got.size(),
                                     cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) return CudaFailure(StatusCode::kIoError, device_, "reading a block back", e);
    if (std::memcmp(expected.data(), got.data(), got.size()) != 0) return false;
  }
  return true;
}

#else  // !KVTIER_HAVE_CUDA

Result<std::unique_ptr<CudaKvCache>> CudaKvCache::Create(int device, std::vector<HostKvTensorShape> /*tensors*/,
                                                         uint32_t /*num_blocks*/) {
  return Status(StatusCode::kUnavailable,
                "CUDA device " + std::to_string(device) + " requested, but kvtier was built without CUDA");
}
CudaKvCache::~CudaKvCache() = default;
uint64_t CudaKvCache::PageAddr(size_t, uint32_t) const { return 0; }
Result<std::span<uint8_t>> CudaKvCache::Staging(uint64_t) {
  return Status(StatusCode::kUnavailable, "built without CUDA");
}
DeviceKvCache CudaKvCache::Registration() const { return {}; }
Status CudaKvCache::Fill(uint32_t, uint64_t) { return Status(StatusCode::kUnavailable, "built without CUDA"); }
Result<bool> CudaKvCache::Matches(uint32_t, uint64_t) {
  return Status(StatusCode::kUnavailable, "built without CUDA");
}

#endif  // KVTIER_HAVE_CUDA

}  // namespace kvtier::internal
