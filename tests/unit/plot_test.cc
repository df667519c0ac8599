// Proves that RenderReplaySvg (the chart of `kvtier replay --plot`) always
// produces a well-formed, self-contained SVG document: for a typical two-phase
// replay, for no requests, for a single request and for degenerate values
// (zero latency everywhere, NaN/inf inputs). A small XML checker below
// verifies balanced tags, quoted attributes and valid entity references; the
// tests also check the restart marker appears exactly when phases differ, the
// title is escaped, no script or external reference sneaks in, and no number
// in the document is "nan" or "inf".
#include "replay/plot.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::internal {
namespace {

// Skips an attribute list up to the end of a tag; false on an unquoted value
// or an unterminated tag. `*i` ends on the '>' (or the '/' of "/>").
bool SkipAttributes(std::string_view doc, size_t* i, bool* self_closing) {
  while (*i < doc.size()) {
    const char c = doc[*i];
    if (c == '"' || c == '\'') {
      const size_t end = doc.find(c, *i + 1);
      if (end == std::string_view::npos ||
          doc.substr(*i + 1, end - *i - 1).find('<') != std::string_view::npos) {
        return false;
      }
      *i = end + 1;
    } else if (c == '/' && *i + 1 < doc.size() && doc[*i + 1] == '>') {
      *self_closing = true;
      return true;
    } else if (c == '>') {
      return true;
    } else if (c == '=' && (*i + 1 >= doc.size() || (doc[*i + 1] != '"' && doc[*i + 1] != '\''))) {
      return false;  // an attribute value without quotes
    } else {
      ++*i;
    }
  }
  return false;
}

// True when every '&' in character data starts one of XML's predefined entities.
bool EntitiesValid(std::string_view text) {
  for (size_t i = text.find('&'); i != std::string_view::npos; i = text.find('&', i + 1)) {
    bool known = false;
    for (std::string_view e : {"&lt;", "&gt;", "&amp;", "&quot;", "&apos;"})
      known |= text.substr(i).starts_with(e);
    if (!known) return false;
  }
  return true;
}

// A minimal well-formedness check: one root element, every start tag closed
// in order, attribute values quoted, entity references valid. Enough for the
// subset of XML the renderer writes (no comments, CDATA or doctype).
::testing::AssertionResult WellFormed(std::string_view doc) {
  std::vector<std::string> open;
  int roots = 0;
  size_t i = 0;
  while (i < doc.size()) {
    const size_t lt = doc.find('<', i);
    std::string_view text =
        doc.substr(i, lt == std::string_view::npos ? std::string_view::npos : lt - i);
    if (!EntitiesValid(text) || text.find('>') != std::string_view::npos) {
      return ::testing::AssertionFailure() << "bad character data near offset " << i;
    }
    if (open.empty() && text.find_first_not_of(" \n\t\r") != std::string_view::npos) {
      return ::testing::AssertionFailure() << "text outside the root element at offset " << i;
    }
    if (lt == std::string_view::npos) break;
    const bool closing = lt + 1 < doc.size() && doc[lt + 1] == '/';
    size_t j = lt + (closing ? 2 : 1);
    const size_t name_start = j;
    while (j < doc.size() &&
           (std::isalnum(static_cast<unsigned char>(doc[j])) || doc[j] == '-' || doc[j] == ':'))
      ++j;
    const std::string name(doc.substr(name_start, j - name_start));
    if (name.empty()) return ::testing::AssertionFailure() << "tag without a name at offset " << lt;
    bool self_closing = false;
    if (!SkipAttributes(doc, &j, &self_closing))
      return ::testing::AssertionFailure() << "bad tag <" << name;
    if (closing) {
      if (open.empty() || open.back() != name)
        return ::testing::AssertionFailure() << "unbalanced </" << name << ">";
      open.pop_back();
    } else if (!self_closing) {
      if (open.empty()) ++roots;
      open.push_back(name);
    } else if (open.empty()) {
      ++roots;
    }
    i = j + (self_closing ? 2 : 1);
  }
  if (!open.empty()) return ::testing::AssertionFailure() << "<" << open.back() << "> never closed";
  if (roots != 1) return ::testing::AssertionFailure() << roots << " root elements";
  return ::testing::AssertionSuccess();
}

// Well-formed, an <svg> root in the SVG namespace, nothing executable or
// fetched from elsewhere, and only finite numbers.
void ExpectValidSvg(const std::string& svg) {
  EXPECT_TRUE(WellFormed(svg));
  EXPECT_TRUE(svg.starts_with("<svg")) << svg.substr(0, 80);
  EXPECT_NE(svg.find("xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  for (const char* banned : {"<script", "href", "@import", "url(", "nan", "inf", "NaN", "Inf"}) {
    EXPECT_EQ(svg.find(banned), std::string::npos) << "contains " << banned;
  }
}

size_t Count(std::string_view haystack, std::string_view needle) {
  size_t n = 0;
  for (size_t i = haystack.find(needle); i != std::string_view::npos;
       i = haystack.find(needle, i + 1))
    ++n;
  return n;
}

// A replay of 60 requests: 30 warm-up ones, then a restart whose first
// requests miss the (cold) CPU tier and load from fs.
std::vector<ReplayPoint> TwoPhaseReplay() {
  std::vector<ReplayPoint> points;
  for (int i = 0; i < 60; ++i) {
    const int phase = i < 30 ? 0 : 1;
    const double hit = std::min(1.0, (i % 30) / 20.0);
    points.push_back({.arrival_s = 0.37 * i,
                      .hit_fraction = hit,
                      .load_ms = phase == 1 ? 3.0 + i % 7 : 1.5,
                      .phase = phase});
  }
  return points;
}

TEST(ReplayPlot, TypicalReplayIsValidWithOneRestartMarker) {
  const std::string svg = RenderReplaySvg(TwoPhaseReplay(), "kvtier replay: synthetic:agents");
  ExpectValidSvg(svg);
  EXPECT_EQ(Count(svg, ">restart<"), 1u);
  EXPECT_EQ(Count(svg, "stroke-dasharray"), 1u);
  EXPECT_EQ(Count(svg, "<circle"), 120u);  // one dot per request in each panel
  EXPECT_NE(svg.find("cache hit rate (%)"), std::string::npos);
  EXPECT_NE(svg.find("kvtier load latency (ms)"), std::string::npos);
  EXPECT_NE(svg.find(">100<"), std::string::npos);  // the hit-rate axis tops at 100 %
  EXPECT_NE(svg.find(">10<"), std::string::npos);   // latency max 9 ms rounds up to 10
  EXPECT_EQ(svg.find("no requests"), std::string::npos);
}

TEST(ReplayPlot, NoRestartMarkerWhenAllRequestsShareAPhase) {
  std::vector<ReplayPoint> points = TwoPhaseReplay();
  for (ReplayPoint& p : points) p.phase = 1;
  const std::string svg = RenderReplaySvg(points, "one phase");
  ExpectValidSvg(svg);
  EXPECT_EQ(svg.find("restart"), std::string::npos);
  EXPECT_EQ(svg.find("stroke-dasharray"), std::string::npos);
}

TEST(ReplayPlot, UnsortedInputStillMarksOneRestart) {
  std::vector<ReplayPoint> points = TwoPhaseReplay();
  std::reverse(points.begin(), points.end());
  const std::string svg = RenderReplaySvg(points, "reversed");
  ExpectValidSvg(svg);
  EXPECT_EQ(Count(svg, ">restart<"), 1u);
}

TEST(ReplayPlot, InterleavedPhasesMarkOneRestart) {
  // Several instances restarting at slightly different times interleave the
  // two phases' arrivals; the chart still marks the restart once.
  std::vector<ReplayPoint> points = TwoPhaseReplay();
  std::swap(points[29].phase, points[31].phase);
  const std::string svg = RenderReplaySvg(points, "interleaved");
  ExpectValidSvg(svg);
  EXPECT_EQ(Count(svg, ">restart<"), 1u);
  EXPECT_EQ(Count(svg, "<polyline"), 4u);  // one rolling mean per phase and panel
}

TEST(ReplayPlot, EmptyInputSaysNoRequests) {
  const std::string svg = RenderReplaySvg({}, "empty");
  ExpectValidSvg(svg);
  EXPECT_NE(svg.find(">no requests<"), std::string::npos);
  EXPECT_EQ(svg.find("<circle"), std::string::npos);
}

TEST(ReplayPlot, SinglePointWithZeroSpans) {
  // One request at t=0 without loads: both the time span and the latency span
  // are zero, the cases where a naive scale divides by zero.
  const std::string svg =
      RenderReplaySvg({{.arrival_s = 0, .hit_fraction = 0, .load_ms = 0, .phase = 0}}, "single");
  ExpectValidSvg(svg);
  EXPECT_EQ(Count(svg, "<circle"), 2u);
  EXPECT_EQ(svg.find("restart"), std::string::npos);
}

TEST(ReplayPlot, ZeroLatencyEverywhereAndNonFiniteInputsStayFinite) {
  std::vector<ReplayPoint> points = TwoPhaseReplay();
  for (ReplayPoint& p : points) p.load_ms = 0;
  ExpectValidSvg(RenderReplaySvg(points, "zero latency"));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  points[3] = {.arrival_s = nan, .hit_fraction = inf, .load_ms = -inf, .phase = 0};
  points[4] = {.arrival_s = inf, .hit_fraction = nan, .load_ms = nan, .phase = 0};
  points[5] = {.arrival_s = -2, .hit_fraction = -1, .load_ms = inf, .phase = 0};
  ExpectValidSvg(RenderReplaySvg(points, "non-finite"));
}

TEST(ReplayPlot, TitleIsEscaped) {
  const std::string svg = RenderReplaySvg(TwoPhaseReplay(), "a<b & \"c\" > d");
  ExpectValidSvg(svg);
  EXPECT_NE(svg.find("a&lt;b &amp; &quot;c&quot; &gt; d"), std::string::npos);
  EXPECT_EQ(svg.find("a<b"), std::string::npos);
  const std::string empty = RenderReplaySvg({}, "</svg><script>x</script>");
  ExpectValidSvg(empty);
  EXPECT_NE(empty.find("&lt;/svg&gt;&lt;script&gt;"), std::string::npos);
}

TEST(ReplayPlot, CheckerRejectsMalformedDocuments) {
  // The checker itself must be able to fail, or the tests above prove nothing.
  EXPECT_FALSE(WellFormed("<svg><g></svg>"));
  EXPECT_FALSE(WellFormed("<svg><text>a < b</text></svg>"));
  EXPECT_FALSE(WellFormed("<svg><text>a & b</text></svg>"));
  EXPECT_FALSE(WellFormed("<svg width=10/>"));
  EXPECT_FALSE(WellFormed("<svg/><svg/>"));
  EXPECT_FALSE(WellFormed("<svg><g>"));
  EXPECT_TRUE(WellFormed("<svg a=\"1\"><g/><text>x &amp; y</text></svg>\n"));
}

}  // namespace
}  // namespace kvtier::internal
