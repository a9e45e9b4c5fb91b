// tests/analysis/report_test.cpp: the HTML page of `rotary report` (render_report): well-formed,
// self-contained, every plot titled, labelled with units and drawn, the check table equal to
// run_checks, and names escaped.
#include "rotary/report.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <regex>
#include <string>
#include <vector>

#include "rotary/analysis.hpp"
#include "rotary/presets.hpp"
#include "analysis/html.hpp"
#include "analysis/report_plots.hpp"

namespace rotary::analysis {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

int64_t count(const std::string& text, const std::string& needle) {
  int64_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

ReportModel preset_model(const std::string& name) { return {name, "preset " + name, preset(name).spec, 0}; }

// Each <svg>...</svg> block of the page.
std::vector<std::string> svgs(const std::string& html) {
  std::vector<std::string> out;
  for (size_t at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 4)) {
    const size_t end = html.find("</svg>", at);
    out.push_back(html.substr(at, end == std::string::npos ? std::string::npos : end - at));
  }
  return out;
}

void expect_well_formed_and_self_contained(const std::string& html) {
  EXPECT_THAT(html, StartsWith("<!DOCTYPE html>"));
  EXPECT_EQ(count(html, "<html"), 1);
  EXPECT_EQ(count(html, "</html>"), 1);
  EXPECT_EQ(count(html, "<svg"), count(html, "</svg>"));
  // No external loads: no URL at all, no script.
  EXPECT_THAT(html, Not(HasSubstr("http://")));
  EXPECT_THAT(html, Not(HasSubstr("https://")));
  EXPECT_THAT(html, Not(HasSubstr("src=")));
  EXPECT_THAT(html, Not(HasSubstr("href=")));
  EXPECT_THAT(html, Not(HasSubstr("<script")));
  // Every plot: a <title>, a visible title, axis labels with a unit in parentheses, drawn elements.
  const std::regex axis_label_with_unit("class=\"axis-label\"[^>]*>[^<]*\\([^)<]+\\)</text>");
  for (const std::string& svg : svgs(html)) {
    EXPECT_THAT(svg, HasSubstr("<title>")) << svg.substr(0, 200);
    EXPECT_THAT(svg, HasSubstr("class=\"plot-title\"")) << svg.substr(0, 200);
    const auto labels = std::distance(std::sregex_iterator(svg.begin(), svg.end(), axis_label_with_unit),
                                      std::sregex_iterator());
    EXPECT_GE(labels, 2) << svg.substr(0, 200);
    const bool drawn = svg.find("<polyline") != std::string::npos || svg.find("<circle") != std::string::npos ||
                       svg.find("<path") != std::string::npos || svg.find("<rect x=") != std::string::npos;
    EXPECT_TRUE(drawn) << svg.substr(0, 200);
    // A chart's data, not only its frame: some polyline with points or a circle or a filled rect.
    EXPECT_TRUE(svg.find("<polyline points=\"") != std::string::npos || svg.find("<circle") != std::string::npos ||
                count(svg, "<rect x=") > 10)
        << svg.substr(0, 200);
  }
}

TEST(Report, DefaultPresetHasEveryPlotAndTheCheckTable) {
  const std::string html = render_report({preset_model(std::string(kDefaultPreset))}, {});
  expect_well_formed_and_self_contained(html);
  // inv_freq, wavelength, turns, heatmap, bound, scores, scaling, coverage, engine numerics
  EXPECT_EQ(count_report_plots(html), 9);
  for (const char* title : {"inv_freq per pair", "Wavelength per pair", "Turns per pair", "Similarity",
                            "Long-term decay bound", "Score vs distance", "Per-pair scaling", "Extrapolation coverage",
                            "Engine numerics vs exact"}) {
    EXPECT_THAT(html, HasSubstr(title));
  }
  EXPECT_THAT(html, HasSubstr("wavelength 2 pi / theta_i (tokens)"));
  EXPECT_THAT(html, HasSubstr("trained context 8192"));

  // The table's numbers are run_checks' numbers (data-value holds them to 17 digits).
  const CheckReport report = run_checks(preset(kDefaultPreset).spec);
  ASSERT_FALSE(report.checks.empty());
  for (const CheckResult& check : report.checks) {
    char measured[64];
    std::snprintf(measured, sizeof measured, "%.17g", check.measured);
    const std::string row_start = "<tr><td>" + check.name + "</td><td class=\"num\" data-value=\"" + measured + "\"";
    EXPECT_THAT(html, HasSubstr(row_start)) << check.name;
    char threshold[64];
    std::snprintf(threshold, sizeof threshold, "%.17g", check.threshold);
    EXPECT_THAT(html, HasSubstr(std::string("data-value=\"") + threshold + "\""));
  }
}

TEST(Report, CompareOverlaysEveryModelInOnePlotEach) {
  const std::vector<std::string> names = {"llama-3.1-8b", "llama-2-7b", "gpt-neox-20b"};
  std::vector<ReportModel> models;
  for (const std::string& name : names) models.push_back(preset_model(name));
  const std::string html = render_report(models, {});
  expect_well_formed_and_self_contained(html);
  EXPECT_EQ(count_report_plots(html), 4 + 3 * 9);
  const size_t compare = html.find("<h2>Side by side</h2>");
  ASSERT_NE(compare, std::string::npos);
  const std::vector<std::string> plots = svgs(html.substr(compare));
  ASSERT_GE(plots.size(), 4u);
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(count(plots[k], "<polyline"), 3) << k;
    for (const std::string& name : names) EXPECT_THAT(plots[k], HasSubstr(">" + name)) << k;
  }
  // Models of different head dims share one axis: the pair's place 2i / rotary_dim in [0, 1).
  EXPECT_THAT(plots[0], HasSubstr("pair place 2i / rotary_dim (0 = fastest, 1 = slowest)"));
  // Coinciding curves stay apart by stroke: the models are solid, dashed and dash-dotted.
  EXPECT_THAT(plots[1], HasSubstr("stroke-dasharray=\"7 4\""));
  EXPECT_THAT(plots[1], HasSubstr("stroke-dasharray=\"10 3 2 3\""));
  // The shared context is the largest target context (llama-3.1-8b's 131072).
  EXPECT_THAT(plots[2], HasSubstr("Past the trained angles at 131072 tokens"));
  EXPECT_THAT(plots[3], HasSubstr("Decay bound at 131072 tokens, compared"));
}

