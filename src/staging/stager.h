// Stager: moves chunks between the engine's KV cache (GPU, or the host
// stand-in) and CPU rows, never blocking the caller or the engine's stream.
//
// One Stager serves all registered devices: a row's slot w is copied to or
// from device w (kv_cache.h gives the row layout). Adjacent pages that are
// adjacent on both sides are merged into one copy. With CUDA, each device has
// its own non-blocking streams per direction and completion is seen through
// events; on the host stand-in the copies run on worker threads.
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvtier/kv_cache.h"
#include "kvtier/options.h"
#include "kvtier/result.h"

namespace kvtier::internal {

enum class CopyDirection {
  kDeviceToHost,  // a store: GPU pages -> CPU row
  kHostToDevice,  // a load: CPU row -> GPU pages
};

// How a CUDA device's copies run is the config's GpuCopy (kvtier/options.h;
// the host stand-in ignores it). Copy engines (DMA, cudaMemcpyBatchAsync)
// cost no SM time but move small scattered pages slowly; the copy kernel
// (copy_kernel.h) moves them at the link's speed on a few SMs; kStaged puts
// every batch through a device staging buffer (staged_copy.h).
//
// GpuCopy::kAuto sends a batch whose segments average below this through the staging
// buffer (a load) or the kernel (a store; each falls back to the other), and
// larger ones to the copy engines directly. Measured on an H100 (PCIe 5 x16,
// 55 GB/s probe): batched DMA of scattered 64 KiB pages 52.8 GB/s, of 16 KiB
// pages 20 GB/s; kernel and staged 48-51 GB/s for 4-32 KiB pages.
inline constexpr uint64_t kKernelBelowMeanBytes = uint64_t{64} << 10;

struct StagerOptions {
  std::vector<DeviceKvCache> devices;  // worker slots, in order; non-empty
  uint32_t blocks_per_chunk = 1;       // GPU blocks per row, > 0
  // Called (from a kvtier thread, without locks held) after a ticket becomes
  // pollable; may be empty.
  std::function<void()> on_finished;
  GpuCopy gpu_copy = GpuCopy::kAuto;  // OffloadConfig::gpu_copy
  // Pinned, device-mapped memory (HostRegion) that rows come from. The kernel
  // only runs on batches whose rows all lie inside these ranges (checked with
  // the driver at Create); other batches, or none given, use DMA.
  std::vector<std::span<uint8_t>> host_ranges;
};

// Segments (merged page copies) each CUDA path has issued.
struct GpuCopyCounts {
  uint64_t kernel_segments = 0;  // the kernel over the link
  uint64_t dma_segments = 0;     // the copy engines, page by page
  uint64_t staged_segments = 0;  // through the staging buffer
  uint64_t crc_device_bytes = 0;  // bytes whose CRC32C the GPU computed (CopyChecksums)
  bool crc_on_device = false;     // the device CRC passed its start-up self-check
};

// What a Submit asks of checksums (FORMAT.md L60/L102: the CRC32C of the
// whole row, padding included). The CRCs are computed where the data is on
// the device side: on the GPU by a kernel on the copy's own stream (the
// source pages of a store, the landed pages of a load), on the host stand-in
// by its copy workers; the CPU only folds per-piece CRCs together and reads
// the row's padding (row_crc.h). If the device's CRC failed its start-up
// self-check, the CPU computes the CRCs from the row instead.
struct CopyChecksums {
  // FinishedCopy::row_crcs gets each row's CRC32C (after a store: of what the
  // row now holds; after a load: of what landed on the device, with the
  // row's own padding).
  bool compute = false;
  // A load only: one CRC32C per row, the one the block carries. A row whose
  // landed bytes differ gets kCorruption in FinishedCopy::row_status (the
  // other rows of the ticket are unaffected). Implies compute.
  std::span<const uint32_t> expected;
  bool wanted() const { return compute || !expected.empty(); }
};

struct FinishedCopy {
  uint64_t ticket = 0;
  Status status;  // OK, or why the copy failed (the rows' contents are then undefined)
  // With CopyChecksums and status OK: one per row, in the order of `rows`.
  std::vector<uint32_t> row_crcs;
  // With CopyChecksums::expected and status OK: one per row; kCorruption for
  // a row whose CRC differs from the expected one.
  std::vector<Status> row_status;
};

class Stager {
 public:
  // kInvalidArgument for an empty or inconsistent layout (zero sizes, a stride
  // below the page size, tensors of one device with different num_blocks);
  // kUnavailable for a CUDA device when kvtier was built without CUDA or the
  // device is absent.
  static Result<std::unique_ptr<Stager>> Create(StagerOptions options);
  virtual ~Stager() = default;

  // Bytes of one row (a multiple of 4096): the sum over devices and tensors of
  // page_bytes x blocks_per_chunk, rounded up.
  virtual uint64_t row_bytes() const = 0;

  // Copies rows[i] <-> the GPU blocks gpu_blocks[i*bpc .. i*bpc+bpc-1] of every
  // device. gpu_blocks.size() must be rows.size() * blocks_per_chunk and every
  // id < num_blocks (else kInvalidArgument, nothing copied). Returns a ticket
  // at once; the rows must stay valid until the ticket is polled.
  // With `checksums` (CopyChecksums), the ticket also reports each row's
  // CRC32C and, for a load, which rows arrived corrupt; kInvalidArgument for
  // expected CRCs on a store, a count other than rows.size(), or rows that
  // overlap. The expected CRCs are copied; the span need not outlive the call.
  virtual Result<uint64_t> Submit(CopyDirection direction, std::span<uint8_t* const> rows,
                                  std::span<const uint32_t> gpu_blocks, const CopyChecksums& checksums) = 0;
  Result<uint64_t> Submit(CopyDirection direction, std::span<uint8_t* const> rows,
                          std::span<const uint32_t> gpu_blocks) {
    return Submit(direction, rows, gpu_blocks, CopyChecksums{});
  }
  // Appends finished tickets to `out`; never blocks. Returns how many.
  virtual size_t PollFinished(std::vector<FinishedCopy>* out) = 0;
  // Blocks until nothing is in flight; kTimedOut after timeout_ms.
  virtual Status WaitIdle(uint32_t timeout_ms) = 0;
  // "host" or "cuda".
  virtual std::string_view backend_name() const = 0;
  // Zero without CUDA slots.
  virtual GpuCopyCounts gpu_copy_counts() const = 0;
};

// True when kvtier was built with CUDA and at least one CUDA device is usable
// (detected at run time).
bool CudaDevicePresent();

// Fault injection, for tests only: while n > 0, each piece the host
// stand-in copies to the "GPU" gets its first landed byte flipped before its
// CRC32C is taken, and n drops by one (a copy that went wrong on the way,
// the CPU row untouched). 0, the default: no fault.
std::atomic<int>& HostLoadFaultsForTest();

}  // namespace kvtier::internal
