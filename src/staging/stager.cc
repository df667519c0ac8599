// Stager: validates a batch, turns it into merged copy segments per device
// slot and hands them to the host pool (stand-in slots) and the CUDA copier
// (GPU slots); the ticket book tells the caller when all of them are done.
#include "staging/stager.h"

#include <chrono>
#include <string>
#include <utility>

#include "staging/row_layout.h"
#include "staging/stager_internal.h"

namespace kvtier::internal {
namespace {

// Set while a thread runs on_finished, so WaitIdle from inside the callback
// fails instead of waiting for itself.
thread_local const TicketBook* t_running_callback_of = nullptr;

}  // namespace

uint64_t TicketBook::Open(size_t parts, std::unique_ptr<TicketCrc> crc) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t ticket = next_ticket_++;
  open_.emplace(ticket, OpenTicket{parts, Status::Ok(), std::move(crc)});
  ++busy_;
  return ticket;
}

void TicketBook::FoldCrcs(const TicketCrc& crc, FinishedCopy* done) {
  done->row_crcs = crc.plan.RowCrcs(crc.raw);
  for (size_t r = 0; r < crc.expected.size(); ++r) {
    const uint32_t got = done->row_crcs[r], want = crc.expected[r];
    done->row_status.push_back(got == want ? Status::Ok()
                                           : Status(StatusCode::kCorruption,
                                                    "row " + std::to_string(r) + ": CRC32C of the staged bytes is " +
                                                        std::to_string(got) + ", the block's is " +
                                                        std::to_string(want)));
  }
}

void TicketBook::PartDone(uint64_t ticket, Status status) {
  FinishedCopy done;
  std::unique_ptr<TicketCrc> crc;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = open_.find(ticket);
    if (it == open_.end()) return;  // cannot happen: every part was counted at Open
    if (it->second.status.ok() && !status.ok()) it->second.status = std::move(status);
    if (--it->second.parts_left > 0) return;
    done = FinishedCopy{ticket, std::move(it->second.status), {}, {}};
    crc = std::move(it->second.crc);
    open_.erase(it);
  }
  // Folded outside the lock: the other parts wrote their raw values before
  // their PartDone, which the lock orders before this.
  if (crc && done.status.ok()) FoldCrcs(*crc, &done);
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_.push_back(std::move(done));
  }
  if (on_finished_) {
    t_running_callback_of = this;
    on_finished_();
    t_running_callback_of = nullptr;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (--busy_ == 0) idle_cv_.notify_all();
}

size_t TicketBook::Poll(std::vector<FinishedCopy>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t n = finished_.size();
  out->insert(out->end(), std::make_move_iterator(finished_.begin()),
              std::make_move_iterator(finished_.end()));
  finished_.clear();
  return n;
}

Status TicketBook::WaitIdle(uint32_t timeout_ms) {
  if (t_running_callback_of == this) {
    return Internal("Stager::WaitIdle called from on_finished would wait for itself");
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (idle_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return busy_ == 0; })) {
    return Status::Ok();
  }
  return Status(StatusCode::kTimedOut, std::to_string(busy_) + " copy ticket(s) still in flight after " +
                                           std::to_string(timeout_ms) + " ms");
}

namespace {

class StagerImpl final : public Stager {
 public:
  StagerImpl(RowLayout layout, StagerOptions* options)
      : layout_(std::move(layout)),
        gpu_copy_(options->gpu_copy),
        host_ranges_(std::move(options->host_ranges)),
        book_(std::move(options->on_finished)) {
    for (size_t slot = 0; slot < layout_.num_devices(); ++slot) {
      (layout_.device(slot).device == kHostStandInDevice ? host_slots_ : cuda_slots_).push_back(slot);
    }
  }

  Status StartBackends() {
    if (!host_slots_.empty()) {
      host_ = std::make_unique<HostCopyPool>(&book_, kHostCopyThreadsPerDirection);
    }
    if (cuda_slots_.empty()) return Status::Ok();
    CudaCopierOptions options{{}, gpu_copy_, host_ranges_};
    for (size_t slot : cuda_slots_) options.ordinals.push_back(layout_.device(slot).device);
    KVTIER_ASSIGN_OR_RETURN(cuda_, MakeCudaCopier(std::move(options), &book_));
    return Status::Ok();
  }

  uint64_t row_bytes() const override { return layout_.row_bytes(); }

