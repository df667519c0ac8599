// transfer_bench: how close the Stager comes to the raw copy bandwidth
// between host memory and a device, per direction.
//
// On the same memory, in the same run, it measures
//   probe:  plain copies of the same total bytes between one contiguous host
//           buffer (the CPU tier's HostRegion, pinned with CUDA) and device
//           memory: cudaMemcpyAsync of 64 MiB pieces on one non-blocking
//           stream (a GPU), or memcpy split over as many threads as the
//           stager's host pool uses per direction (the host stand-in);
//   kvtier: Stager::Submit moving --rows rows in batches of --batch-rows
//           rows whose GPU block ids are a seeded random permutation (so
//           pages are scattered and rarely merge), every batch in flight at
//           once, timed from the first Submit to WaitIdle.
// Each figure is the best of --repeat passes after one untimed warm-up pass;
// GB = 1e9 bytes. The target is kvtier / probe >= 0.90.
// On a GPU, --copy picks the stager's path (GpuCopy): the copy engines,
// the copy kernel over the link, the device staging buffer, or auto (staged
// for small pages); the report says how many segments each path moved.
//
// --checksums on: stores ask the stager for each row's CRC32C and loads
// hand them back to be checked on the device side (CopyChecksums); the probe
// stays a plain copy, so the ratio shows what checksumming costs.
//
// The layout: one device slot with --tensors tensors of
// row_bytes / (tensors x blocks_per_chunk)-byte pages, unstrided.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_common.h"
#include "cpu_tier/host_region.h"
#include "staging/stager.h"
#include "staging/stager_internal.h"

#if KVTIER_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kvtier::internal {
namespace {

constexpr uint64_t kProbePieceBytes = uint64_t{64} << 20;

struct Flags {
  int device = kHostStandInDevice;
  uint64_t row_bytes = uint64_t{2} << 20;
  uint64_t rows = 512;
  uint32_t blocks_per_chunk = 16;
  uint32_t tensors = 1;
  uint32_t batch_rows = 64;
  int repeat = 3;
  uint64_t seed = 1;
  bool json = false;
  std::string copy = "auto";  // GpuCopy: auto, dma, kernel, staged
  std::string checksums = "off";  // on: CopyChecksums on every Submit
  bool crc() const { return checksums == "on"; }
};

GpuCopy CopyMode(const Flags& f) {
  if (f.copy == "dma") return GpuCopy::kDma;
  if (f.copy == "kernel") return GpuCopy::kKernel;
  if (f.copy == "staged") return GpuCopy::kStaged;
  return GpuCopy::kAuto;
}

struct Figures {
  double probe_gbps = 0;
  double kvtier_gbps = 0;
  double ratio() const { return probe_gbps > 0 ? kvtier_gbps / probe_gbps : 0; }
};

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Host rows plus the "device" side: device memory, or host memory standing in.
class Memory {
 public:
  ~Memory() {
#if KVTIER_HAVE_CUDA
    if (gpu_ != nullptr) static_cast<void>(cudaFree(gpu_));
#endif
  }
  Status Allocate(const Flags& f) {
    const uint64_t total = f.rows * f.row_bytes;
    KVTIER_ASSIGN_OR_RETURN(host_, HostRegion::Allocate(total));
    std::memset(host_->bytes().data(), 0x3c, total);  // fault every page in before timing
    if (f.device == kHostStandInDevice) {
      KVTIER_ASSIGN_OR_RETURN(stand_in_, HostRegion::Allocate(total));
      std::memset(stand_in_->bytes().data(), 0x7e, total);
      device_ = stand_in_->bytes().data();
      return Status::Ok();
    }
#if KVTIER_HAVE_CUDA
    cudaError_t e = cudaSetDevice(f.device);
    if (e == cudaSuccess) e = cudaMalloc(&gpu_, total);
    if (e == cudaSuccess) e = cudaMemset(gpu_, 0x7e, total);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) return Status(StatusCode::kUnavailable, std::string("device memory: ") + cudaGetErrorString(e));
    device_ = static_cast<uint8_t*>(gpu_);
    return Status::Ok();
#else
    return Status(StatusCode::kUnavailable, "--device " + std::to_string(f.device) +
                                                ": transfer_bench was built without CUDA");
#endif
  }
  uint8_t* host() { return host_->bytes().data(); }
  std::span<uint8_t> host_bytes() { return host_->bytes(); }
  uint8_t* device() { return device_; }

 private:
  std::unique_ptr<HostRegion> host_;
  std::unique_ptr<HostRegion> stand_in_;
  void* gpu_ = nullptr;
  uint8_t* device_ = nullptr;
};

