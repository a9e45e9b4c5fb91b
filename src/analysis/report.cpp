// src/analysis/report.cpp: render_report (include/rotary/report.hpp): the analysis plots as
// one self-contained HTML page.
//
// The SVG helper (Chart, render_chart, render_heatmap) is deliberately small: a plot area with
// linear or log axes, "nice" ticks, polylines, circle markers, horizontal reference lines and a
// legend. Every plot gets a <title>, a visible heading and axis labels with units. No scripts,
// no external resources (inline SVG in HTML5 needs no xmlns, so the page holds no URL at all).
#include "rotary/report.hpp"

#include <algorithm>
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

struct Series {
  std::string label;  // legend text; empty = not in the legend
  std::string color;
  std::vector<Point> points;
  Mark mark = Mark::Line;
  bool dashed = false;
  std::vector<std::string> point_colors;  // optional, per point (markers only)
};

struct ReferenceLine {  // a horizontal line across the plot at y, labelled
  double y = 0.0;
  std::string label;
  std::string color;
};

struct LegendEntry {
  std::string label;
  std::string color;
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

// Plot geometry, in SVG user units.
constexpr double kWidth = 640, kHeight = 360;
constexpr double kLeft = 78, kRight = 170, kTop = 34, kBottom = 52;  // kRight holds the legend

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

std::string tick_text(double value, bool log) {
  if (log) {
    const int e = static_cast<int>(std::lround(std::log10(value)));
    if (e >= -2 && e <= 5) return number_text(value);
    return "1e" + std::to_string(e);
  }
  return number_text(value, 4);
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
  for (const double t : ticks(x)) {
    const double p = x.to_pixel(t);
    out << "<line x1=\"" << px(p) << "\" y1=\"" << px(y.pixel_lo) << "\" x2=\"" << px(p) << "\" y2=\""
        << px(y.pixel_lo + 5) << "\" stroke=\"#444\"/>"
        << "<line x1=\"" << px(p) << "\" y1=\"" << px(y.pixel_hi) << "\" x2=\"" << px(p) << "\" y2=\""
        << px(y.pixel_lo) << "\" stroke=\"#eee\"/>"
        << "<text class=\"tick\" x=\"" << px(p) << "\" y=\"" << px(y.pixel_lo + 17)
        << "\" text-anchor=\"middle\">" << tick_text(t, x.log) << "</text>\n";
  }
  for (const double t : ticks(y)) {
    const double p = y.to_pixel(t);
    out << "<line x1=\"" << px(x.pixel_lo - 5) << "\" y1=\"" << px(p) << "\" x2=\"" << px(x.pixel_lo) << "\" y2=\""
        << px(p) << "\" stroke=\"#444\"/>"
        << "<line x1=\"" << px(x.pixel_lo) << "\" y1=\"" << px(p) << "\" x2=\"" << px(x.pixel_hi) << "\" y2=\""
        << px(p) << "\" stroke=\"#eee\"/>"
        << "<text class=\"tick\" x=\"" << px(x.pixel_lo - 8) << "\" y=\"" << px(p + 4)
        << "\" text-anchor=\"end\">" << tick_text(t, y.log) << "</text>\n";
  }
  const double x_mid = (x.pixel_lo + x.pixel_hi) / 2, y_mid = (y.pixel_lo + y.pixel_hi) / 2;
  out << "<text class=\"axis-label\" x=\"" << px(x_mid) << "\" y=\"" << px(y.pixel_lo + 40)
      << "\" text-anchor=\"middle\">" << html_escape(x_label) << "</text>\n";
  out << "<text class=\"axis-label\" x=\"16\" y=\"" << px(y_mid) << "\" text-anchor=\"middle\" transform=\"rotate(-90 16 "
      << px(y_mid) << ")\">" << html_escape(y_label) << "</text>\n";
  return out.str();
}

// A legend at the right of the plot area: a swatch and the text per entry.
std::string draw_legend(const std::vector<LegendEntry>& entries, double left, double top) {
  std::ostringstream out;
  double y = top;
  for (const LegendEntry& entry : entries) {
    out << "<rect class=\"swatch\" x=\"" << px(left) << "\" y=\"" << px(y - 8) << "\" width=\"14\" height=\"10\" fill=\""
        << entry.color << "\"/><text class=\"legend\" x=\"" << px(left + 19) << "\" y=\"" << px(y + 1) << "\">"
        << html_escape(entry.label) << "</text>\n";
    y += 16;
  }
  return out.str();
}

// Points a log axis cannot show (<= 0) or that are not finite are left out of the chart.
bool drawable(const Chart& chart, const Point& p) {
  if (!std::isfinite(p.x) || !std::isfinite(p.y)) return false;
  if (chart.log_x && p.x <= 0) return false;
  if (chart.log_y && p.y <= 0) return false;
  return true;
}

std::string render_chart(const Chart& chart) {
  Axis x{.log = chart.log_x, .lo = INFINITY, .hi = -INFINITY, .pixel_lo = kLeft, .pixel_hi = kWidth - kRight};
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

  std::ostringstream out;
  out << svg_open(chart.title, kWidth, kHeight) << draw_axes(x, y, chart.x_label, chart.y_label);
  std::vector<LegendEntry> legend;
  for (const ReferenceLine& line : chart.reference_lines) {
    if (chart.log_y && line.y <= 0) continue;
    const double p = y.to_pixel(line.y);
    out << "<path d=\"M" << px(x.pixel_lo) << " " << px(p) << " H" << px(x.pixel_hi) << "\" stroke=\"" << line.color
        << "\" stroke-dasharray=\"6 3\" fill=\"none\"/>\n";
    legend.push_back({line.label, line.color});
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
          << (s.dashed ? " stroke-dasharray=\"5 3\"" : "") << "/>\n";
    }
    if (s.mark != Mark::Line) {
      for (const auto& [pixel, color] : markers) {
        out << "<circle cx=\"" << px(pixel.x) << "\" cy=\"" << px(pixel.y) << "\" r=\"2.6\" fill=\"" << color << "\"/>";
      }
      out << "\n";
    }
    if (!s.label.empty()) legend.push_back({s.label, s.color});
  }
  legend.insert(legend.end(), chart.extra_legend.begin(), chart.extra_legend.end());
  out << draw_legend(legend, kWidth - kRight + 12, kTop + 8) << "</svg>\n";
  return out.str();
}

