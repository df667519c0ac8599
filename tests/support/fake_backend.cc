// FakeBackend (see header).
#include "support/fake_backend.h"

#include <algorithm>
#include <cerrno>
#include <thread>
#include <vector>

#include <sys/uio.h>

namespace kvtier::testing {

using internal::IoOp;

int64_t FakeBackend::Execute(internal::IoRequest req) {
  const bool transfer =
      req.op == IoOp::kRead || req.op == IoOp::kWrite || req.op == IoOp::kReadv || req.op == IoOp::kWritev;
  if (OneIn(plan_.eagain_one_in)) return ++faults_, OneIn(2) ? -EAGAIN : -EINTR;
  if (transfer && OneIn(plan_.timeout_one_in)) return ++faults_, -ECANCELED;
  const bool targeted = req.op == plan_.error_op && !(plan_.error_fd_only && req.path != nullptr);
  if (targeted && plan_.error_errno != 0 && OneIn(plan_.error_one_in)) {
    return ++faults_, -plan_.error_errno;
  }
  const bool vectored = req.op == IoOp::kReadv || req.op == IoOp::kWritev;
  std::vector<iovec> trimmed;  // a vectored transfer cut short at a random byte (mid-piece too)
  if (vectored && OneIn(plan_.short_transfer_one_in)) {
    const auto* iov = static_cast<const iovec*>(req.buf);
    uint64_t total = 0;
    for (uint32_t i = 0; i < req.len; ++i) total += iov[i].iov_len;
    if (total > 1) {
      ++faults_;
      uint64_t left = std::uniform_int_distribution<uint64_t>(1, total - 1)(rng_);
      for (uint32_t i = 0; i < req.len && left > 0; ++i) {
        trimmed.push_back({iov[i].iov_base, std::min<uint64_t>(iov[i].iov_len, left)});
        left -= trimmed.back().iov_len;
      }
      req.buf = trimmed.data();
      req.len = static_cast<uint32_t>(trimmed.size());
    }
  } else if (transfer && !vectored && req.len > 1 && OneIn(plan_.short_transfer_one_in)) {
    ++faults_;
    req.len = std::uniform_int_distribution<uint32_t>(1, req.len - 1)(rng_);
  }
  log_.push_back(req);
  return internal::ExecuteSync(req);
}

Status FakeBackend::Submit(std::span<const internal::IoRequest> requests) {
  std::lock_guard lock(mu_);
  for (const auto& r : requests) {
    if (hold_ && hold_(r)) {
      held_.push_back(r);
      continue;
    }
    internal::IoCompletion c{r.tag, Execute(r)};
    if (OneIn(plan_.slow_one_in)) {
      ++faults_;
      slow_.emplace_back(std::uniform_int_distribution<int>(1, 20)(rng_), c);
    } else {
      done_.push_back(c);
    }
  }
  if (plan_.shuffle) std::shuffle(done_.begin(), done_.end(), rng_);
  cv_.notify_all();
  return Status::Ok();
}

size_t FakeBackend::Reap(std::span<internal::IoCompletion> out, int timeout_ms) {
  if (manual_) return ReapManually(out, timeout_ms);
  for (int waited = 0;; ++waited) {
    {
      std::lock_guard lock(mu_);
      for (auto it = slow_.begin(); it != slow_.end();) {  // slow ones age by one per poll
        if (--it->first > 0) {
          ++it;
          continue;
        }
        done_.push_back(it->second);
        it = slow_.erase(it);
      }
      if (!done_.empty() || woken_ || (timeout_ms >= 0 && waited >= timeout_ms)) return TakeDone(out);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

size_t FakeBackend::ReapManually(std::span<internal::IoCompletion> out, int timeout_ms) {
  std::unique_lock lock(mu_);
  if (done_.empty() && !woken_ && timeout_ms != 0) {
    ++waits_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return !done_.empty() || woken_; });
  }
  return TakeDone(out);
}

size_t FakeBackend::TakeDone(std::span<internal::IoCompletion> out) {
  woken_ = false;
  const size_t n = std::min(out.size(), done_.size());
  std::copy_n(done_.begin(), n, out.begin());
  done_.erase(done_.begin(), done_.begin() + static_cast<std::ptrdiff_t>(n));
  return n;
}

void FakeBackend::Wake() {
  std::lock_guard lock(mu_);
  woken_ = true;
  ++wakes_;
  cv_.notify_all();
}

uint64_t FakeBackend::wakes() const {
  std::lock_guard lock(mu_);
  return wakes_;
}

void FakeBackend::AwaitWakes(uint64_t n) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return wakes_ >= n; });
}

void FakeBackend::HoldWhere(RequestFilter which) {
  std::lock_guard lock(mu_);
  hold_ = std::move(which);
}

std::vector<internal::IoRequest> FakeBackend::held() const {
  std::lock_guard lock(mu_);
  return held_;
}

size_t FakeBackend::Release(const RequestFilter& which, std::optional<int64_t> res) {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (auto it = held_.begin(); it != held_.end();) {
    if (which && !which(*it)) {
      ++it;
      continue;
    }
    done_.push_back({it->tag, res ? *res : Execute(*it)});
    it = held_.erase(it);
    ++n;
  }
  cv_.notify_all();
  return n;
}

void FakeBackend::StepManually() {
  std::lock_guard lock(mu_);
  manual_ = true;
}

void FakeBackend::Settle(const std::atomic<bool>* done) {
  std::unique_lock lock(mu_);
  const uint64_t waits = waits_;
  woken_ = true;
  cv_.notify_all();
  cv_.wait(lock, [&] { return waits_ > waits || (done != nullptr && *done); });
}

std::vector<internal::IoRequest> FakeBackend::log() const {
  std::lock_guard lock(mu_);
  return log_;
}

int FakeBackend::faults_injected() const {
  std::lock_guard lock(mu_);
  return faults_;
}

}  // namespace kvtier::testing