// memcpy of `bytes` split over `threads` threads, as the host pool splits a batch.
double ProbeHost(uint8_t* dst, const uint8_t* src, uint64_t bytes, int threads) {
  const uint64_t share = (bytes / threads + 4095) / 4096 * 4096;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) {
    const uint64_t off = std::min(bytes, share * i), len = std::min(share, bytes - off);
    pool.emplace_back([=] { std::memcpy(dst + off, src + off, len); });
  }
  for (std::thread& t : pool) t.join();
  return Seconds(start);
}

Result<double> ProbeCuda([[maybe_unused]] uint8_t* dst, [[maybe_unused]] const uint8_t* src,
                         [[maybe_unused]] uint64_t bytes, [[maybe_unused]] bool to_device) {
#if KVTIER_HAVE_CUDA
  cudaStream_t stream = nullptr;
  cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) return Status(StatusCode::kIoError, cudaGetErrorString(e));
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t off = 0; off < bytes && e == cudaSuccess; off += kProbePieceBytes) {
    e = cudaMemcpyAsync(dst + off, src + off, std::min(kProbePieceBytes, bytes - off),
                        to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, stream);
  }
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  const double s = Seconds(start);
  static_cast<void>(cudaStreamDestroy(stream));
  if (e != cudaSuccess) return Status(StatusCode::kIoError, std::string("probe: ") + cudaGetErrorString(e));
  return s;
#else
  return Status(StatusCode::kUnavailable, "built without CUDA");
#endif
}

Result<double> Probe(const Flags& f, Memory* m, CopyDirection d) {
  const uint64_t bytes = f.rows * f.row_bytes;
  const bool to_device = d == CopyDirection::kHostToDevice;
  uint8_t* dst = to_device ? m->device() : m->host();
  const uint8_t* src = to_device ? m->host() : m->device();
  if (f.device == kHostStandInDevice) return ProbeHost(dst, src, bytes, kHostCopyThreadsPerDirection);
  return ProbeCuda(dst, src, bytes, to_device);
}

// Checks the finished tickets; with --checksums on, a store's CRCs are kept
// in crcs[row] (the loads of the same rows check against them) and a load
// must find every row intact.
Status CheckDone(const std::vector<FinishedCopy>& done, const std::vector<std::pair<uint64_t, uint64_t>>& firsts,
                 bool crc, std::vector<uint32_t>* crcs) {
  if (done.size() != firsts.size()) return Internal("a ticket went missing");
  for (const FinishedCopy& c : done) {
    KVTIER_RETURN_IF_ERROR(c.status);
    if (!crc) continue;
    const auto it = std::find_if(firsts.begin(), firsts.end(), [&](const auto& t) { return t.first == c.ticket; });
    if (it == firsts.end() || c.row_crcs.empty()) return Internal("a ticket came back without CRCs");
    for (const Status& row : c.row_status) KVTIER_RETURN_IF_ERROR(row);
    std::copy(c.row_crcs.begin(), c.row_crcs.end(), crcs->begin() + static_cast<std::ptrdiff_t>(it->second));
  }
  return Status::Ok();
}

// Every batch submitted at once, then WaitIdle; each ticket must end OK.
Result<double> TimeStager(const Flags& f, Stager* stager, Memory* m, const std::vector<uint32_t>& ids,
                          CopyDirection d, std::vector<uint32_t>* crcs) {
  std::vector<uint8_t*> rows(f.rows);
  for (uint64_t i = 0; i < f.rows; ++i) rows[i] = m->host() + i * f.row_bytes;
  const bool load = d == CopyDirection::kHostToDevice;
  std::vector<std::pair<uint64_t, uint64_t>> firsts;  // (ticket, first row)
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t first = 0; first < f.rows; first += f.batch_rows) {
    const uint64_t n = std::min<uint64_t>(f.batch_rows, f.rows - first);
    std::span<uint8_t* const> batch(rows.data() + first, n);
    CopyChecksums checksums{f.crc() && !load, {}};
    if (f.crc() && load) checksums.expected = std::span<const uint32_t>(crcs->data() + first, n);
    KVTIER_ASSIGN_OR_RETURN(const uint64_t ticket,
                            stager->Submit(d, batch, {ids.data() + first * f.blocks_per_chunk, n * f.blocks_per_chunk},
                                           checksums));
    firsts.emplace_back(ticket, first);
  }
  KVTIER_RETURN_IF_ERROR(stager->WaitIdle(600000));
  const double s = Seconds(start);
  std::vector<FinishedCopy> done;
  stager->PollFinished(&done);
  KVTIER_RETURN_IF_ERROR(CheckDone(done, firsts, f.crc(), crcs));
  return s;
}

