// CudaKvCache: an engine KV cache in CUDA device memory, the GPU twin of
// HostKvCache. `kvtier bench tiers` drives TieredStore through it on a
// machine with a GPU, so the end-to-end proof covers real device copies.
// Content follows GenerateKvPage, so a row stored from either cache
// verifies in the other.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kvtier/kv_cache.h"
#include "kvtier/result.h"
#include "staging/host_kv_cache.h"

namespace kvtier::internal {

class CudaKvCache {
 public:
  // num_blocks zero-filled blocks of each tensor on `device`. kUnavailable
  // without CUDA (build or device) or when cudaMalloc fails.
  static Result<std::unique_ptr<CudaKvCache>> Create(int device, std::vector<HostKvTensorShape> tensors,
                                                     uint32_t num_blocks);
  ~CudaKvCache();
  CudaKvCache(const CudaKvCache&) = delete;
  CudaKvCache& operator=(const CudaKvCache&) = delete;

  DeviceKvCache Registration() const;
  // Writes every page of `block` (synchronously: done when it returns).
  // Not thread-safe (one staging page).
  [[nodiscard]] Status Fill(uint32_t block, uint64_t seed);
  // Reads every page of `block` back and compares it with what Fill writes.
  Result<bool> Matches(uint32_t block, uint64_t seed);

 private:
  CudaKvCache(int device, std::vector<HostKvTensorShape> tensors, uint32_t num_blocks)
      : device_(device), shapes_(std::move(tensors)), num_blocks_(num_blocks) {}
  uint64_t PageAddr(size_t tensor, uint32_t block) const;
  Result<std::span<uint8_t>> Staging(uint64_t bytes);

  int device_;
  std::vector<HostKvTensorShape> shapes_;
  uint32_t num_blocks_;
  std::vector<void*> memory_;  // one cudaMalloc per tensor
  void* staging_ = nullptr;    // pinned, for Fill and Matches
  uint64_t staging_bytes_ = 0;
};

}  // namespace kvtier::internal
