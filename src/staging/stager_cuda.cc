// The CUDA backend: per device one non-blocking stream per direction (so
// loads and stores overlap on a full-duplex link and never queue behind the
// engine's stream). A batch's merged segments go to the copy engines in one
// cudaMemcpyBatchAsync when they are large; small ones go through a device
// staging buffer (staged_copy.h) or, failing that, to the copy kernel over
// the link when the rows lie in mapped pinned memory (GpuCopy); then an
// event.
// Per stream, a completion thread waits for the events in order (blocking
// sync: it sleeps, it does not spin) and finishes the tickets. No host
// function goes into the stream: the stream would stall until the driver ran
// it, which cost ~20% of the link with 16 MiB batches.
//
// Built without CUDA, this file only answers "no device".
#include <algorithm>
#include <string>
#include <utility>

#include "staging/stager_internal.h"

#if KVTIER_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "staging/copy_kernel.h"
#include "staging/device_crc.h"
#include "staging/staged_copy.h"
#endif

namespace kvtier::internal {

#if KVTIER_HAVE_CUDA
namespace {

std::string CudaErrorText(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

Status CudaIoError(int ordinal, const std::string& what, cudaError_t e) {
  return Status(StatusCode::kIoError,
                "CUDA device " + std::to_string(ordinal) + ": " + what + " failed: " + CudaErrorText(e));
}

// Makes `ordinal` current for the scope and restores the caller's device:
// Submit runs on the engine's threads, whose current device must not change.
class ScopedDevice {
 public:
  explicit ScopedDevice(int ordinal) : ordinal_(ordinal) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    status_ = previous_ == ordinal ? cudaSuccess : cudaSetDevice(ordinal);
  }
  ~ScopedDevice() {
    if (previous_ >= 0 && previous_ != ordinal_) static_cast<void>(cudaSetDevice(previous_));
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  cudaError_t status() const { return status_; }

 private:
  int ordinal_;
  int previous_ = -1;
  cudaError_t status_ = cudaSuccess;
};

Status CheckDevicePresent(int ordinal) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    static_cast<void>(cudaGetLastError());  // not sticky; keep later calls clean
    return Status(StatusCode::kUnavailable, "CUDA device " + std::to_string(ordinal) +
                                                " not present (cudaGetDeviceCount: " + CudaErrorText(e) + ")");
  }
  if (ordinal >= count) {
    return Status(StatusCode::kUnavailable, "CUDA device " + std::to_string(ordinal) +
                                                " not present (cudaGetDeviceCount: " + std::to_string(count) +
                                                " device(s))");
  }
  return Status::Ok();
}

struct DeviceStreams;

// One device's part of a ticket, on its way to the completion thread.
struct Pending {
  uint64_t ticket = 0;
  DeviceStreams* dev = nullptr;
  cudaEvent_t event = nullptr;  // null: nothing to wait for (the issue failed)
  Status status;                // an error while issuing
  PartCrc crc;                  // this part's CRC pieces (CopyChecksums), if any
  CrcSlot crc_slot;             // where the CRC kernel writes them
};

// A stream's completion thread and its queue, in the stream's order.
struct Lane {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Pending> queue;
  bool stop = false;
  std::thread thread;
};

struct DeviceStreams {
  int ordinal = 0;
  std::atomic<bool> kernel_usable{true};  // false after a launch failed (no image for this GPU)
  cudaStream_t stream[2] = {nullptr, nullptr};  // by CopyDirection
  Lane lanes[2];                                // by CopyDirection
  std::unique_ptr<StagedCopier> staged[2];      // by CopyDirection
  std::unique_ptr<DeviceCrc> crc;               // checksummed staging (self-checked)
  std::mutex event_mu;
  std::vector<cudaEvent_t> free_events;  // recycled once their copies are seen done
  std::vector<cudaEvent_t> all_events;   // destroyed with the copier
};

class CudaCopierImpl final : public CudaCopier {
 public:
  CudaCopierImpl(TicketBook* book, GpuCopy mode) : book_(book), mode_(mode) {}
  ~CudaCopierImpl() override;
  Status Init(const CudaCopierOptions& options);
  void Start(uint64_t ticket, CopyDirection direction, std::span<const std::vector<CopySegment>> per_device,
             std::span<const PartCrc> crc_per_device) override;
  GpuCopyCounts counts() const override {
    GpuCopyCounts c{kernel_segments_.load(std::memory_order_relaxed), dma_segments_.load(std::memory_order_relaxed),
                    staged_segments_.load(std::memory_order_relaxed), 0, !devices_.empty()};
    for (const auto& dev : devices_) {
      c.crc_device_bytes += dev->crc->device_bytes();
      c.crc_on_device = c.crc_on_device && dev->crc->usable();
    }
    return c;
  }

