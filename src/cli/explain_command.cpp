// src/cli/explain_command.cpp: `rotary explain`: what a model's RoPE does, for a person.
//
// For each pair: its wavelength against the trained and the target context, what the scaling
// scheme did to it (extrapolated, interpolated, blended, by how much), and whether the target
// context drives it to angles pretraining never produced. Then the attention scaling and where
// it comes from, and warnings for configurations that are known to go wrong
// (../shared/design/FORMULAS.md, "Pitfalls").
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <numbers>
#include <sstream>

#include "commands.hpp"
#include "rotary/error.hpp"
#include "rotary/frequencies.hpp"

namespace rotary::cli {

const char* const kExplainHelp =
    "usage: rotary explain [--preset NAME | --config FILE] [--context N] [--seq-len N]\n"
    "                      [--layer-type T]\n"
    "\n"
    "Explains a model's RoPE: each pair's wavelength against the trained and the target\n"
    "context, which pairs the scaling scheme extrapolates, interpolates or blends and by how\n"
    "much, which pairs the target context drives past the angles seen in pretraining, the\n"
    "attention scaling and where it comes from, and warnings for suspicious configs.\n"
    "\n"
    "  --preset NAME   a built-in preset (rotary presets); default llama-3.1-8b\n"
    "  --config FILE   a Hugging Face config.json\n"
    "  --context N     target context in tokens (default: max_position_embeddings)\n"
    "  --seq-len N     sequence length for dynamic NTK / LongRoPE (default: the target context)\n"
    "  --layer-type T  for configs with per-layer-type RoPE\n";

namespace {

std::string describe_scheme(const RopeSpec& spec, const Frequencies& freqs) {
  const Scaling& s = spec.scaling;
  std::ostringstream out;
  out << to_string(s.type);
  auto num = [](double v) { return detail::shortest(v); };
  switch (s.type) {
    case ScalingType::Default:
      out << " (RoFormer: theta_i = base^(-2i/d))";
      break;
    case ScalingType::Linear:
      out << ": position interpolation, every frequency divided by " << num(*s.factor);
      break;
    case ScalingType::Dynamic:
      out << " NTK: factor " << num(*s.factor) << "; the base grows once sequences pass "
          << spec.max_position_embeddings << " tokens (here " << num(freqs.effective_theta_base) << " at seq_len "
          << freqs.seq_len << ")";
      break;
    case ScalingType::NtkAlpha:
      out << ": static NTK-aware base change, alpha " << num(s.ntk_alpha) << ", base " << num(spec.theta_base)
          << " -> " << num(freqs.effective_theta_base);
      break;
    case ScalingType::Yarn: {
      const YarnCorrectionRange range = yarn_correction_range(spec);
      out << ": factor " << num(freqs.effective_factor) << ", original context " << spec.original_context()
          << ", beta_fast " << num(s.beta_fast) << ", beta_slow " << num(s.beta_slow) << ", ramp over pairs ["
          << num(range.low) << ", " << num(range.high) << "]" << (s.truncate ? "" : " (truncate false)");
      break;
    }
    case ScalingType::LongRope:
      out << ": per-pair factor lists, " << to_string(freqs.longrope_factor_set) << " set in use (long when seq_len > "
          << spec.original_context() << "), factor " << num(freqs.effective_factor);
      break;
    case ScalingType::Llama3:
      out << ": factor " << num(*s.factor) << ", low_freq_factor " << num(s.low_freq_factor) << ", high_freq_factor "
          << num(s.high_freq_factor) << ", original context " << spec.original_context()
          << " (wavelengths below " << num(static_cast<double>(spec.original_context()) / s.high_freq_factor)
          << " tokens kept, above " << num(static_cast<double>(spec.original_context()) / s.low_freq_factor)
          << " divided by " << num(*s.factor) << ")";
      break;
    case ScalingType::Proportional:
      out << ": frequencies over the full head_dim " << spec.head_dim << ", partial_rotary_factor "
          << num(spec.partial_rotary_factor) << " of the pairs rotate, the rest have frequency 0";
      break;
  }
  return out.str();
}

std::string pair_dims(const RopeSpec& spec, size_t i) {
  const int64_t half = spec.rotary_dim / 2;
  const auto index = static_cast<int64_t>(i);
  return spec.style == Style::NeoX ? detail::concat("(", index, ",", index + half, ")")
                                   : detail::concat("(", 2 * index, ",", 2 * index + 1, ")");
}

}  // namespace

int run_explain(Args& args) {
  LoadedConfig loaded = load_config(args);
  const std::optional<int64_t> context_arg = args.integer("--context", 1, int64_t{1} << 40);
  const std::optional<int64_t> seq_len_arg = args.integer("--seq-len", 0, int64_t{1} << 40);
  const std::optional<std::string> layer_type = args.value("--layer-type");
  args.finish();

  const RopeSpec& spec = select_spec(loaded, layer_type);
  if (args.parse_only()) return 0;
  const int64_t declared = spec.max_position_embeddings;
  // The pretraining context: the scheme's original length where it has one; for linear
  // interpolation without one, max_position_embeddings / factor (the positions it maps onto);
  // otherwise max_position_embeddings (2048 when the config gives none).
  const ScalingType type = spec.scaling.type;
  int64_t trained = declared > 0 ? declared : 2048;
  if (type == ScalingType::Yarn || type == ScalingType::LongRope || type == ScalingType::Llama3 ||
      spec.scaling.original_max_position_embeddings > 0) {
    trained = spec.original_context();
  } else if (type == ScalingType::Linear && declared > 0) {
    trained = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(declared) / *spec.scaling.factor));
  }
  const int64_t target = context_arg.value_or(declared > 0 ? declared : trained);
  const int64_t seq_len = seq_len_arg.value_or(target);
  const Frequencies freqs = frequencies(spec, seq_len);
  const std::vector<PairCoverage> coverage = context_coverage(spec, freqs, trained, target);
  const auto num = [](double v) { return detail::shortest(v); };

  args.out() << "RoPE of " << spec.name << " (" << loaded.source << ")\n\n";
  args.out() << "  scheme      " << describe_scheme(spec, freqs) << "\n";
  args.out() << "  geometry    head_dim " << spec.head_dim << ", rotary_dim " << spec.rotary_dim;
  if (spec.rotary_dim < spec.head_dim) {
    args.out() << " (partial: dims " << spec.rotary_dim << ".." << spec.head_dim - 1 << " pass through)";
  }
  args.out() << ", " << spec.num_pairs() << " pairs, "
             << (spec.style == Style::NeoX ? "NeoX pairing (x[i], x[i+rotary_dim/2])"
                                          : "GPT-J pairing (x[2i], x[2i+1])")
            << "\n";
  if (spec.num_attention_heads > 0) {
    args.out() << "  heads       " << spec.num_attention_heads << " query, " << spec.num_key_value_heads
               << " key/value" << (spec.num_key_value_heads < spec.num_attention_heads ? " (GQA)" : "") << "\n";
  }
  args.out() << "  theta       " << num(spec.theta_base);
  if (freqs.effective_theta_base != spec.theta_base) args.out() << " (effective " << num(freqs.effective_theta_base) << ")";
  args.out() << "\n";
  if (spec.axes == PositionAxes::MRope) {
    args.out() << "  positions   M-RoPE, " << to_string(spec.mrope.assignment) << " sections (t, h, w) = ("
               << spec.mrope.pairs[0] << ", " << spec.mrope.pairs[1] << ", " << spec.mrope.pairs[2] << ") pairs\n";
  }
  args.out() << "  contexts    trained " << trained << " tokens"
             << (trained != declared && declared > 0 ? detail::concat(", declared ", declared) : std::string())
             << ", target " << target << (context_arg ? " (--context)" : "") << "\n";
  args.out() << "  attention   scaling " << num(freqs.attention_scaling) << " = " << freqs.attention_scaling_source
             << "; it multiplies cos and sin, so attention logits scale by its square ("
             << num(freqs.attention_scaling * freqs.attention_scaling) << ")\n\n";

  args.out() << "Per pair (wavelength = tokens per full turn; turns = full rotations within the context;\n"
               "factor = how much the scheme divided the pair's frequency; OOD = angles at the target\n"
               "context that pretraining never produced)\n";
  args.out() << format_line(
      "%5s  %-10s  %12s  %12s  %9s  %-18s  %11s  %11s  %s\n", "pair", "dims", "inv_freq", "wavelength", "factor",
      "regime", "turns@train", "turns@target", "OOD");
  int64_t counts[6] = {0, 0, 0, 0, 0, 0};
  int64_t ood = 0;
  double worst_overshoot = 1.0;
  int64_t never_full_turn = 0;
  for (size_t i = 0; i < freqs.inv_freq.size(); ++i) {
    const PairDiagnostics& pair = freqs.pairs[i];
    const PairCoverage& c = coverage[i];
    ++counts[static_cast<int>(pair.regime)];
    if (c.out_of_distribution) {
      ++ood;
      worst_overshoot = std::max(worst_overshoot, c.overshoot);
    }
    if (pair.regime != PairRegime::Unrotated && c.rotations_target < 1.0) ++never_full_turn;
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
    args.out() << format_line(
        "%5zu  %-10s  %12s  %12s  %9s  %-18s  %11s  %11s  %s\n", i, pair_dims(spec, i).c_str(),
        format_number(freqs.inv_freq[i], 5).c_str(), format_number(pair.wavelength_tokens, 5).c_str(),
        format_number(pair.factor_applied, 4).c_str(), regime.c_str(), format_number(c.rotations_trained, 4).c_str(),
        format_number(c.rotations_target, 4).c_str(), ood_text.c_str());
  }

  args.out() << "\nSummary\n";
  const char* regime_words[6] = {
      "unscaled (no scheme acts on them)", "extrapolated (original frequency kept)",
      "interpolated (frequency divided by the full factor)", "blended between the two",
      "rescaled by a per-pair factor", "unrotated (frequency 0, passed through)"};
  for (int r = 0; r < 6; ++r) {
    if (counts[r] > 0) args.out() << "  " << counts[r] << " pairs " << regime_words[r] << "\n";
  }
  if (ood > 0) {
    args.out() << "  " << ood << " pairs reach angles at " << target << " tokens that pretraining on " << trained
               << " tokens never produced (largest overshoot x" << format_number(worst_overshoot, 3) << ")\n";
  } else {
    args.out() << "  every pair stays within the angles pretraining produced, up to " << target << " tokens\n";
  }
  if (never_full_turn > 0) {
    args.out() << "  " << never_full_turn << " pairs do not complete one turn within " << target
               << " tokens: they encode position almost monotonically (low frequencies)\n";
  }

  // Warnings for suspicious configurations.
  std::vector<std::string> warnings;
  if (declared > 0 && target > declared) {
    warnings.push_back(detail::concat("the target context ", target, " exceeds max_position_embeddings ", declared,
                                      ": the model was not configured for it"));
  }
  if (spec.scaling.type == ScalingType::Default && ood > 0) {
    warnings.push_back("no context-extension scheme: the out-of-distribution pairs above extrapolate unchanged");
  }
  if (spec.scaling.type == ScalingType::Dynamic) {
    warnings.push_back(
        "dynamic NTK changes the frequencies with the sequence length: keys already in a KV cache keep the "
        "rotation they were given, so a cache that spans a change mixes bases (transformers#25104)");
  }
  if (spec.scaling.type == ScalingType::LongRope) {
    warnings.push_back(detail::concat(
        "LongRoPE switches from the short to the long factors once a sequence passes ", spec.original_context(),
        " tokens: keys cached before the switch were rotated with the short factors (transformers re-prefills)"));
  }
  if (spec.scaling.type == ScalingType::Yarn && spec.scaling.mscale && spec.scaling.mscale_all_dim &&
      *spec.scaling.mscale == *spec.scaling.mscale_all_dim && freqs.effective_factor > 1.0) {
    const double softmax_factor = yarn_mscale(freqs.effective_factor, *spec.scaling.mscale_all_dim);
    warnings.push_back(detail::concat(
        "mscale == mscale_all_dim makes the RoPE attention scaling exactly 1; DeepSeek-style models multiply the "
        "softmax scale by mscale(s, mscale_all_dim)^2 = ",
        softmax_factor * softmax_factor, " inside attention instead (not part of RoPE)"));
  }
  if (spec.style == Style::GPTJ) {
    warnings.push_back(
        "GPT-J (interleaved) pairing: weights converted between Meta and Hugging Face layouts are permuted "
        "per head; applying the other pairing gives plausible output for a few tokens, then garbage");
  }
  if (spec.axes == PositionAxes::MRope) {
    warnings.push_back(
        "M-RoPE: each token carries three positions (t, h, w); text-only tokens use the same value in all three");
  }
  if (spec.theta_base < 1000.0) {
    warnings.push_back(detail::concat("rope_theta ", spec.theta_base,
                                      " is unusually small: the slowest pair turns every ",
                                      format_number(freqs.pairs.back().wavelength_tokens), " tokens"));
  }
  for (const std::string& w : loaded.config.warnings) warnings.push_back("config: " + w);
  args.out() << "\nWarnings\n";
  if (warnings.empty()) args.out() << "  none\n";
  for (const std::string& w : warnings) args.out() << "  - " << w << "\n";
  return 0;
}

}  // namespace rotary::cli
