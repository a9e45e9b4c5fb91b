// src/cli/freqs_command.cpp: `rotary freqs`: inv_freq and attention scaling, for people or JSON.
#include <cstdio>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/layer_types.hpp"
#include "rotary/error.hpp"
#include "rotary/frequencies.hpp"
#include "core/json.hpp"

namespace rotary::cli {

const char* const kFreqsHelp =
    "usage: rotary freqs [--preset NAME | --config FILE] [--seq-len N] [--layer-type T] [--json]\n"
    "\n"
    "Prints the inverse frequencies (radians per token, float64, in pair order) and the attention\n"
    "scaling of a model's RoPE, with per-pair diagnostics.\n"
    "\n"
    "  --preset NAME     a built-in preset (rotary presets); default llama-3.1-8b\n"
    "  --config FILE     a Hugging Face config.json, or a model folder holding one\n"
    "  --seq-len N       sequence length, read by the sequence-dependent schemes only: dynamic NTK\n"
    "                    (base grows when N > max_position_embeddings) and LongRoPE (long factors\n"
    "                    when N > original_max_position_embeddings). Default 0: construction time.\n"
    "  --layer-type T    for configs with per-layer-type RoPE (Gemma 3: full_attention or\n"
    "                    sliding_attention); without it such a config prints every layer type\n"
    "  --json            a JSON object: name, rope_type, style, head_dim, rotary_dim, theta_base,\n"
    "                    effective_theta_base, seq_len, attention_scaling, attention_scaling_source,\n"
    "                    inv_freq [rotary_dim/2], pairs [{index, inv_freq, wavelength_tokens,\n"
    "                    factor_applied, regime, blend}], layer_type (null without layer types).\n"
    "                    Every layer type: {name, source, layer_types: [that object per type]}\n";

namespace {

// One layer type's frequencies: a JSON object into *json_out, or the text table.
void print_freqs(Args& args, const LoadedConfig& loaded, const LayerTypeSpec& type, std::optional<int64_t> seq_len,
                 json::Writer* json_out) {
  const RopeSpec& spec = *type.spec;
  const Frequencies freqs = frequencies(spec, seq_len.value_or(0));

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
    out.key("rope_type").value(to_string(spec.scaling.type));
    out.key("style").value(to_string(spec.style));
    out.key("head_dim").value(spec.head_dim);
    out.key("rotary_dim").value(spec.rotary_dim);
    out.key("theta_base").value(spec.theta_base);
    out.key("effective_theta_base").value(freqs.effective_theta_base);
    out.key("effective_factor").value(freqs.effective_factor);
    out.key("max_position_embeddings").value(spec.max_position_embeddings);
    out.key("original_max_position_embeddings").value(spec.original_context());
    out.key("seq_len").value(freqs.seq_len);
    if (freqs.longrope_factor_set != LongRopeFactorSet::None) {
      out.key("longrope_factor_set").value(std::string(to_string(freqs.longrope_factor_set)));
    }
    out.key("attention_scaling").value(freqs.attention_scaling);
    out.key("attention_scaling_source").value(freqs.attention_scaling_source);
    out.key("inv_freq").begin_array();
    for (double v : freqs.inv_freq) out.value(v);
    out.end_array();
    out.key("pairs").begin_array();
    for (size_t i = 0; i < freqs.pairs.size(); ++i) {
      const PairDiagnostics& pair = freqs.pairs[i];
      out.begin_object();
      out.key("index").value(static_cast<int64_t>(i));
      out.key("inv_freq").value(freqs.inv_freq[i]);
      out.key("wavelength_tokens").value(pair.wavelength_tokens);  // null when unrotated (infinite)
      out.key("factor_applied").value(pair.factor_applied);
      out.key("regime").value(to_string(pair.regime));
      out.key("blend").value(pair.blend);
      out.end_object();
    }
    out.end_array();
    out.end_object();
    return;
  }

  if (!type.name.empty()) args.out() << "Layer type " << type.name << "\n";
  args.out() << spec.name << ": " << to_string(spec.scaling.type) << ", theta " << detail::shortest(spec.theta_base)
             << ", rotary_dim " << spec.rotary_dim << " of head_dim " << spec.head_dim << " ("
             << to_string(spec.style) << " pairing), seq_len " << freqs.seq_len
             << (freqs.seq_len == 0 ? " (construction time)" : "") << "\n";
  if (freqs.effective_theta_base != spec.theta_base) {
    args.out() << "effective theta " << detail::shortest(freqs.effective_theta_base) << "\n";
  }
  if (freqs.longrope_factor_set != LongRopeFactorSet::None) {
    args.out() << "LongRoPE factors: " << to_string(freqs.longrope_factor_set) << "\n";
  }
  args.out() << "attention_scaling " << detail::shortest(freqs.attention_scaling) << "  = "
             << freqs.attention_scaling_source << "\n\n";
  args.out() << format_line(
      "%5s  %-24s  %17s  %10s  %-12s\n", "pair", "inv_freq (rad/token)", "wavelength_tokens", "factor", "regime");
  for (size_t i = 0; i < freqs.inv_freq.size(); ++i) {
    const PairDiagnostics& pair = freqs.pairs[i];
    std::string regime(to_string(pair.regime));
    if (pair.regime == PairRegime::Blended) {
      regime += ' ';  // two appends, not " " + ...: GCC 12 gives a false -Wrestrict (bug 105329)
      regime += format_number(pair.blend, 3);
    }
    args.out() << format_line(
        "%5zu  %-24s  %17s  %10s  %-12s\n", i, detail::shortest(freqs.inv_freq[i]).c_str(),
        format_number(pair.wavelength_tokens).c_str(), format_number(pair.factor_applied, 5).c_str(), regime.c_str());
  }
}

}  // namespace

int run_freqs(Args& args) {
  LoadedConfig loaded = load_config(args);
  const std::optional<int64_t> seq_len = args.integer("--seq-len", 0, int64_t{1} << 40);
  const std::optional<std::string> layer_type = args.value("--layer-type");
  const bool as_json = args.has_switch("--json");
  args.finish();

  // Every layer type of a per-layer-type config unless --layer-type picks one.
  const std::vector<LayerTypeSpec> types = layer_types_to_run(loaded, layer_type);
  if (args.parse_only()) return 0;
  if (!as_json) {
    for (size_t i = 0; i < types.size(); ++i) {
      if (i > 0) args.out() << "\n";
      print_freqs(args, loaded, types[i], seq_len, nullptr);
    }
    return 0;
  }
  json::Writer out;
  if (types.size() == 1) {
    print_freqs(args, loaded, types.front(), seq_len, &out);
  } else {
    out.begin_object();
    out.key("name").value(loaded.config.spec.name);
    out.key("source").value(loaded.source);
    out.key("layer_types").begin_array();
    for (const LayerTypeSpec& type : types) print_freqs(args, loaded, type, seq_len, &out);
    out.end_array();
    out.end_object();
  }
  args.out() << out.str() << "\n";
  return 0;
}

}  // namespace rotary::cli
