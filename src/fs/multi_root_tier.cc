// An fs tier over several roots (path_sharding "by_block_hash", FORMAT.md
// L99): one single-root tier per root, each with its own I/O loop, ring and
// read/write queues, behind a router that splits every job by the keys'
// roots and merges the parts back into one JobResult in submission order.
//
// Why one I/O loop per root: a drive that slows down (or hangs until its I/O
// deadline) then holds only its own keys' slots and queue; the others keep
// their full queue depth, and a store queue that fills on one drive drops
// only that drive's stores. The limits of the options (n_read_threads,
// n_write_threads, store_queue_bytes_max) therefore apply per root.
//
// Results reach the router through each child's on_job_finished: the
// callback polls that child and merges. A child may finish a part before the
// router has recorded which job it belongs to (a dropped store finishes
// inside Submit), so such results wait in `early_` until it has.
#include <algorithm>
#include <condition_variable>
#include <iterator>
#include <mutex>
#include <unordered_map>

#include "format/root_list.h"
#include "fs/fs_tier_internal.h"
#include "fs/root_set.h"
#include "fs/tier_metrics.h"
#include "fs/tier_space.h"
#include "io/io_watch.h"

namespace kvtier::internal {
namespace {

class MultiRootTier final : public FsTier {
 public:
  MultiRootTier(const FsTierOpenOptions& o, Namespace ns, size_t n_roots)
      : row_bytes_(o.row_bytes), on_finished_(o.on_job_finished), ns_(std::move(ns)), routes_(n_roots),
        early_(n_roots) {}

  ~MultiRootTier() override {
    {
      std::lock_guard lock(mu_);
      closing_ = true;  // children still finishing jobs while closing must not call back in
    }
    for (auto& child : children_) child.reset();
  }

  // Opens (or reopens) child `i` with the tier's keys; its callback feeds this router.
  Status OpenChild(size_t i, FsTierOpenOptions o, const std::shared_ptr<const SealKeyring>& keys) {
    o.on_job_finished = [this, i] { Harvest(i); };
    if (children_.size() <= i) children_.resize(i + 1);
    children_[i].reset();
    KVTIER_ASSIGN_OR_RETURN(children_[i], OpenFsTier(o, keys));
    return Status::Ok();
  }
  FsTier& child(size_t i) { return *children_[i]; }

  Result<uint64_t> SubmitStore(std::span<const OffloadKey> keys, std::span<const std::span<const uint8_t>> rows,
                               std::span<const std::vector<BlockHash>> block_hashes) override {
    return RouteRows(JobKind::kStore, keys, rows, block_hashes, [](FsTier& t, auto part, auto part_rows, auto hashes) {
      return t.SubmitStore(part, part_rows, hashes);
    });
  }
  Result<uint64_t> SubmitLoad(std::span<const OffloadKey> keys, std::span<const std::span<uint8_t>> rows) override {
    return RouteRows(JobKind::kLoad, keys, rows, {}, [](FsTier& t, auto part, auto part_rows, auto) {
      return t.SubmitLoad(part, part_rows);
    });
  }
  Result<uint64_t> SubmitStorePieces(std::span<const OffloadKey> keys,
                                     std::span<const std::vector<std::span<const uint8_t>>> rows,
                                     std::span<const std::vector<BlockHash>> block_hashes) override {
    return RouteRows(JobKind::kStore, keys, rows, block_hashes, [](FsTier& t, auto part, auto part_rows, auto hashes) {
      return t.SubmitStorePieces(part, part_rows, hashes);
    });
  }
  Result<uint64_t> SubmitLoadPieces(std::span<const OffloadKey> keys,
                                    std::span<const std::vector<std::span<uint8_t>>> rows) override {
    return RouteRows(JobKind::kLoad, keys, rows, {}, [](FsTier& t, auto part, auto part_rows, auto) {
      return t.SubmitLoadPieces(part, part_rows);
    });
  }

  Result<uint64_t> SubmitLookup(std::span<const OffloadKey> keys) override {
    return Route(JobKind::kLookup, keys, [](FsTier& t, std::span<const OffloadKey> part, const std::vector<uint32_t>&) {
      return t.SubmitLookup(part);
    });
  }

  size_t PollFinished(std::vector<JobResult>* out) override {
    std::lock_guard lock(mu_);
    const size_t n = finished_.size();
    for (JobResult& r : finished_) out->push_back(std::move(r));
    finished_.clear();
    return n;
  }

  Status WaitIdle(uint32_t timeout_ms) override {
    std::unique_lock lock(mu_);
    const bool idle = idle_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return open_.empty(); });
    return idle ? Status::Ok() : Status(StatusCode::kTimedOut, "fs tier: jobs still running");
  }

