// What the operators' tools judge a block's size against (layout-spec/
// FORMAT.md L196): the row an operator gave, else the row the namespace
// itself declares, else the size most of its blocks have. Only the first
// two are trusted to remove a block for being short: files a co-tenant
// plants can make any size the most common, and an operator's own tool must
// never be the one that deletes valid blocks because of them.
#pragma once

#include <cstdint>

#include "ops/ops_internal.h"

namespace kvtier::internal {

struct RowBasis {
  enum class From { kGiven, kDeclared, kMostCommon };
  uint64_t bytes = 0;  // the expected file size (a sealed namespace's: row + seal trailer)
  From from = From::kMostCommon;
  bool trusted() const { return from != From::kMostCommon; }
  // "given row size ", "declared page size " or "most common size ", for a finding's detail.
  const char* name() const;
};

// L196: `given_row_bytes` (fsck --row-bytes; 0: none), else an SGLang
// namespace's `page_bytes` (L104, L107) where its config.json hashes to its
// digest (L79: a co-tenant cannot change it then), else MostCommonSize.
// A sealed namespace's rows carry the seal trailer (L163).
RowBasis RowBasisOf(const NsScan& ns, const ConfigInfo& info, uint64_t given_row_bytes);

// L196: whether a block of `size` bytes, shorter than `basis`, may be
// removed for its size alone: against a trusted basis always (L65, L80);
// against the most common size only when it is empty (no row is).
inline bool RemovableShort(uint64_t size, const RowBasis& basis) {
  return size < basis.bytes && (basis.trusted() || size == 0);
}

}  // namespace kvtier::internal