 private:
  void KeepMappedRanges(const std::vector<std::span<uint8_t>>& ranges);
  enum class Path { kDma, kKernel, kStaged };
  Path ChoosePath(const DeviceStreams& dev, CopyDirection direction, std::span<const CopySegment> segments) const;
  bool KernelReaches(const DeviceStreams& dev, std::span<const CopySegment> segments) const;
  Status IssueStaged(DeviceStreams* dev, CopyDirection direction, std::span<const CopySegment> segments,
                     cudaStream_t stream);
  Status IssueKernel(DeviceStreams* dev, bool to_host, std::span<const CopySegment> segments,
                     cudaStream_t stream);
  Status IssueDma(const DeviceStreams& dev, bool to_host, std::span<const CopySegment> segments,
                  cudaStream_t stream);
  Status IssueCopy(DeviceStreams* dev, CopyDirection direction, std::span<const CopySegment> segments,
                   cudaStream_t stream);
  Pending Issue(DeviceStreams* dev, CopyDirection direction, std::span<const CopySegment> segments,
                const PartCrc& crc);
  Result<cudaEvent_t> TakeEvent(DeviceStreams* dev);
  static void Hand(Lane* lane, Pending pending);
  void RunLane(DeviceStreams* dev, Lane* lane);
  void Finish(Pending pending);

