// src/cli/report_command.cpp: `rotary report`: the analysis plots of one or more models as one
// self-contained HTML page (analysis::render_report, include/rotary/report.hpp).
#include <ctime>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "analysis/report_plots.hpp"
#include "commands.hpp"
#include "core/atomic_file.hpp"
#include "rotary/error.hpp"
#include "rotary/presets.hpp"
#include "rotary/report.hpp"
#include "rotary/table.hpp"

namespace rotary::cli {

const char* const kReportHelp =
    "usage: rotary report [--preset NAME | --config FILE | --compare A,B,...] [--context N] -o FILE.html\n"
    "\n"
    "Writes one self-contained HTML page (inline SVG, no scripts, no network) with, per model:\n"
    "inv_freq and wavelength per pair against the default, the turns of each pair at a few\n"
    "positions, a similarity heatmap of positions, RoFormer's long-term decay bound and measured\n"
    "scores, the scheme's per-pair scaling, the extrapolation coverage and the property checks of\n"
    "rotary check. With --compare, a side-by-side section overlays the models' wavelengths and\n"
    "scaling factors, and their out-of-distribution angles and decay at one shared context.\n"
    "docs/analysis.md explains each plot.\n"
    "\n"
    "  --preset NAME       a built-in preset (rotary presets); default llama-3.1-8b\n"
    "  --config FILE       a Hugging Face config.json\n"
    "  --compare A,B,...   several presets, compared side by side\n"
    "  --context N         target context in tokens (default: each model's max_position_embeddings)\n"
    "  --layer-type T      for configs with per-layer-type RoPE (not with --compare)\n"
    "  -o FILE             the HTML file to write (required); written to a temporary file beside\n"
    "                      it and renamed into place, so a failed write leaves FILE as it was.\n"
    "                      Not the --config file.\n";

namespace {

// "a,b,,c" -> {"a", "b", "c"}.
std::vector<std::string> split_names(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// The command line for the page's provenance, each token quoted when a shell would need it.
std::string command_line(const Args& args) {
  std::string line = "rotary " + args.command();
  for (const std::string& token : args.tokens()) {
    const bool plain = !token.empty() && token.find_first_not_of(
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=,:+@") == std::string::npos;
    std::string quoted = "'";
    for (const char c : token) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += " " + (plain ? token : quoted + "'");
  }
  return line;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm parts{};
  gmtime_r(&now, &parts);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%d %H:%M UTC", &parts);
  return buffer;
}

// The docs as a file:// URL when this build's source tree still holds them (a build-tree or
// locally installed command); an installed copy without them names the pages as text.
std::string docs_url() {
  std::error_code error;
  const std::filesystem::path docs(ROTARY_SOURCE_DOCS_DIR);
  if (!std::filesystem::is_regular_file(docs / "analysis.md", error)) return "";
  return "file://" + docs.generic_string() + "/";
}

}  // namespace

int run_report(Args& args) {
  const std::optional<std::string> compare = args.value("--compare");
  const std::optional<int64_t> context = args.integer("--context", 1, kMaxPosition);
  const std::optional<std::string> output = args.value("-o", "a file path");
  const std::optional<std::string> layer_type = args.value("--layer-type");

  std::vector<analysis::ReportModel> models;
  std::optional<std::string> input_config;  // read by the report, so -o must not replace it
  if (compare) {
    const std::optional<std::string> preset_name = args.value("--preset", "a preset name");
    const std::optional<std::string> config_path = args.value("--config", "a file path");
    if (preset_name || config_path || layer_type) {
      throw UsageError(detail::concat("report: give --compare or --preset/--config/--layer-type, not both (got --compare ",
                                      *compare, ")"));
    }
    const std::vector<std::string> names = split_names(*compare);
    if (names.empty()) throw UsageError(detail::concat("report: --compare needs preset names A,B,... (got \"", *compare, "\")"));
    for (const std::string& name : names) {
      std::string known;
      for (const PresetInfo& info : list_presets()) {
        if (info.name == name) known = name;
      }
      if (known.empty()) {
        throw UsageError(detail::concat("report: --compare must list built-in presets (see rotary presets) (got \"",
                                        name, "\")"));
      }
      models.push_back({name, "preset " + name, preset(name).spec, context.value_or(0)});
    }
  } else {
    const LoadedConfig loaded = load_config(args);
    const RopeSpec& spec = select_spec(loaded, layer_type);
    models.push_back({spec.name.empty() ? loaded.source : spec.name, loaded.source, spec, context.value_or(0)});
    input_config = loaded.config_path;
  }
  if (!output) throw UsageError("report: -o FILE is required: the HTML file to write (got no -o)");
  args.finish();
  if (input_config && detail::same_file(*output, *input_config)) {
    throw UsageError(detail::concat("report: -o must not be the input --config: it would be replaced by the report (got ",
                                    *output == *input_config ? *output + " for both" : *input_config + " and " + *output,
                                    ", the same file)"));
  }
  if (args.parse_only()) return 0;

  analysis::ReportOptions options;
  options.generator = std::string("rotary ") + ROTARY_VERSION;
  options.created = utc_now();
  options.command_line = command_line(args);
  options.docs_url = docs_url();
  const std::string html = analysis::render_report(models, options);
  // "report: cannot write <path>: <reason>"; a failure leaves an existing file as it was.
  detail::write_file_atomically(*output, html, "report");
  args.out() << "report written to " << *output << " (" << analysis::count_report_plots(html) << " plots)\n";
  return 0;
}

}  // namespace rotary::cli