  // Each field merged as its row in kFsTierMetricFields says: counters and
  // histograms summed, root_up and the scan flag the lowest root's, the
  // backpressure gauges the highest.
  // Root by root: a key lives on one root, so each key's own events keep their order.
  std::vector<TierKeyEvent> TakeKeyEvents() override {
    std::vector<TierKeyEvent> all;
    for (const auto& child : children_) {
      std::vector<TierKeyEvent> events = child->TakeKeyEvents();
      all.insert(all.end(), std::make_move_iterator(events.begin()), std::make_move_iterator(events.end()));
    }
    return all;
  }
  FsTierMetrics Metrics() const override {
    FsTierMetrics merged = children_.front()->Metrics();
    for (size_t i = 1; i < children_.size(); ++i) MergeFsTierMetrics(children_[i]->Metrics(), &merged);
    return merged;
  }
  std::string PrometheusText(std::string_view tier_name) const override {
    return FormatPrometheus(Metrics(), tier_name);
  }
  const Namespace& ns() const override { return ns_; }
  std::string_view backend_name() const override { return children_[0]->backend_name(); }
  bool o_direct() const override { return AllOf(&FsTier::o_direct); }
  bool xattrs_supported() const override { return AllOf(&FsTier::xattrs_supported); }
  std::string_view checksum_place() const override {
    for (const auto& child : children_) {
      if (child->checksum_place() != children_[0]->checksum_place()) return "mixed";
    }
    return children_[0]->checksum_place();
  }
  std::string BlockPath(const OffloadKey& key) const override { return children_[RootOf(key)]->BlockPath(key); }

 private:
  struct OpenJob {
    JobKind kind = JobKind::kLoad;
    std::vector<KeyResult> keys;
    size_t parts_left = 0;
  };
  struct Part {
    uint64_t job = 0;
    std::vector<uint32_t> at;  // the job's key index of each of the part's keys
  };

  size_t RootOf(const OffloadKey& key) const { return format::RootIndexOf(key.hash.bytes(), routes_.size()); }

  bool AllOf(bool (FsTier::*flag)() const) const {
    for (const auto& child : children_) {
      if (!((*child).*flag)()) return false;
    }
    return true;
  }

  // A store or load (rows or pieces): each root's part gets its keys' rows
  // (and hashes: empty, or one list per key), through
  // `submit(tier, part, part_rows, part_hashes)`.
  template <class Row, class SubmitRows>
  Result<uint64_t> RouteRows(JobKind kind, std::span<const OffloadKey> keys, std::span<const Row> rows,
                             std::span<const std::vector<BlockHash>> hashes, SubmitRows submit) {
    KVTIER_RETURN_IF_ERROR(CheckRows(keys.size(), rows, row_bytes_));
    if (!hashes.empty() && hashes.size() != keys.size()) return InvalidArgument("block_hashes: one list per key");
    return Route(kind, keys, [&](FsTier& t, std::span<const OffloadKey> part, const std::vector<uint32_t>& at) {
      std::vector<Row> part_rows;
      std::vector<std::vector<BlockHash>> part_hashes;
      part_rows.reserve(at.size());
      for (uint32_t k : at) {
        part_rows.push_back(rows[k]);
        if (!hashes.empty()) part_hashes.push_back(hashes[k]);
      }
      return submit(t, part, std::span<const Row>(part_rows), std::span<const std::vector<BlockHash>>(part_hashes));
    });
  }

  // Splits `keys` by root, submits one part per root that has keys, and
  // returns the router's job id. The rows were checked, so a part can only
  // fail for a reason of its own; its keys then report that error.
  template <class SubmitPart>
  Result<uint64_t> Route(JobKind kind, std::span<const OffloadKey> keys, SubmitPart submit) {
    std::vector<std::vector<uint32_t>> by_root(routes_.size());
    for (size_t k = 0; k < keys.size(); ++k) by_root[RootOf(keys[k])].push_back(static_cast<uint32_t>(k));
    size_t parts = 0;
    for (const auto& at : by_root) parts += at.empty() ? 0 : 1;
    uint64_t id = 0;
    bool done = false;
    {
      std::lock_guard lock(mu_);
      id = next_id_++;
      open_[id] = OpenJob{kind, std::vector<KeyResult>(keys.size()), parts};
      if (parts == 0) done = FinishLocked(id);
    }
    for (size_t r = 0; r < by_root.size(); ++r) {
      if (by_root[r].empty()) continue;
      std::vector<OffloadKey> part;
      for (uint32_t k : by_root[r]) part.push_back(keys[k]);
      Result<uint64_t> child_id = submit(*children_[r], part, by_root[r]);
      std::lock_guard lock(mu_);
      done = Register(r, child_id, Part{id, std::move(by_root[r])}) || done;
    }
    if (done) Notify();
    return id;
  }

  // Called with mu_ held; true when the job finished.
  bool Register(size_t r, const Result<uint64_t>& child_id, Part part) {
    if (!child_id.ok()) {
      std::vector<KeyResult> failed(part.at.size(), KeyResult{KeyOutcome::kError, child_id.status()});
      return Merge(part, failed);
    }
    const auto early = early_[r].find(*child_id);
    if (early == early_[r].end()) {
      routes_[r].emplace(*child_id, std::move(part));
      return false;
    }
    const bool done = Merge(part, early->second.keys);
    early_[r].erase(early);
    return done;
  }

