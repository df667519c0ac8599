#include "staging/host_kv_cache.h"

#include <cstring>

namespace kvtier::internal {
namespace {

// splitmix64: a fast, well-mixed byte stream for test and benchmark content.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void Generate(std::span<uint8_t> out, uint64_t seed) {
  uint64_t state = Mix(seed);
  size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) {
    state = Mix(state);
    std::memcpy(out.data() + i, &state, 8);
  }
  state = Mix(state);
  for (; i < out.size(); ++i) out[i] = static_cast<uint8_t>(state >> (8 * (i % 8)));
}

}  // namespace

void GenerateKvPage(std::span<uint8_t> page, uint64_t seed, size_t tensor) { Generate(page, Mix(seed) + tensor); }

HostKvCache::HostKvCache(std::vector<HostKvTensorShape> tensors, uint32_t num_blocks)
    : shapes_(std::move(tensors)), num_blocks_(num_blocks) {
  for (HostKvTensorShape& shape : shapes_) {
    if (shape.page_stride_bytes == 0) shape.page_stride_bytes = shape.page_bytes;
    memory_.emplace_back(shape.page_stride_bytes * num_blocks_, 0);
  }
}

DeviceKvCache HostKvCache::Registration() const {
  DeviceKvCache device;
  device.device = kHostStandInDevice;
  for (size_t t = 0; t < shapes_.size(); ++t) {
    device.tensors.push_back(KvTensorSpec{reinterpret_cast<uint64_t>(memory_[t].data()), shapes_[t].page_bytes,
                                          shapes_[t].page_stride_bytes, num_blocks_});
  }
  return device;
}

std::span<uint8_t> HostKvCache::Page(size_t tensor, uint32_t block) {
  return {memory_[tensor].data() + shapes_[tensor].page_stride_bytes * block, shapes_[tensor].page_bytes};
}

void HostKvCache::Fill(uint32_t block, uint64_t seed) {
  for (size_t t = 0; t < shapes_.size(); ++t) GenerateKvPage(Page(t, block), seed, t);
}

bool HostKvCache::Matches(uint32_t block, uint64_t seed) {
  std::vector<uint8_t> expected;
  for (size_t t = 0; t < shapes_.size(); ++t) {
    std::span<uint8_t> page = Page(t, block);
    expected.resize(page.size());
    GenerateKvPage(expected, seed, t);
    if (std::memcmp(expected.data(), page.data(), page.size()) != 0) return false;
  }
  return true;
}

}  // namespace kvtier::internal
