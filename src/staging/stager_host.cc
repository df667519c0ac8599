// The host stand-in backend: "device" tensors are host memory, copies are
// memcpy on a small pool of worker threads per direction.
#include <algorithm>
#include <cstring>
#include <utility>

#include "staging/stager_internal.h"

namespace kvtier::internal {
namespace {

void CopyPiece(CopyDirection direction, const std::vector<CopySegment>& segments) {
  for (const CopySegment& s : segments) {
    // The stand-in's device addresses are host pointers by definition.
    auto* device = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(s.device_addr));
    if (direction == CopyDirection::kDeviceToHost) {
      std::memcpy(s.host_ptr, device, s.bytes);
    } else {
      std::memcpy(device, s.host_ptr, s.bytes);
    }
  }
}

// The first landed byte of a load's piece, flipped (HostLoadFaultsForTest).
void MaybeInjectLoadFault(CopyDirection direction, const std::vector<CopySegment>& segments) {
  if (direction != CopyDirection::kHostToDevice || segments.empty()) return;
  std::atomic<int>& faults = HostLoadFaultsForTest();
  int n = faults.load();
  while (n > 0 && !faults.compare_exchange_weak(n, n - 1)) {
  }
  if (n <= 0) return;
  *reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(segments[0].device_addr)) ^= 0x5a;
}

}  // namespace

std::atomic<int>& HostLoadFaultsForTest() {
  static std::atomic<int> faults{0};
  return faults;
}

HostCopyPool::HostCopyPool(TicketBook* book, int threads_per_direction)
    : book_(book), threads_per_direction_(std::max(1, threads_per_direction)) {
  for (CopyDirection d : {CopyDirection::kDeviceToHost, CopyDirection::kHostToDevice}) {
    for (int i = 0; i < threads_per_direction_; ++i) {
      lanes_[static_cast<int>(d)].threads.emplace_back([this, d] { Run(d); });
    }
  }
}

HostCopyPool::~HostCopyPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  for (Lane& lane : lanes_) {
    lane.cv.notify_all();
    for (std::thread& t : lane.threads) t.join();
  }
}

std::vector<std::vector<CopySegment>> HostCopyPool::Split(std::span<const CopySegment> segments,
                                                          size_t max_pieces,
                                                          uint64_t min_piece_bytes) {
  uint64_t total = 0;
  for (const CopySegment& s : segments) total += s.bytes;
  const uint64_t by_size = std::max<uint64_t>(1, total / std::max<uint64_t>(1, min_piece_bytes));
  const size_t pieces = static_cast<size_t>(std::clamp<uint64_t>(by_size, 1, std::max<size_t>(1, max_pieces)));
  // Cut points land on 4 KiB multiples so no two threads share a cache line.
  const uint64_t target = (total / pieces + 4095) / 4096 * 4096;
  std::vector<std::vector<CopySegment>> out(1);
  uint64_t room = target;  // bytes the current piece may still take
  for (CopySegment s : segments) {
    while (s.bytes > 0) {
      if (room == 0 && out.size() < pieces) {
        out.emplace_back();
        room = target;
      }
      const uint64_t take = out.size() < pieces ? std::min(s.bytes, room) : s.bytes;
      out.back().push_back(CopySegment{s.device_addr, s.host_ptr, take});
      s.device_addr += take;
      s.host_ptr += take;
      s.bytes -= take;
      room -= std::min(room, take);
    }
  }
  return out;
}

void HostCopyPool::Enqueue(CopyDirection direction, uint64_t ticket, std::vector<CopySegment> piece,
                           PartCrc crc) {
  Lane& lane = lanes_[static_cast<int>(direction)];
  {
    std::lock_guard<std::mutex> lock(mu_);
    lane.queue.push_back(Piece{ticket, std::move(piece), crc});
  }
  lane.cv.notify_one();
}

void HostCopyPool::Run(CopyDirection direction) {
  Lane& lane = lanes_[static_cast<int>(direction)];
  for (;;) {
    Piece piece;
    {
      std::unique_lock<std::mutex> lock(mu_);
      lane.cv.wait(lock, [&] { return stop_ || !lane.queue.empty(); });
      if (lane.queue.empty()) return;  // stopping, and everything queued is done
      piece = std::move(lane.queue.front());
      lane.queue.pop_front();
    }
    CopyPiece(direction, piece.segments);
    MaybeInjectLoadFault(direction, piece.segments);
    // The stand-in's "device" bytes: the source pages of a store, the
    // landed pages of a load (copied just above, by this thread).
    for (size_t i = 0; i < piece.crc.units.size(); ++i) {
      uint32_t reg = 0;
      for (const CrcPiece& c : piece.crc.pieces.subspan(piece.crc.units[i].first_piece, piece.crc.units[i].pieces)) {
        reg = CpuRawCrc(reg, reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(c.device_addr)), c.bytes);
      }
      piece.crc.raw[i] = reg;
    }
    book_->PartDone(piece.ticket, Status::Ok());
  }
}

}  // namespace kvtier::internal