  TicketBook* const book_;
  const GpuCopy mode_;
  std::vector<std::span<uint8_t>> mapped_;  // host ranges every device can address as is
  std::atomic<uint64_t> kernel_segments_{0};
  std::atomic<uint64_t> dma_segments_{0};
  std::atomic<uint64_t> staged_segments_{0};
  std::vector<std::unique_ptr<DeviceStreams>> devices_;
};

Status CudaCopierImpl::Init(const CudaCopierOptions& options) {
  const std::vector<int>& ordinals = options.ordinals;
  for (int ordinal : ordinals) {
    KVTIER_RETURN_IF_ERROR(CheckDevicePresent(ordinal));
    auto dev = std::make_unique<DeviceStreams>();
    dev->ordinal = ordinal;
    for (auto& staged : dev->staged) staged = std::make_unique<StagedCopier>();
    ScopedDevice scope(ordinal);
    if (scope.status() != cudaSuccess) return CudaIoError(ordinal, "cudaSetDevice", scope.status());
    for (cudaStream_t& s : dev->stream) {
      const cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
      if (e != cudaSuccess) {
        s = nullptr;
        devices_.push_back(std::move(dev));  // the destructor frees what was created
        return CudaIoError(ordinal, "cudaStreamCreateWithFlags", e);
      }
    }
    dev->crc = std::make_unique<DeviceCrc>(ordinal, dev->stream[0]);
    devices_.push_back(std::move(dev));
  }
  KeepMappedRanges(options.host_ranges);
  for (auto& dev : devices_) {
    for (Lane& lane : dev->lanes) lane.thread = std::thread([this, d = dev.get(), l = &lane] { RunLane(d, l); });
  }
  return Status::Ok();
}

CudaCopierImpl::~CudaCopierImpl() {
  // Our own streams only: every queued copy ends before the rows are let go.
  for (auto& dev : devices_) {
    ScopedDevice scope(dev->ordinal);
    for (cudaStream_t s : dev->stream) {
      if (s != nullptr) static_cast<void>(cudaStreamSynchronize(s));
    }
  }
  // Their queues hold only finished copies now; they drain them and stop.
  for (auto& dev : devices_) {
    for (Lane& lane : dev->lanes) {
      if (!lane.thread.joinable()) continue;
      {
        std::lock_guard<std::mutex> lock(lane.mu);
        lane.stop = true;
      }
      lane.cv.notify_one();
      lane.thread.join();
    }
  }
  for (auto& dev : devices_) {
    ScopedDevice scope(dev->ordinal);
    for (cudaEvent_t e : dev->all_events) static_cast<void>(cudaEventDestroy(e));
    for (cudaStream_t s : dev->stream) {
      if (s != nullptr) static_cast<void>(cudaStreamDestroy(s));
    }
  }
}

void CudaCopierImpl::Start(uint64_t ticket, CopyDirection direction,
                           std::span<const std::vector<CopySegment>> per_device,
                           std::span<const PartCrc> crc_per_device) {
  for (size_t k = 0; k < devices_.size(); ++k) {
    Pending pending = Issue(devices_[k].get(), direction, per_device[k],
                            crc_per_device.empty() ? PartCrc{} : crc_per_device[k]);
    pending.ticket = ticket;
    Hand(&devices_[k]->lanes[static_cast<int>(direction)], std::move(pending));
  }
}

Status CudaCopierImpl::IssueCopy(DeviceStreams* dev, CopyDirection direction,
                                 std::span<const CopySegment> segments, cudaStream_t stream) {
  const bool to_host = direction == CopyDirection::kDeviceToHost;
  switch (ChoosePath(*dev, direction, segments)) {
    case Path::kStaged:
      return IssueStaged(dev, direction, segments, stream);
    case Path::kKernel:
      return IssueKernel(dev, to_host, segments, stream);
    case Path::kDma:
      break;
  }
  return IssueDma(*dev, to_host, segments, stream);
}

Pending CudaCopierImpl::Issue(DeviceStreams* dev, CopyDirection direction,
                              std::span<const CopySegment> segments, const PartCrc& crc) {
  Pending p;
  p.dev = dev;
  p.crc = crc;
  ScopedDevice scope(dev->ordinal);
  if (scope.status() != cudaSuccess) {
    p.status = CudaIoError(dev->ordinal, "cudaSetDevice", scope.status());
    return p;
  }
  cudaStream_t stream = dev->stream[static_cast<int>(direction)];
  // On an error the event is still recorded below: copies already queued
  // must end before the ticket reports, since they use the caller's rows.
  p.status = IssueCopy(dev, direction, segments, stream);
  // After the copy on the same stream: a load's CRC reads what landed.
  if (p.status.ok()) p.crc_slot = dev->crc->Launch(crc, stream);
  Result<cudaEvent_t> event = TakeEvent(dev);
  if (!event.ok()) {
    if (p.status.ok()) p.status = event.status();
    return p;
  }
  const cudaError_t e = cudaEventRecord(*event, stream);
  if (e != cudaSuccess) {
    if (p.status.ok()) p.status = CudaIoError(dev->ordinal, "cudaEventRecord", e);
    std::lock_guard<std::mutex> lock(dev->event_mu);
    dev->free_events.push_back(*event);
    return p;
  }
  p.event = *event;
  return p;
}

// A range is kept when the driver maps it (pinned, portable, mapped) at the
// same address on the device, so the kernel can use host pointers as is.
void CudaCopierImpl::KeepMappedRanges(const std::vector<std::span<uint8_t>>& ranges) {
  for (std::span<uint8_t> r : ranges) {
    if (r.empty()) continue;
    bool mapped = true;
    for (uint8_t* p : {r.data(), r.data() + r.size() - 1}) {
      cudaPointerAttributes a{};
      if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        static_cast<void>(cudaGetLastError());
        mapped = false;
      } else {
        mapped = mapped && a.type == cudaMemoryTypeHost && a.devicePointer == p;
      }
    }
    if (mapped) mapped_.push_back(r);
  }
}

