// TierSpace (tier_space.h): the max_bytes hooks, the startup scan and the
// statvfs sampler, and the eviction op.
#include "fs/tier_space.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>

#include "fs/hash_record_read.h"
#include "fs/namespace_scan.h"
#include "util/log.h"

namespace kvtier::internal {

// What the two threads touch: it lives as long as the last of them and the tier.
struct TierSpace::State {
  UniqueFd root;
  std::string root_dir, block_dir;
  std::shared_ptr<CapacityIndex> index;
  std::atomic<uint64_t> scan_bytes{0}, scan_blocks{0}, volume_used{0}, volume_free{0};
  std::atomic<bool> scan_done{false};
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  int running = 0;
  std::thread scanner, sampler;

  bool Stopping() {
    std::lock_guard lock(mu);
    return stop;
  }
  void Exited() {
    std::lock_guard lock(mu);
    --running;
    cv.notify_all();
  }
};

namespace {

void RunScan(const std::shared_ptr<TierSpace::State>& s) {
  const ScanTotals totals = ScanBlockDir(
      s->root.get(), s->block_dir, [&] { return s->Stopping(); },
      [&](std::span<const ScannedBlock> blocks) {
        if (s->index) s->index->Seed(blocks);
      });
  if (totals.err != 0) {
    LogWarning("fs tier: the startup scan of " + JoinRoot(s->root_dir, s->block_dir) + " missed part of it (" +
               ErrnoToStatus(totals.err, "list").ToString() + "): namespace usage counts only what it read");
  }
  s->scan_bytes = totals.bytes;
  s->scan_blocks = totals.blocks;
  s->scan_done = true;
  s->Exited();
}

void RunSampler(const std::shared_ptr<TierSpace::State>& s) {
  std::unique_lock lock(s->mu);
  while (!s->stop) {
    lock.unlock();
    struct statvfs st {};
    if (fstatvfs(s->root.get(), &st) == 0) {
      const uint64_t unit = st.f_frsize != 0 ? st.f_frsize : st.f_bsize;
      s->volume_used = (st.f_blocks - st.f_bfree) * unit;
      s->volume_free = st.f_bavail * unit;
    }
    lock.lock();
    s->cv.wait_for(lock, std::chrono::milliseconds(kSampleIntervalMs), [&] { return s->stop; });
  }
  lock.unlock();
  s->Exited();
}

// Where the OS refuses a thread (a thread or memory limit), the tier runs
// without it (a warning): the budget still holds for what it stores, and the
// gauges it would have fed stay 0.
void Refused(const std::shared_ptr<TierSpace::State>& s, const std::system_error& e, bool scan) {
  std::lock_guard lock(s->mu);
  --s->running;
  if (scan) s->scan_done = true;
  LogWarning("fs tier: no thread for the usage " + std::string(scan ? "scan" : "sampler") + " of " + s->root_dir +
             " (" + e.what() + "): " + (scan ? "namespace" : "volume") + " usage stays unknown");
}

void StartThreads(const std::shared_ptr<TierSpace::State>& s, bool scan) {
  {
    std::lock_guard lock(s->mu);
    s->running = scan ? 2 : 1;
  }
  try {
    if (scan) s->scanner = std::thread([s] { RunScan(s); });
  } catch (const std::system_error& e) {
    Refused(s, e, true);
  }
  try {
    s->sampler = std::thread([s] { RunSampler(s); });
  } catch (const std::system_error& e) {
    Refused(s, e, false);
  }
}

}  // namespace

bool StartupScanWanted(const FsTierOptions& tier, bool local_root) {
  switch (tier.startup_scan) {
    case StartupScan::kOn: return true;
    case StartupScan::kOff: return false;
    case StartupScan::kAuto: return tier.capacity_bytes_max.has_value() && local_root;
  }
  return false;
}

Status CheckCapacityOptions(const FsTierOptions& tier, uint64_t row_bytes, size_t roots) {
  if (!tier.capacity_bytes_max.has_value() || roots == 0) return Status::Ok();
  const uint64_t per_root = *tier.capacity_bytes_max / roots;
  if (per_root >= row_bytes) return Status::Ok();
  std::string what = "max_bytes " + std::to_string(*tier.capacity_bytes_max);
  if (roots > 1) what += " over " + std::to_string(roots) + " roots (" + std::to_string(per_root) + " each)";
  return InvalidArgument("fs tier: " + what + " is less than one block (row_bytes " + std::to_string(row_bytes) +
                         "): no block could ever be stored");
}

std::unique_ptr<TierSpace> TierSpace::Start(const FsTierOptions& tier, bool local_root, int root_fd,
                                            std::string block_dir, uint64_t row_bytes) {
  std::unique_ptr<TierSpace> usage(new TierSpace());
  usage->block_dir_ = block_dir;
  usage->row_bytes_ = row_bytes;
  auto s = std::make_shared<State>();
  s->root = UniqueFd(fcntl(root_fd, F_DUPFD_CLOEXEC, 0));
  s->root_dir = tier.root_dir;
  s->block_dir = std::move(block_dir);
  if (tier.capacity_bytes_max.has_value()) s->index = std::make_shared<CapacityIndex>(*tier.capacity_bytes_max);
  usage->index_ = s->index;
  usage->state_ = s;
  if (!s->root.valid()) {  // EMFILE: no scan, no samples; the index still bounds what this tier stores
    LogWarning("fs tier: no fd for the usage sampler of " + tier.root_dir + ": namespace and volume usage unknown");
    s->scan_done = true;
    return usage;
  }
  const bool scan = StartupScanWanted(tier, local_root);
  if (!scan) s->scan_done = true;  // nothing to wait for: the gauges count this tier's own traffic
  if (!scan && s->index) {
    Log(LogLevel::kInfo, "fs tier: max_bytes without a startup walk (startup_scan, FORMAT.md L140): blocks already in " +
                             JoinRoot(s->root_dir, s->block_dir) +
                             " count toward the budget once a load or lookup finds them");
  }
  StartThreads(s, scan);
  return usage;
}

TierSpace::~TierSpace() {
  State& s = *state_;
  std::unique_lock lock(s.mu);
  s.stop = true;
  s.cv.notify_all();
  const bool exited = s.cv.wait_for(lock, std::chrono::milliseconds(kCloseWaitMs), [&] { return s.running == 0; });
  lock.unlock();
  for (std::thread* t : {&s.scanner, &s.sampler}) {
    if (!t->joinable()) continue;
    if (exited) t->join();
    else t->detach();  // stuck on the mount: it holds its own reference to the state
  }
}

std::vector<CapacityKey> TierSpace::Keys(std::span<const OffloadKey> keys) const {
  std::vector<CapacityKey> out;
  if (!bounded()) return out;
  out.reserve(keys.size());
  for (const OffloadKey& key : keys) out.push_back(CapacityKey::Of(key));
  return out;
}

Status TierSpace::AdmitStore(std::span<const CapacityKey> keys, std::vector<std::string>* evict) {
  if (!bounded()) return Status::Ok();
  CapacityIndex::Admission admission = index_->Reserve(keys, row_bytes_);
  for (const CapacityKey& victim : admission.victims) evict->push_back(block_dir_ + "/" + victim.RelPath());
  return admission.status;
}

void TierSpace::PinLoads(std::span<const CapacityKey> keys) {
  for (const CapacityKey& key : keys) index_->Pin(key);
}

void TierSpace::OnKeyDone(JobKind kind, const CapacityKey* key, KeyOutcome outcome) {
  if (kind == JobKind::kStore && outcome == KeyOutcome::kOk) {
    stored_bytes_.fetch_add(row_bytes_, std::memory_order_relaxed);
    stored_blocks_.fetch_add(1, std::memory_order_relaxed);
  }
  if (key == nullptr || !bounded()) return;
  if (kind == JobKind::kStore) return index_->StoreDone(*key, outcome);
  if (kind == JobKind::kLoad) index_->Unpin(*key);
  if (outcome == KeyOutcome::kOk) index_->Used(*key, row_bytes_);
  // A miss: gc or another writer removed it. A corrupt block: the load removed it (L65, L67).
  if (outcome == KeyOutcome::kMiss || outcome == KeyOutcome::kCorrupt) index_->Gone(*key);
}

void TierSpace::Fill(FsTierMetrics* m) const {
  const State& s = *state_;
  m->volume_used_bytes = s.volume_used.load(std::memory_order_relaxed);
  m->volume_free_bytes = s.volume_free.load(std::memory_order_relaxed);
  m->namespace_scan_complete = s.scan_done.load(std::memory_order_relaxed) ? 1 : 0;
  if (bounded()) {
    m->capacity_bytes_max = index_->bytes_max();
    m->namespace_bytes = index_->bytes();
    m->namespace_blocks = index_->blocks();
    m->capacity_evicted_blocks = index_->evicted_blocks();
    m->capacity_evicted_bytes = index_->evicted_bytes();
    m->capacity_refused_rows = index_->refused_rows();
    return;
  }
  m->namespace_bytes = s.scan_bytes.load(std::memory_order_relaxed) + stored_bytes_.load(std::memory_order_relaxed);
  m->namespace_blocks = s.scan_blocks.load(std::memory_order_relaxed) + stored_blocks_.load(std::memory_order_relaxed);
}

namespace {

// An eviction: the file's block-hash record first (hash_record_read.h),
// where the events need it, then the unlink.
class EvictOp final : public FsBlockOp {
 public:
  EvictOp(TierShared* shared, std::string rel_path)
      : shared_(shared), rel_(std::move(rel_path)), record_(*shared, shared->root.get(), rel_.c_str()) {}