  // Called with mu_ held: places a part's results; true when the job finished.
  bool Merge(const Part& part, std::vector<KeyResult>& results) {
    OpenJob& job = open_.at(part.job);
    for (size_t k = 0; k < part.at.size() && k < results.size(); ++k) job.keys[part.at[k]] = std::move(results[k]);
    return --job.parts_left == 0 && FinishLocked(part.job);
  }

  bool FinishLocked(uint64_t id) {
    auto it = open_.find(id);
    finished_.push_back(JobResult{id, it->second.kind, std::move(it->second.keys)});
    open_.erase(it);
    if (open_.empty()) idle_cv_.notify_all();
    return true;
  }

  // A child finished a part (its on_job_finished, no child lock held).
  void Harvest(size_t r) {
    bool done = false;
    {
      std::lock_guard lock(mu_);
      if (closing_ || r >= children_.size() || !children_[r]) return;
      std::vector<JobResult> results;
      children_[r]->PollFinished(&results);
      for (JobResult& res : results) {
        const auto route = routes_[r].find(res.job_id);
        if (route == routes_[r].end()) {
          early_[r].emplace(res.job_id, std::move(res));
          continue;
        }
        done = Merge(route->second, res.keys) || done;
        routes_[r].erase(route);
      }
    }
    if (done) Notify();
  }

  void Notify() const {
    if (on_finished_) on_finished_();
  }

  const uint64_t row_bytes_;
  const std::function<void()> on_finished_;
  const Namespace ns_;
  std::vector<std::unique_ptr<FsTier>> children_;  // one per root, in list order
  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, OpenJob> open_;
  std::vector<std::unordered_map<uint64_t, Part>> routes_;       // per root: child job id -> part
  std::vector<std::unordered_map<uint64_t, JobResult>> early_;  // per root: parts finished before Register
  std::vector<JobResult> finished_;
  bool closing_ = false;
};

// L99 (as vLLM PR #53133): O_DIRECT only if every root passed the probe;
// roots that did are reopened buffered.
Status EqualizeODirect(MultiRootTier* tier, const FsTierOpenOptions& base, const std::vector<std::string>& roots,
                       const std::shared_ptr<const SealKeyring>& keys) {
  bool all = true;
  for (size_t i = 0; i < roots.size(); ++i) all = all && tier->child(i).o_direct();
  if (all) return Status::Ok();
  for (size_t i = 0; i < roots.size(); ++i) {
    if (!tier->child(i).o_direct()) continue;
    FsTierOpenOptions o = base;
    o.tier.root_dir = roots[i];
    o.tier.o_direct = false;
    KVTIER_RETURN_IF_ERROR(tier->OpenChild(i, o, keys).WithContext("root_dir[" + std::to_string(i) + "]"));
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<FsTier>> OpenMultiRootTier(const FsTierOpenOptions& o, const std::vector<std::string>& roots) {
  // The keys are read once, here, and every root gets the same ones (FORMAT.md L160): a Secret
  // rotated while the roots open cannot leave them under different keys.
  KVTIER_ASSIGN_OR_RETURN(const std::shared_ptr<const SealKeyring> keys, LoadSealKeyring(o.tier));
  KVTIER_ASSIGN_OR_RETURN(Namespace ns, StoreNamespace(o, keys.get()));  // the roots' markers name the sealed one
  // One watched call each when FsTier::Open runs under a watch (io_watch.h);
  // none is open while a child registers memory (not the mount's time).
  Result<std::vector<RootState>> examined = [&] {
    IoScope examining(o.tier.root_dir);
    return ExamineRoots(roots, ns);
  }();
  KVTIER_ASSIGN_OR_RETURN(std::vector<RootState> states, std::move(examined));
  KVTIER_RETURN_IF_ERROR(CheckRootSet(roots, ns, states));
  auto tier = std::make_unique<MultiRootTier>(o, ns, roots.size());
  KVTIER_RETURN_IF_ERROR(CheckCapacityOptions(o.tier, o.row_bytes, roots.size()));
  FsTierOpenOptions base = o;
  base.tier.path_sharding = PathSharding::kNone;
  // max_bytes splits evenly: blocks spread evenly over the roots by hash (L99).
  if (base.tier.capacity_bytes_max) *base.tier.capacity_bytes_max /= roots.size();
  for (size_t i = 0; i < roots.size(); ++i) {
    FsTierOpenOptions child = base;
    child.tier.root_dir = roots[i];
    KVTIER_RETURN_IF_ERROR(tier->OpenChild(i, child, keys).WithContext("root_dir[" + std::to_string(i) + "]"));
  }
  KVTIER_RETURN_IF_ERROR(EqualizeODirect(tier.get(), base, roots, keys));
  for (size_t i = 0; i < roots.size(); ++i) {
    const format::RootSlot slot{i, roots.size()};
    if (states[i].marker == slot) continue;
    const IoScope marking(roots[i]);
    KVTIER_RETURN_IF_ERROR(WriteRootMarker(roots[i], ns, slot, MonotonicNowNs() + i));
  }
  return std::unique_ptr<FsTier>(std::move(tier));
}

}  // namespace kvtier::internal