CudaCopierImpl::Path CudaCopierImpl::ChoosePath(const DeviceStreams& dev, CopyDirection direction,
                                                std::span<const CopySegment> segments) const {
  if (mode_ == GpuCopy::kDma || segments.empty()) return Path::kDma;
  uint64_t bytes = 0;
  for (const CopySegment& s : segments) bytes += s.bytes;
  if (mode_ == GpuCopy::kAuto && bytes >= kKernelBelowMeanBytes * segments.size()) return Path::kDma;
  // Small pages, auto: SM writes to host memory are posted and run close to
  // the link's speed, so stores take the kernel; SM reads of host memory do
  // less well than DMA into the staging buffer, so loads are staged.
  if (mode_ == GpuCopy::kAuto && direction == CopyDirection::kDeviceToHost && KernelReaches(dev, segments)) {
    return Path::kKernel;
  }
  if (mode_ != GpuCopy::kKernel && dev.staged[static_cast<int>(direction)]->Accepts(segments)) {
    return Path::kStaged;
  }
  if (mode_ != GpuCopy::kStaged && KernelReaches(dev, segments)) return Path::kKernel;
  return Path::kDma;
}

// The kernel works and every row lies in memory the device maps as is.
bool CudaCopierImpl::KernelReaches(const DeviceStreams& dev, std::span<const CopySegment> segments) const {
  if (!dev.kernel_usable.load(std::memory_order_relaxed) || !CopyKernelBuilt()) return false;
  auto inside = [&](const CopySegment& s) {
    return std::any_of(mapped_.begin(), mapped_.end(), [&](std::span<uint8_t> r) {
      return s.host_ptr >= r.data() && s.bytes <= static_cast<uint64_t>(r.data() + r.size() - s.host_ptr);
    });
  };
  return std::all_of(segments.begin(), segments.end(), inside);
}

Status CudaCopierImpl::IssueStaged(DeviceStreams* dev, CopyDirection direction,
                                   std::span<const CopySegment> segments, cudaStream_t stream) {
  StagedCopier& staged = *dev->staged[static_cast<int>(direction)];
  const bool to_host = direction == CopyDirection::kDeviceToHost;
  std::string what;
  const cudaError_t e = staged.Issue(to_host, segments, stream, &what);
  if (e == cudaSuccess) {
    staged_segments_.fetch_add(segments.size(), std::memory_order_relaxed);
    return Status::Ok();
  }
  // No staging memory, or no kernel image for this GPU: the other paths
  // still work (a load's DMA into the buffer may have run; it is harmless).
  if (staged.failed()) {
    return KernelReaches(*dev, segments) ? IssueKernel(dev, to_host, segments, stream)
                                         : IssueDma(*dev, to_host, segments, stream);
  }
  return CudaIoError(dev->ordinal, what, e);
}

Status CudaCopierImpl::IssueKernel(DeviceStreams* dev, bool to_host, std::span<const CopySegment> segments,
                                   cudaStream_t stream) {
  thread_local std::vector<KernelCopy> copies;
  copies.clear();
  for (const CopySegment& s : segments) {
    void* device = reinterpret_cast<void*>(static_cast<uintptr_t>(s.device_addr));
    copies.push_back(to_host ? KernelCopy{device, s.host_ptr, s.bytes} : KernelCopy{s.host_ptr, device, s.bytes});
  }
  const cudaError_t e = LaunchCopyKernel(copies.data(), copies.size(), stream);
  if (e == cudaSuccess) {
    kernel_segments_.fetch_add(segments.size(), std::memory_order_relaxed);
    return Status::Ok();
  }
  // A launch error is not sticky (no image for this GPU, say): this device
  // falls back to the copy engines for good. Nothing was queued.
  static_cast<void>(cudaGetLastError());
  dev->kernel_usable.store(false, std::memory_order_relaxed);
  return IssueDma(*dev, to_host, segments, stream);
}

