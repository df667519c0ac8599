// SglangStore: synchronous batch calls over an FsTier (skeleton: the API
// compiles; the calls answer as after Close until the engine is wired).
#include "kvtier/sglang.h"

namespace kvtier {

struct SglangStore::Rep {
  explicit Rep(SglangNamespace n) : ns(std::move(n)) {}
  SglangNamespace ns;
  FsTierOptions tier;
};

SglangStore::SglangStore(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
SglangStore::~SglangStore() { Close(); }

Result<std::unique_ptr<SglangStore>> SglangStore::Open(const SglangStoreOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(SglangNamespace ns, SglangNamespace::Create(options.spec));
  auto rep = std::make_unique<Rep>(std::move(ns));
  rep->tier = options.tier;
  return std::unique_ptr<SglangStore>(new SglangStore(std::move(rep)));
}

size_t SglangStore::ExistsPrefix(std::span<const std::string_view> /*keys*/) { return 0; }

std::vector<bool> SglangStore::Load(std::span<const std::string_view> keys,
                                    std::span<const SglangPagePieces> /*pages*/) {
  return std::vector<bool>(keys.size(), false);
}

std::vector<bool> SglangStore::Store(std::span<const std::string_view> keys,
                                     std::span<const SglangConstPagePieces> /*pages*/) {
  return std::vector<bool>(keys.size(), false);
}

Result<uint64_t> SglangStore::Clear() { return Status(StatusCode::kUnavailable, "SglangStore: not implemented yet"); }

FsTierMetrics SglangStore::Metrics() const { return FsTierMetrics{}; }

const SglangNamespace& SglangStore::ns() const { return rep_->ns; }

std::string SglangStore::PagePath(std::string_view key) const {
  return JoinRoot(rep_->tier.root_dir, rep_->ns.PageRelPath(key));
}

void SglangStore::Close() {}

}  // namespace kvtier
