// The publisher thread's loop, and the bounded queue that keeps Publish()
// out of the I/O path's way: callers only take the queue's mutex for a
// push; encoding, sending and replay all happen on the one thread.
#include "events/kv_event_publisher.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

#include "events/kv_event_sockets.h"
#include "events/kv_event_wire.h"
#include "util/log.h"

namespace kvtier::internal {
namespace {

using Clock = std::chrono::steady_clock;

// How long the thread sleeps with nothing queued: short with a replay
// socket (requests wait at most this long), longer without one (Close()
// and Publish() wake it anyway).
constexpr std::chrono::milliseconds kReplayPoll{10};
constexpr std::chrono::milliseconds kIdlePoll{100};
// A batch's ts is when its first event was published, and it takes no
// event published later than this after that one: subscribers that merge
// several sources (the instances and collectors of one volume) order by ts,
// so each event's change lies within this of its batch's ts.
constexpr double kBatchSpanS = 0.001;

// One queued event and when Publish() took it (wall seconds).
struct Queued {
  double ts;
  KvEvent event;
};

Status ValidateOptions(const KvEventsOptions& o) {
  auto at_least = [](const char* key, int64_t value, int64_t min) -> Status {
    if (value >= min) return Status::Ok();
    return InvalidArgument(std::string("kv_events_config.") + key + ": must be >= " +
                           std::to_string(min) + " (got " + std::to_string(value) + ")");
  };
  KVTIER_RETURN_IF_ERROR(at_least("buffer_steps", o.buffer_steps, 1));
  KVTIER_RETURN_IF_ERROR(at_least("hwm", o.hwm, 0));
  KVTIER_RETURN_IF_ERROR(at_least("max_queue_size", o.max_queue_size, 1));
  if (o.batch_events_max == 0) return InvalidArgument("kv events: batch_events_max must be >= 1");
  return Status::Ok();
}

double WallSeconds() {
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  return std::chrono::duration<double>(since_epoch).count();
}

class ZmqKvEventPublisher final : public KvEventPublisher {
 public:
  ZmqKvEventPublisher(const KvEventsOptions& options, std::unique_ptr<KvEventCounters> counters,
                      std::unique_ptr<KvEventSockets> sockets)
      : options_(options), counters_(std::move(counters)), sockets_(std::move(sockets)) {}
  ~ZmqKvEventPublisher() override { Close(); }

  Status Start();
  using KvEventPublisher::Publish;
  size_t Publish(std::vector<KvEvent> events) override;
  void Close() override;
  KvEventMetrics Metrics() const override;
  const std::string& pub_endpoint() const override { return sockets_->pub_endpoint(); }
  const std::string& replay_endpoint() const override { return sockets_->replay_endpoint(); }

 private:
  void Run();
  bool WaitForEvents();
  bool Joined();
  double TakeBatch(std::vector<KvEvent>* batch);
  bool Finished();

  const KvEventsOptions options_;
  const std::unique_ptr<KvEventCounters> counters_;
  const std::unique_ptr<KvEventSockets> sockets_;

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Queued> queue_;               // guarded by mu_
  bool stopping_ = false;                  // guarded by mu_
  Clock::time_point drain_deadline_;       // guarded by mu_; set with stopping_
  std::atomic<uint64_t> queue_depth_{0};   // queue_.size(), for Metrics()

  std::mutex close_mu_;  // one Close() at a time
  bool closed_ = false;  // guarded by close_mu_
  std::thread thread_;
  const Clock::time_point opened_ = Clock::now();
  bool joined_ = false;  // publisher thread only: the first batch may go (Joined())
};

Status ZmqKvEventPublisher::Start() {
  try {
    thread_ = std::thread([this] { Run(); });
  } catch (const std::system_error& e) {
    return Status(StatusCode::kUnavailable,
                  std::string("kv events: cannot start the publisher thread: ") + e.what());
  }
  return Status::Ok();
}

size_t ZmqKvEventPublisher::Publish(std::vector<KvEvent> events) {
  size_t queued = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      const size_t capacity = static_cast<size_t>(options_.max_queue_size);
      queued = std::min(events.size(), capacity - std::min(capacity, queue_.size()));
      const double now = WallSeconds();
      for (size_t i = 0; i < queued; ++i) queue_.push_back({now, std::move(events[i])});
      queue_depth_.store(queue_.size(), std::memory_order_relaxed);
    }
  }
  if (queued > 0) wake_.notify_one();
  if (queued < events.size()) {
    counters_->events_dropped.fetch_add(events.size() - queued, std::memory_order_relaxed);
  }
  return queued;
}

