// BouncePool, RowPieces and the abandoned-op result (block_ops.h).
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "fs/block_ops.h"
#include "fs/tier_events.h"

namespace kvtier::internal {

namespace {
constexpr uint64_t kPage = 4096;
}  // namespace

BouncePool::~BouncePool() {
  for (uint8_t* row : idle_) std::free(row);
}

uint8_t* BouncePool::Acquire() {
  {
    std::lock_guard lock(mu_);
    if (!idle_.empty()) {
      uint8_t* row = idle_.back();
      idle_.pop_back();
      return row;
    }
  }
  const uint64_t bytes = (row_bytes_ + kPage - 1) / kPage * kPage;
  auto* row = static_cast<uint8_t*>(std::aligned_alloc(kPage, bytes));
  if (row == nullptr) throw std::bad_alloc();
  return row;
}

void BouncePool::Release(uint8_t* row) {
  {
    std::lock_guard lock(mu_);
    if (idle_.size() < keep_max_) {
      idle_.push_back(row);
      return;
    }
  }
  std::free(row);
}

bool RowPieces::DirectAligned() const {
  for (size_t i = 0; i < count(); ++i) {
    if (!DirectIoAligned(piece(i).data(), piece(i).size())) return false;
  }
  return true;
}

void RowPieces::IovecsFrom(uint64_t done, std::vector<iovec>* out) const {
  constexpr uint64_t kRequestBytesMax = uint64_t{1} << 30;
  out->clear();
  uint64_t bytes = 0;
  for (size_t i = 0; i < count() && out->size() < kIovecsMax && bytes < kRequestBytesMax; ++i) {
    std::span<uint8_t> p = piece(i);
    if (done >= p.size()) {
      done -= p.size();
      continue;
    }
    p = p.subspan(done);
    done = 0;
    const uint64_t take = std::min<uint64_t>(p.size(), kRequestBytesMax - bytes);
    out->push_back({p.data(), take});
    bytes += take;
  }
}

void RowPieces::ScatterFrom(const uint8_t* src) const {
  for (size_t i = 0; i < count(); ++i) {
    std::memcpy(piece(i).data(), src, piece(i).size());
    src += piece(i).size();
  }
}

void RowPieces::GatherTo(uint8_t* dst) const {
  for (size_t i = 0; i < count(); ++i) {
    std::memcpy(dst, piece(i).data(), piece(i).size());
    dst += piece(i).size();
  }
}

bool Stageable(const TierShared& shared, const RowPieces& row) {
  return shared.stage != nullptr && row.size() > 0 && row.size() % kPage == 0 && row.size() <= shared.row_bytes &&
         !row.DirectAligned();
}

void AddSharedCounters(const TierShared& shared, FsTierMetrics* m) {
  m->staged_ios = shared.staged_ios.load(std::memory_order_relaxed);
  m->checksum_ns = shared.checksum_ns.load(std::memory_order_relaxed);
  m->auth_failures = shared.auth_failures.load(std::memory_order_relaxed);
  m->block_hash_records_lost = shared.block_hash_records_lost.load(std::memory_order_relaxed);
  if (shared.events) shared.events->FillMetrics(m);
}

KeyResult AbandonedResult(const char* syscall, const std::string& path, uint32_t io_timeout_ms) {
  return {KeyOutcome::kError,
          ErrnoToStatus(ETIMEDOUT, std::string(syscall) + " " + path + ": no answer within io_timeout_ms (" +
                                       std::to_string(io_timeout_ms) + " ms); abandoned to the kernel")};
}

}  // namespace kvtier::internal