  bool NextRequest(IoRequest* req) override {
    if (done_) return false;
    *req = IoRequest{};
    if (!record_.done()) {
      record_.Fill(req);
      req->deadline_ns = record_.closing() || abandoned_ ? 0 : DeadlineNs(*shared_);
      return true;
    }
    if (abandoned_) return done_ = true, false;  // the read was abandoned: no unlink
    req->op = IoOp::kUnlink;
    req->dirfd = shared_->root.get();
    req->path = rel_.c_str();
    req->deadline_ns = DeadlineNs(*shared_);
    return true;
  }
  void OnCompletion(int64_t res) override {
    if (!record_.done()) {
      record_.OnCompletion(res);
      if (record_.done()) block_hashes = record_.Take();
      return;
    }
    done_ = true;
    unlinked = !abandoned_ && res == 0;
    if (abandoned_ || res == 0 || res == -ENOENT) return;
    LogWarning("fs tier: evicting " + JoinRoot(shared_->root_dir, rel_) + " failed (" +
               ErrnoToStatus(static_cast<int>(-res), "unlink").ToString() + "); it stays until gc removes it");
  }
  void OnAbandon() override {
    abandoned_ = true;
    record_.OnAbandon();
  }

 private:
  TierShared* shared_;
  std::string rel_;
  HashRecordRead record_;
  bool done_ = false, abandoned_ = false;
};

}  // namespace

std::unique_ptr<FsBlockOp> MakeEvictOp(TierShared* shared, std::string rel_path) {
  return std::make_unique<EvictOp>(shared, std::move(rel_path));
}

}  // namespace kvtier::internal