// True when events are queued; false after a quiet poll interval or, with
// nothing queued, once Close() began.
bool ZmqKvEventPublisher::WaitForEvents() {
  const auto poll = sockets_->has_replay() ? kReplayPoll : kIdlePoll;
  std::unique_lock<std::mutex> lock(mu_);
  wake_.wait_for(lock, poll, [this] { return !queue_.empty() || stopping_; });
  return !queue_.empty();
}

// Takes the next batch; returns its ts (the first event's).
double ZmqKvEventPublisher::TakeBatch(std::vector<KvEvent>* batch) {
  batch->clear();
  std::lock_guard<std::mutex> lock(mu_);
  const double ts = queue_.empty() ? WallSeconds() : queue_.front().ts;
  while (!queue_.empty() && batch->size() < options_.batch_events_max && queue_.front().ts <= ts + kBatchSpanS) {
    batch->push_back(std::move(queue_.front().event));
    queue_.pop_front();
  }
  queue_depth_.store(queue_.size(), std::memory_order_relaxed);
  return ts;
}

// After Close() began: everything is sent, or the drain time is up.
bool ZmqKvEventPublisher::Finished() {
  std::lock_guard<std::mutex> lock(mu_);
  return stopping_ && (queue_.empty() || Clock::now() >= drain_deadline_);
}

// Until the first batch goes: whether a subscriber has joined (or the wait
// for one is over); sleeps a little while not, events queuing meanwhile.
bool ZmqKvEventPublisher::Joined() {
  if (joined_) {
    sockets_->Subscribed();  // reads what came since, so it cannot pile up
    return true;
  }
  joined_ = sockets_->Subscribed() || Clock::now() >= opened_ + options_.subscriber_wait_ms;
  if (!joined_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return joined_;
}

void ZmqKvEventPublisher::Run() {
  std::vector<KvEvent> batch;
  while (!Finished()) {
    if (WaitForEvents() && Joined()) {
      if (options_.before_take_for_test) options_.before_take_for_test();
      const double ts = TakeBatch(&batch);
      if (!batch.empty()) sockets_->SendBatch(EncodeKvEventBatch(ts, batch), batch.size());
    }
    sockets_->ServiceReplay();
  }
}

void ZmqKvEventPublisher::Close() {
  std::lock_guard<std::mutex> close_lock(close_mu_);
  if (closed_) return;
  closed_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    drain_deadline_ = Clock::now() + options_.shutdown_drain_ms;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  // What ZeroMQ still holds gets the rest of the drain time (at least 100 ms).
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(drain_deadline_ - Clock::now());
  sockets_->Close(std::max(left, std::chrono::milliseconds(100)));
  // What the drain time did not cover is dropped, and counted as such.
  std::lock_guard<std::mutex> lock(mu_);
  if (!queue_.empty()) {
    LogWarning("kv events: dropped " + std::to_string(queue_.size()) +
               " queued events at shutdown (drain time is up)");
    counters_->events_dropped.fetch_add(queue_.size(), std::memory_order_relaxed);
    queue_.clear();
    queue_depth_.store(0, std::memory_order_relaxed);
  }
}

KvEventMetrics ZmqKvEventPublisher::Metrics() const {
  KvEventMetrics m;
  const KvEventCounters& c = *counters_;
  m.events_published = c.events_published.load(std::memory_order_relaxed);
  m.batches_published = c.batches_published.load(std::memory_order_relaxed);
  m.events_dropped = c.events_dropped.load(std::memory_order_relaxed);
  m.replay_requests = c.replay_requests.load(std::memory_order_relaxed);
  m.replay_batches_sent = c.replay_batches_sent.load(std::memory_order_relaxed);
  m.queue_depth = queue_depth_.load(std::memory_order_relaxed);
  return m;
}

}  // namespace

size_t KvEventPublisher::Publish(KvEvent event) {
  std::vector<KvEvent> one;
  one.push_back(std::move(event));
  return Publish(std::move(one));
}

Result<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Open(const KvEventsOptions& options) {
  KVTIER_RETURN_IF_ERROR(ValidateOptions(options));
  auto counters = std::make_unique<KvEventCounters>();
  KVTIER_ASSIGN_OR_RETURN(auto sockets, KvEventSockets::Open(options, counters.get()));
  auto publisher =
      std::make_unique<ZmqKvEventPublisher>(options, std::move(counters), std::move(sockets));
  KVTIER_RETURN_IF_ERROR(publisher->Start());
  return std::unique_ptr<KvEventPublisher>(std::move(publisher));
}

}  // namespace kvtier::internal
