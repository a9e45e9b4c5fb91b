// src/cli/diverge_command.cpp: `rotary diverge`: each engine's cos/sin numerics against the exact
// table, by position bucket and by pair (analysis::engine_divergence, include/rotary/analysis.hpp).
#include <cmath>
#include <string>

#include "cli/commands.hpp"
#include "cli/layer_types.hpp"
#include "core/json.hpp"
#include "rotary/analysis.hpp"
#include "rotary/error.hpp"

namespace rotary::cli {

const char* const kDivergeHelp =
    "usage: rotary diverge [--preset NAME | --config FILE] [--positions LIST|FIRST:LAST | --max-position N]\n"
    "                      [--samples N] [--vllm-dtype float32|bfloat16|float16] [--layer-type T] [--json]\n"
    "\n"
    "Shows where each engine's RoPE numerics drift from the exact values, and by how much: the\n"
    "cos/sin of Hugging Face's float32 path (hf), llama.cpp's CPU rope (ggml: float32 angle by\n"
    "repeated multiplication, its YaRN ramp and frequency factors) and vLLM's cache (vllm: float32\n"
    "angles, cast to the model dtype), each against the exact table. docs/interop.md explains them.\n"
    "\n"
    "  --positions     the positions to evaluate: a list (0,1,4096) or a range FIRST:LAST\n"
    "  --max-position  evaluate octaves of [0, N) (default max_position_embeddings), --samples\n"
    "                  positions in each (default 64, ends included)\n"
    "  --vllm-dtype    the dtype of vLLM's cache (default float32: the angle error alone)\n"
    "  --layer-type T  for configs with per-layer-type RoPE (Gemma 3: full_attention or\n"
    "                  sliding_attention): that type only; default: every layer type in turn\n"
    "  --json          {\"name\", \"layer_type\" (null without layer types), \"seq_len\", \"positions\",\n"
    "                  \"engines\": [{\"engine\", \"available\", \"reason\", \"max_abs_error\",\n"
    "                  \"max_ulps\", \"buckets\": [{\"first\", \"last\", \"positions\", \"max_abs_error\",\n"
    "                  \"max_ulps\", \"worst_position\", \"worst_pair\"}], \"pairs\": [{\"pair\",\n"
    "                  \"wavelength_tokens\", \"max_abs_error\", \"max_ulps\"}]}]}. Every layer type:\n"
    "                  {\"name\", \"source\", \"layer_types\": [that object per type]}\n"
    "\n"
    "abs: the largest |engine value - true value| (scaling included); ulps: float32 steps from the\n"
    "correctly rounded value; where the two differ in sign (near a zero of cos or sin), each value's\n"
    "own steps down to zero, not every tiny float32 between them (analysis::float32_steps).\n"
    "An engine that cannot reproduce the model is listed with the reason (vllm: also positions past\n"
    "the rows vLLM's cache holds).\n";

namespace {

std::string bucket_text(const analysis::DivergenceBucket& b) {
  if (b.first == b.last) return std::to_string(b.first);
  return format_line("[%lld, %lld]", static_cast<long long>(b.first), static_cast<long long>(b.last));
}

std::string abs_text(double value) { return value == 0 ? "0" : format_line("%.2e", value); }

// One layer type's divergence table, as text or (json_out) one JSON object.
void print_divergence(Args& args, const LayerTypeSpec& type, const analysis::DivergenceOptions& options,
                      json::Writer* json_out) {
  const analysis::Divergence d = analysis::engine_divergence(*type.spec, options);
  if (json_out != nullptr) {
    json::Writer& out = *json_out;
    out.begin_object();
    out.key("name").value(d.spec_name);
    if (type.name.empty()) {
      out.key("layer_type").null();
    } else {
      out.key("layer_type").value(type.name);
    }
    out.key("seq_len").value(d.seq_len);
    out.key("positions").begin_array();
    for (const int64_t p : d.positions) out.value(p);
    out.end_array();
    out.key("engines").begin_array();
    for (const analysis::EngineDivergence& e : d.engines) {
      out.begin_object();
      out.key("engine").value(e.label);
      out.key("precision").value(to_string(e.precision));
      out.key("available").value(e.available);
      out.key("reason").value(e.reason);
      out.key("max_abs_error").value(e.max_abs_error);
      out.key("max_ulps").value(e.max_ulps);
      out.key("buckets").begin_array();
      for (const analysis::DivergenceBucket& b : e.buckets) {
        out.begin_object();
        out.key("first").value(b.first);
        out.key("last").value(b.last);
        out.key("positions").value(b.positions);
        out.key("max_abs_error").value(b.max_abs_error);
        out.key("max_ulps").value(b.max_ulps);
        out.key("worst_position").value(b.worst_position);
        out.key("worst_pair").value(b.worst_pair);
        out.end_object();
      }
      out.end_array();
      out.key("pairs").begin_array();
      for (const analysis::DivergencePair& p : e.pairs) {
        out.begin_object();
        out.key("pair").value(p.pair);
        out.key("wavelength_tokens").value(p.wavelength_tokens);
        out.key("max_abs_error").value(p.max_abs_error);
        out.key("max_ulps").value(p.max_ulps);
        out.end_object();
      }
      out.end_array();
      out.end_object();
    }
    out.end_array();
    out.end_object();
    return;
  }

  std::ostream& out = args.out();
  out << d.spec_name << (type.name.empty() ? "" : " (layer type " + type.name + ")") << ": each engine's cos/sin against the exact values, " << d.positions.size()
      << " positions in [" << d.positions.front() << ", " << d.positions.back() << "] (seq_len " << d.seq_len << ")\n"
      << "abs: largest |engine - true value|; ulps: float32 steps from the correctly rounded value\n\n";
  std::vector<const analysis::EngineDivergence*> shown;
  for (const analysis::EngineDivergence& e : d.engines) {
    if (e.available) shown.push_back(&e);
  }
  if (!shown.empty()) {
    out << format_line("%-26s", "positions");
    for (const auto* e : shown) out << format_line("  %26s", (e->label + ": abs, ulps").c_str());
    out << "\n";
    const std::vector<analysis::DivergenceBucket>& rows = shown.front()->buckets;
    for (size_t r = 0; r < rows.size(); ++r) {
      out << format_line("%-26s", bucket_text(rows[r]).c_str());
      for (const auto* e : shown) {
        const analysis::DivergenceBucket& b = e->buckets[r];
        out << format_line("  %15s %10lld", abs_text(b.max_abs_error).c_str(), static_cast<long long>(b.max_ulps));
      }
      out << "\n";
    }
    out << "\nby pair (worst over these positions):\n" << format_line("%-5s %12s", "pair", "wavelength");
    for (const auto* e : shown) out << format_line("  %26s", (e->label + ": abs, ulps").c_str());
    out << "\n";
    for (size_t i = 0; i < shown.front()->pairs.size(); ++i) {
      out << format_line("%-5zu %12s", i, format_number(shown.front()->pairs[i].wavelength_tokens).c_str());
      for (const auto* e : shown) {
        const analysis::DivergencePair& p = e->pairs[i];
        out << format_line("  %15s %10lld", abs_text(p.max_abs_error).c_str(), static_cast<long long>(p.max_ulps));
      }
      out << "\n";
    }
  }
  for (const analysis::EngineDivergence& e : d.engines) {
    if (!e.available) out << "\n" << e.label << ": not applicable: " << e.reason << "\n";
  }
}

}  // namespace

int run_diverge(Args& args) {
  LoadedConfig loaded = load_config(args);
  const std::optional<std::string> positions_text = args.value("--positions");
  const std::optional<int64_t> max_position = args.integer("--max-position", 1, kMaxPosition + 1);
  const std::optional<int64_t> samples = args.integer("--samples", 2, 10000);
  const std::optional<std::string> dtype_text = args.value("--vllm-dtype", "a dtype");
  const std::optional<std::string> layer_type = args.value("--layer-type");
  const bool as_json = args.has_switch("--json");
  args.finish();
  if (positions_text && max_position) {
    throw UsageError("diverge: give --positions or --max-position, not both");
  }
  analysis::DivergenceOptions options;
  if (positions_text) options.positions = parse_positions("diverge", *positions_text);
  if (max_position) options.max_position = *max_position;
  if (samples) options.samples_per_bucket = *samples;
  if (dtype_text) {
    const std::optional<DType> dtype = parse_dtype(*dtype_text);
    if (!dtype || *dtype == DType::F64) {
      throw UsageError("diverge: --vllm-dtype must be float32, bfloat16 or float16 (got \"" + *dtype_text + "\")");
    }
    options.vllm_dtype = *dtype;
  }
  // Every layer type of a per-layer-type config unless --layer-type picks one.
  const std::vector<LayerTypeSpec> types = layer_types_to_run(loaded, layer_type);
  if (args.parse_only()) return 0;
  if (!as_json) {
    for (size_t i = 0; i < types.size(); ++i) {
      if (i > 0) args.out() << "\n";
      print_divergence(args, types[i], options, nullptr);
    }
    return 0;
  }
  json::Writer out(json::TextLayout::Compact);
  if (types.size() == 1) {
    print_divergence(args, types.front(), options, &out);
  } else {
    out.begin_object();
    out.key("name").value(loaded.config.spec.name);
    out.key("source").value(loaded.source);
    out.key("layer_types").begin_array();
    for (const LayerTypeSpec& type : types) print_divergence(args, type, options, &out);
    out.end_array();
    out.end_object();
  }
  args.out() << out.str() << "\n";
  return 0;
}

}  // namespace rotary::cli
