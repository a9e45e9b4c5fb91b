// src/analysis/report_chart.hpp: the SVG helper that draws the HTML report's plots
// (report_chart.cpp), shared with the page and its sections (report.cpp). Internal to
// rotary_analysis (not installed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rotary/analysis.hpp"

namespace rotary::analysis::detail {

// A number for tick labels and tables: %.6g ("inf" for infinity, "nan").
std::string number_text(double value, int significant = 6);

// A fixed palette for series (colour-blind friendly Okabe-Ito order) and one colour per regime.
const char* series_color(size_t index);
const char* regime_color(PairRegime regime);

struct Point {
  double x = 0.0;
  double y = 0.0;
};

enum class Mark { Line, Markers, LineAndMarkers };

// How a line is stroked. Series are solid or dashed; reference lines are dotted, so that a
// reference line never looks like a series (and the legend shows each as drawn).
enum class Stroke { Solid, Dashed, DashDot, Dotted };

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

// The chart as one <svg> element: axes ranged to the drawable points and reference lines, the
// series, the reference lines (dotted) and the legend at the right.
std::string render_chart(const Chart& chart);

// Plot 3: the normalized score <R_m q, R_n q> / (m^2 |q|^2) for q = all ones, which is
// (1 / num_pairs) sum_i cos((m - n) theta_i) (pairs of the rotary dims; pass-through dims are
// not part of it). A cells x cells grid over positions [0, positions); each cell shows the mean
// score over its positions (sampling one position per cell would alias: a pair whose wavelength
// is shorter than the cell paints a false pattern). The colour scale spans
// the scores present (min to max), not [-1, 1]: the scores of a real spec stay in a narrow band
// and a fixed scale would paint them all one colour. Returns the SVG; min and max are reported.
std::string render_heatmap(const std::string& title, const std::vector<double>& inv_freq, int64_t positions,
                           int64_t cells, double& low, double& high);

}  // namespace rotary::analysis::detail
