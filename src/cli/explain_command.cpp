// src/cli/explain_command.cpp: `rotary explain`: what a model's RoPE does, for a person.
//
// The verdict first: warnings for configurations that are known to go wrong (docs/formulas.md,
// "Pitfalls"), and only those, so that a correct config shows none; then, in plain words, what
// the scaling scheme did to the pairs. Then the details: scheme, contexts, attention scaling,
// notes (facts about the scheme worth knowing, not faults) and one table row per pair: its
// wavelength against the trained and the target context, the factor, and whether the target
// context drives it to angles pretraining never produced.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <numbers>
#include <sstream>

#include "cli/commands.hpp"
#include "rotary/analysis.hpp"
#include "rotary/error.hpp"
#include "rotary/frequencies.hpp"
#include "core/json.hpp"
#include "core/scaling/registry.hpp"

namespace rotary::cli {

const char* const kExplainHelp =
    "usage: rotary explain [--preset NAME | --config FILE] [--context N] [--seq-len N]\n"
    "                      [--layer-type T] [--json]\n"
    "\n"
    "Explains a model's RoPE, verdict first: warnings for configs known to go wrong (none for a\n"
    "correct one), then in plain words which pairs the scaling scheme keeps unchanged\n"
    "(\"extrapolated\" in the YaRN paper's words), which it interpolates and by how much, and\n"
    "which the target context drives past the angles seen in pretraining. Then the details: the\n"
    "scheme, the contexts, the attention scaling and where it comes from, notes on the scheme,\n"
    "and a table of every pair. A config with per-layer-type RoPE (Gemma 3: sliding and full\n"
    "attention) is explained one layer type after the other.\n"
    "\n"
    "  --preset NAME   a built-in preset (rotary presets); default llama-3.1-8b\n"
    "  --config FILE   a Hugging Face config.json, or a model folder holding one\n"
    "  --context N     target context in tokens (default: the context the config extends the\n"
    "                  model to: max_position_embeddings, or YaRN's original x factor if larger)\n"
    "  --seq-len N     sequence length for dynamic NTK / LongRoPE (default: the target context)\n"
    "  --layer-type T  only this layer type of a per-layer-type config\n"
    "  --json          {name, source, ok, verdict, warnings, notes, layer_types: [{layer_type,\n"
    "                  name, rope_type, scheme, trained_context, configured_context,\n"
    "                  target_context, attention_scaling, attention_scaling_source, num_pairs,\n"
    "                  num_kept, num_interpolated, num_blended, num_rescaled, num_unscaled,\n"
    "                  num_unrotated, num_out_of_distribution, largest_overshoot, in_words,\n"
    "                  warnings, notes, pairs: [{index, dims, inv_freq, wavelength_tokens,\n"
    "                  factor, regime, blend, turns_trained, turns_target, out_of_distribution,\n"
    "                  overshoot}]}]}; ok is true when there is no warning\n";

namespace {

// The scheme and its parameters: the scheme's own line (src/core/scaling/, its row's describe).
std::string describe_scheme(const RopeSpec& spec, const Frequencies& freqs) {
  return scaling::scheme(spec.scaling.type).describe(spec, freqs);
}

std::string pair_dims(const RopeSpec& spec, size_t i) {
  const int64_t half = spec.rotary_dim / 2;
  const auto index = static_cast<int64_t>(i);
  return spec.style == Style::NeoX ? detail::concat("(", index, ",", index + half, ")")
                                   : detail::concat("(", 2 * index, ",", 2 * index + 1, ")");
}

}  // namespace

namespace {

// Everything said about one spec (one layer type), computed once for the text and the JSON.
struct Explained {
  std::string layer_type;  // empty for the config's main spec
  const RopeSpec* spec = nullptr;
  Frequencies freqs;
  std::vector<PairCoverage> coverage;
  int64_t declared = 0;    // max_position_embeddings
  int64_t trained = 0;     // the pretraining context
  int64_t configured = 0;  // the context the config extends the model to
  int64_t target = 0;
  bool target_given = false;
  int64_t counts[6] = {0, 0, 0, 0, 0, 0};  // per PairRegime
  int64_t ood = 0;
  double worst_overshoot = 1.0;
  int64_t never_full_turn = 0;
  std::vector<std::string> in_words;  // the plain-words lines of the verdict
  std::vector<std::string> warnings;
  std::vector<std::string> notes;
};

// Wavelength range of the pairs in `regime`, "from 6.3 to 1200 tokens".
std::string wavelength_range(const Explained& e, PairRegime regime) {
  double low = std::numeric_limits<double>::infinity();
  double high = 0.0;
  for (const PairDiagnostics& pair : e.freqs.pairs) {
    if (pair.regime != regime) continue;
    low = std::min(low, pair.wavelength_tokens);
    high = std::max(high, pair.wavelength_tokens);
  }
  return detail::concat("wavelengths ", format_number(low, 3), " to ", format_number(high, 3), " tokens");
}

std::string pairs_text(int64_t count, int64_t total) {
  return count == total ? detail::concat("all ", total, " pairs") : detail::concat(count, " of ", total, " pairs");
}

Explained explain_spec(const RopeSpec& spec, const std::string& layer_type, std::optional<int64_t> context_arg,
                       std::optional<int64_t> seq_len_arg) {
  Explained e;
  e.layer_type = layer_type;
  e.spec = &spec;
  e.declared = spec.max_position_embeddings;
  // The pretraining context (analysis.hpp default_trained_context, which check and report use too):
  // the scheme's original length where it has one; for linear interpolation without one,
  // max_position_embeddings / factor; otherwise max_position_embeddings (2048 when none).
  e.trained = analysis::default_trained_context(spec);
  const ScalingType type = spec.scaling.type;
  e.configured = e.declared > 0 ? analysis::default_target_context(spec) : e.trained;
  e.target = context_arg.value_or(e.configured);
  e.target_given = context_arg.has_value();
  e.freqs = frequencies(spec, seq_len_arg.value_or(e.target));
  e.coverage = context_coverage(spec, e.freqs, e.trained, e.target);
  for (size_t i = 0; i < e.freqs.inv_freq.size(); ++i) {
    const PairDiagnostics& pair = e.freqs.pairs[i];
    const PairCoverage& c = e.coverage[i];
    ++e.counts[static_cast<int>(pair.regime)];
    if (c.out_of_distribution) {
      ++e.ood;
      e.worst_overshoot = std::max(e.worst_overshoot, c.overshoot);
    }
    if (pair.regime != PairRegime::Unrotated && c.rotations_target < 1.0) ++e.never_full_turn;
  }

  // In plain words.
  const auto total = static_cast<int64_t>(e.freqs.pairs.size());
  const auto num = [](double v) { return detail::shortest(v); };
  const int64_t kept = e.counts[static_cast<int>(PairRegime::Extrapolated)];
  const int64_t interpolated = e.counts[static_cast<int>(PairRegime::Interpolated)];
  const int64_t blended = e.counts[static_cast<int>(PairRegime::Blended)];
  const int64_t rescaled = e.counts[static_cast<int>(PairRegime::Rescaled)];
  const int64_t unscaled = e.counts[static_cast<int>(PairRegime::Unscaled)];
  const int64_t unrotated = e.counts[static_cast<int>(PairRegime::Unrotated)];
  const double factor = e.freqs.effective_factor;
  if (unscaled > 0) {
    e.in_words.push_back(detail::concat(
        pairs_text(unscaled, total), " keep the model's own frequencies (",
        type == ScalingType::Default ? "no context-extension scheme"
                                     : std::string(to_string(type)) + " is not active at this length",
        ")"));
  }
  if (kept > 0) {
    e.in_words.push_back(detail::concat(
        pairs_text(kept, total), " are kept unchanged (\"extrapolated\" in the YaRN paper's words; ",
        wavelength_range(e, PairRegime::Extrapolated),
        "): they complete turns within the trained context, so a longer input shows them no new angle"));
  }
  if (interpolated > 0) {
    e.in_words.push_back(detail::concat(
        pairs_text(interpolated, total), " are interpolated (", wavelength_range(e, PairRegime::Interpolated),
        "): their frequency is divided by ", num(factor), ", so ", num(factor), " times as many tokens turn them as far"
        " as the trained context did"));
  }
  if (blended > 0) {
    e.in_words.push_back(detail::concat(pairs_text(blended, total),
                                        " in between are blended: divided by part of the factor, more for the slower "
                                        "pairs (", wavelength_range(e, PairRegime::Blended), ")"));
  }
  if (rescaled > 0) {
    double low = std::numeric_limits<double>::infinity(), high = 0.0;
    for (const PairDiagnostics& pair : e.freqs.pairs) {
      if (pair.regime != PairRegime::Rescaled) continue;
      low = std::min(low, pair.factor_applied);
      high = std::max(high, pair.factor_applied);
    }
    e.in_words.push_back(detail::concat(pairs_text(rescaled, total), " are divided by a factor of their own, from ",
                                        format_number(low, 3), " to ", format_number(high, 3), " (LongRoPE's ",
                                        to_string(e.freqs.longrope_factor_set), " list, in use at ",
                                        e.freqs.seq_len, " tokens)"));
  }
  if (unrotated > 0) {
    e.in_words.push_back(detail::concat(pairs_text(unrotated, total),
                                        " do not rotate (frequency 0): they carry no position"));
  }
  if (e.ood > 0) {
    e.in_words.push_back(detail::concat(e.ood, " pairs reach angles at ", e.target, " tokens that pretraining on ",
                                        e.trained, " tokens never produced (largest overshoot x",
                                        format_number(e.worst_overshoot, 3), ")"));
  } else {
    e.in_words.push_back(detail::concat("every pair stays within the angles pretraining produced, up to ", e.target,
                                        " tokens"));
  }

  // Warnings: configurations known to go wrong, and only those.
  if (e.declared > 0 && e.target > e.configured) {
    e.warnings.push_back(
        e.configured == e.declared
            ? detail::concat("the target context ", e.target, " exceeds max_position_embeddings ", e.declared,
                             ": the model was not configured for it")
            : detail::concat("the target context ", e.target, " exceeds the ", e.configured,
                             " tokens the scaling extends the model to (", spec.original_context(), " x ", num(factor),
                             "): the model was not configured for it"));
  }
  if (type == ScalingType::Default && e.ood > 0) {
    e.warnings.push_back("no context-extension scheme: the out-of-distribution pairs above extrapolate unchanged");
  }
  if (spec.theta_base < 1000.0) {
    e.warnings.push_back(detail::concat("rope_theta ", spec.theta_base, " is unusually small: the slowest pair turns every ",
                                        format_number(e.freqs.pairs.back().wavelength_tokens), " tokens"));
  }

  // Notes: facts about the scheme that matter to whoever runs it, not faults.
  if (type == ScalingType::Dynamic) {
    e.notes.push_back(
        "dynamic NTK changes the frequencies with the sequence length: keys already in a KV cache keep the "
        "rotation they were given, so a cache that spans a change mixes bases (transformers#25104)");
  }
  if (type == ScalingType::LongRope) {
    e.notes.push_back(detail::concat(
        "LongRoPE switches from the short to the long factors once a sequence passes ", spec.original_context(),
        " tokens: keys cached before the switch were rotated with the short factors (transformers re-prefills)"));
  }
  if (type == ScalingType::Yarn && spec.scaling.mscale && spec.scaling.mscale_all_dim &&
      *spec.scaling.mscale == *spec.scaling.mscale_all_dim && factor > 1.0) {
    const double softmax_factor = yarn_mscale(factor, *spec.scaling.mscale_all_dim);
    e.notes.push_back(detail::concat(
        "mscale == mscale_all_dim makes the RoPE attention scaling exactly 1; DeepSeek-style models multiply the "
        "softmax scale by mscale(s, mscale_all_dim)^2 = ",
        softmax_factor * softmax_factor, " inside attention instead (not part of RoPE)"));
  }
  if (spec.style == Style::GPTJ) {
    e.notes.push_back(
        "GPT-J (interleaved) pairing: weights converted between Meta and Hugging Face layouts are permuted "
        "per head; applying the other pairing gives plausible output for a few tokens, then garbage");
  }
  if (spec.axes == PositionAxes::MRope) {
    e.notes.push_back(
        "M-RoPE: each token carries three positions (t, h, w); text-only tokens use the same value in all three");
  }
  return e;
}

// "scaling 1.1386 = 0.1*ln(4)+1 (...); ..." or, for 1, "not scaled (llama3 does not scale
// attention)" rather than "scaling 1 = 1 (...)".
std::string attention_text(const Frequencies& freqs) {
  const std::string& source = freqs.attention_scaling_source;
  if (freqs.attention_scaling == 1.0) {
    std::string why = source;
    if (why.rfind("1 (", 0) == 0 && why.back() == ')') why = why.substr(3, why.size() - 4);
    return "not scaled (" + why + ")";
  }
  return "scaling " + detail::shortest(freqs.attention_scaling) + " = " + source +
         "; it multiplies cos and sin, so attention logits scale by its square (" +
         detail::shortest(freqs.attention_scaling * freqs.attention_scaling) + ")";
}

void print_details(std::ostream& out, const Explained& e) {
  const RopeSpec& spec = *e.spec;
  const Frequencies& freqs = e.freqs;
  const auto num = [](double v) { return detail::shortest(v); };
  out << "  scheme      " << describe_scheme(spec, freqs) << "\n";
  out << "  geometry    head_dim " << spec.head_dim << ", rotary_dim " << spec.rotary_dim;
  if (spec.rotary_dim < spec.head_dim) {
    out << " (partial: dims " << spec.rotary_dim << ".." << spec.head_dim - 1 << " pass through)";
  }
  out << ", " << spec.num_pairs() << " pairs, "
      << (spec.style == Style::NeoX ? "NeoX pairing (x[i], x[i+rotary_dim/2])" : "GPT-J pairing (x[2i], x[2i+1])")
      << "\n";
  if (spec.num_attention_heads > 0) {
    out << "  heads       " << spec.num_attention_heads << " query, " << spec.num_key_value_heads << " key/value"
        << (spec.num_key_value_heads < spec.num_attention_heads ? " (GQA)" : "") << "\n";
  }
  out << "  theta       " << num(spec.theta_base);
  if (freqs.effective_theta_base != spec.theta_base) out << " (effective " << num(freqs.effective_theta_base) << ")";
  out << "\n";
  if (spec.axes == PositionAxes::MRope) {
    out << "  positions   M-RoPE, " << to_string(spec.mrope.assignment) << " sections (t, h, w) = (" << spec.mrope.pairs[0]
        << ", " << spec.mrope.pairs[1] << ", " << spec.mrope.pairs[2] << ") pairs\n";
  }
  out << "  contexts    trained " << e.trained << " tokens";
  if (e.configured != e.trained) out << ", configured " << e.configured;
  if (e.declared > 0 && e.declared != e.configured && e.declared != e.trained) out << " (max_position_embeddings " << e.declared << ")";
  out << ", target " << e.target << (e.target_given ? " (--context)" : "") << "\n";
  out << "  attention   " << attention_text(freqs) << "\n";
  if (!e.notes.empty()) {
    out << "  notes\n";
    for (const std::string& note : e.notes) out << "    - " << note << "\n";
  }
  out << "\n";

  out << "Per pair (wavelength = tokens per full turn; turns = full rotations within the context;\n"
         "factor = how much the scheme divided the pair's frequency; OOD = angles at the target\n"
         "context that pretraining never produced)\n";
  out << format_line("%5s  %-10s  %12s  %12s  %9s  %-18s  %11s  %11s  %s\n", "pair", "dims", "inv_freq", "wavelength",
                     "factor", "regime", "turns@train", "turns@target", "OOD");
  for (size_t i = 0; i < freqs.inv_freq.size(); ++i) {
    const PairDiagnostics& pair = freqs.pairs[i];
    const PairCoverage& c = e.coverage[i];
    std::string regime(to_string(pair.regime));
    if (pair.regime == PairRegime::Blended || pair.regime == PairRegime::Rescaled) {
      regime += ' ';  // two appends, not " " + ...: GCC 12 gives a false -Wrestrict (bug 105329)
      regime += format_number(pair.blend, 2);
    }
    std::string ood_text;
    if (c.out_of_distribution) {
      ood_text = "x";
      ood_text += format_number(c.overshoot, 3);
    }
    out << format_line("%5zu  %-10s  %12s  %12s  %9s  %-18s  %11s  %11s  %s\n", i, pair_dims(spec, i).c_str(),
                       format_number(freqs.inv_freq[i], 5).c_str(), format_number(pair.wavelength_tokens, 5).c_str(),
                       format_number(pair.factor_applied, 4).c_str(), regime.c_str(),
                       format_number(c.rotations_trained, 4).c_str(), format_number(c.rotations_target, 4).c_str(),
                       ood_text.c_str());
  }
  if (e.never_full_turn > 0) {
    out << "\n" << e.never_full_turn << " pairs do not complete one turn within " << e.target
        << " tokens: they encode position almost monotonically (low frequencies)\n";
  }
}

void write_json(json::Writer& out, const Explained& e) {
  const RopeSpec& spec = *e.spec;
  out.begin_object();
  if (e.layer_type.empty()) {
    out.key("layer_type").null();
  } else {
    out.key("layer_type").value(e.layer_type);
  }
  out.key("name").value(spec.name);
  out.key("rope_type").value(to_string(spec.scaling.type));
  out.key("scheme").value(describe_scheme(spec, e.freqs));
  out.key("trained_context").value(e.trained);
  out.key("configured_context").value(e.configured);
  out.key("target_context").value(e.target);
  out.key("attention_scaling").value(e.freqs.attention_scaling);
  out.key("attention_scaling_source").value(e.freqs.attention_scaling_source);
  out.key("num_pairs").value(static_cast<int64_t>(e.freqs.pairs.size()));
  out.key("num_kept").value(e.counts[static_cast<int>(PairRegime::Extrapolated)]);
  out.key("num_interpolated").value(e.counts[static_cast<int>(PairRegime::Interpolated)]);
  out.key("num_blended").value(e.counts[static_cast<int>(PairRegime::Blended)]);
  out.key("num_rescaled").value(e.counts[static_cast<int>(PairRegime::Rescaled)]);
  out.key("num_unscaled").value(e.counts[static_cast<int>(PairRegime::Unscaled)]);
  out.key("num_unrotated").value(e.counts[static_cast<int>(PairRegime::Unrotated)]);
  out.key("num_out_of_distribution").value(e.ood);
  out.key("largest_overshoot").value(e.worst_overshoot);
  for (const auto* list : {&e.in_words, &e.warnings, &e.notes}) {
    out.key(list == &e.in_words ? "in_words" : list == &e.warnings ? "warnings" : "notes").begin_array();
    for (const std::string& line : *list) out.value(line);
    out.end_array();
  }
  out.key("pairs").begin_array();
  for (size_t i = 0; i < e.freqs.pairs.size(); ++i) {
    const PairDiagnostics& pair = e.freqs.pairs[i];
    const PairCoverage& c = e.coverage[i];
    out.begin_object();
    out.key("index").value(static_cast<int64_t>(i));
    out.key("dims").value(pair_dims(spec, i));
    out.key("inv_freq").value(e.freqs.inv_freq[i]);
    out.key("wavelength_tokens").value(pair.wavelength_tokens);  // null when unrotated (infinite)
    out.key("factor").value(pair.factor_applied);
    out.key("regime").value(to_string(pair.regime));
    out.key("blend").value(pair.blend);
    out.key("turns_trained").value(c.rotations_trained);
    out.key("turns_target").value(c.rotations_target);
    out.key("out_of_distribution").value(c.out_of_distribution);
    out.key("overshoot").value(c.overshoot);
    out.end_object();
  }
  out.end_array();
  out.end_object();
}

}  // namespace

int run_explain(Args& args) {
  LoadedConfig loaded = load_config(args);
  const std::optional<int64_t> context_arg = args.integer("--context", 1, int64_t{1} << 40);
  const std::optional<int64_t> seq_len_arg = args.integer("--seq-len", 0, int64_t{1} << 40);
  const std::optional<std::string> layer_type = args.value("--layer-type");
  const bool as_json = args.has_switch("--json");
  args.finish();

  const RopeSpec& selected = select_spec(loaded, layer_type);
  if (args.parse_only()) return 0;

  // Every layer type of a per-layer-type config unless --layer-type picks one.
  std::vector<Explained> parts;
  if (layer_type || loaded.config.layer_type_specs.empty()) {
    parts.push_back(explain_spec(selected, layer_type.value_or(""), context_arg, seq_len_arg));
  } else {
    for (const auto& [name, spec] : loaded.config.layer_type_specs) {
      parts.push_back(explain_spec(spec, name, context_arg, seq_len_arg));
    }
  }
  // The verdict: every warning of every part, and the config's own.
  std::vector<std::string> warnings;
  std::vector<std::string> notes;
  for (const Explained& e : parts) {
    const std::string prefix = parts.size() > 1 ? e.layer_type + ": " : "";
    for (const std::string& w : e.warnings) warnings.push_back(prefix + w);
  }
  for (const std::string& w : loaded.config.warnings) warnings.push_back("config: " + w);
  for (const std::string& n : loaded.config.notes) notes.push_back("config: " + n);
  for (const Explained& e : parts) {
    for (const std::string& n : e.notes) {
      if (std::find(notes.begin(), notes.end(), n) == notes.end()) notes.push_back(n);
    }
  }
  const std::string name = parts.size() > 1 ? selected.name : parts.front().spec->name;
  const Explained& first = parts.front();
  const std::string verdict =
      warnings.empty()
          ? detail::concat("OK: no warnings; configured for ", first.configured, " tokens",
                           first.configured != first.trained ? detail::concat(" (trained on ", first.trained, ")") : "",
                           first.target != first.configured ? detail::concat(", explained at ", first.target) : "")
          : detail::concat(warnings.size(), warnings.size() == 1 ? " warning" : " warnings");

  if (as_json) {
    json::Writer out;
    out.begin_object();
    out.key("name").value(name);
    out.key("source").value(loaded.source);
    out.key("ok").value(warnings.empty());
    out.key("verdict").value(verdict);
    out.key("warnings").begin_array();
    for (const std::string& w : warnings) out.value(w);
    out.end_array();
    out.key("notes").begin_array();
    for (const std::string& n : notes) out.value(n);
    out.end_array();
    out.key("layer_types").begin_array();
    for (const Explained& e : parts) write_json(out, e);
    out.end_array();
    out.end_object();
    args.out() << out.str() << "\n";
    return 0;
  }

  std::ostream& out = args.out();
  out << "RoPE of " << (name.empty() ? loaded.source : name)
      << (name.empty() || name == loaded.source ? std::string() : " (" + loaded.source + ")") << "\n\n";
  out << "Verdict: " << verdict << "\n";
  for (const std::string& w : warnings) out << "  ! " << w << "\n";
  for (const Explained& e : parts) {
    if (parts.size() > 1) {
      out << "  " << e.layer_type << " layers (" << to_string(e.spec->scaling.type) << ", theta "
          << detail::shortest(e.spec->theta_base) << ")\n";
    }
    for (const std::string& line : e.in_words) out << (parts.size() > 1 ? "    - " : "  - ") << line << "\n";
  }
  for (const std::string& n : loaded.config.notes) out << "  note: " << n << "\n";
  for (const Explained& e : parts) {
    out << "\n";
    if (parts.size() > 1) out << "Layer type " << e.layer_type << " (" << e.spec->name << ")\n";
    print_details(out, e);
  }
  return 0;
}

}  // namespace rotary::cli
