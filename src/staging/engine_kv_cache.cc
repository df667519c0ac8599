// EngineKvCache (engine_kv_cache.h).
#include "staging/engine_kv_cache.h"

#include "staging/stager.h"

namespace kvtier::internal {

int ResolveDevice(int device) {
  if (device != kAutoDevice) return device;
  return CudaDevicePresent() ? 0 : kHostStandInDevice;
}

Result<std::unique_ptr<EngineKvCache>> EngineKvCache::Make(int device, std::vector<HostKvTensorShape> tensors,
                                                           uint32_t num_blocks) {
  auto cache = std::make_unique<EngineKvCache>();
  cache->device_ = ResolveDevice(device);
  if (cache->device_ == kHostStandInDevice) {
    cache->host_ = std::make_unique<HostKvCache>(std::move(tensors), num_blocks);
  } else {
    KVTIER_ASSIGN_OR_RETURN(cache->cuda_, CudaKvCache::Create(cache->device_, std::move(tensors), num_blocks));
  }
  return cache;
}

Status EngineKvCache::Fill(uint32_t block, uint64_t seed) {
  if (cuda_) return cuda_->Fill(block, seed);
  host_->Fill(block, seed);
  return Status::Ok();
}

Result<bool> EngineKvCache::Matches(uint32_t block, uint64_t seed) {
  if (cuda_) return cuda_->Matches(block, seed);
  return host_->Matches(block, seed);
}

}  // namespace kvtier::internal
