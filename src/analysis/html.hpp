// src/analysis/html.hpp: text made safe for the HTML report (internal to rotary_analysis; the
// report itself is include/rotary/report.hpp).
#pragma once

#include <string>
#include <string_view>

namespace rotary::analysis {

// Text made safe for HTML element content and attribute values (& < > " ').
std::string html_escape(std::string_view text);

}  // namespace rotary::analysis
