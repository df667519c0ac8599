// The CUDA backend: per device one non-blocking stream per direction (so
// loads and stores overlap on a full-duplex link and never queue behind the
// engine's stream), one cudaMemcpyAsync per merged segment, then an event.
// A completion thread queries the events and finishes the tickets; a host
// function queued behind each event wakes it, with a short poll as backstop.
//
// Built without CUDA, this file only answers "no device".
#include <string>
#include <utility>

#include "tier/stager_internal.h"

#if KVTIER_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <chrono>
#endif

namespace kvtier::internal {

#if KVTIER_HAVE_CUDA
namespace {

// Bounds how late a finished copy is noticed should a wake-up be lost.
constexpr auto kBackstopPoll = std::chrono::microseconds(500);

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

struct DeviceStreams {
  int ordinal = 0;
  cudaStream_t stream[2] = {nullptr, nullptr};  // by CopyDirection
  std::mutex event_mu;
  std::vector<cudaEvent_t> free_events;  // recycled once their copies are seen done
  std::vector<cudaEvent_t> all_events;   // destroyed with the copier
};

// One device's part of a ticket, on its way to the completion thread.
struct Pending {
  uint64_t ticket = 0;
  DeviceStreams* dev = nullptr;
  cudaEvent_t event = nullptr;  // null: nothing to wait for (the issue failed)
  Status status;                // an error while issuing
};

class CudaCopierImpl final : public CudaCopier {
 public:
  explicit CudaCopierImpl(TicketBook* book) : book_(book) {}
  ~CudaCopierImpl() override;
  Status Init(const std::vector<int>& ordinals);
  void Start(uint64_t ticket, CopyDirection direction,
             std::span<const std::vector<CopySegment>> per_device) override;

 private:
  Pending Issue(DeviceStreams* dev, CopyDirection direction, std::span<const CopySegment> segments);
  Result<cudaEvent_t> TakeEvent(DeviceStreams* dev);
  void Hand(Pending pending);
  static void CUDART_CB Wake(void* self);
  void Run();
  void Reap(std::vector<Pending>* inflight);