// Diverging colour for a value in [-1, 1]: blue (-1), white (0), red (+1).
std::string diverging_color(double value) {
  const double v = std::clamp(value, -1.0, 1.0);
  const auto channel = [](double t) { return static_cast<int>(std::lround(255.0 * std::clamp(t, 0.0, 1.0))); };
  int r, g, b;
  if (v >= 0) {
    r = 255, g = channel(1.0 - 0.85 * v), b = channel(1.0 - 0.85 * v);
  } else {
    r = channel(1.0 + 0.85 * v), g = channel(1.0 + 0.85 * v), b = 255;
  }
  char buffer[8];
  std::snprintf(buffer, sizeof buffer, "#%02x%02x%02x", r, g, b);
  return buffer;
}

// Plot 3: the normalized score <R_m q, R_n q> / (m^2 |q|^2) for q = all ones, which is
// (1 / num_pairs) sum_i cos((m - n) theta_i) (pairs of the rotary dims; pass-through dims are
// not part of it). A cells x cells grid over positions [0, positions).
std::string render_heatmap(const std::string& title, const std::vector<double>& inv_freq, int64_t positions,
                           int64_t cells) {
  cells = std::clamp<int64_t>(cells, 1, positions);
  const double side = 256.0;  // grid size in SVG units
  const double left = kLeft, top = kTop + 6;
  const double cell_px = side / static_cast<double>(cells);
  const double step = static_cast<double>(positions) / static_cast<double>(cells);  // positions per cell
  std::ostringstream out;
  out << svg_open(title, kWidth, kHeight);
  for (int64_t row = 0; row < cells; ++row) {
    const auto m = static_cast<double>(static_cast<int64_t>(static_cast<double>(row) * step));
    for (int64_t col = 0; col < cells; ++col) {
      const auto n = static_cast<double>(static_cast<int64_t>(static_cast<double>(col) * step));
      double sum = 0.0;
      for (const double theta : inv_freq) sum += std::cos((m - n) * theta);
      const double score = inv_freq.empty() ? 1.0 : sum / static_cast<double>(inv_freq.size());
      out << "<rect x=\"" << px(left + static_cast<double>(col) * cell_px) << "\" y=\""
          << px(top + static_cast<double>(row) * cell_px) << "\" width=\"" << px(cell_px + 0.05) << "\" height=\""
          << px(cell_px + 0.05) << "\" fill=\"" << diverging_color(score) << "\"/>";
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
  // Colour legend: a bar of 40 rects from -1 (bottom) to +1 (top), with ticks.
  const double bar_left = left + side + 60, bar_height = side, bar_width = 18;
  for (int k = 0; k < 40; ++k) {
    const double value = 1.0 - 2.0 * (k + 0.5) / 40.0;
    out << "<rect x=\"" << px(bar_left) << "\" y=\"" << px(top + k * bar_height / 40.0) << "\" width=\""
        << px(bar_width) << "\" height=\"" << px(bar_height / 40.0 + 0.05) << "\" fill=\"" << diverging_color(value)
        << "\"/>";
  }
  for (const double value : {1.0, 0.5, 0.0, -0.5, -1.0}) {
    out << "<text class=\"tick\" x=\"" << px(bar_left + bar_width + 5) << "\" y=\""
        << px(top + (1.0 - value) / 2.0 * bar_height + 4) << "\">" << number_text(value) << "</text>";
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

  const std::vector<ReferenceLine> context_lines = {
      {static_cast<double>(trained), "trained context " + std::to_string(trained), "#555555"},
      {static_cast<double>(context), "target context " + std::to_string(context), "#d55e00"}};

  // (1) inv_freq and (1b) wavelength per pair, scheme vs default.
  Chart inv{.title = "inv_freq per pair: " + name, .x_label = "pair index i (0 = fastest)",
            .y_label = "inv_freq theta_i (radians / token)", .log_y = true};
  inv.series.push_back({"default base^(-2i/d)", "#7f7f7f",
                        pair_points(scaling.pairs, [](const PairScaling& p) { return p.default_inv_freq; }),
                        Mark::Line, true, {}});
  inv.series.push_back({"scheme (" + std::string(to_string(scaling.type)) + ")", "#0072b2",
                        pair_points(scaling.pairs, [](const PairScaling& p) { return p.inv_freq; }), Mark::Line,
                        false, {}});
  out << figure(render_chart(inv), "Radians per token of each pair; the scheme's values against the unscaled default.");

  Chart wave{.title = "Wavelength per pair: " + name, .x_label = "pair index i (0 = fastest)",
             .y_label = "wavelength 2 pi / theta_i (tokens)", .log_y = true};
  wave.series = inv.series;
  wave.series[0].points = pair_points(scaling.pairs, [](const PairScaling& p) { return p.default_wavelength_tokens; });
  wave.series[1].points = pair_points(scaling.pairs, [](const PairScaling& p) { return p.wavelength_tokens; });
  wave.reference_lines = context_lines;
  out << figure(render_chart(wave),
                "Tokens per full turn. Pairs above a context line do not complete a turn within that context.");

  // (2) angle per pair, mod 2 pi, at chosen positions (markers: the values jump at each turn).
  std::vector<int64_t> positions = options.angle_positions;
  if (positions.empty()) positions = {1, 16, 256, 4096, context};
  std::sort(positions.begin(), positions.end());
  positions.erase(std::unique(positions.begin(), positions.end()), positions.end());
  Chart angle{.title = "Angle per pair at chosen positions: " + name, .x_label = "pair index i (0 = fastest)",
              .y_label = "angle p theta_i mod 2 pi (radians)"};
  for (size_t k = 0; k < positions.size(); ++k) {
    Series s{.label = "position " + std::to_string(positions[k]), .color = series_color(k), .mark = Mark::Markers};
    for (const PairScaling& p : scaling.pairs) {
      const long double turns = static_cast<long double>(positions[k]) * static_cast<long double>(p.inv_freq);
      s.points.push_back({static_cast<double>(p.pair), static_cast<double>(std::fmod(turns, 2.0L * std::numbers::pi_v<long double>))});
    }
    angle.series.push_back(std::move(s));
  }
  angle.reference_lines = {{kTwoPi, "2 pi (one turn)", "#999999"}};
  out << figure(render_chart(angle), "Where each pair's rotation stands at a few positions (a full turn is 2 pi).");

  // (3) similarity heatmap.
  std::vector<double> inv_freq;
  for (const PairScaling& p : scaling.pairs) inv_freq.push_back(p.inv_freq);
  out << figure(render_heatmap("Similarity <R_m q, R_n q>, q = all ones: " + name, inv_freq,
                               options.heatmap_positions, options.heatmap_cells),
                "Normalized score of an all-ones q with itself at positions m and n: 1 on the diagonal, "
                "depending on m - n only.");

  // (4) long-term decay: RoFormer's bound and measured scores vs relative distance (log x).
  const LongTermDecay decay =
      long_term_decay(spec, DecayOptions{.max_distance = report.decay_distance, .num_samples = options.decay_samples,
                                         .seq_len = context});
  Chart bound{.title = "Long-term decay bound (RoFormer): " + name, .x_label = "relative distance m - n (tokens)",
              .y_label = "(1/(d/2)) sum_j |S_j| (dimensionless)", .log_x = true};
  bound.series.push_back({"relative upper bound", "#0072b2", curve_points(decay.bound), Mark::Line, false, {}});
  out << figure(render_chart(bound), "RoFormer section 3.4.3: the bound on the score decays with distance (" +
                                         std::to_string(decay.max_distance) + " tokens shown; decay ratio " +
                                         number_text(decay.decay_ratio, 4) + ").");
  Chart scores{.title = "Score vs distance: " + name, .x_label = "relative distance m - n (tokens)",
               .y_label = "score / (m^2 |q| |k|) (dimensionless)", .log_x = true};
  scores.series.push_back({"q = k = all ones", "#0072b2", curve_points(decay.score_identical_ones), Mark::Line, false, {}});
  scores.series.push_back({"q = k random (mean)", "#d55e00", curve_points(decay.score_identical_random), Mark::Line,
                           false, {}});
  scores.series.push_back({"q, k independent (mean |score|)", "#009e73", curve_points(decay.score_independent_random),
                           Mark::Line, false, {}});
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

  out << "</div>\n" << check_table(report) << "</section>\n";
  return out.str();
}

// Overlays of several models: wavelength and scaling factor per pair.
std::string comparison_section(const std::vector<ReportModel>& models, const std::vector<SchemeScaling>& scalings) {
  Chart wave{.title = "Wavelength per pair, compared", .x_label = "pair index i (0 = fastest)",
             .y_label = "wavelength 2 pi / theta_i (tokens)", .log_y = true};
  Chart factor{.title = "Per-pair scaling factor, compared", .x_label = "pair index i (0 = fastest)",
               .y_label = "factor applied: default / scheme theta_i (x)"};
  for (size_t k = 0; k < models.size(); ++k) {
    const std::string label = models[k].name.empty() ? models[k].spec.name : models[k].name;
    wave.series.push_back({label, series_color(k),
                           pair_points(scalings[k].pairs, [](const PairScaling& p) { return p.wavelength_tokens; }),
                           Mark::Line, false, {}});
    factor.series.push_back({label, series_color(k),
                             pair_points(scalings[k].pairs, [](const PairScaling& p) { return p.factor_applied; }),
                             Mark::Line, false, {}});
  }
  return "<section class=\"compare\">\n<h2>Side by side</h2>\n<div class=\"plots\">\n" +
         figure(render_chart(wave), "Tokens per full turn of each pair, every model in one plot.") +
         figure(render_chart(factor), "Per-pair factor each model's scheme applies (1 = unscaled).") +
         "</div>\n</section>\n";
}

constexpr const char* kStyle = R"(body{font-family:sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:24px}h2{font-size:20px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:32px}
.plots{display:flex;flex-wrap:wrap;gap:12px}figure{margin:0;border:1px solid #ddd;padding:6px;background:#fff}
figcaption{font-size:12px;color:#555;max-width:640px}svg text{font-family:sans-serif}
.plot-title{font-size:14px;font-weight:bold}.tick{font-size:10px}.axis-label{font-size:12px}.legend{font-size:11px}
table.checks{border-collapse:collapse;margin-top:16px}table.checks td,table.checks th{border:1px solid #ccc;padding:3px 8px}
td.num{text-align:right;font-family:monospace}td.pass{color:#070}td.fail{color:#b00;font-weight:bold}
caption{text-align:left;font-weight:bold;padding:4px 0})";

}  // namespace

std::string render_report(const std::vector<ReportModel>& models, const ReportOptions& options) {
  std::vector<CheckReport> reports;
  std::vector<SchemeScaling> scalings;
  for (const ReportModel& model : models) {
    reports.push_back(run_checks(model.spec, model.context));
    scalings.push_back(scheme_scaling(model.spec, reports.back().context));
  }
  std::ostringstream out;
  out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" << html_escape(options.title)
      << "</title>\n<style>\n" << kStyle << "\n</style>\n</head>\n<body>\n<h1>" << html_escape(options.title)
      << "</h1>\n<p>RoPE analysis of " << models.size()
      << (models.size() == 1 ? " model" : " models")
      << ": frequencies, angles, similarity, long-term decay, scheme scaling, extrapolation and the property checks. "
         "Formulas: docs/analysis.md.</p>\n";
  if (models.size() > 1) out << comparison_section(models, scalings);
  for (size_t k = 0; k < models.size(); ++k) out << model_section(models[k], options, reports[k], scalings[k]);
  out << "</body>\n</html>\n";
  return out.str();
}

}  // namespace rotary::analysis