  using Stager::Submit;
  Result<uint64_t> Submit(CopyDirection direction, std::span<uint8_t* const> rows,
                          std::span<const uint32_t> gpu_blocks, const CopyChecksums& checksums) override {
    KVTIER_RETURN_IF_ERROR(layout_.CheckBatch(rows, gpu_blocks));
    std::unique_ptr<TicketCrc> crc;
    if (checksums.wanted()) {
      KVTIER_ASSIGN_OR_RETURN(crc, NewTicketCrc(direction, rows, checksums));
    }
    // Every part is known before the ticket opens: a part may finish (on
    // another thread) before the next one is even started.
    std::vector<std::vector<CopySegment>> host_pieces;
    if (host_) {
      std::vector<CopySegment> segments;
      for (size_t slot : host_slots_) layout_.AppendSegments(slot, rows, gpu_blocks, &segments);
      host_pieces = HostCopyPool::Split(segments, static_cast<size_t>(host_->threads_per_direction()),
                                        kHostMinPieceBytes);
    }
    std::vector<std::vector<CopySegment>> per_device(cuda_slots_.size());
    for (size_t k = 0; k < cuda_slots_.size(); ++k) {
      layout_.AppendSegments(cuda_slots_[k], rows, gpu_blocks, &per_device[k]);
    }
    std::vector<PartCrc> host_crc, device_crc;
    if (crc) PlanCrcs(crc.get(), host_pieces, per_device, &host_crc, &device_crc);
    const uint64_t ticket = book_.Open(host_pieces.size() + per_device.size(), std::move(crc));
    for (size_t i = 0; i < host_pieces.size(); ++i) {
      host_->Enqueue(direction, ticket, std::move(host_pieces[i]), host_crc.empty() ? PartCrc{} : host_crc[i]);
    }
    if (cuda_) cuda_->Start(ticket, direction, per_device, device_crc);
    return ticket;
  }

  size_t PollFinished(std::vector<FinishedCopy>* out) override { return book_.Poll(out); }
  Status WaitIdle(uint32_t timeout_ms) override { return book_.WaitIdle(timeout_ms); }
  std::string_view backend_name() const override { return cuda_slots_.empty() ? "host" : "cuda"; }
  GpuCopyCounts gpu_copy_counts() const override { return cuda_ ? cuda_->counts() : GpuCopyCounts{}; }

 private:
  Result<std::unique_ptr<TicketCrc>> NewTicketCrc(CopyDirection direction, std::span<uint8_t* const> rows,
                                                  const CopyChecksums& checksums) const {
    if (!checksums.expected.empty() && direction != CopyDirection::kHostToDevice) {
      return InvalidArgument("expected CRCs are for loads (host to device) only");
    }
    if (!checksums.expected.empty() && checksums.expected.size() != rows.size()) {
      return InvalidArgument(std::to_string(checksums.expected.size()) + " expected CRCs for " +
                             std::to_string(rows.size()) + " rows");
    }
    auto crc = std::make_unique<TicketCrc>(rows, layout_.row_bytes());
    // A load checks each destination, so one row loaded twice is fine; a
    // store would write one row from two places.
    if (!crc->plan.RowsDisjoint(/*allow_equal=*/direction == CopyDirection::kHostToDevice)) {
      return InvalidArgument("checksummed rows overlap");
    }
    crc->expected.assign(checksums.expected.begin(), checksums.expected.end());
    return crc;
  }

  // Cuts each part's segments into CRC pieces and units; the parts' spans
  // are taken once everything is planned (the plan's vectors no longer move).
  static void PlanCrcs(TicketCrc* crc, const std::vector<std::vector<CopySegment>>& host_pieces,
                       const std::vector<std::vector<CopySegment>>& per_device, std::vector<PartCrc>* host_crc,
                       std::vector<PartCrc>* device_crc) {
    std::vector<std::pair<size_t, size_t>> ranges;
    for (const auto& piece : host_pieces) ranges.push_back(crc->plan.Add(piece, UINT64_MAX));
    for (const auto& segments : per_device) ranges.push_back(crc->plan.Add(segments, kCrcPieceBytesMax));
    crc->raw.assign(crc->plan.units().size(), 0);
    for (size_t i = 0; i < ranges.size(); ++i) {
      const auto [first, end] = ranges[i];
      PartCrc part{std::span<const CrcUnit>(crc->plan.units()).subspan(first, end - first), crc->plan.pieces(),
                   crc->raw.data() + first};
      (i < host_pieces.size() ? host_crc : device_crc)->push_back(part);
    }
  }

  const RowLayout layout_;
  const GpuCopy gpu_copy_;
  const std::vector<std::span<uint8_t>> host_ranges_;
  std::vector<size_t> host_slots_;  // stand-in slots
  std::vector<size_t> cuda_slots_;  // GPU slots
  // Declared before the backends: they report to it until they are destroyed
  // (each drains its in-flight copies first).
  TicketBook book_;
  std::unique_ptr<HostCopyPool> host_;
  std::unique_ptr<CudaCopier> cuda_;
};

}  // namespace

Result<std::unique_ptr<Stager>> Stager::Create(StagerOptions options) {
  KVTIER_ASSIGN_OR_RETURN(RowLayout layout, RowLayout::Create(options.devices, options.blocks_per_chunk));
  auto stager = std::make_unique<StagerImpl>(std::move(layout), &options);
  KVTIER_RETURN_IF_ERROR(stager->StartBackends());
  return std::unique_ptr<Stager>(std::move(stager));
}

}  // namespace kvtier::internal