Result<std::unique_ptr<Stager>> MakeStager(const Flags& f, Memory* m) {
  DeviceKvCache dev;
  dev.device = f.device;
  const uint64_t page = f.row_bytes / (uint64_t{f.tensors} * f.blocks_per_chunk);
  const uint64_t tensor_bytes = f.rows * f.row_bytes / f.tensors;
  for (uint32_t t = 0; t < f.tensors; ++t) {
    dev.tensors.push_back(KvTensorSpec{reinterpret_cast<uintptr_t>(m->device() + t * tensor_bytes), page, page,
                                       static_cast<uint32_t>(f.rows * f.blocks_per_chunk)});
  }
  StagerOptions options{{dev}, f.blocks_per_chunk, {}, GpuCopy::kAuto, {}};
  options.gpu_copy = CopyMode(f);
  options.host_ranges = {m->host_bytes()};
  KVTIER_ASSIGN_OR_RETURN(auto stager, Stager::Create(std::move(options)));
  if (stager->row_bytes() != f.row_bytes) return Internal("layout row size differs from --row-bytes");
  return stager;
}

Status CheckFlags(const Flags& f) {
  const uint64_t pages_per_row = uint64_t{f.tensors} * f.blocks_per_chunk;
  if (f.row_bytes == 0 || f.row_bytes % 4096 != 0) return InvalidArgument("--row-bytes must be a positive multiple of 4096");
  if (f.rows == 0 || f.batch_rows == 0 || f.repeat < 1) return InvalidArgument("--rows, --batch-rows and --repeat must be > 0");
  if (pages_per_row == 0 || f.row_bytes % pages_per_row != 0) {
    return InvalidArgument("--row-bytes must split into tensors x blocks-per-chunk equal pages");
  }
  if (f.rows * f.blocks_per_chunk > UINT32_MAX) return InvalidArgument("too many blocks");
  if (f.device >= 0 && !CudaDevicePresent()) {
    return Status(StatusCode::kUnavailable, "--device " + std::to_string(f.device) + ": no CUDA device present");
  }
  return CheckBufferMemory(f.row_bytes, f.device == kHostStandInDevice ? 2 * f.rows : f.rows);
}

// Best-of-repeat figures for one direction (after an untimed warm-up pass).
Result<Figures> Measure(const Flags& f, Stager* stager, Memory* m, const std::vector<uint32_t>& ids,
                        CopyDirection d, std::vector<uint32_t>* crcs) {
  const double gb = static_cast<double>(f.rows * f.row_bytes) / 1e9;
  Figures best;
  for (int pass = 0; pass <= f.repeat; ++pass) {
    KVTIER_ASSIGN_OR_RETURN(double probe_s, Probe(f, m, d));
    KVTIER_ASSIGN_OR_RETURN(double kvtier_s, TimeStager(f, stager, m, ids, d, crcs));
    if (pass == 0) continue;
    best.probe_gbps = std::max(best.probe_gbps, gb / probe_s);
    best.kvtier_gbps = std::max(best.kvtier_gbps, gb / kvtier_s);
  }
  return best;
}

void PrintChecksums(const Flags& f, std::string_view backend, const GpuCopyCounts& counts) {
  std::printf("checksums %s", f.checksums.c_str());
  if (f.crc()) {
    const char* where = backend == "host"         ? "by the host stand-in's copy workers"
                        : counts.crc_on_device ? "on the GPU"
                                               : "on the CPU (the device CRC failed its self-check)";
    std::printf(" (CRC32C computed %s; %llu bytes on the device)", where,
                static_cast<unsigned long long>(counts.crc_device_bytes));
  }
}

