// SVG rendering of a replay: two panels (hit rate, load latency) over one
// time axis. Written by hand rather than with a plotting library because the
// product has no such dependency and the chart is simple: a few rectangles,
// lines, circles and text elements.
#include "replay/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::internal {
namespace {

// Canvas and plot-area geometry, in SVG user units (pixels at 100 %).
constexpr double kWidth = 900;
constexpr double kHeight = 560;
constexpr double kLeft = 78;  // room for the y tick labels and the rotated axis label
constexpr double kRight = 880;
constexpr double kTimeAxisY = 536;  // baseline of the x axis label
// Requests averaged by the rolling mean: long enough to smooth the per-request
// noise, short enough that the drop after a restart stays sharp.
constexpr size_t kRollingWindow = 10;

// One vertical panel: where it sits and what it plots.
struct Panel {
  double top = 0, bottom = 0;    // pixel extent of the plot area
  double y_max = 1, y_step = 1;  // axis range [0, y_max] with ticks every y_step
  double ReplayPoint::*field = nullptr;
  double scale = 1;  // field * scale is the plotted value (fraction -> %)
  const char* label = "";
  const char* color = "";
};

// A coordinate: one decimal is below a pixel, and non-finite values (which
// the callers avoid, but a stray one must not break the document) become 0.
std::string Num(double v) {
  if (!std::isfinite(v)) v = 0;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// A tick label: short, and exact for the 1-2-5 steps NiceAxis produces.
std::string Label(double v) {
  if (!std::isfinite(v)) v = 0;
  if (std::fabs(v) < 1e-12) v = 0;  // no "-0" or "1e-17" from accumulated steps
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

std::string XmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        // Control characters other than tab/newline are not allowed in XML 1.0.
        out += (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') ? ' ' : c;
    }
  }
  return out;
}

// Rounds `data_max` up to the tightest axis top that takes at most 8 ticks
// on a 1-2-5 step, so the labels read as round numbers without wasting much
// of the panel. A zero, negative or non-finite maximum (no loads, a single
// request) gives [0, 1]: a span of zero would divide by zero.
void NiceAxis(double data_max, double* top, double* step) {
  *top = 1, *step = 0.25;
  if (!std::isfinite(data_max) || data_max <= 0) return;
  constexpr double kMaxTicks = 8;
  const double lowest = std::pow(10.0, std::floor(std::log10(data_max / kMaxTicks)));
  *top = std::numeric_limits<double>::infinity();
  for (double magnitude : {lowest, 10 * lowest}) {
    for (double m : {1.0, 2.0, 5.0}) {
      const double candidate_step = m * magnitude;
      const double candidate_top = candidate_step * std::ceil(data_max / candidate_step - 1e-9);
      if (candidate_top / candidate_step > kMaxTicks + 1e-9 || candidate_top >= *top) continue;
      *top = candidate_top, *step = candidate_step;
    }
  }
}

// Copies the points with every value made finite and in range, sorted by
// arrival (stable, so equal arrivals keep their order).
std::vector<ReplayPoint> Sanitized(const std::vector<ReplayPoint>& points) {
  auto finite_or_zero = [](double v) { return std::isfinite(v) ? v : 0.0; };
  std::vector<ReplayPoint> out = points;
  for (ReplayPoint& p : out) {
    p.arrival_s = std::max(0.0, finite_or_zero(p.arrival_s));
    p.hit_fraction = std::clamp(finite_or_zero(p.hit_fraction), 0.0, 1.0);
    p.load_ms = std::max(0.0, finite_or_zero(p.load_ms));
  }
  std::stable_sort(out.begin(), out.end(), [](const ReplayPoint& a, const ReplayPoint& b) {
    return a.arrival_s < b.arrival_s;
  });
  return out;
}

double XOf(double t, double t_max) { return kLeft + (kRight - kLeft) * t / t_max; }

double YOf(const Panel& panel, double v) {
  return panel.bottom - (panel.bottom - panel.top) * std::min(v, panel.y_max) / panel.y_max;
}

void Text(double x, double y, std::string_view anchor, std::string_view extra,
          std::string_view text, std::string* out) {
  *out += "<text x=\"" + Num(x) + "\" y=\"" + Num(y) + "\" text-anchor=\"" + std::string(anchor) +
          "\"" + std::string(extra) + ">" + XmlEscape(text) + "</text>\n";
}

void Line(double x1, double y1, double x2, double y2, std::string_view style, std::string* out) {
  *out += "<line x1=\"" + Num(x1) + "\" y1=\"" + Num(y1) + "\" x2=\"" + Num(x2) + "\" y2=\"" +
          Num(y2) + "\" " + std::string(style) + "/>\n";
}

// The panel's frame, horizontal grid lines with their tick labels, and the
// rotated y axis label.
void DrawPanelFrame(const Panel& panel, std::string* out) {
  *out += "<rect x=\"" + Num(kLeft) + "\" y=\"" + Num(panel.top) + "\" width=\"" +
          Num(kRight - kLeft) + "\" height=\"" + Num(panel.bottom - panel.top) +
          "\" fill=\"#fafafa\" stroke=\"#888\"/>\n";
  const int ticks = static_cast<int>(std::lround(panel.y_max / panel.y_step));
  for (int i = 0; i <= ticks; ++i) {
    const double v = i * panel.y_step;
    const double y = YOf(panel, v);
    if (i > 0 && i < ticks) Line(kLeft, y, kRight, y, "stroke=\"#ddd\"", out);
    Line(kLeft - 4, y, kLeft, y, "stroke=\"#888\"", out);
    Text(kLeft - 7, y + 4, "end", "", Label(v), out);
  }
  const double mid = (panel.top + panel.bottom) / 2;
  Text(18, mid, "middle", " transform=\"rotate(-90 18 " + Num(mid) + ")\"", panel.label, out);
}

// Vertical grid lines through both panels, tick labels under the lower one.
void DrawTimeAxis(const Panel& upper, const Panel& lower, double t_max, double t_step,
                  std::string* out) {
  const int ticks = static_cast<int>(std::lround(t_max / t_step));
  for (int i = 0; i <= ticks; ++i) {
    const double x = XOf(i * t_step, t_max);
    if (i > 0 && i < ticks) {
      Line(x, upper.top, x, upper.bottom, "stroke=\"#ddd\"", out);
      Line(x, lower.top, x, lower.bottom, "stroke=\"#ddd\"", out);
    }
    Line(x, lower.bottom, x, lower.bottom + 4, "stroke=\"#888\"", out);
    Text(x, lower.bottom + 17, "middle", "", Label(i * t_step), out);
  }
  Text((kLeft + kRight) / 2, kTimeAxisY, "middle", "", "time since trace start (s)", out);
}

void DrawDots(const std::vector<ReplayPoint>& points, const Panel& panel, double t_max,
              std::string* out) {
  *out += "<g fill=\"" + std::string(panel.color) + "\" fill-opacity=\"0.45\">\n";
  for (const ReplayPoint& p : points) {
    *out += "<circle cx=\"" + Num(XOf(p.arrival_s, t_max)) + "\" cy=\"" +
            Num(YOf(panel, p.*panel.field * panel.scale)) + "\" r=\"2.2\"/>\n";
  }
  *out += "</g>\n";
}

// The phases present, in order of first appearance by arrival.
std::vector<int> PhasesInOrder(const std::vector<ReplayPoint>& points) {
  std::vector<int> phases;
  for (const ReplayPoint& p : points) {
    if (std::find(phases.begin(), phases.end(), p.phase) == phases.end()) phases.push_back(p.phase);
  }
  return phases;
}

// A trailing mean over the last kRollingWindow requests of each phase, one
// polyline per phase: averaging across a restart would blur the very drop the
// chart is meant to show.
void DrawRollingMean(const std::vector<ReplayPoint>& points, const Panel& panel, double t_max,
                     std::string* out) {
  for (int phase : PhasesInOrder(points)) {
    std::vector<double> window;  // the phase's values so far; the mean uses the last few
    std::string coords;
    double sum = 0;
    for (const ReplayPoint& p : points) {
      if (p.phase != phase) continue;
      window.push_back(p.*panel.field * panel.scale);
      sum += window.back();
      if (window.size() > kRollingWindow) sum -= window[window.size() - 1 - kRollingWindow];
      const double n = static_cast<double>(std::min(window.size(), kRollingWindow));
      // Appended piece by piece: GCC 12 at -O2 misreports `"" + std::string&&`
      // as an overlapping memcpy (-Wrestrict, a GCC 12 false positive).
      if (!coords.empty()) coords += ' ';
      coords += Num(XOf(p.arrival_s, t_max));
      coords += ',';
      coords += Num(YOf(panel, sum / n));
    }
    *out += "<polyline fill=\"none\" stroke=\"#222\" stroke-width=\"1.6\" points=\"" + coords +
            "\"/>\n";
  }
}

// A dashed line at the first request of every phase after the first, across
// both panels. Keyed on new phase values rather than on every change so that
// requests of two phases with interleaved arrivals cannot draw a forest.
void DrawRestarts(const std::vector<ReplayPoint>& points, const Panel& upper, const Panel& lower,
                  double t_max, std::string* out) {
  const std::vector<int> phases = PhasesInOrder(points);
  for (size_t k = 1; k < phases.size(); ++k) {
    const auto first = std::find_if(points.begin(), points.end(),
                                    [&](const ReplayPoint& p) { return p.phase == phases[k]; });
    const double x = XOf(first->arrival_s, t_max);
    Line(x, upper.top, x, lower.bottom,
         "stroke=\"#c0392b\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"", out);
    Text(x + 4, upper.top + 13, "start", " fill=\"#c0392b\"", "restart", out);
  }
}

// The root element, a <title> for viewers' tab names, a white background
// (dark-themed viewers would otherwise show black text on black) and the
// visible title.
std::string Header(std::string_view title) {
  const std::string size = "width=\"" + Num(kWidth) + "\" height=\"" + Num(kHeight) + "\"";
  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" " + size + " viewBox=\"0 0 " +
                    Num(kWidth) + " " + Num(kHeight) +
                    "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  out += "<title>" + XmlEscape(title) + "</title>\n";
  out += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  Text(kWidth / 2, 26, "middle", " font-size=\"16\" font-weight=\"bold\"", title, &out);
  return out;
}

}  // namespace

std::string RenderReplaySvg(const std::vector<ReplayPoint>& input, std::string_view title) {
  std::string out = Header(title);
  if (input.empty()) {
    Text(kWidth / 2, kHeight / 2, "middle", " font-size=\"14\" fill=\"#666\"", "no requests", &out);
    return out + "</svg>\n";
  }
  const std::vector<ReplayPoint> points = Sanitized(input);
  double t_max = 0, t_step = 0, load_max = 0;
  for (const ReplayPoint& p : points) load_max = std::max(load_max, p.load_ms);
  NiceAxis(points.back().arrival_s, &t_max, &t_step);
  Panel hits{.top = 50,
             .bottom = 260,
             .y_max = 100,
             .y_step = 20,
             .field = &ReplayPoint::hit_fraction,
             .scale = 100,
             .label = "cache hit rate (%)",
             .color = "#2874a6"};
  Panel loads{.top = 290,
              .bottom = 500,
              .field = &ReplayPoint::load_ms,
              .label = "kvtier load latency (ms)",
              .color = "#d68910"};
  NiceAxis(load_max, &loads.y_max, &loads.y_step);
  for (const Panel* panel : {&hits, &loads}) DrawPanelFrame(*panel, &out);
  DrawTimeAxis(hits, loads, t_max, t_step, &out);
  for (const Panel* panel : {&hits, &loads}) {
    DrawDots(points, *panel, t_max, &out);
    DrawRollingMean(points, *panel, t_max, &out);
  }
  DrawRestarts(points, hits, loads, t_max, &out);
  Text(kRight, 44, "end", " fill=\"#555\"",
       "dots: requests; line: rolling mean of " + std::to_string(kRollingWindow) + " requests",
       &out);
  return out + "</svg>\n";
}

}  // namespace kvtier::internal
