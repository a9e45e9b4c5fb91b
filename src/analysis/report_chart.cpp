// src/analysis/report_chart.cpp: the SVG helper of the HTML report (report_chart.hpp): line
// charts (Chart, render_chart) and the similarity heatmap (render_heatmap), with their axes,
// ticks and legends. The page and its sections are in report.cpp.
//
// The helper is deliberately small: a plot area with linear or log axes, "nice" ticks,
// polylines, circle markers, horizontal reference lines and a legend. Every plot gets a <title>,
// a visible heading and axis labels with units. No scripts, no external resources (inline SVG in
// HTML5 needs no xmlns, so the page holds no URL at all).
#include "analysis/report_chart.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "analysis/html.hpp"

namespace rotary::analysis::detail {

// A number for tick labels and tables: %.6g ("inf" for infinity, "nan").
std::string number_text(double value, int significant) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[40];
  std::snprintf(buffer, sizeof buffer, "%.*g", significant, value);
  return buffer;
}

namespace {

// Coordinates in the SVG, 2 decimals are plenty.
std::string px(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2f", value);
  return buffer;
}

// A fixed palette for series (colour-blind friendly Okabe-Ito order) and one colour per regime.
const char* const kPalette[] = {"#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000", "#f0e442"};

}  // namespace

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

namespace {

const char* dash_array(Stroke stroke) {
  switch (stroke) {
    case Stroke::Solid: return "";
    case Stroke::Dashed: return " stroke-dasharray=\"7 4\"";
    case Stroke::DashDot: return " stroke-dasharray=\"10 3 2 3\"";
    case Stroke::Dotted: return " stroke-dasharray=\"2 3\"";
  }
  return "";
}

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

}  // namespace

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

namespace {

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

}  // namespace

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

}  // namespace rotary::analysis::detail