  TicketBook* const book_;
  std::vector<std::unique_ptr<DeviceStreams>> devices_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Pending> incoming_;
  bool woken_ = false;
  bool stop_ = false;
  std::thread thread_;
};

Status CudaCopierImpl::Init(const std::vector<int>& ordinals) {
  for (int ordinal : ordinals) {
    KVTIER_RETURN_IF_ERROR(CheckDevicePresent(ordinal));
    auto dev = std::make_unique<DeviceStreams>();
    dev->ordinal = ordinal;
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
    devices_.push_back(std::move(dev));
  }
  thread_ = std::thread([this] { Run(); });
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
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
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
                           std::span<const std::vector<CopySegment>> per_device) {
  for (size_t k = 0; k < devices_.size(); ++k) {
    Pending pending = Issue(devices_[k].get(), direction, per_device[k]);
    pending.ticket = ticket;
    Hand(std::move(pending));
  }
}

Pending CudaCopierImpl::Issue(DeviceStreams* dev, CopyDirection direction,
                              std::span<const CopySegment> segments) {
  Pending p;
  p.dev = dev;
  ScopedDevice scope(dev->ordinal);
  if (scope.status() != cudaSuccess) {
    p.status = CudaIoError(dev->ordinal, "cudaSetDevice", scope.status());
    return p;
  }
  cudaStream_t stream = dev->stream[static_cast<int>(direction)];
  const bool to_host = direction == CopyDirection::kDeviceToHost;
  for (const CopySegment& s : segments) {
    void* device = reinterpret_cast<void*>(static_cast<uintptr_t>(s.device_addr));
    const cudaError_t e =
        to_host ? cudaMemcpyAsync(s.host_ptr, device, s.bytes, cudaMemcpyDeviceToHost, stream)
                : cudaMemcpyAsync(device, s.host_ptr, s.bytes, cudaMemcpyHostToDevice, stream);
    if (e != cudaSuccess) {
      // Still record the event below: copies already queued must end before
      // the ticket reports, since they use the caller's rows.
      p.status = CudaIoError(dev->ordinal, "cudaMemcpyAsync of " + std::to_string(s.bytes) + " bytes", e);
      break;
    }
  }
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
  // A failed wake-up only costs latency: the backstop poll still sees the event.
  static_cast<void>(cudaLaunchHostFunc(stream, &CudaCopierImpl::Wake, this));
  return p;
}

Result<cudaEvent_t> CudaCopierImpl::TakeEvent(DeviceStreams* dev) {
  std::lock_guard<std::mutex> lock(dev->event_mu);
  if (!dev->free_events.empty()) {
    cudaEvent_t e = dev->free_events.back();
    dev->free_events.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  const cudaError_t err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  if (err != cudaSuccess) return CudaIoError(dev->ordinal, "cudaEventCreateWithFlags", err);
  dev->all_events.push_back(e);
  return e;
}

void CudaCopierImpl::Hand(Pending pending) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    incoming_.push_back(std::move(pending));
  }
  cv_.notify_one();
}

// Runs on a CUDA driver thread: must not call CUDA, only wake ours.
void CUDART_CB CudaCopierImpl::Wake(void* self) {
  auto* copier = static_cast<CudaCopierImpl*>(self);
  {
    std::lock_guard<std::mutex> lock(copier->mu_);
    copier->woken_ = true;
  }
  copier->cv_.notify_one();
}

void CudaCopierImpl::Run() {
  std::vector<Pending> inflight;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto ready = [&] { return stop_ || woken_ || !incoming_.empty(); };
      if (inflight.empty()) {
        cv_.wait(lock, ready);
      } else {
        cv_.wait_for(lock, kBackstopPoll, ready);
      }
      woken_ = false;
      for (Pending& p : incoming_) inflight.push_back(std::move(p));
      incoming_.clear();
      // The destructor synchronized every stream before stopping us, so
      // whatever is still in flight here is about to be reaped.
      if (stop_ && inflight.empty()) return;
    }
    Reap(&inflight);
  }
}

void CudaCopierImpl::Reap(std::vector<Pending>* inflight) {
  std::vector<Pending> done;
  for (size_t i = 0; i < inflight->size();) {
    Pending& p = (*inflight)[i];
    if (p.event != nullptr) {
      const cudaError_t e = cudaEventQuery(p.event);
      if (e == cudaErrorNotReady) {
        ++i;
        continue;
      }
      if (e != cudaSuccess && p.status.ok()) p.status = CudaIoError(p.dev->ordinal, "copy", e);
      std::lock_guard<std::mutex> lock(p.dev->event_mu);
      p.dev->free_events.push_back(p.event);
    }
    done.push_back(std::move(p));
    if (i + 1 != inflight->size()) (*inflight)[i] = std::move(inflight->back());
    inflight->pop_back();
  }
  for (Pending& p : done) book_->PartDone(p.ticket, std::move(p.status));
}

}  // namespace

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

Result<std::unique_ptr<CudaCopier>> MakeCudaCopier(std::vector<int> ordinals, TicketBook* book) {
  auto copier = std::make_unique<CudaCopierImpl>(book);
  KVTIER_RETURN_IF_ERROR(copier->Init(ordinals));
  return std::unique_ptr<CudaCopier>(std::move(copier));
}

#else  // !KVTIER_HAVE_CUDA

bool CudaDevicePresent() { return false; }

Result<std::unique_ptr<CudaCopier>> MakeCudaCopier(std::vector<int> ordinals, TicketBook* /*book*/) {
  return Status(StatusCode::kUnavailable,
                "CUDA device " + std::to_string(ordinals.empty() ? 0 : ordinals.front()) +
                    " requested, but kvtier was built without CUDA");
}

#endif  // KVTIER_HAVE_CUDA

}  // namespace kvtier::internal
