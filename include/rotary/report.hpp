// include/rotary/report.hpp: the HTML report of `rotary report`: one self-contained page
// (inline CSS and SVG, no scripts, no network) with the analysis plots of one or more models.
//
// Every number comes from include/rotary/analysis.hpp (scheme_scaling, extrapolation,
// long_term_decay, run_checks) or frequencies.hpp; this file only draws them. The SVG is drawn
// by a small helper in src/analysis/report.cpp (axes, ticks, log scales, polylines, rects,
// legends), so the page needs nothing but a browser.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rotary/spec.hpp"

namespace rotary::analysis {

struct ReportModel {
  std::string name;     // the section heading ("llama-3.1-8b", a config path); escaped in the page
  std::string source;   // where it came from, for people: "preset llama-3.1-8b" or the path
  RopeSpec spec;
  int64_t context = 0;  // target context in tokens; 0 = analysis::default_target_context (as run_checks)
};

struct ReportOptions {
  std::string title = "rotary report";  // the page title; escaped
  // Positions whose per-pair turns are drawn (plot 2); empty = 1, 16, 256, 4096 and the context.
  std::vector<int64_t> angle_positions;
  int64_t heatmap_positions = 4096;  // the similarity heatmap covers positions m, n in [0, this)
  int64_t heatmap_cells = 64;        // cells per axis (each cell shows its first position)
  int64_t decay_samples = 32;        // random vectors averaged per distance in the decay curves
  // Provenance, shown under the title (empty = not shown): what made the page ("rotary 0.1.0"),
  // when (a UTC date and time), and the command line that made it. Escaped.
  std::string generator;
  std::string created;
  std::string command_line;
  // Where docs/analysis.md and the other docs are, as a web URL prefix
  // ("https://example.org/rotary/docs/"); empty or a file:// URL (it breaks once the page moves) =
  // the docs are named as plain text, by their path in rotary's repository. Escaped.
  std::string docs_url;
};

// The page: "<!DOCTYPE html>" first, per model the plots (1) inv_freq and (1b) wavelength per
// pair vs the default, (2) turns per pair at chosen positions, (3) the similarity heatmap
// <R_m q, R_n q> for an all-ones q, (4) the long-term decay bound and (4b) scores vs distance,
// (5) the scheme's per-pair scaling factor by regime, (6) extrapolation coverage, then the
// property-check table of run_checks; with several models, a comparison section first: their
// wavelengths and scaling factors against the pair's place in the head (2i / rotary_dim, so that
// models of different head dims share one axis), and at one shared context (the largest target
// context among them) the out-of-distribution overshoot per pair and the decay bound.
// Throws what run_checks throws for an invalid spec.
std::string render_report(const std::vector<ReportModel>& models, const ReportOptions& options = {});

}  // namespace rotary::analysis
