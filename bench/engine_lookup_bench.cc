// What VllmTier's lookup interest tracking costs as the
// number of live requests sharing keys grows. Every request asks for the
// same 16 keys each step (a common system prompt), as vLLM's scheduler does
// while requests wait. With per-key sets a lookup and a FinishRequest cost
// the same at 10^3 and 10^5 requests; the per-key lists they replaced cost
// O(requests) each (16,000 requests: 2.5 s per step, 7.3 s to finish them).
// Prints ns per lookup (the step in which every request asks again) and per
// FinishRequest at each size, then the ratios largest / smallest (~1: no
// growth). Usage: engine_lookup_bench [max_requests] (default 100000).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvtier/vllm_tier.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kRow = 4096;
constexpr int kKeys = 16;

struct Cost {
  double lookup_ns = 0;
  double finish_ns = 0;
};

std::vector<kvtier::OffloadKey> SharedKeys() {
  std::vector<kvtier::OffloadKey> keys;
  for (int i = 0; i < kKeys; ++i) {
    std::vector<uint8_t> bytes(32, 0x5a);
    bytes[0] = static_cast<uint8_t>(i);
    keys.push_back({kvtier::BlockHash::FromBytes(bytes).value(), 0});
  }
  return keys;
}

std::unique_ptr<kvtier::VllmTier> Open(const std::string& root, std::span<uint8_t> rows) {
  kvtier::VllmTierOptions o;
  o.fs.tier.root_dir = root;
  o.fs.ns.model_name = "kvtier-bench/lookup";
  o.fs.ns.kv_cache_groups.push_back({16, {"l0"}});
  o.fs.row_bytes = kRow;
  o.rows = rows;
  auto tier = kvtier::VllmTier::Open(o);
  if (!tier.ok()) {
    std::fprintf(stderr, "engine_lookup_bench: %s\n", tier.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(tier).value();
}

double NsPer(Clock::time_point start, size_t n) {
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() / static_cast<double>(n);
}

// One tier, `n` requests: the first step asks and flushes, the timed step
// asks again (verdicts cached), then every request finishes (timed).
Cost Measure(int n, const std::string& root, std::span<uint8_t> rows) {
  std::unique_ptr<kvtier::VllmTier> tier = Open(root, rows);
  const std::vector<kvtier::OffloadKey> keys = SharedKeys();
  std::vector<std::string> requests;
  for (int i = 0; i < n; ++i) requests.push_back("req-" + std::to_string(i));
  for (const std::string& r : requests) {
    for (const auto& k : keys) tier->Lookup(k, r);
  }
  if (!tier->FlushLookups().ok()) std::exit(1);
  while (tier->Lookup(keys.back(), requests[0]) == kvtier::LookupVerdict::kRetry) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  Cost cost;
  Clock::time_point start = Clock::now();
  for (const std::string& r : requests) {
    for (const auto& k : keys) tier->Lookup(k, r);
  }
  cost.lookup_ns = NsPer(start, requests.size() * keys.size());
  start = Clock::now();
  for (const std::string& r : requests) tier->FinishRequest(r);
  cost.finish_ns = NsPer(start, requests.size());
  tier->Shutdown();
  return cost;
}

}  // namespace

int main(int argc, char** argv) {
  const int max_requests = argc > 1 ? std::atoi(argv[1]) : 100000;
  char tmpl[] = "/tmp/kvtier-lookup-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return 1;
  std::vector<uint8_t> region(16 * kRow);
  std::vector<Cost> costs;
  std::printf("%10s %14s %18s\n", "requests", "ns/lookup", "ns/FinishRequest");
  for (int n = 1000; n <= max_requests; n *= 10) {
    costs.push_back(Measure(n, tmpl, region));
    std::printf("%10d %14.0f %18.0f\n", n, costs.back().lookup_ns, costs.back().finish_ns);
  }
  if (costs.size() > 1) {
    std::printf("ratio largest/smallest: lookup %.2f, FinishRequest %.2f (quadratic tracking: ~%d)\n",
                costs.back().lookup_ns / costs.front().lookup_ns, costs.back().finish_ns / costs.front().finish_ns,
                max_requests / 1000);
  }
  std::filesystem::remove_all(tmpl);
  return 0;
}
