// src/cli/check_command.cpp: `rotary check`: every property check of a model's RoPE, with margins.
//
// A view of analysis::run_checks (include/rotary/analysis.hpp); nothing here recomputes a
// formula. Exit codes: 0 when every check passes, 1 when one fails (a violation is a result,
// not an error: the table is still printed), 2 for errors as every command.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include "cli/commands.hpp"
#include "cli/layer_types.hpp"
#include "rotary/analysis.hpp"
#include "rotary/error.hpp"
#include "core/json.hpp"

namespace rotary::cli {

const char* const kCheckHelp =
    "usage: rotary check [--preset NAME | --config FILE] [--context N] [--layer-type T] [--json]\n"
    "\n"
    "Runs every property check of a model's RoPE and prints what was checked, the measured value,\n"
    "the threshold and the margin (docs/analysis.md explains each):\n"
    "  norm_preserved_f64            |R_p q| = m |q| (m = attention scaling), float64, p up to 2^31-1\n"
    "  norm_preserved_f32_kernel     the same for rotary::apply (float32 SIMD kernel)\n"
    "  relative_position_invariance  <R_m q, R_n k> depends on n - m only\n"
    "  long_term_decay_bound         RoFormer's bound on the score decays with distance\n"
    "  pairing_convention            the expanded cos/sin layout is a rotation with its own pairing\n"
    "                                and is detected as such\n"
    "Then, for information, which pairs the context drives past the angles seen in training.\n"
    "\n"
    "  --preset NAME   a built-in preset (rotary presets); default llama-3.1-8b\n"
    "  --config FILE   a Hugging Face config.json, or a model folder holding one\n"
    "  --context N     target context in tokens (default: max_position_embeddings): the\n"
    "                  extrapolation target and the seq_len of dynamic NTK / LongRoPE; the decay is\n"
    "                  evaluated up to max(N, 2048)\n"
    "  --layer-type T  for configs with per-layer-type RoPE (Gemma 3: full_attention or\n"
    "                  sliding_attention); without it such a config checks every layer type\n"
    "  --json          a JSON object: name, source, context, trained_context, decay_distance, passed,\n"
    "                  checks [{name, passed, measured, bound (\"at_most\" | \"at_least\"), threshold,\n"
    "                  margin, explanation}], extrapolation {trained_context, target_context,\n"
    "                  num_pairs, num_out_of_distribution, largest_overshoot, largest_overshoot_pair},\n"
    "                  layer_type (null without layer types). Every layer type: {name, source,\n"
    "                  passed, layer_types: [that object per type]}\n"
    "\n"
    "Exit status: 0 every check passed, 1 a check failed, 2 an error.\n";

namespace {

const char* bound_symbol(analysis::Bound bound) { return bound == analysis::Bound::AtMost ? "<=" : ">="; }
const char* bound_name(analysis::Bound bound) { return bound == analysis::Bound::AtMost ? "at_most" : "at_least"; }

// "x52.9", "x3003": how many times inside its threshold a value is (below 1: outside).
std::string margin_text(const analysis::CheckResult& check) {
  const double margin = analysis::check_margin(check);
  if (std::isinf(margin)) return "inf";
  if (std::isnan(margin)) return "-";
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, margin >= 1000.0 && margin < 1e9 ? "x%.0f" : "x%.3g", margin);
  return buffer;
}

// Word-wraps `text` to lines of at most `width` characters, each starting with `indent`.
std::string wrap(const std::string& text, const std::string& indent, size_t width) {
  std::string out, line;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(start, end - start);
    if (!line.empty() && indent.size() + line.size() + 1 + word.size() > width) {
      out += indent + line + "\n";
      line.clear();
    }
    if (!line.empty()) line += ' ';
    line += word;
    start = end + 1;
  }
  if (!line.empty()) out += indent + line + "\n";
  return out;
}

