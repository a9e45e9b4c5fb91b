// src/cli/table_command.cpp: `rotary table`: cos/sin rows at chosen positions.
#include <charconv>
#include <cstdio>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/layer_types.hpp"
#include "rotary/error.hpp"
#include "core/json.hpp"
#include "rotary/table.hpp"

namespace rotary::cli {

const char* const kTableHelp =
    "usage: rotary table [--preset NAME | --config FILE] --positions LIST|FIRST:LAST\n"
    "                    [--precision exact|hf|ggml|vllm] [--seq-len N] [--layer-type T] [--json]\n"
    "\n"
    "Prints the cos/sin table rows of the given positions: attention_scaling * cos(p * inv_freq)\n"
    "and * sin, as float32, each row rotary_dim values in the layout the spec's style uses\n"
    "(NeoX: cat(freqs, freqs), as Hugging Face returns them; GPT-J: each pair's value twice).\n"
    "\n"
    "  --positions       a comma-separated list (0,1,4096) or a range FIRST:LAST = [FIRST, LAST)\n"
    "  --precision       exact (default): within 1 float32 ulp of the true value at any position;\n"
    "                    hf: Hugging Face's float32 numerics (angle fl32(fl32(p) * inv_freq_f32));\n"
    "                    ggml: llama.cpp's CPU rope; vllm: vLLM's float32 cache (docs/interop.md)\n"
    "  --seq-len N       for dynamic NTK / LongRoPE; default: max(positions) + 1, as one forward\n"
    "                    call of Hugging Face's rotary embedding would see them\n"
    "  --layer-type T    required for configs with per-layer-type RoPE (Gemma 3: full_attention\n"
    "                    or sliding_attention), whose layer types have different tables\n"
    "  --json            {\"name\", \"source\", \"precision\", \"layer_type\" (null without layer types),\n"
    "                    \"rotary_dim\", \"style\", \"attention_scaling\",\n"
    "                    \"positions\", \"cos\": [[...] per position], \"sin\": [[...]]}\n";


int run_table(Args& args) {
  LoadedConfig loaded = load_config(args);
  const std::optional<std::string> positions_text = args.value("--positions");
  const std::optional<std::string> precision_text = args.value("--precision");
  const std::optional<int64_t> seq_len_arg = args.integer("--seq-len", 0, kMaxPosition + 1);
  const std::optional<std::string> layer_type = args.value("--layer-type");
  const bool as_json = args.has_switch("--json");
  args.finish();
  if (!positions_text) throw UsageError("table: --positions is required (a list 0,1,4096 or a range 0:16)");
  const std::vector<int64_t> positions = parse_positions("table", *positions_text);
  Precision precision = Precision::Exact;
  if (precision_text) {
    const std::optional<Precision> parsed = parse_precision(*precision_text);
    if (!parsed) throw UsageError(detail::concat("table: --precision must be exact, hf, ggml or vllm (got \"", *precision_text, "\")"));
    precision = *parsed;
  }
  const LayerTypeSpec chosen = one_layer_type("table", loaded, layer_type);
  const RopeSpec& spec = *chosen.spec;
  if (args.parse_only()) return 0;

  int64_t max_position = 0;
  for (int64_t p : positions) max_position = std::max(max_position, p);
  std::shared_ptr<const CosSinTable> table;
  if (seq_len_arg) {
    table = std::make_shared<const CosSinTable>(
        spec, TableOptions{.precision = precision, .storage = Storage::OnTheFly, .seq_len = *seq_len_arg});
  } else {
    // One forward call over these positions, with Hugging Face's dynamic / LongRoPE rules.
    RopeCache cache(spec, {.precision = precision, .storage = Storage::OnTheFly});
    table = cache.table_for(max_position);
  }

  const int64_t pairs = table->num_pairs();
  std::vector<float> c(static_cast<size_t>(pairs));
  std::vector<float> s(static_cast<size_t>(pairs));
  // A position past a fixed table (vLLM's cache) is refused before anything is printed.
  if (max_position > table->max_position()) table->row(max_position, c.data(), s.data());
  if (as_json) {
    json::Writer out(json::TextLayout::Compact);
    out.begin_object();
    out.key("name").value(spec.name);
    out.key("source").value(loaded.source);  // "preset NAME": what --preset resolved to
    out.key("precision").value(to_string(precision));
    if (chosen.name.empty()) {
      out.key("layer_type").null();
    } else {
      out.key("layer_type").value(chosen.name);
    }
    out.key("rotary_dim").value(spec.rotary_dim);
    out.key("style").value(to_string(spec.style));
    out.key("attention_scaling").value(table->attention_scaling());
    out.key("positions").begin_array();
    for (int64_t p : positions) out.value(p);
    out.end_array();
    std::vector<std::vector<float>> cos_rows;
    std::vector<std::vector<float>> sin_rows;
    for (int64_t p : positions) {
      table->row(p, c.data(), s.data());
      cos_rows.push_back(expand_row(c.data(), pairs, spec.style));
      sin_rows.push_back(expand_row(s.data(), pairs, spec.style));
    }
    for (const auto* rows : {&cos_rows, &sin_rows}) {
      out.key(rows == &cos_rows ? "cos" : "sin").begin_array();
      for (const std::vector<float>& row : *rows) {
        out.begin_array();
        for (float v : row) out.value(static_cast<double>(v));
        out.end_array();
      }
      out.end_array();
    }
    out.end_object();
    args.out() << out.str() << "\n";
    return 0;
  }
  args.out() << spec.name << (chosen.name.empty() ? "" : " (layer type " + chosen.name + ")") << ": "
             << to_string(precision) << " table, attention_scaling "
             << detail::shortest(table->attention_scaling()) << ", " << spec.rotary_dim << " values per row ("
             << to_string(spec.style) << " layout), float32 printed with 9 significant digits\n";
  for (int64_t p : positions) {
    table->row(p, c.data(), s.data());
    for (int which = 0; which < 2; ++which) {
      const std::vector<float> row = expand_row(which == 0 ? c.data() : s.data(), pairs, spec.style);
      args.out() << format_line("%s[%lld]", which == 0 ? "cos" : "sin", static_cast<long long>(p));
      for (float v : row) args.out() << format_line(" %.9g", static_cast<double>(v));
      args.out() << "\n";
    }
  }
  return 0;
}

}  // namespace rotary::cli
