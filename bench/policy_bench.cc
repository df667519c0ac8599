// How fast are the CPU tier's eviction policies (LRU and ARC) at the size a
// CPU tier runs at? Every figure uses a policy holding 100k rows (capacity
// 100k) keyed by random 32-byte hashes, and reports items/s:
//   BM_GetHit/<policy>
//       Get() of present keys in random order.
//   BM_InsertEvict/<policy>/<n>/<held%>
//       Steady state of a full cache: evict n rows, insert n new (not ready)
//       rows, mark them ready as a completed store does; items are rows
//       evicted. New keys were last evicted 200k evictions ago (no longer
//       ARC ghosts). held%=50: every other row is held (ref_cnt 1)
//       throughout, so the held rows soon are the oldest 50k, which an
//       eviction that scans the recency order would walk past every time.
//   BM_Touch64/<policy>
//       Touch() of a 64-key prefix (a request's blocks at lookup), a
//       different prefix each time; items are keys touched.
// policy: 0 = lru, 1 = arc.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "cpu_tier/cache_policy.h"

namespace {

using kvtier::EvictionPolicy;
using kvtier::OffloadKey;
using kvtier::internal::CachePolicy;
using kvtier::internal::MakeCachePolicy;
using kvtier::internal::OffloadKeySet;
using kvtier::internal::RowStatus;

constexpr size_t kRows = 100000;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// 3 x kRows keys: the first kRows fill the policy, the rest are new blocks.
const std::vector<OffloadKey>& AllKeys() {
  static const std::vector<OffloadKey> keys = [] {
    std::vector<OffloadKey> out(3 * kRows);
    for (size_t i = 0; i < out.size(); ++i) {
      uint8_t bytes[32];
      for (int w = 0; w < 4; ++w) {
        const uint64_t v = SplitMix64(i * 4 + static_cast<uint64_t>(w));
        std::memcpy(bytes + 8 * w, &v, 8);
      }
      out[i].hash = *kvtier::BlockHash::FromBytes(bytes);
    }
    return out;
  }();
  return keys;
}

EvictionPolicy PolicyOf(const benchmark::State& state) {
  return state.range(0) == 0 ? EvictionPolicy::kLru : EvictionPolicy::kArc;
}

// A full policy of kRows ready rows; every `held_every`-th one (0: none) is
// held by one reader.
std::unique_ptr<CachePolicy> FullPolicy(EvictionPolicy kind, size_t held_every) {
  auto policy = MakeCachePolicy(kind, kRows);
  const std::vector<OffloadKey>& keys = AllKeys();
  for (size_t i = 0; i < kRows; ++i) {
    const bool held = held_every != 0 && i % held_every == 0;
    policy->Insert(keys[i], RowStatus{held ? 1 : 0, static_cast<uint32_t>(i)});
  }
  return policy;
}

void BM_GetHit(benchmark::State& state) {
  auto policy = FullPolicy(PolicyOf(state), 0);
  std::vector<OffloadKey> order(AllKeys().begin(), AllKeys().begin() + kRows);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(42));
  size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(policy->Get(order[i]));
    if (++i == order.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_GetHit)->Arg(0)->Arg(1);

void BM_InsertEvict(benchmark::State& state) {
  const auto batch = static_cast<size_t>(state.range(1));
  auto policy = FullPolicy(PolicyOf(state), state.range(2) == 50 ? 2 : 0);
  // Keys not in the policy, oldest-evicted first: a ring that hands out its
  // oldest key for each store and takes back each evicted key.
  std::vector<OffloadKey> absent(AllKeys().begin() + kRows, AllKeys().end());
  size_t oldest = 0;
  std::vector<OffloadKey> stored(batch);
  const OffloadKeySet none;
  for (auto _ : state) {
    std::optional<kvtier::internal::EvictedRows> evicted = policy->Evict(batch, none);
    if (!evicted) {
      state.SkipWithError("eviction failed");
      break;
    }
    for (size_t i = 0; i < batch; ++i) {
      stored[i] = absent[oldest];
      absent[oldest] = (*evicted)[i].first;
      oldest = oldest + 1 == absent.size() ? 0 : oldest + 1;
      policy->Insert(stored[i], RowStatus{-1, (*evicted)[i].second.row});
    }
    for (const OffloadKey& key : stored) {  // the store completes
      policy->Get(key)->ref_cnt = 0;
      policy->MarkEvictable(key);
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(batch));
}
BENCHMARK(BM_InsertEvict)->ArgsProduct({{0, 1}, {1, 16}, {0, 50}});

void BM_Touch64(benchmark::State& state) {
  constexpr size_t kPrefix = 64;
  auto policy = FullPolicy(PolicyOf(state), 0);
  std::vector<OffloadKey> order(AllKeys().begin(), AllKeys().begin() + kRows);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(7));
  size_t start = 0;
  for (auto _ : state) {
    policy->Touch(std::span<const OffloadKey>(order.data() + start, kPrefix));
    start += kPrefix;
    if (start + kPrefix > order.size()) start = 0;
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(kPrefix));
}
BENCHMARK(BM_Touch64)->Arg(0)->Arg(1);

}  // namespace

BENCHMARK_MAIN();
