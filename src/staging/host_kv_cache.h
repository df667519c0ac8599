// HostKvCache: an engine KV cache in host memory, registered with the host
// stand-in device. It lets the CLI (`kvtier bench tiers`, `kvtier replay`)
// and the tests drive TieredStore exactly as an engine would, without a GPU.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvtier/kv_cache.h"

namespace kvtier::internal {

struct HostKvTensorShape {
  uint64_t page_bytes = 0;         // bytes copied per block, > 0
  uint64_t page_stride_bytes = 0;  // >= page_bytes; 0 means page_bytes
};

// The bytes Fill writes into page `tensor` of a block for `seed`: the same
// rule for every engine-side cache (this one, CudaKvCache).
void GenerateKvPage(std::span<uint8_t> page, uint64_t seed, size_t tensor);

class HostKvCache {
 public:
  // num_blocks blocks of each tensor, zero-filled.
  HostKvCache(std::vector<HostKvTensorShape> tensors, uint32_t num_blocks);
  HostKvCache(const HostKvCache&) = delete;
  HostKvCache& operator=(const HostKvCache&) = delete;

  // The registration to pass in TieredStoreOptions::devices.
  DeviceKvCache Registration() const;
  uint32_t num_blocks() const { return num_blocks_; }
  // The copied bytes of block `block` of tensor `tensor`.
  std::span<uint8_t> Page(size_t tensor, uint32_t block);
  // Fills every page of `block` with bytes derived from `seed`.
  void Fill(uint32_t block, uint64_t seed);
  // True when every page of `block` holds the bytes Fill(block', seed) wrote
  // (for any block': the content does not depend on the block id).
  bool Matches(uint32_t block, uint64_t seed);

 private:
  std::vector<HostKvTensorShape> shapes_;
  uint32_t num_blocks_;
  std::vector<std::vector<uint8_t>> memory_;  // one buffer per tensor
};

}  // namespace kvtier::internal
