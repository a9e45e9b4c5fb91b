// src/cli/report_command.cpp: `rotary report`: the analysis plots of one or more models as one
// self-contained HTML page (analysis::render_report, include/rotary/report.hpp).
#include <ctime>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "analysis/report_plots.hpp"
#include "cli/commands.hpp"
#include "cli/layer_types.hpp"
#include "core/atomic_file.hpp"
#include "rotary/error.hpp"
#include "core/json.hpp"
#include "rotary/presets.hpp"
#include "rotary/report.hpp"
#include "rotary/table.hpp"

namespace rotary::cli {

const char* const kReportHelp =
    "usage: rotary report [--preset NAME | --config FILE | --compare A,B,...] [--context N] -o FILE.html\n"
    "                     [--json]\n"
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
    "  --config FILE       a Hugging Face config.json, or a model folder holding one\n"
    "  --compare A,B,...   several models compared side by side: presets, config.json files or\n"
    "                      model folders, comma-separated\n"
    "  --context N         target context in tokens (default: each model's max_position_embeddings)\n"
    "  --layer-type T      for configs with per-layer-type RoPE (not with --compare); without it\n"
    "                      such a config (Gemma 3) gets one model per layer type, side by side\n"
    "  -o FILE             the HTML file to write (required); written to a temporary file beside\n"
    "                      it and renamed into place, so a failed write leaves FILE as it was.\n"
    "                      Not the --config file. -o - writes the page to stdout.\n"
    "  --json              print {\"path\", \"plots\", \"models\": [{\"name\", \"source\"}]} instead of the\n"
    "                      sentence (not with -o -)\n";

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

}  // namespace

int run_report(Args& args) {
  const std::optional<std::string> compare = args.value("--compare");
  const std::optional<int64_t> context = args.integer("--context", 1, kMaxPosition);
  const std::optional<std::string> output = args.value("-o", "a file path");
  const std::optional<std::string> layer_type = args.value("--layer-type");

  std::vector<analysis::ReportModel> models;
  std::vector<std::string> input_configs;  // read by the report, so -o must not replace them
  if (compare) {
    const std::optional<std::string> preset_name = args.value("--preset", "a preset name");
    const std::optional<std::string> config_path = args.value("--config", "a file path");
    if (preset_name || config_path || layer_type) {
      throw UsageError(detail::concat("report: give --compare or --preset/--config/--layer-type, not both (got --compare ",
                                      *compare, ")"));
    }
    const std::vector<std::string> names = split_names(*compare);
    if (names.empty()) {
      throw UsageError(detail::concat("report: --compare needs models A,B,... (presets, config.json files or model folders)"
                                      " (got \"", *compare, "\")"));
    }
    for (const std::string& name : names) {
      if (const std::optional<std::string> known = resolve_preset_name("report", "--compare", name, true)) {
        models.push_back({*known, "preset " + *known, preset(*known).spec, context.value_or(0)});
        continue;
      }
      std::error_code ignored;
      if (!std::filesystem::exists(name, ignored)) {
        throw UsageError(detail::concat("report: --compare entries must be presets (see rotary presets), config.json "
                                        "files or model folders (got \"", name, "\", neither a preset nor a path)",
                                        did_you_mean(suggest_presets(name))));
      }
      const std::string path = config_file_path("report", "--compare", name);
      const HfRopeConfig config = load_hf_config(path);
      for (const std::string& warning : config.warnings) args.err() << "rotary: warning: " << warning << "\n";
      models.push_back({config.spec.name.empty() ? path : config.spec.name, path, config.spec, context.value_or(0)});
      input_configs.push_back(path);
    }
  } else {
    const LoadedConfig loaded = load_config(args);
    // Every layer type of a per-layer-type config unless --layer-type picks one, each named.
    for (const LayerTypeSpec& type : layer_types_to_run(loaded, layer_type)) {
      std::string name = type.spec->name.empty() ? loaded.source : type.spec->name;
      if (!type.name.empty() && name.find(type.name) == std::string::npos) name += " (" + type.name + ")";
      const std::string source = type.name.empty() ? loaded.source : loaded.source + ", layer type " + type.name;
      models.push_back({name, source, *type.spec, context.value_or(0)});
    }
    if (loaded.config_path) input_configs.push_back(*loaded.config_path);
  }
  const bool as_json = args.has_switch("--json");
  if (!output) throw UsageError("report: -o FILE is required: the HTML file to write, or - for stdout (got no -o)");
  args.finish();
  if (as_json && is_stdout(output)) {
    throw UsageError("report: --json prints where the page went, so it needs -o FILE (got -o - and --json)");
  }
  for (const std::string& input : input_configs) {
    if (is_stdout(output) || !detail::same_file(*output, input)) continue;
    throw UsageError(detail::concat("report: -o must not be the input ", compare ? "--compare entry" : "--config",
                                    ": it would be replaced by the report (got ",
                                    *output == input ? *output + " for both" : input + " and " + *output,
                                    ", the same file)"));
  }
  if (args.parse_only()) return 0;

  analysis::ReportOptions options;
  options.generator = std::string("rotary ") + ROTARY_VERSION;
  options.created = utc_now();
  options.command_line = command_line(args);
  // options.docs_url stays empty: the report names the docs by their repository path, as text
  // (a file:// link into this machine's source tree breaks once the page is moved or shared).
  const std::string html = analysis::render_report(models, options);
  if (is_stdout(output)) {
    args.out() << html;
    return 0;
  }
  // "report: cannot write <path>: <reason>"; a failure leaves an existing file as it was.
  detail::write_file_atomically(*output, html, "report");
  const int64_t plots = analysis::count_report_plots(html);
  if (as_json) {
    json::Writer out;
    out.begin_object();
    out.key("path").value(*output);
    out.key("plots").value(plots);
    out.key("models").begin_array();
    for (const analysis::ReportModel& model : models) {
      out.begin_object();
      out.key("name").value(model.name);
      out.key("source").value(model.source);
      out.end_object();
    }
    out.end_array();
    out.end_object();
    args.out() << out.str() << "\n";
    return 0;
  }
  args.out() << "report written to " << *output << " (" << plots << " plots)\n";
  return 0;
}

}  // namespace rotary::cli