void Print(const Flags& f, const Stager& stager, const Figures& h2d, const Figures& d2h) {
  const std::string_view backend = stager.backend_name();
  const GpuCopyCounts counts = stager.gpu_copy_counts();
  if (f.json) {
    auto one = [](const Figures& x) {
      return nlohmann::json{{"probe_gbps", Round(x.probe_gbps, 3)},
                            {"kvtier_gbps", Round(x.kvtier_gbps, 3)},
                            {"ratio", Round(x.ratio(), 3)}};
    };
    const nlohmann::json copy = {{"mode", f.copy},
                                 {"kernel_segments", counts.kernel_segments},
                                 {"dma_segments", counts.dma_segments},
                                 {"staged_segments", counts.staged_segments}};
    const nlohmann::json checksums = {{"mode", f.checksums},
                                      {"on_device", counts.crc_on_device},
                                      {"device_bytes", counts.crc_device_bytes}};
    std::printf("%s\n", nlohmann::json{{"h2d", one(h2d)}, {"d2h", one(d2h)}, {"copy", copy}, {"checksums", checksums}}
                             .dump()
                             .c_str());
    return;
  }
  std::printf("transfer_bench: backend %.*s, device %d; %llu rows x %s = %.3f GB a pass; %u tensor(s) x %u blocks "
              "per chunk (%s pages); batches of %u rows; best of %d\n",
              static_cast<int>(backend.size()), backend.data(), f.device, static_cast<unsigned long long>(f.rows),
              HumanBytes(f.row_bytes).c_str(), static_cast<double>(f.rows * f.row_bytes) / 1e9, f.tensors,
              f.blocks_per_chunk, HumanBytes(f.row_bytes / (f.tensors * f.blocks_per_chunk)).c_str(),
              f.batch_rows, f.repeat);
  if (backend == "cuda") {
    std::printf("copy mode %s: segments staged %llu, by the copy kernel %llu, by the copy engines %llu\n",
                f.copy.c_str(), static_cast<unsigned long long>(counts.staged_segments),
                static_cast<unsigned long long>(counts.kernel_segments),
                static_cast<unsigned long long>(counts.dma_segments));
  }
  PrintChecksums(f, backend, counts);
  std::printf("\n%-9s %12s %12s %7s\n", "direction", "probe GB/s", "kvtier GB/s", "ratio");
  std::printf("%-9s %12.2f %12.2f %7.3f\n", "h2d", h2d.probe_gbps, h2d.kvtier_gbps, h2d.ratio());
  std::printf("%-9s %12.2f %12.2f %7.3f\n", "d2h", d2h.probe_gbps, d2h.kvtier_gbps, d2h.ratio());
}

Status Run(const Flags& f) {
  KVTIER_RETURN_IF_ERROR(CheckFlags(f));
  Memory m;
  KVTIER_RETURN_IF_ERROR(m.Allocate(f));
  KVTIER_ASSIGN_OR_RETURN(auto stager, MakeStager(f, &m));
  std::vector<uint32_t> ids(f.rows * f.blocks_per_chunk);
  std::iota(ids.begin(), ids.end(), 0u);
  std::shuffle(ids.begin(), ids.end(), std::mt19937_64(f.seed));
  // Stores first: their CRCs are what the loads of the same rows check.
  std::vector<uint32_t> crcs(f.rows);
  KVTIER_ASSIGN_OR_RETURN(Figures d2h, Measure(f, stager.get(), &m, ids, CopyDirection::kDeviceToHost, &crcs));
  KVTIER_ASSIGN_OR_RETURN(Figures h2d, Measure(f, stager.get(), &m, ids, CopyDirection::kHostToDevice, &crcs));
  Print(f, *stager, h2d, d2h);
  return Status::Ok();
}

}  // namespace
}  // namespace kvtier::internal

int main(int argc, char** argv) {
  kvtier::internal::Flags f;
  CLI::App app{"Stager bandwidth against plain copies of the same bytes", "transfer_bench"};
  app.add_option("--device", f.device, "CUDA device ordinal, or -1 for the host stand-in")->capture_default_str();
  app.add_option("--row-bytes", f.row_bytes, "Bytes per row (a multiple of 4096)")
      ->capture_default_str()
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--rows", f.rows, "Rows moved per pass and direction")->capture_default_str();
  app.add_option("--blocks-per-chunk", f.blocks_per_chunk, "GPU blocks per row")->capture_default_str();
  app.add_option("--tensors", f.tensors, "KV tensors per device")->capture_default_str();
  app.add_option("--batch-rows", f.batch_rows, "Rows per Submit")->capture_default_str();
  app.add_option("--repeat", f.repeat, "Timed passes per figure (best is kept)")->capture_default_str();
  app.add_option("--seed", f.seed, "Seed of the block-id permutation")->capture_default_str();
  app.add_option("--copy", f.copy, "CUDA copy path: auto, dma (copy engines), kernel or staged")
      ->check(CLI::IsMember({"auto", "dma", "kernel", "staged"}))
      ->capture_default_str();
  app.add_option("--checksums", f.checksums, "on: stores return each row's CRC32C and loads check it (CopyChecksums)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  app.add_flag("--json", f.json, "Print {\"h2d\": {...}, \"d2h\": {...}} only");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "transfer_bench: %s\nRun 'transfer_bench --help' for usage.\n", e.what());
    return 2;
  }
  const kvtier::Status s = kvtier::internal::Run(f);
  if (!s.ok()) {
    std::fprintf(stderr, "transfer_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
