// EngineKvCache: the engine-side KV cache that kvtier's own drivers
// (`kvtier bench tiers`, `kvtier replay`) hand to TieredStore: CUDA device
// memory (CudaKvCache) where a GPU is present, else host memory registered
// as the host stand-in device (HostKvCache). Block content follows
// GenerateKvPage either way.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kvtier/kv_cache.h"
#include "kvtier/result.h"
#include "staging/cuda_kv_cache.h"
#include "staging/host_kv_cache.h"

namespace kvtier::internal {

// A device argument meaning: CUDA device 0 when one is present, else the
// host stand-in.
inline constexpr int kAutoDevice = -2;

// kAutoDevice resolved; other values unchanged.
int ResolveDevice(int device);

class EngineKvCache {
 public:
  // `device`: a CUDA ordinal, kHostStandInDevice or kAutoDevice.
  static Result<std::unique_ptr<EngineKvCache>> Make(int device, std::vector<HostKvTensorShape> tensors,
                                                     uint32_t num_blocks);

  int device() const { return cuda_ ? device_ : kHostStandInDevice; }
  DeviceKvCache Registration() const { return cuda_ ? cuda_->Registration() : host_->Registration(); }
  [[nodiscard]] Status Fill(uint32_t block, uint64_t seed);
  Result<bool> Matches(uint32_t block, uint64_t seed);

 private:
  int device_ = kHostStandInDevice;
  std::unique_ptr<HostKvCache> host_;
  std::unique_ptr<CudaKvCache> cuda_;
};

}  // namespace kvtier::internal
