// The SVG chart behind `kvtier replay --plot FILE.svg`: how the hit rate and
// the load latency evolve over a replayed trace, and what a restart does to
// them (a cold CPU tier, a warm fs tier).
//
// The output is a single self-contained SVG document (no scripts, no external
// fonts or stylesheets) so it opens in any browser and can be attached to a
// report or a CI artifact as is.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvtier::internal {

// One replayed request, as plotted.
struct ReplayPoint {
  double arrival_s = 0;  // request arrival, seconds from trace start
  double hit_fraction =
      0;  // prompt tokens served from cache (GPU or any kvtier tier) / prompt tokens, in [0,1]
  double load_ms = 0;  // time to load the request's hits from kvtier (0 if none)
  int phase = 0;       // 0 before the restart, 1 after
};

// A self-contained SVG (no scripts, no external fonts): two stacked panels
// sharing the time axis: hit rate (0-100 %) and load latency (ms, linear axis
// from 0 to a rounded max), one dot per request, plus a rolling mean line
// (window ~10 requests), a vertical dashed line where phase changes (labelled
// "restart"), axis ticks and labels, a title. Empty input gives a valid SVG
// saying "no requests".
//
// Points may come in any order (they are plotted by arrival); non-finite
// values are clamped so that the document never contains "nan" or "inf".
// `title` is escaped, so any text is safe.
std::string RenderReplaySvg(const std::vector<ReplayPoint>& points, std::string_view title);

}  // namespace kvtier::internal