TEST(Report, LogAxesUseOneTickStyleAndContextLinesDifferFromSeries) {
  const std::string html = render_report({preset_model(std::string(kDefaultPreset))}, {});
  const std::vector<std::string> plots = svgs(html);
  ASSERT_EQ(plots.size(), 9u);
  // inv_freq spans 1 .. 1e-7: every tick a power of ten with a superscript, no "0.01" beside "1e-3".
  const std::string& inv = plots[0];
  EXPECT_THAT(inv, HasSubstr(">10<tspan dy=\"-5\" font-size=\"8\">-3</tspan>"));
  EXPECT_THAT(inv, HasSubstr(">10<tspan dy=\"-5\" font-size=\"8\">0</tspan>"));
  EXPECT_THAT(inv, Not(HasSubstr(">0.01<")));
  EXPECT_THAT(inv, Not(HasSubstr(">1e-")));
  // The wavelength plot: the context lines are dotted, the default series dashed, in other colours.
  const std::string& wave = plots[1];
  EXPECT_THAT(wave, HasSubstr("stroke=\"#009e73\" stroke-width=\"1.4\" stroke-dasharray=\"2 3\""));
  EXPECT_THAT(wave, HasSubstr("stroke=\"#7f7f7f\" stroke-width=\"1.6\" stroke-dasharray=\"7 4\""));
  // The turns plot has a line per position and the one-turn reference.
  EXPECT_EQ(count(plots[2], "<polyline"), 5);
  EXPECT_THAT(plots[2], HasSubstr(">one full turn</text>"));
  // The engine numerics: a line per engine (hf, ggml, vllm) and the float32 reference, dotted.
  EXPECT_EQ(count(plots[8], "<polyline"), 3);
  EXPECT_THAT(plots[8], HasSubstr(">vllm (float32 cache)</text>"));
  EXPECT_THAT(plots[8], HasSubstr("stroke-dasharray=\"10 3 2 3\""));  // vllm over hf, which it equals here
  EXPECT_THAT(plots[8], HasSubstr("stroke=\"#999999\" stroke-width=\"1.4\" stroke-dasharray=\"2 3\""));
}

