// GatedBackend: an IoBackend that runs every request at once with real
// syscalls (ExecuteSync, on real files) but, while held, keeps back the
// completions of the requests `hold_if` picks (all of them by default): their
// jobs stay in flight, as a fact rather than a race, until Release().
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <utility>

#include "io/backend.h"

namespace kvtier::testing {

class GatedBackend final : public internal::IoBackend {
 public:
  using Pick = std::function<bool(const internal::IoRequest&)>;
  explicit GatedBackend(Pick hold_if = {}) : hold_if_(std::move(hold_if)) {}

  std::string_view name() const override { return "gated"; }
  Status Submit(std::span<const internal::IoRequest> requests) override {
    std::lock_guard lock(mu_);
    for (const internal::IoRequest& r : requests) {
      const internal::IoCompletion c{r.tag, internal::ExecuteSync(r)};
      (closed_ && (!hold_if_ || hold_if_(r)) ? held_ : done_).push_back(c);
    }
    cv_.notify_all();
    return Status::Ok();
  }
  size_t Reap(std::span<internal::IoCompletion> out, int timeout_ms) override {
    std::unique_lock lock(mu_);
    auto ready = [&] { return !done_.empty() || woken_; };
    if (timeout_ms < 0) cv_.wait(lock, ready);
    else cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), ready);
    woken_ = false;
    size_t n = 0;
    for (; n < out.size() && !done_.empty(); ++n) {
      out[n] = done_.front();
      done_.pop_front();
    }
    return n;
  }
  void Wake() override {
    std::lock_guard lock(mu_);
    woken_ = true;
    cv_.notify_all();
  }
  void Hold() {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  void Release() {
    std::lock_guard lock(mu_);
    closed_ = false;
    for (const auto& c : held_) done_.push_back(c);
    held_.clear();
    cv_.notify_all();
  }
  size_t held() const {
    std::lock_guard lock(mu_);
    return held_.size();
  }

 private:
  const Pick hold_if_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<internal::IoCompletion> done_, held_;
  bool closed_ = false, woken_ = false;
};

}  // namespace kvtier::testing
