// TieredStore setup: config, row layout, CPU region, secondary tiers and the
// progress thread.
#include <algorithm>
#include <string>

#include "staging/row_layout.h"
#include "tiered_store/tiered_store_impl.h"
#include "util/log.h"

namespace kvtier {

using internal::TieredStoreImpl;

Result<std::unique_ptr<TieredStore>> TieredStore::Open(const TieredStoreOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(OffloadConfig config, ParseOffloadConfig(options.config_json, options.engine));
  auto store = std::make_unique<TieredStoreImpl>(options, config);
  KVTIER_RETURN_IF_ERROR(store->Init());
  return std::unique_ptr<TieredStore>(std::move(store));
}

std::string_view ChunkVerdictName(ChunkVerdict verdict) {
  switch (verdict) {
    case ChunkVerdict::kHit: return "hit";
    case ChunkVerdict::kHitPending: return "hit_pending";
    case ChunkVerdict::kRetry: return "retry";
    case ChunkVerdict::kMiss: return "miss";
  }
  return "unknown";
}

std::string_view ChunkOutcomeName(ChunkOutcome outcome) {
  switch (outcome) {
    case ChunkOutcome::kOk: return "ok";
    case ChunkOutcome::kAlreadyCached: return "already_cached";
    case ChunkOutcome::kNotOffloaded: return "not_offloaded";
    case ChunkOutcome::kMiss: return "miss";
    case ChunkOutcome::kNoSpace: return "no_space";
    case ChunkOutcome::kError: return "error";
  }
  return "unknown";
}

size_t TransferResult::OkPrefix() const {
  size_t n = 0;
  while (n < chunks.size() &&
         (chunks[n].outcome == ChunkOutcome::kOk || chunks[n].outcome == ChunkOutcome::kAlreadyCached)) {
    ++n;
  }
  return n;
}

}  // namespace kvtier

namespace kvtier::internal {
namespace {

// The fs tiers' namespace: each file is one chunk of blocks_per_chunk blocks.
NamespaceSpec ChunkFiles(const NamespaceSpec& ns, const OffloadConfig& config) {
  NamespaceSpec files = ns;
  files.blocks_per_file = config.blocks_per_chunk;
  return files;
}

}  // namespace

TieredStoreImpl::TieredStoreImpl(const TieredStoreOptions& options, const OffloadConfig& config)
    : options_(options),
      config_(config),
      requests_({uint64_t{options.engine.gpu_block_size_tokens} * config.blocks_per_chunk, config.offload_prompt_only,
                 config.secondary_tiers.size(), ChunkFiles(options.ns, config)}) {}

Status TieredStoreImpl::Init() {
  // The row size comes from the layout; the stager is created once the
  // region exists, so the copy kernel may address its rows.
  KVTIER_ASSIGN_OR_RETURN(const RowLayout layout, RowLayout::Create(options_.devices, config_.blocks_per_chunk));
  row_bytes_ = layout.row_bytes();
  const uint64_t rows = config_.cpu_bytes_to_use / row_bytes_;
  if (rows == 0) {
    return Status(StatusCode::kInvalidArgument,
                  "config key 'cpu_bytes_to_use': " + std::to_string(config_.cpu_bytes_to_use) +
                      " bytes is less than one row (" + std::to_string(row_bytes_) + " bytes)");
  }
  if (rows > UINT32_MAX) {
    return Status(StatusCode::kInvalidArgument, "config key 'cpu_bytes_to_use': more than 2^32 rows");
  }
  KVTIER_ASSIGN_OR_RETURN(region_, HostRegion::Allocate(rows * row_bytes_));
  StagerOptions stager{options_.devices, config_.blocks_per_chunk, [this] { Wake(); }, config_.gpu_copy,
                       {}};
  stager.host_ranges = {region_->bytes()};
  KVTIER_ASSIGN_OR_RETURN(stager_, Stager::Create(std::move(stager)));
  row_checks_.assign(rows, RowCheck{});
  cpu_ = std::make_unique<CpuTier>(config_.eviction_policy, static_cast<uint32_t>(rows), config_.store_threshold,
                                   config_.max_tracker_size);
  requests_.set_pin_rows_max(options_.pinned_bytes_max / row_bytes_);
  router_.AttachRows(region_->bytes(), row_bytes_);
  KVTIER_RETURN_IF_ERROR(OpenSecondaryTiers());
  staged_crc_ = StagerChecksums() && router_.any_staged();
  progress_ = std::thread([this] { ProgressLoop(); });
  return Status::Ok();
}

Status TieredStoreImpl::OpenSecondaryTiers() {
  const NamespaceSpec ns = ChunkFiles(options_.ns, config_);
  for (size_t i = 0; i < config_.secondary_tiers.size(); ++i) {
    const FsTierOptions& fs = config_.secondary_tiers[i].fs;
    FsTierOpenOptions open;
    open.tier = fs;
    open.ns = ns;
    open.row_bytes = row_bytes_;
    open.registered_memory = {region_->bytes()};
    open.on_job_finished = [this] { Wake(); };
    Result<std::unique_ptr<FsTier>> tier = FsTier::Open(open);
    if (!tier.ok()) {
      return Status(tier.status().code(), "secondary_tiers[" + std::to_string(i) + "] (" + fs.root_dir +
                                              "): " + tier.status().message());
    }
    router_.AddTier("fs" + std::to_string(i), std::move(tier).value(), StagerChecksums());
  }
  return Status::Ok();
}

// Whether the copies compute the rows' CRC32C where the data is (staged_crc.h):
// on the GPU once its CRC kernel passed its start-up self-check (else the
// stager would compute them on the CPU from the row, which the fs tier does as
// well); the host stand-in's copy workers compute them too, so that tests
// without a GPU run this path.
bool TieredStoreImpl::StagerChecksums() const {
  return stager_->backend_name() == "host" || stager_->gpu_copy_counts().crc_on_device;
}

TieredStoreImpl::~TieredStoreImpl() {
  if (progress_.joinable()) {
    if (!WaitIdle(options_.shutdown_timeout_ms).ok()) {
      LogWarning("tiered store: shutting down with transfers still running");
    }
    {
      std::lock_guard lock(wake_mu_);
      stop_ = true;
    }
    wake_cv_.notify_one();
    progress_.join();
  }
}

}  // namespace kvtier::internal
