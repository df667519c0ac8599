// `kvtier du --top N --by bytes|age`: which namespaces fill the volume, or
// have been idle longest, whichever engine wrote them.
#include <algorithm>

#include "cli/ops_command.h"

namespace kvtier::internal {

Result<DuTopBy> ParseDuTopBy(std::string_view text) {
  if (text == "bytes") return DuTopBy::kBytes;
  if (text == "age") return DuTopBy::kAge;
  return InvalidArgument("--by: expected bytes or age, got '" + std::string(text) + "'");
}

void KeepTopNamespaces(const DuTop& top, DuReport* r) {
  if (top.n == 0) return;
  auto before = [by = top.by](const NamespaceUsage& a, const NamespaceUsage& b) {
    if (by == DuTopBy::kBytes && a.bytes != b.bytes) return a.bytes > b.bytes;
    // Coldest first: the oldest last use as gc counts it (FORMAT.md L155: blocks
    // dated far ahead count as the epoch); a namespace without blocks (0) has none at all.
    if (by == DuTopBy::kAge && a.newest_counted_activity != b.newest_counted_activity) {
      return a.newest_counted_activity < b.newest_counted_activity;
    }
    return a.dir < b.dir;
  };
  std::vector<NamespaceUsage>& list = r->namespaces;
  const size_t keep = std::min(top.n, list.size());
  std::partial_sort(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(keep), list.end(), before);
  list.resize(keep);
}

}  // namespace kvtier::internal