// One layer type's checks: a JSON object into *json_out, or the text; true when every check passed.
bool print_checks(Args& args, const LoadedConfig& loaded, const LayerTypeSpec& type, std::optional<int64_t> context,
                  json::Writer* json_out) {
  const RopeSpec& spec = *type.spec;
  const analysis::CheckReport report = analysis::run_checks(spec, context.value_or(0));
  const analysis::Extrapolation& ext = report.extrapolation;
  const bool passed = report.all_passed();

  if (json_out) {
    json::Writer& out = *json_out;
    out.begin_object();
    if (type.name.empty()) {
      out.key("layer_type").null();
    } else {
      out.key("layer_type").value(type.name);
    }
    out.key("name").value(spec.name);
    out.key("source").value(loaded.source);
    out.key("context").value(report.context);
    out.key("trained_context").value(report.trained_context);
    out.key("decay_distance").value(report.decay_distance);
    out.key("passed").value(passed);
    out.key("checks").begin_array();
    for (const analysis::CheckResult& check : report.checks) {
      out.begin_object();
      out.key("name").value(check.name);
      out.key("passed").value(check.passed);
      out.key("measured").value(check.measured);
      out.key("bound").value(bound_name(check.bound));
      out.key("threshold").value(check.threshold);
      out.key("margin").value(analysis::check_margin(check));  // null when infinite
      out.key("explanation").value(check.explanation);
      out.end_object();
    }
    out.end_array();
    out.key("extrapolation").begin_object();
    out.key("trained_context").value(ext.trained_context);
    out.key("target_context").value(ext.target_context);
    out.key("num_pairs").value(ext.num_pairs);
    out.key("num_out_of_distribution").value(ext.num_out_of_distribution);
    out.key("largest_overshoot").value(ext.largest_overshoot);
    out.key("largest_overshoot_pair").value(ext.largest_overshoot_pair);
    out.end_object();
    out.end_object();
    return passed;
  }

  args.out() << "Property checks of " << spec.name << " (" << loaded.source << ")"
             << (type.name.empty() ? "" : ", layer type " + type.name) << ": " << to_string(spec.scaling.type)
             << ", rotary_dim " << spec.rotary_dim << ", " << to_string(spec.style) << " pairing, context "
             << report.context << " tokens" << (context ? " (--context)" : "") << ", trained "
             << report.trained_context << "\n\n";
  args.out() << format_line(
      "  %-30s  %-10s  %2s  %-9s  %-8s  %s\n", "check", "measured", "", "threshold", "margin", "result");
  for (const analysis::CheckResult& check : report.checks) {
    args.out() << format_line(
        "  %-30s  %-10s  %2s  %-9s  %-8s  %s\n", check.name.c_str(), format_number(check.measured, 3).c_str(),
        bound_symbol(check.bound), format_number(check.threshold, 3).c_str(), margin_text(check).c_str(),
        check.passed ? "pass" : "FAIL");
  }

  args.out() << "\nWhat was checked (margin = how far inside its threshold each value is)\n";
  for (const analysis::CheckResult& check : report.checks) {
    args.out() << "  " << check.name << "\n" << wrap(check.explanation, "      ", 100);
  }

  args.out() << "\nExtrapolation (information, not a check)\n  ";
  if (ext.num_out_of_distribution > 0) {
    args.out() << ext.num_out_of_distribution << " of " << ext.num_pairs << " pairs reach angles at "
               << ext.target_context << " tokens that training on " << ext.trained_context
               << " tokens never produced (largest overshoot x" << format_number(ext.largest_overshoot, 3)
               << ", pair " << ext.largest_overshoot_pair << "); see rotary explain\n";
  } else {
    args.out() << "every pair stays within the angles training on " << ext.trained_context << " tokens produced, up to "
               << ext.target_context << " tokens\n";
  }

  int64_t failed = 0;
  std::string failed_names;
  for (const analysis::CheckResult& check : report.checks) {
    if (check.passed) continue;
    ++failed;
    failed_names += (failed_names.empty() ? "" : ", ") + check.name;
  }
  if (failed == 0) {
    args.out() << "\nAll " << report.checks.size() << " checks passed.\n";
  } else {
    args.out() << "\n" << failed << " of " << report.checks.size() << " checks FAILED: " << failed_names << "\n";
  }
  return passed;
}

}  // namespace

int run_check(Args& args) {
  LoadedConfig loaded = load_config(args);
  const std::optional<int64_t> context = args.integer("--context", 1, kMaxPosition);
  const std::optional<std::string> layer_type = args.value("--layer-type");
  const bool as_json = args.has_switch("--json");
  args.finish();

  // Every layer type of a per-layer-type config unless --layer-type picks one.
  const std::vector<LayerTypeSpec> types = layer_types_to_run(loaded, layer_type);
  if (args.parse_only()) return 0;
  bool passed = true;
  if (!as_json) {
    for (size_t i = 0; i < types.size(); ++i) {
      if (i > 0) args.out() << "\n";
      passed = print_checks(args, loaded, types[i], context, nullptr) && passed;
    }
    return passed ? 0 : 1;
  }
  json::Writer out;
  if (types.size() == 1) {
    passed = print_checks(args, loaded, types.front(), context, &out);
  } else {
    out.begin_object();
    out.key("name").value(loaded.config.spec.name);
    out.key("source").value(loaded.source);
    out.key("layer_types").begin_array();
    for (const LayerTypeSpec& type : types) passed = print_checks(args, loaded, type, context, &out) && passed;
    out.end_array();
    out.key("passed").value(passed);
    out.end_object();
  }
  args.out() << out.str() << "\n";
  return passed ? 0 : 1;
}

}  // namespace rotary::cli