Status CudaCopierImpl::IssueDma(const DeviceStreams& dev, bool to_host, std::span<const CopySegment> segments,
                                cudaStream_t stream) {
  thread_local std::vector<void*> dsts;
  thread_local std::vector<const void*> srcs;
  thread_local std::vector<size_t> sizes;
  dsts.clear(), srcs.clear(), sizes.clear();
  for (const CopySegment& s : segments) {
    void* device = reinterpret_cast<void*>(static_cast<uintptr_t>(s.device_addr));
    dsts.push_back(to_host ? s.host_ptr : device);
    srcs.push_back(to_host ? device : s.host_ptr);
    sizes.push_back(s.bytes);
  }
  std::string what;
  const cudaError_t e = BatchMemcpy(dsts.data(), srcs.data(), sizes.data(), dsts.size(), stream, &what);
  if (e != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return CudaIoError(dev.ordinal, what, e);
  }
  dma_segments_.fetch_add(segments.size(), std::memory_order_relaxed);
  return Status::Ok();
}

Result<cudaEvent_t> CudaCopierImpl::TakeEvent(DeviceStreams* dev) {
  std::lock_guard<std::mutex> lock(dev->event_mu);
  if (!dev->free_events.empty()) {
    cudaEvent_t e = dev->free_events.back();
    dev->free_events.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  const cudaError_t err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync);
  if (err != cudaSuccess) return CudaIoError(dev->ordinal, "cudaEventCreateWithFlags", err);
  dev->all_events.push_back(e);
  return e;
}

void CudaCopierImpl::Hand(Lane* lane, Pending pending) {
  {
    std::lock_guard<std::mutex> lock(lane->mu);
    lane->queue.push_back(std::move(pending));
  }
  lane->cv.notify_one();
}

// Two Submits racing on one stream may queue their events out of stream
// order; waiting for the later one first only delays the earlier's report.
void CudaCopierImpl::RunLane(DeviceStreams* dev, Lane* lane) {
  static_cast<void>(cudaSetDevice(dev->ordinal));  // a failure shows in the event's status
  for (;;) {
    Pending p;
    {
      std::unique_lock<std::mutex> lock(lane->mu);
      lane->cv.wait(lock, [&] { return lane->stop || !lane->queue.empty(); });
      if (lane->queue.empty()) return;  // stopping
      p = std::move(lane->queue.front());
      lane->queue.pop_front();
    }
    Finish(std::move(p));
  }
}

void CudaCopierImpl::Finish(Pending p) {
  if (p.event != nullptr) {
    const cudaError_t e = cudaEventSynchronize(p.event);
    if (e != cudaSuccess && p.status.ok()) p.status = CudaIoError(p.dev->ordinal, "copy", e);
    if (p.status.ok()) p.dev->crc->Collect(p.crc_slot, p.crc);
    std::lock_guard<std::mutex> lock(p.dev->event_mu);
    p.dev->free_events.push_back(p.event);
  }
  book_->PartDone(p.ticket, std::move(p.status));
}

}  // namespace

#if !KVTIER_HAVE_CUDA_KERNELS
// Built without nvcc: the copy engines do every copy.
bool CopyKernelBuilt() { return false; }
cudaError_t LaunchCopyKernel(const KernelCopy* /*copies*/, size_t /*count*/, cudaStream_t /*stream*/, int /*blocks*/) {
  return cudaErrorNotSupported;
}
#endif

bool CudaDevicePresent() {
  // Asked once: the answer does not change while the process lives, and
  // without a driver cudaGetDeviceCount just returns an error (no output).
  static const bool present = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      return false;
    }
    return count > 0;
  }();
  return present;
}

Result<std::unique_ptr<CudaCopier>> MakeCudaCopier(CudaCopierOptions options, TicketBook* book) {
  auto copier = std::make_unique<CudaCopierImpl>(book, options.mode);
  KVTIER_RETURN_IF_ERROR(copier->Init(options));
  return std::unique_ptr<CudaCopier>(std::move(copier));
}

#else  // !KVTIER_HAVE_CUDA

bool CudaDevicePresent() { return false; }

Result<std::unique_ptr<CudaCopier>> MakeCudaCopier(CudaCopierOptions options, TicketBook* /*book*/) {
  const std::vector<int>& ordinals = options.ordinals;
  return Status(StatusCode::kUnavailable,
                "CUDA device " + std::to_string(ordinals.empty() ? 0 : ordinals.front()) +
                    " requested, but kvtier was built without CUDA");
}

#endif  // KVTIER_HAVE_CUDA

}  // namespace kvtier::internal
