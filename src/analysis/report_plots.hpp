// src/analysis/report_plots.hpp: the number of plots in a page render_report made. Internal to
// rotary_analysis (not installed): only `rotary report` (which prints the count) and the report
// tests need it, so it stays out of the public include/rotary/report.hpp.
#pragma once

#include <cstdint>
#include <string_view>

namespace rotary::analysis {

// The number of <svg> elements in `html` (render_report draws each plot as one).
int64_t count_report_plots(std::string_view html);

}  // namespace rotary::analysis