TEST(Report, HeatmapColoursSpanTheScoresPresentAndShowTheirRange) {
  ReportOptions options;
  options.heatmap_positions = 4096;
  options.heatmap_cells = 64;
  const std::string html = render_report({preset_model(std::string(kDefaultPreset))}, options);
  const std::string heatmap = svgs(html)[3];
  // The darkest and the brightest colours of the scale are both used (not a band of [-1, 1]).
  EXPECT_THAT(heatmap, HasSubstr("fill=\"#440154\""));
  EXPECT_THAT(heatmap, HasSubstr("fill=\"#fde725\""));
  EXPECT_EQ(count(heatmap, "<rect x="), 64 * 64 + 40);
  EXPECT_THAT(html, HasSubstr("for m, n below 4096"));
}

TEST(Report, ProvenanceAndDocsLinks) {
  ReportOptions options;
  options.generator = "rotary 9.9.9";
  options.created = "2026-11-25 16:00 UTC";
  options.command_line = "rotary report --preset x -o 'a b.html'";
  options.docs_url = "https://example.org/rotary/docs/";
  const std::string html = render_report({preset_model("llama-2-7b")}, options);
  EXPECT_THAT(html, HasSubstr("<p class=\"provenance\">Made by rotary 9.9.9 on 2026-11-25 16:00 UTC: "
                              "<code>rotary report --preset x -o &#39;a b.html&#39;</code></p>"));
  EXPECT_THAT(html, HasSubstr("<a href=\"https://example.org/rotary/docs/analysis.md\">docs/analysis.md</a>"));
  const std::string plain = render_report({preset_model("llama-2-7b")}, {});
  EXPECT_THAT(plain, Not(HasSubstr("<p class=\"provenance\">")));
  EXPECT_THAT(plain, HasSubstr("its formula: docs/analysis.md;"));
}

// A file:// address for the docs (an absolute path into the source tree that made the page) is
// not linked: a page moved to another machine or folder would carry broken links. The pages are
// named by their path in the repository instead, and no "file://" appears anywhere in the page.
TEST(Report, NamesDocsAsTextInsteadOfFileLinks) {
  ReportOptions options;
  options.docs_url = "file:///work/rotary/docs/";
  const std::string html = render_report({preset_model("llama-2-7b")}, options);
  EXPECT_EQ(html.find("file://"), std::string::npos);
  EXPECT_THAT(html, Not(HasSubstr("<a href=")));
  EXPECT_THAT(html, HasSubstr("its formula: docs/analysis.md;"));
  options.docs_url = "FILE:///work/rotary/docs/";  // URL schemes are case-insensitive
  EXPECT_EQ(render_report({preset_model("llama-2-7b")}, options).find("/work/rotary/docs"), std::string::npos);
}

TEST(Report, EscapesNamesAndTitles) {
  ReportModel model = preset_model("llama-2-7b");
  model.name = "my <model> & \"co\"";
  model.source = "a<b>.json";
  ReportOptions options;
  options.title = "report <&>";
  const std::string html = render_report({model}, options);
  expect_well_formed_and_self_contained(html);
  EXPECT_THAT(html, HasSubstr("my &lt;model&gt; &amp; &quot;co&quot;"));
  EXPECT_THAT(html, HasSubstr("report &lt;&amp;&gt;"));
  EXPECT_THAT(html, HasSubstr("a&lt;b&gt;.json"));
  EXPECT_THAT(html, Not(HasSubstr("<model>")));
  EXPECT_EQ(html_escape("<&>'\""), "&lt;&amp;&gt;&#39;&quot;");
}

}  // namespace
}  // namespace rotary::analysis
