#include "ops/row_basis.h"

#include "format/seal_record.h"

namespace kvtier::internal {

const char* RowBasis::name() const {
  switch (from) {
    case From::kGiven: return "given row size ";
    case From::kDeclared: return "declared page size ";
    case From::kMostCommon: break;
  }
  return "most common size ";
}

RowBasis RowBasisOf(const NsScan& ns, const ConfigInfo& info, uint64_t given_row_bytes) {
  const uint64_t trailer = info.sealed ? format::kSealTrailerBytes : 0;
  if (given_row_bytes != 0) return {given_row_bytes + trailer, RowBasis::From::kGiven};
  // L104: only kvtier's SGLang namespaces name their page's bytes; vLLM's
  // fields (L11) name no row size, so theirs is never declared.
  if (info.engine == "sglang" && info.digest_matches && info.page_bytes > 0) {
    return {static_cast<uint64_t>(info.page_bytes) + trailer, RowBasis::From::kDeclared};
  }
  return {MostCommonSize(ns), RowBasis::From::kMostCommon};
}

}  // namespace kvtier::internal
