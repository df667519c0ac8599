// The pieces behind Stager (stager.h): the ticket book every backend reports
// to, the host stand-in's copy pool and the CUDA copier. Split out so each
// backend lives in its own file and the CUDA one can compile to a stub.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kvtier/result.h"
#include "staging/row_crc.h"
#include "staging/row_layout.h"
#include "staging/stager.h"

namespace kvtier::internal {

// Worker threads per direction on the host stand-in. The transfer benchmark's
// memcpy probe uses the same count, so its ratio compares like with like.
inline constexpr int kHostCopyThreadsPerDirection = 2;
// A host batch is split into at most one piece per thread, but never into
// pieces below this: handing a small copy to a second thread costs more
// than the copy.
inline constexpr uint64_t kHostMinPieceBytes = uint64_t{1} << 20;

// Device CRC pieces are cut to at most this: a warp's 32 lanes split one
// piece, and a warp takes one unit (row_crc.h) of such pieces.
inline constexpr uint64_t kCrcPieceBytesMax = uint64_t{64} << 10;

// A checksummed ticket's CRC state (CopyChecksums). Each part writes raw[i]
// for its own pieces only, before it reports to the TicketBook; the book
// folds them once the last part is in.
struct TicketCrc {
  TicketCrc(std::span<uint8_t* const> rows, uint64_t row_bytes) : plan(rows, row_bytes) {}
  RowCrcPlan plan;
  std::vector<uint32_t> raw;       // one per plan unit, sized once every unit is planned
  std::vector<uint32_t> expected;  // a load's CopyChecksums::expected, copied
};

// A part's share of a TicketCrc: raw[i] = the register CRC (crc32c_hd.h) of
// units[i], whose pieces are pieces[first_piece, +count), computed on the
// device side. Empty when no CRC was asked.
struct PartCrc {
  std::span<const CrcUnit> units;
  std::span<const CrcPiece> pieces;  // every piece of the plan
  uint32_t* raw = nullptr;
};

// Tickets and their outstanding parts. A Submit opens a ticket with the
// number of parts its backends will report (host pieces, one per CUDA
// device); the ticket becomes pollable when the last part is done, with the
// first error any part reported.
class TicketBook {
 public:
  explicit TicketBook(std::function<void()> on_finished) : on_finished_(std::move(on_finished)) {}

  // parts > 0. `crc` (may be null) is folded into FinishedCopy::row_crcs
  // and row_status when the last part is done.
  uint64_t Open(size_t parts, std::unique_ptr<TicketCrc> crc = nullptr);
  // Called by backends without their locks held: on the ticket's last part
  // it runs on_finished on the calling thread.
  void PartDone(uint64_t ticket, Status status);
  size_t Poll(std::vector<FinishedCopy>* out);
  // Waits until every opened ticket is pollable and its on_finished returned.
  Status WaitIdle(uint32_t timeout_ms);

 private:
  struct OpenTicket {
    size_t parts_left = 0;
    Status status;
    std::unique_ptr<TicketCrc> crc;
  };
  static void FoldCrcs(const TicketCrc& crc, FinishedCopy* done);

  const std::function<void()> on_finished_;
  std::mutex mu_;
  std::condition_variable idle_cv_;
  uint64_t next_ticket_ = 1;  // 0 is never a ticket
  std::unordered_map<uint64_t, OpenTicket> open_;
  std::vector<FinishedCopy> finished_;
  size_t busy_ = 0;  // tickets not yet pollable, or whose on_finished is running
};

// The host stand-in's copies: per direction a queue and a few threads doing
// memcpy, so loads never wait behind a store backlog.
class HostCopyPool {
 public:
  HostCopyPool(TicketBook* book, int threads_per_direction);
  // Finishes every queued piece (the rows are the caller's until polled).
  ~HostCopyPool();
  HostCopyPool(const HostCopyPool&) = delete;
  HostCopyPool& operator=(const HostCopyPool&) = delete;

  // Splits a batch into at most max_pieces pieces of about equal bytes, none
  // below min_piece_bytes (except the only one); always at least one piece
  // (possibly empty, so an empty batch still finishes through a worker).
  static std::vector<std::vector<CopySegment>> Split(std::span<const CopySegment> segments,
                                                     size_t max_pieces, uint64_t min_piece_bytes);
  int threads_per_direction() const { return threads_per_direction_; }
  // Each piece is one part of `ticket`.
  // After copying, the worker computes `crc` (units within `piece`'s
  // segments) from the "device" side.
  void Enqueue(CopyDirection direction, uint64_t ticket, std::vector<CopySegment> piece, PartCrc crc = {});

 private:
  struct Piece {
    uint64_t ticket = 0;
    std::vector<CopySegment> segments;
    PartCrc crc;
  };
  struct Lane {  // one direction
    std::deque<Piece> queue;
    std::condition_variable cv;
    std::vector<std::thread> threads;
  };

  void Run(CopyDirection direction);

  TicketBook* const book_;
  const int threads_per_direction_;
  std::mutex mu_;
  bool stop_ = false;
  Lane lanes_[2];  // by CopyDirection
};

// Copies between pinned rows and CUDA devices (stager_cuda.cc).
class CudaCopier {
 public:
  virtual ~CudaCopier() = default;
  // per_device[k] holds the segments for the k-th ordinal given to
  // MakeCudaCopier; each device is one part of `ticket`. crc_per_device is
  // empty or holds each device's PartCrc (pieces within its segments).
  virtual void Start(uint64_t ticket, CopyDirection direction,
                     std::span<const std::vector<CopySegment>> per_device,
                     std::span<const PartCrc> crc_per_device) = 0;
  virtual GpuCopyCounts counts() const = 0;
};

struct CudaCopierOptions {
  std::vector<int> ordinals;  // may repeat when several slots share a GPU
  GpuCopy mode = GpuCopy::kAuto;
  std::vector<std::span<uint8_t>> host_ranges;  // as StagerOptions::host_ranges
};

// One stream per direction on each ordinal. kUnavailable when kvtier was
// built without CUDA or a device is not present.
Result<std::unique_ptr<CudaCopier>> MakeCudaCopier(CudaCopierOptions options, TicketBook* book);

}  // namespace kvtier::internal
