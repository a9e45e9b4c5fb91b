// src/analysis/report.cpp: render_report (include/rotary/report.hpp): the analysis plots as
// one self-contained HTML page: the page, its per-model sections and the side-by-side section.
// The plots are drawn by the SVG helper in report_chart.cpp.
#include "rotary/report.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <sstream>

#include "rotary/analysis.hpp"
#include "rotary/frequencies.hpp"
#include "analysis/html.hpp"
#include "analysis/report_chart.hpp"
#include "analysis/report_plots.hpp"

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

using detail::Chart;
using detail::LegendEntry;
using detail::LegendMark;
using detail::Mark;
using detail::number_text;
using detail::Point;
using detail::ReferenceLine;
using detail::regime_color;
using detail::render_chart;
using detail::render_heatmap;
using detail::Series;
using detail::series_color;
using detail::Stroke;

constexpr double kTwoPi = 2.0 * std::numbers::pi;

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

// Plots (1) and (2) of a model: each pair's frequency, wavelength and turns, scheme vs default.
std::string frequency_plots(const std::string& name, const ReportOptions& options, const CheckReport& report,
                            const SchemeScaling& scaling) {
  const int64_t context = report.context;
  const int64_t trained = report.trained_context;
  std::ostringstream out;
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
  return out.str();
}

// Plots (3) and (4) of a model: the similarity heatmap and the long-term decay.
std::string similarity_and_decay_plots(const std::string& name, const RopeSpec& spec, const ReportOptions& options,
                                       const CheckReport& report, const SchemeScaling& scaling) {
  const int64_t context = report.context;
  std::ostringstream out;
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
  return out.str();
}

// Plots (5) to (7) of a model: the scheme's per-pair factor, the extrapolation coverage and the
// engines' numerics.
std::string scaling_and_engine_plots(const std::string& name, const RopeSpec& spec, const CheckReport& report,
                                     const SchemeScaling& scaling) {
  const int64_t context = report.context;
  std::ostringstream out;
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

  out << frequency_plots(name, options, report, scaling)
      << similarity_and_decay_plots(name, spec, options, report, scaling)
      << scaling_and_engine_plots(name, spec, report, scaling);
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
