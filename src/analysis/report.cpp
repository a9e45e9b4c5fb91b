// src/analysis/report.cpp: render_report (include/rotary/report.hpp): the analysis plots as
// one self-contained HTML page.
//
// The SVG helper (Chart, render_chart, render_heatmap) is deliberately small: a plot area with
// linear or log axes, "nice" ticks, polylines, circle markers, horizontal reference lines and a
// legend. Every plot gets a <title>, a visible heading and axis labels with units. No scripts,
// no external resources (inline SVG in HTML5 needs no xmlns, so the page holds no URL at all).
#include "rotary/report.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <sstream>

#include "rotary/analysis.hpp"
#include "rotary/frequencies.hpp"
#include "src/analysis/html.hpp"
#include "src/analysis/report_plots.hpp"

namespace rotary::analysis {

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

int64_t count_report_plots(std::string_view html) {
  int64_t count = 0;
  for (size_t at = html.find("<svg"); at != std::string_view::npos; at = html.find("<svg", at + 4)) ++count;
  return count;
}

namespace {

constexpr double kTwoPi = 2.0 * std::numbers::pi;

// A number for tick labels and tables: %.6g ("inf" for infinity, "nan").
std::string number_text(double value, int significant = 6) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[40];
  std::snprintf(buffer, sizeof buffer, "%.*g", significant, value);
  return buffer;
}

// Coordinates in the SVG, 2 decimals are plenty.
std::string px(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2f", value);
  return buffer;
}

// A fixed palette for series (colour-blind friendly Okabe-Ito order) and one colour per regime.
const char* const kPalette[] = {"#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000", "#f0e442"};
const char* series_color(size_t index) { return kPalette[index % (sizeof kPalette / sizeof kPalette[0])]; }

const char* regime_color(PairRegime regime) {
  switch (regime) {
    case PairRegime::Unscaled: return "#7f7f7f";
    case PairRegime::Extrapolated: return "#0072b2";
    case PairRegime::Interpolated: return "#d55e00";
    case PairRegime::Blended: return "#009e73";
    case PairRegime::Rescaled: return "#cc79a7";
    case PairRegime::Unrotated: return "#000000";
  }
  return "#7f7f7f";
}

// ---- the SVG helper -------------------------------------------------------------------------

struct Point {
  double x = 0.0;
  double y = 0.0;
};

enum class Mark { Line, Markers, LineAndMarkers };

// How a line is stroked. Series are solid or dashed; reference lines are dotted, so that a
// reference line never looks like a series (and the legend shows each as drawn).
enum class Stroke { Solid, Dashed, DashDot, Dotted };

const char* dash_array(Stroke stroke) {
  switch (stroke) {
    case Stroke::Solid: return "";
    case Stroke::Dashed: return " stroke-dasharray=\"7 4\"";
    case Stroke::DashDot: return " stroke-dasharray=\"10 3 2 3\"";
    case Stroke::Dotted: return " stroke-dasharray=\"2 3\"";
  }
  return "";
}

struct Series {
  std::string label;  // legend text; empty = not in the legend
  std::string color;
  std::vector<Point> points;
  Mark mark = Mark::Line;
  Stroke stroke = Stroke::Solid;
  std::vector<std::string> point_colors;  // optional, per point (markers only)
};

struct ReferenceLine {  // a horizontal line across the plot at y, labelled
  double y = 0.0;
  std::string label;
  std::string color;
};

enum class LegendMark { Swatch, Line, Marker };

struct LegendEntry {
  std::string label;
  std::string color;
  LegendMark mark = LegendMark::Swatch;
  Stroke stroke = Stroke::Solid;  // for LegendMark::Line
};

struct Chart {
  std::string title;    // heading and <title>
  std::string x_label;  // with units, e.g. "pair index i (0 = fastest)"
  std::string y_label;  // with units, e.g. "wavelength (tokens)"
  bool log_x = false;
  bool log_y = false;
  std::vector<Series> series;
  std::vector<ReferenceLine> reference_lines;
  std::vector<LegendEntry> extra_legend;  // e.g. regime colours of per-point markers
};

// Plot geometry, in SVG user units. The plot area is kPlotWidth wide; the legend at its right
// gets at least kRight and grows with its longest label, so no label is cut off.
constexpr double kWidth = 640, kHeight = 360;
constexpr double kLeft = 78, kRight = 170, kTop = 34, kBottom = 52;
constexpr double kPlotWidth = kWidth - kLeft - kRight;
// Width of legend text at 11 px sans-serif: ~0.6 em per character is a safe upper estimate for
// Latin text in DejaVu Sans / Liberation Sans (the browser test measures the real boxes).
constexpr double kLegendCharWidth = 6.6;

struct Axis {
  bool log = false;
  double lo = 0.0, hi = 1.0;  // in data units (log axes: positive)
  double pixel_lo = 0.0, pixel_hi = 1.0;
  double to_pixel(double value) const {
    const double a = log ? std::log10(lo) : lo;
    const double b = log ? std::log10(hi) : hi;
    const double v = log ? std::log10(value) : value;
    return pixel_lo + (v - a) / (b - a) * (pixel_hi - pixel_lo);
  }
};

// Widens [lo, hi] to a non-empty range; log axes to whole decades, linear ones padded.
void settle_range(Axis& axis) {
  if (axis.log) {
    axis.lo = std::pow(10.0, std::floor(std::log10(axis.lo) + 1e-9));
    axis.hi = std::pow(10.0, std::ceil(std::log10(axis.hi) - 1e-9));
    if (axis.hi <= axis.lo) axis.hi = axis.lo * 10.0;
  } else {
    if (axis.hi <= axis.lo) {
      axis.lo -= 0.5;
      axis.hi += 0.5;
    }
    const double pad = 0.04 * (axis.hi - axis.lo);
    axis.lo -= pad;
    axis.hi += pad;
  }
}

// Tick values: log axes every power of ten (thinned to at most ~8), linear ones at 1/2/5 steps.
std::vector<double> ticks(const Axis& axis) {
  std::vector<double> out;
  if (axis.log) {
    const int first = static_cast<int>(std::lround(std::log10(axis.lo)));
    const int last = static_cast<int>(std::lround(std::log10(axis.hi)));
    const int step = std::max(1, (last - first + 7) / 8);
    for (int e = first; e <= last; e += step) out.push_back(std::pow(10.0, e));
    return out;
  }
  const double raw = (axis.hi - axis.lo) / 6.0;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  for (double t = std::ceil(axis.lo / step) * step; t <= axis.hi + 1e-9 * step; t += step) {
    out.push_back(std::abs(t) < 1e-12 * step ? 0.0 : t);
  }
  return out;
}

// Tick labels as SVG text content. One style per axis: a log axis whose ticks all lie in
// [1, 1e5] shows plain numbers (1, 10, ..., 100000); any other log axis shows every tick as a
// power of ten with a superscript exponent (10⁻³, 10⁰, 10²), never a mix of 0.01 and 1e-3.
std::vector<std::string> tick_texts(const std::vector<double>& values, bool log) {
  std::vector<std::string> out;
  if (!log) {
    for (const double v : values) out.push_back(number_text(v, 4));
    return out;
  }
  bool plain = true;
  for (const double v : values) {
    const long e = std::lround(std::log10(v));
    plain = plain && e >= 0 && e <= 5;
  }
  for (const double v : values) {
    const long e = std::lround(std::log10(v));
    out.push_back(plain ? number_text(v) : "10<tspan dy=\"-5\" font-size=\"8\">" + std::to_string(e) + "</tspan>");
  }
  return out;
}

std::string svg_open(const std::string& title, double width, double height) {
  std::string out = "<svg class=\"plot\" role=\"img\" viewBox=\"0 0 " + px(width) + " " + px(height) + "\" width=\"" +
                    px(width) + "\" height=\"" + px(height) + "\">\n";
  out += "<title>" + html_escape(title) + "</title>\n";
  out += "<text class=\"plot-title\" x=\"" + px(width / 2) + "\" y=\"20\" text-anchor=\"middle\">" +
         html_escape(title) + "</text>\n";
  return out;
}

// Axis lines, ticks with labels, and the two axis labels.
std::string draw_axes(const Axis& x, const Axis& y, const std::string& x_label, const std::string& y_label) {
  std::ostringstream out;
  out << "<rect class=\"frame\" x=\"" << px(x.pixel_lo) << "\" y=\"" << px(y.pixel_hi) << "\" width=\""
      << px(x.pixel_hi - x.pixel_lo) << "\" height=\"" << px(y.pixel_lo - y.pixel_hi)
      << "\" fill=\"none\" stroke=\"#444\"/>\n";
  const std::vector<double> x_ticks = ticks(x), y_ticks = ticks(y);
  const std::vector<std::string> x_texts = tick_texts(x_ticks, x.log), y_texts = tick_texts(y_ticks, y.log);
  for (size_t k = 0; k < x_ticks.size(); ++k) {
    const double p = x.to_pixel(x_ticks[k]);
    out << "<line x1=\"" << px(p) << "\" y1=\"" << px(y.pixel_lo) << "\" x2=\"" << px(p) << "\" y2=\""
        << px(y.pixel_lo + 5) << "\" stroke=\"#444\"/>"
        << "<line x1=\"" << px(p) << "\" y1=\"" << px(y.pixel_hi) << "\" x2=\"" << px(p) << "\" y2=\""
        << px(y.pixel_lo) << "\" stroke=\"#eee\"/>"
        << "<text class=\"tick\" x=\"" << px(p) << "\" y=\"" << px(y.pixel_lo + 17)
        << "\" text-anchor=\"middle\">" << x_texts[k] << "</text>\n";
  }
  for (size_t k = 0; k < y_ticks.size(); ++k) {
    const double p = y.to_pixel(y_ticks[k]);
    out << "<line x1=\"" << px(x.pixel_lo - 5) << "\" y1=\"" << px(p) << "\" x2=\"" << px(x.pixel_lo) << "\" y2=\""
        << px(p) << "\" stroke=\"#444\"/>"
        << "<line x1=\"" << px(x.pixel_lo) << "\" y1=\"" << px(p) << "\" x2=\"" << px(x.pixel_hi) << "\" y2=\""
        << px(p) << "\" stroke=\"#eee\"/>"
        << "<text class=\"tick\" x=\"" << px(x.pixel_lo - 8) << "\" y=\"" << px(p + 4)
        << "\" text-anchor=\"end\">" << y_texts[k] << "</text>\n";
  }
  const double x_mid = (x.pixel_lo + x.pixel_hi) / 2, y_mid = (y.pixel_lo + y.pixel_hi) / 2;
  out << "<text class=\"axis-label\" x=\"" << px(x_mid) << "\" y=\"" << px(y.pixel_lo + 40)
      << "\" text-anchor=\"middle\">" << html_escape(x_label) << "</text>\n";
  out << "<text class=\"axis-label\" x=\"16\" y=\"" << px(y_mid) << "\" text-anchor=\"middle\" transform=\"rotate(-90 16 "
      << px(y_mid) << ")\">" << html_escape(y_label) << "</text>\n";
  return out.str();
}

// A legend at the right of the plot area: per entry, a sample drawn as the plot draws it (a
// line with its dashes, a marker, or a colour swatch) and the text.
std::string draw_legend(const std::vector<LegendEntry>& entries, double left, double top) {
  std::ostringstream out;
  double y = top;
  for (const LegendEntry& entry : entries) {
    switch (entry.mark) {
      case LegendMark::Swatch:
        out << "<rect class=\"swatch\" x=\"" << px(left) << "\" y=\"" << px(y - 8)
            << "\" width=\"14\" height=\"10\" fill=\"" << entry.color << "\"/>";
        break;
      case LegendMark::Line:
        out << "<path class=\"swatch\" d=\"M" << px(left - 2) << " " << px(y - 3) << " h18\" stroke=\"" << entry.color
            << "\" stroke-width=\"2\"" << dash_array(entry.stroke) << " fill=\"none\"/>";
        break;
      case LegendMark::Marker:
        out << "<circle class=\"swatch\" cx=\"" << px(left + 7) << "\" cy=\"" << px(y - 3) << "\" r=\"3.2\" fill=\""
            << entry.color << "\"/>";
        break;
    }
    out << "<text class=\"legend\" x=\"" << px(left + 21) << "\" y=\"" << px(y + 1) << "\">" << html_escape(entry.label)
        << "</text>\n";
    y += 16;
  }
  return out.str();
}

// The legend's width: samples, gap and the longest label.
double legend_width(const std::vector<LegendEntry>& entries) {
  size_t longest = 0;
  for (const LegendEntry& entry : entries) longest = std::max(longest, entry.label.size());
  return 12 + 21 + kLegendCharWidth * static_cast<double>(longest) + 8;
}

// Points a log axis cannot show (<= 0) or that are not finite are left out of the chart.
bool drawable(const Chart& chart, const Point& p) {
  if (!std::isfinite(p.x) || !std::isfinite(p.y)) return false;
  if (chart.log_x && p.x <= 0) return false;
  if (chart.log_y && p.y <= 0) return false;
  return true;
}

std::string render_chart(const Chart& chart) {
  Axis x{.log = chart.log_x, .lo = INFINITY, .hi = -INFINITY, .pixel_lo = kLeft, .pixel_hi = kLeft + kPlotWidth};
  Axis y{.log = chart.log_y, .lo = INFINITY, .hi = -INFINITY, .pixel_lo = kHeight - kBottom, .pixel_hi = kTop};
  for (const Series& s : chart.series) {
    for (const Point& p : s.points) {
      if (!drawable(chart, p)) continue;
      x.lo = std::min(x.lo, p.x), x.hi = std::max(x.hi, p.x);
      y.lo = std::min(y.lo, p.y), y.hi = std::max(y.hi, p.y);
    }
  }
  for (const ReferenceLine& line : chart.reference_lines) {
    if (chart.log_y && line.y <= 0) continue;
    y.lo = std::min(y.lo, line.y), y.hi = std::max(y.hi, line.y);
  }
  if (!(x.lo <= x.hi)) x.lo = 1, x.hi = 10;  // nothing drawable: an empty frame still renders
  if (!(y.lo <= y.hi)) y.lo = 1, y.hi = 10;
  settle_range(x);
  settle_range(y);

  // The legend first: its width sets the SVG's.
  std::vector<LegendEntry> legend;
  for (const ReferenceLine& line : chart.reference_lines) {
    if (chart.log_y && line.y <= 0) continue;
    legend.push_back({line.label, line.color, LegendMark::Line, Stroke::Dotted});
  }
  for (const Series& s : chart.series) {
    if (s.label.empty()) continue;
    legend.push_back({s.label, s.color, s.mark == Mark::Markers ? LegendMark::Marker : LegendMark::Line, s.stroke});
  }
  legend.insert(legend.end(), chart.extra_legend.begin(), chart.extra_legend.end());
  const double width = kLeft + kPlotWidth + std::max(kRight, legend_width(legend));

  std::ostringstream out;
  out << svg_open(chart.title, width, kHeight) << draw_axes(x, y, chart.x_label, chart.y_label);
  for (const ReferenceLine& line : chart.reference_lines) {
    if (chart.log_y && line.y <= 0) continue;
    const double p = y.to_pixel(line.y);
    out << "<path d=\"M" << px(x.pixel_lo) << " " << px(p) << " H" << px(x.pixel_hi) << "\" stroke=\"" << line.color
        << "\" stroke-width=\"1.4\"" << dash_array(Stroke::Dotted) << " fill=\"none\"/>\n";
  }
  for (const Series& s : chart.series) {
    std::string coords;
    std::vector<std::pair<Point, std::string>> markers;
    for (size_t i = 0; i < s.points.size(); ++i) {
      const Point& p = s.points[i];
      if (!drawable(chart, p)) continue;
      const Point pixel{x.to_pixel(p.x), y.to_pixel(p.y)};
      coords += px(pixel.x) + "," + px(pixel.y) + " ";
      markers.emplace_back(pixel, i < s.point_colors.size() ? s.point_colors[i] : s.color);
    }
    if (s.mark != Mark::Markers && !coords.empty()) {
      out << "<polyline points=\"" << coords << "\" fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"1.6\""
          << dash_array(s.stroke) << "/>\n";
    }
    if (s.mark != Mark::Line) {
      for (const auto& [pixel, color] : markers) {
        out << "<circle cx=\"" << px(pixel.x) << "\" cy=\"" << px(pixel.y) << "\" r=\"2.6\" fill=\"" << color << "\"/>";
      }
      out << "\n";
    }
  }
  out << draw_legend(legend, kLeft + kPlotWidth + 12, kTop + 8) << "</svg>\n";
  return out.str();
}

// Sequential colour for t in [0, 1]: viridis (matplotlib's, sampled at 9 stops and interpolated
// linearly), dark purple (low) to yellow (high); perceptually uniform and readable in grey.
std::string sequential_color(double t) {
  static constexpr double kStops[9][3] = {{68, 1, 84},    {71, 44, 122},  {59, 81, 139},
                                          {44, 113, 142}, {33, 144, 141}, {39, 173, 129},
                                          {92, 200, 99},  {170, 220, 50}, {253, 231, 37}};
  const double x = std::clamp(t, 0.0, 1.0) * 8.0;
  const int i = std::min(7, static_cast<int>(x));
  const double f = x - i;
  int rgb[3];
  for (int c = 0; c < 3; ++c) rgb[c] = static_cast<int>(std::lround(kStops[i][c] + f * (kStops[i + 1][c] - kStops[i][c])));
  char buffer[8];
  std::snprintf(buffer, sizeof buffer, "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
  return buffer;
}

// Plot 3: the normalized score <R_m q, R_n q> / (m^2 |q|^2) for q = all ones, which is
// (1 / num_pairs) sum_i cos((m - n) theta_i) (pairs of the rotary dims; pass-through dims are
// not part of it). A cells x cells grid over positions [0, positions); each cell shows the mean
// score over its positions (sampling one position per cell would alias: a pair whose wavelength
// is shorter than the cell paints a false pattern). The colour scale spans
// the scores present (min to max), not [-1, 1]: the scores of a real spec stay in a narrow band
// and a fixed scale would paint them all one colour. Returns the SVG; min and max are reported.
std::string render_heatmap(const std::string& title, const std::vector<double>& inv_freq, int64_t positions,
                           int64_t cells, double& low, double& high) {
  cells = std::clamp<int64_t>(cells, 1, positions);
  const double side = 256.0;  // grid size in SVG units
  const double left = kLeft, top = kTop + 6;
  const double cell_px = side / static_cast<double>(cells);
  // The score depends on m - n only: one value per cell distance D. A cell of w x w positions
  // (w = positions / cells, whole) holds the distances D w + t, t in (-w, w), w - |t| times each.
  const int64_t w = std::max<int64_t>(1, positions / cells);
  const auto score_at = [&](int64_t distance) {
    double sum = 0.0;
    for (const double theta : inv_freq) sum += std::cos(static_cast<double>(distance) * theta);
    return inv_freq.empty() ? 1.0 : sum / static_cast<double>(inv_freq.size());
  };
  std::vector<double> by_distance(static_cast<size_t>(2 * cells - 1));
  low = INFINITY, high = -INFINITY;
  for (int64_t d = -(cells - 1); d <= cells - 1; ++d) {
    double sum = 0.0;
    for (int64_t t = -(w - 1); t <= w - 1; ++t) sum += static_cast<double>(w - std::abs(t)) * score_at(d * w + t);
    const double score = sum / static_cast<double>(w * w);
    by_distance[static_cast<size_t>(d + cells - 1)] = score;
    low = std::min(low, score), high = std::max(high, score);
  }
  const double span = high > low ? high - low : 1.0;
  std::ostringstream out;
  out << svg_open(title, kWidth, kHeight);
  for (int64_t row = 0; row < cells; ++row) {
    for (int64_t col = 0; col < cells; ++col) {
      const double score = by_distance[static_cast<size_t>(row - col + cells - 1)];
      out << "<rect x=\"" << px(left + static_cast<double>(col) * cell_px) << "\" y=\""
          << px(top + static_cast<double>(row) * cell_px) << "\" width=\"" << px(cell_px + 0.05) << "\" height=\""
          << px(cell_px + 0.05) << "\" fill=\"" << sequential_color((score - low) / span) << "\"/>";
    }
    out << "\n";
  }
  // Axes: ticks at 0, 1/4, ... of the position range.
  for (int k = 0; k <= 4; ++k) {
    const double frac = k / 4.0;
    const std::string label = number_text(std::round(frac * static_cast<double>(positions)));
    out << "<text class=\"tick\" x=\"" << px(left + frac * side) << "\" y=\"" << px(top + side + 15)
        << "\" text-anchor=\"middle\">" << label << "</text>"
        << "<text class=\"tick\" x=\"" << px(left - 6) << "\" y=\"" << px(top + frac * side + 4)
        << "\" text-anchor=\"end\">" << label << "</text>\n";
  }
  out << "<text class=\"axis-label\" x=\"" << px(left + side / 2) << "\" y=\"" << px(top + side + 36)
      << "\" text-anchor=\"middle\">key position n (tokens)</text>\n";
  out << "<text class=\"axis-label\" x=\"16\" y=\"" << px(top + side / 2)
      << "\" text-anchor=\"middle\" transform=\"rotate(-90 16 " << px(top + side / 2)
      << ")\">query position m (tokens)</text>\n";
  // Colour legend: a bar of 40 rects from the lowest score (bottom) to the highest (top), with
  // ticks at both ends and three between.
  const double bar_left = left + side + 60, bar_height = side, bar_width = 18;
  for (int k = 0; k < 40; ++k) {
    const double t = 1.0 - (k + 0.5) / 40.0;
    out << "<rect x=\"" << px(bar_left) << "\" y=\"" << px(top + k * bar_height / 40.0) << "\" width=\""
        << px(bar_width) << "\" height=\"" << px(bar_height / 40.0 + 0.05) << "\" fill=\"" << sequential_color(t)
        << "\"/>";
  }
  for (const double t : {1.0, 0.75, 0.5, 0.25, 0.0}) {
    out << "<text class=\"tick\" x=\"" << px(bar_left + bar_width + 5) << "\" y=\"" << px(top + (1.0 - t) * bar_height + 4)
        << "\">" << number_text(low + t * (high - low), 3) << "</text>";
  }
  out << "\n<text class=\"axis-label\" x=\"" << px(bar_left + bar_width + 40) << "\" y=\"" << px(top + side / 2)
      << "\" text-anchor=\"middle\" transform=\"rotate(90 " << px(bar_left + bar_width + 40) << " "
      << px(top + side / 2) << ")\">score / (m² |q|²) (dimensionless)</text>\n";
  out << "</svg>\n";
  return out.str();
}

// ---- the plots of one model -----------------------------------------------------------------

std::vector<Point> pair_points(const std::vector<PairScaling>& pairs, double (*get)(const PairScaling&)) {
  std::vector<Point> out;
  for (const PairScaling& p : pairs) out.push_back({static_cast<double>(p.pair), get(p)});
  return out;
}

std::vector<Point> curve_points(const std::vector<CurvePoint>& curve) {
  std::vector<Point> out;
  for (const CurvePoint& c : curve) out.push_back({c.distance_tokens, c.value});
  return out;
}

// The regimes present in a scheme, as legend entries.
std::vector<LegendEntry> regime_legend(const std::vector<PairScaling>& pairs) {
  std::vector<LegendEntry> out;
  for (const PairScaling& p : pairs) {
    const std::string label(to_string(p.regime));
    if (std::none_of(out.begin(), out.end(), [&](const LegendEntry& e) { return e.label == label; })) {
      out.push_back({label, regime_color(p.regime)});
    }
  }
  return out;
}

// What a plot section looks like: heading, the SVG, a one-line caption.
std::string figure(const std::string& svg, const std::string& caption) {
  return "<figure>\n" + svg + "<figcaption>" + html_escape(caption) + "</figcaption>\n</figure>\n";
}

std::string check_table(const CheckReport& report) {
  std::ostringstream out;
  out << "<table class=\"checks\">\n<caption>Property checks (run_checks, as rotary check)</caption>\n"
      << "<tr><th>check</th><th>measured</th><th>bound</th><th>threshold</th><th>margin</th><th>result</th></tr>\n";
  for (const CheckResult& check : report.checks) {
    out << "<tr><td>" << html_escape(check.name) << "</td><td class=\"num\" data-value=\""
        << number_text(check.measured, 17) << "\">" << number_text(check.measured, 4) << "</td><td>"
        << (check.bound == Bound::AtMost ? "&lt;=" : "&gt;=") << "</td><td class=\"num\" data-value=\""
        << number_text(check.threshold, 17) << "\">" << number_text(check.threshold, 4) << "</td><td class=\"num\">x"
        << number_text(check_margin(check), 4) << "</td><td class=\"" << (check.passed ? "pass" : "fail") << "\">"
        << (check.passed ? "pass" : "FAIL") << "</td></tr>\n";
  }
  out << "</table>\n";
  return out.str();
}

std::string model_section(const ReportModel& model, const ReportOptions& options, const CheckReport& report,
                          const SchemeScaling& scaling) {
  const RopeSpec& spec = model.spec;
  const int64_t context = report.context;
  const int64_t trained = report.trained_context;
  const std::string name = model.name.empty() ? spec.name : model.name;
  std::ostringstream out;
  out << "<section class=\"model\">\n<h2>" << html_escape(name) << "</h2>\n<p>" << html_escape(model.source) << ": "
      << html_escape(std::string(to_string(spec.scaling.type))) << " scaling, rotary_dim " << spec.rotary_dim
      << ", theta_base " << number_text(spec.theta_base) << ", " << html_escape(std::string(to_string(spec.style)))
      << " pairing; trained context " << trained << " tokens, target context " << context
      << " tokens; attention scaling " << number_text(scaling.attention_scaling) << ".</p>\n<div class=\"plots\">\n";

  // Context lines in colours no series of these plots uses (series: blue, grey dashed).
  const std::vector<ReferenceLine> context_lines = {
      {static_cast<double>(trained), "trained context " + std::to_string(trained), "#009e73"},
      {static_cast<double>(context), "target context " + std::to_string(context), "#d55e00"}};

  // (1) inv_freq and (1b) wavelength per pair, scheme vs default.
  Chart inv{.title = "inv_freq per pair: " + name, .x_label = "pair index i (0 = fastest)",
            .y_label = "inv_freq theta_i (radians / token)", .log_y = true};
  inv.series.push_back({"default base^(-2i/d)", "#7f7f7f",
                        pair_points(scaling.pairs, [](const PairScaling& p) { return p.default_inv_freq; }),
                        Mark::Line, Stroke::Dashed, {}});
  inv.series.push_back({"scheme (" + std::string(to_string(scaling.type)) + ")", "#0072b2",
                        pair_points(scaling.pairs, [](const PairScaling& p) { return p.inv_freq; }), Mark::Line,
                        Stroke::Solid, {}});
  out << figure(render_chart(inv), "Radians per token of each pair; the scheme's values against the unscaled default.");

  Chart wave{.title = "Wavelength per pair: " + name, .x_label = "pair index i (0 = fastest)",
             .y_label = "wavelength 2 pi / theta_i (tokens)", .log_y = true};
  wave.series = inv.series;
  wave.series[0].points = pair_points(scaling.pairs, [](const PairScaling& p) { return p.default_wavelength_tokens; });
  wave.series[1].points = pair_points(scaling.pairs, [](const PairScaling& p) { return p.wavelength_tokens; });
  wave.reference_lines = context_lines;
  out << figure(render_chart(wave),
                "Tokens per full turn. Pairs above a context line do not complete a turn within that context.");

  // (2) turns per pair at chosen positions: p theta_i / (2 pi) on a log axis. (The angle itself,
  // mod 2 pi, looks like noise at large positions; the number of turns shows what it means.)
  std::vector<int64_t> positions = options.angle_positions;
  if (positions.empty()) positions = {1, 16, 256, 4096, context};
  std::sort(positions.begin(), positions.end());
  positions.erase(std::unique(positions.begin(), positions.end()), positions.end());
  Chart turns{.title = "Turns per pair at chosen positions: " + name, .x_label = "pair index i (0 = fastest)",
              .y_label = "turns p theta_i / 2 pi (full rotations)", .log_y = true};
  for (size_t k = 0; k < positions.size(); ++k) {
    Series s{.label = "position " + std::to_string(positions[k]), .color = series_color(k)};
    for (const PairScaling& p : scaling.pairs) {
      s.points.push_back({static_cast<double>(p.pair), static_cast<double>(positions[k]) * p.inv_freq / kTwoPi});
    }
    turns.series.push_back(std::move(s));
  }
  turns.reference_lines = {{1.0, "one full turn", "#999999"}};
  out << figure(render_chart(turns),
                "Full rotations each pair has made by a position. Below one turn a pair's angle alone tells "
                "positions apart; above it the angle wraps around and only the faster pairs' mix does.");

  // (3) similarity heatmap.
  std::vector<double> inv_freq;
  for (const PairScaling& p : scaling.pairs) inv_freq.push_back(p.inv_freq);
  double low = 0.0, high = 0.0;
  const std::string heatmap = render_heatmap("Similarity <R_m q, R_n q>, q = all ones: " + name, inv_freq,
                                             options.heatmap_positions, options.heatmap_cells, low, high);
  out << figure(heatmap, "Normalized score of an all-ones q with itself at positions m and n, for m, n below " +
                             std::to_string(options.heatmap_positions) + ", each cell the mean over its positions: "
                             "highest on the diagonal, depending on m - n only; "
                             "colours span the scores present (" + number_text(low, 3) + " to " +
                             number_text(high, 3) + ").");

  // (4) long-term decay: RoFormer's bound and measured scores vs relative distance (log x).
  const LongTermDecay decay =
      long_term_decay(spec, DecayOptions{.max_distance = report.decay_distance, .num_samples = options.decay_samples,
                                         .seq_len = context});
  Chart bound{.title = "Long-term decay bound (RoFormer): " + name, .x_label = "relative distance m - n (tokens)",
              .y_label = "(1/(d/2)) sum_j |S_j| (dimensionless)", .log_x = true};
  bound.series.push_back({"relative upper bound", "#0072b2", curve_points(decay.bound), Mark::Line, Stroke::Solid, {}});
  out << figure(render_chart(bound), "RoFormer section 3.4.3: the bound on the score decays with distance (" +
                                         std::to_string(decay.max_distance) + " tokens shown; decay ratio " +
                                         number_text(decay.decay_ratio, 4) + ").");
  Chart scores{.title = "Score vs distance: " + name, .x_label = "relative distance m - n (tokens)",
               .y_label = "score / (m^2 |q| |k|) (dimensionless)", .log_x = true};
  // The all-ones and random-mean curves nearly coincide (both are the mean of cos(r theta_i)):
  // the second is dashed and drawn on top, so both stay visible.
  scores.series.push_back({"q = k = all ones", "#0072b2", curve_points(decay.score_identical_ones), Mark::Line, Stroke::Solid, {}});
  scores.series.push_back({"q = k random (mean)", "#d55e00", curve_points(decay.score_identical_random), Mark::Line,
                           Stroke::Dashed, {}});
  scores.series.push_back({"q, k independent (mean |score|)", "#009e73", curve_points(decay.score_independent_random),
                           Mark::Line, Stroke::Solid, {}});
  out << figure(render_chart(scores), "Measured scores: identical vectors lose their in-phase sum with distance; "
                                      "independent ones have none to lose.");

  // (5) per-pair scaling factor of the scheme, markers coloured by regime.
  Chart factor{.title = "Per-pair scaling (" + std::string(to_string(scaling.type)) + "): " + name,
               .x_label = "pair index i (0 = fastest)", .y_label = "factor applied: default / scheme theta_i (x)"};
  Series f{.label = "", .color = "#bbbbbb", .mark = Mark::LineAndMarkers};
  for (const PairScaling& p : scaling.pairs) {
    f.points.push_back({static_cast<double>(p.pair), p.factor_applied});
    f.point_colors.push_back(regime_color(p.regime));
  }
  factor.series.push_back(std::move(f));
  factor.extra_legend = regime_legend(scaling.pairs);
  out << figure(render_chart(factor), "How much each pair's frequency was divided by (1 = kept); colour = regime.");

  // (6) extrapolation coverage: max angle trained vs target, out-of-distribution pairs marked.
  const Extrapolation& ext = report.extrapolation;
  Chart cover{.title = "Extrapolation coverage: " + name, .x_label = "pair index i (0 = fastest)",
              .y_label = "largest angle reached (radians)", .log_y = true};
  Series trained_s{.label = "trained (" + std::to_string(ext.trained_context) + " tokens)", .color = "#7f7f7f"};
  Series target_s{.label = "target (" + std::to_string(ext.target_context) + " tokens)", .color = "#0072b2"};
  Series ood{.label = "out of distribution", .color = "#d62728", .mark = Mark::Markers};
  for (size_t i = 0; i < ext.pairs.size(); ++i) {
    const double x = static_cast<double>(i);
    trained_s.points.push_back({x, ext.pairs[i].max_angle_trained_rad});
    target_s.points.push_back({x, ext.pairs[i].max_angle_target_rad});
    if (ext.pairs[i].out_of_distribution) ood.points.push_back({x, ext.pairs[i].max_angle_target_rad});
  }
  cover.series = {trained_s, target_s, ood};
  cover.reference_lines = {{kTwoPi, "2 pi (one full turn)", "#999999"}};
  out << figure(render_chart(cover), std::to_string(ext.num_out_of_distribution) + " of " +
                                         std::to_string(ext.num_pairs) +
                                         " pairs reach angles at the target that training never produced.");

  // (7) engine numerics: each engine's largest cos/sin error against the exact table, per octave
  // of positions up to the target context (engine_divergence; `rotary diverge` has the tables).
  const Divergence divergence = engine_divergence(spec, {.max_position = context, .samples_per_bucket = 8});
  Chart engines{.title = "Engine numerics vs exact: " + name, .x_label = "position (start of each octave, tokens)",
                .y_label = "largest |cos, sin - exact| (absolute)", .log_x = true, .log_y = true};
  const char* const engine_colors[] = {"#0072b2", "#d55e00", "#009e73", "#cc79a7"};
  std::string unavailable;
  size_t color = 0;
  for (const EngineDivergence& e : divergence.engines) {
    if (!e.available) {
      unavailable += (unavailable.empty() ? "" : "; ") + e.label + " cannot reproduce this model";
      continue;
    }
    // Engines that coincide (vLLM's float32 cache is Hugging Face's numerics) stay apart by stroke.
    const Stroke strokes[] = {Stroke::Solid, Stroke::Dashed, Stroke::DashDot};
    Series series{.label = e.label, .color = engine_colors[color % 4], .mark = Mark::LineAndMarkers,
                  .stroke = strokes[color % 3]};
    ++color;
    for (const DivergenceBucket& b : e.buckets) {
      if (b.first > 0) series.points.push_back({static_cast<double>(b.first), b.max_abs_error});
    }
    engines.series.push_back(std::move(series));
  }
  engines.reference_lines = {{0x1p-24, "half a float32 ulp of 1 (exact table)", "#999999"}};
  out << figure(render_chart(engines), "Where long contexts drift: the float32 angle of each engine loses "
                                       "precision with the position (ggml also multiplies theta pair by pair). " +
                                           (unavailable.empty() ? std::string() : unavailable + "."));

  out << "</div>\n" << check_table(report) << "</section>\n";
  return out.str();
}

// The pair's place in the head, 2i / rotary_dim in [0, 1): models of different head dims share
// one axis (pair 31 of 32 and pair 63 of 64 are both the slowest).
std::vector<Point> normalized_points(const std::vector<PairScaling>& pairs, double (*get)(const PairScaling&)) {
  std::vector<Point> out;
  const auto n = static_cast<double>(pairs.size());
  for (const PairScaling& p : pairs) out.push_back({static_cast<double>(p.pair) / n, get(p)});
  return out;
}

// Overlays of several models: wavelength and scaling factor per pair, then at one shared context
// (the largest target context among them) the overshoot of each pair's angle past its trained
// range and the long-term decay bound.
// Several models in one plot: a colour and a stroke each, so that coinciding curves (two
// unscaled models at factor 1) stay visible through each other's gaps.
Stroke model_stroke(size_t k) {
  constexpr Stroke kStrokes[] = {Stroke::Solid, Stroke::Dashed, Stroke::DashDot};
  return kStrokes[k % 3];
}

std::string comparison_section(const std::vector<ReportModel>& models, const std::vector<CheckReport>& reports,
                               const std::vector<SchemeScaling>& scalings, const ReportOptions& options) {
  const std::string pair_axis = "pair place 2i / rotary_dim (0 = fastest, 1 = slowest)";
  Chart wave{.title = "Wavelength per pair, compared", .x_label = pair_axis,
             .y_label = "wavelength 2 pi / theta_i (tokens)", .log_y = true};
  Chart factor{.title = "Per-pair scaling factor, compared", .x_label = pair_axis,
               .y_label = "factor applied: default / scheme theta_i (x)"};
  int64_t shared = 0;
  for (const CheckReport& report : reports) shared = std::max(shared, report.context);
  Chart overshoot{.title = "Past the trained angles at " + std::to_string(shared) + " tokens", .x_label = pair_axis,
                  .y_label = "largest angle at context / in training (x)", .log_y = true};
  Chart decay{.title = "Decay bound at " + std::to_string(shared) + " tokens, compared",
              .x_label = "relative distance m - n (tokens)", .y_label = "(1/(d/2)) sum_j |S_j| (dimensionless)",
              .log_x = true};
  for (size_t k = 0; k < models.size(); ++k) {
    const std::string label = models[k].name.empty() ? models[k].spec.name : models[k].name;
    wave.series.push_back({label, series_color(k),
                           normalized_points(scalings[k].pairs, [](const PairScaling& p) { return p.wavelength_tokens; }),
                           Mark::Line, model_stroke(k), {}});
    factor.series.push_back({label, series_color(k),
                             normalized_points(scalings[k].pairs, [](const PairScaling& p) { return p.factor_applied; }),
                             Mark::Line, model_stroke(k), {}});
    const Extrapolation ext = extrapolation(models[k].spec, reports[k].trained_context, shared);
    Series ratio{.label = label + " (trained " + std::to_string(ext.trained_context) + ")", .color = series_color(k),
                 .stroke = model_stroke(k)};
    Series ood{.label = "", .color = series_color(k), .mark = Mark::Markers};
    const auto n = static_cast<double>(ext.pairs.size());
    for (size_t i = 0; i < ext.pairs.size(); ++i) {
      const PairCoverage& pair = ext.pairs[i];
      if (!(pair.max_angle_trained_rad > 0)) continue;  // unrotated pairs
      const Point point{static_cast<double>(i) / n, pair.max_angle_target_rad / pair.max_angle_trained_rad};
      ratio.points.push_back(point);
      if (pair.out_of_distribution) ood.points.push_back(point);
    }
    overshoot.series.push_back(std::move(ratio));
    overshoot.series.push_back(std::move(ood));
    const LongTermDecay bound = long_term_decay(
        models[k].spec, DecayOptions{.max_distance = shared, .num_samples = options.decay_samples, .seq_len = shared});
    decay.series.push_back({label, series_color(k), curve_points(bound.bound), Mark::Line, model_stroke(k), {}});
  }
  overshoot.reference_lines = {{1.0, "the trained range", "#999999"}};
  overshoot.extra_legend = {{"out of distribution", "#555555", LegendMark::Marker}};
  return "<section class=\"compare\">\n<h2>Side by side</h2>\n<div class=\"plots\">\n" +
         figure(render_chart(wave), "Tokens per full turn of each pair, every model in one plot; pairs placed by "
                                    "their share of the head, so different head dims line up.") +
         figure(render_chart(factor), "Per-pair factor each model's scheme applies (1 = unscaled).") +
         figure(render_chart(overshoot),
                "At one shared context: how far each pair's largest angle goes past what its model saw in "
                "training. Above 1 is harmless for a pair that turned fully in training; the marked pairs "
                "never did, so those angles are new to the model.") +
         figure(render_chart(decay), "RoFormer's decay bound of each model over the shared context.") +
         "</div>\n</section>\n";
}

constexpr const char* kStyle = R"(body{font-family:sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:24px}h2{font-size:20px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:32px}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(600px,1fr));gap:12px}
figure{margin:0;border:1px solid #ddd;padding:6px;background:#fff}svg.plot{max-width:100%;height:auto}
figcaption{font-size:12px;color:#555;max-width:640px}svg text{font-family:sans-serif}
.plot-title{font-size:14px;font-weight:bold}.tick{font-size:10px}.axis-label{font-size:12px}.legend{font-size:11px}
table.checks{border-collapse:collapse;margin-top:16px}table.checks td,table.checks th{border:1px solid #ccc;padding:3px 8px}
td.num{text-align:right;font-family:monospace}td.pass{color:#070}td.fail{color:#b00;font-weight:bold}
caption{text-align:left;font-weight:bold;padding:4px 0}.provenance{color:#555;font-size:13px}
.provenance code{background:#f4f4f4;padding:1px 4px})";

}  // namespace

std::string render_report(const std::vector<ReportModel>& models, const ReportOptions& options) {
  std::vector<CheckReport> reports;
  std::vector<SchemeScaling> scalings;
  for (const ReportModel& model : models) {
    reports.push_back(run_checks(model.spec, model.context));
    scalings.push_back(scheme_scaling(model.spec, reports.back().context));
  }
  // A docs page as a link when the caller gives a web address for the docs, else its path in
  // rotary's repository as text. A file:// address is an absolute path on the machine that made
  // the page: the link breaks as soon as the page is moved or sent, so it is shown as text too.
  std::string scheme = options.docs_url.substr(0, 5);  // URL schemes are case-insensitive (RFC 3986)
  std::transform(scheme.begin(), scheme.end(), scheme.begin(), [](unsigned char c) { return std::tolower(c); });
  const bool docs_linked = !options.docs_url.empty() && scheme != "file:";
  const auto doc = [&](const std::string& page) {
    const std::string text = "docs/" + page;
    if (!docs_linked) return html_escape(text);
    return "<a href=\"" + html_escape(options.docs_url + page) + "\">" + html_escape(text) + "</a>";
  };
  std::ostringstream out;
  out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" << html_escape(options.title)
      << "</title>\n<style>\n" << kStyle << "\n</style>\n</head>\n<body>\n<h1>" << html_escape(options.title)
      << "</h1>\n";
  if (!options.generator.empty() || !options.created.empty() || !options.command_line.empty()) {
    out << "<p class=\"provenance\">";
    if (!options.generator.empty()) out << "Made by " << html_escape(options.generator);
    if (!options.created.empty()) out << (options.generator.empty() ? "Made " : "") << " on " << html_escape(options.created);
    if (!options.command_line.empty()) out << ": <code>" << html_escape(options.command_line) << "</code>";
    out << "</p>\n";
  }
  out << "<p>RoPE analysis of " << models.size() << (models.size() == 1 ? " model" : " models")
      << ": frequencies, turns, similarity, long-term decay, scheme scaling, extrapolation and the property checks. "
         "What each plot shows and its formula: "
      << doc("analysis.md") << "; the numerics of the checks: " << doc("numerics.md") << ".</p>\n";
  if (models.size() > 1) out << comparison_section(models, reports, scalings, options);
  for (size_t k = 0; k < models.size(); ++k) out << model_section(models[k], options, reports[k], scalings[k]);
  out << "</body>\n</html>\n";
  return out.str();
}

}  // namespace rotary::analysis
