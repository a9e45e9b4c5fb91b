// src/analysis/per_pair.cpp: the analyses of a spec pair by pair (include/rotary/analysis.hpp,
// docs/analysis.md): each pair's rotations over a context (4), its coverage when the context
// grows past the trained one (5) and what the scaling scheme did to it (6), all read from the
// pair frequencies (frequencies(), docs/formulas.md). The checks and the rotations are in
// analysis.cpp.
#include "rotary/analysis.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "rotary/error.hpp"
#include "rotary/frequencies.hpp"

namespace rotary::analysis {
namespace {

constexpr double kTwoPi = 2.0 * std::numbers::pi;

}  // namespace

// ---- 4. rotations over a context ---------------------------------------------------------------------

std::vector<PairRotation> pair_rotations(const RopeSpec& spec, int64_t context) {
  if (context < 1) throw Error(detail::concat("pair_rotations: context must be >= 1 (got ", context, ")"));
  const Frequencies freqs = frequencies(spec, context);
  std::vector<PairRotation> out(freqs.inv_freq.size());
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].pair = static_cast<int64_t>(i);
    out[i].inv_freq = freqs.inv_freq[i];
    out[i].wavelength_tokens = freqs.pairs[i].wavelength_tokens;
    out[i].rotations = static_cast<double>(context - 1) * freqs.inv_freq[i] / kTwoPi;
    out[i].regime = freqs.pairs[i].regime;
  }
  return out;
}

// ---- 5. extrapolation --------------------------------------------------------------------------------

Extrapolation extrapolation(const RopeSpec& spec, int64_t trained_context, int64_t target_context) {
  const Frequencies freqs = frequencies(spec, target_context > 0 ? target_context : 0);
  Extrapolation out;
  out.pairs = context_coverage(spec, freqs, trained_context, target_context);  // checks both contexts
  out.trained_context = trained_context;
  out.target_context = target_context;
  out.num_pairs = static_cast<int64_t>(out.pairs.size());
  for (size_t i = 0; i < out.pairs.size(); ++i) {
    const PairCoverage& c = out.pairs[i];
    if (c.rotations_trained >= 1.0) ++out.num_full_turn_in_training;
    if (freqs.pairs[i].regime != PairRegime::Unrotated && c.rotations_target < 1.0) ++out.num_below_one_turn_at_target;
    if (!c.out_of_distribution) continue;
    ++out.num_out_of_distribution;
    if (c.overshoot > out.largest_overshoot || out.largest_overshoot_pair < 0) {
      out.largest_overshoot = std::max(out.largest_overshoot, c.overshoot);
      out.largest_overshoot_pair = static_cast<int64_t>(i);
    }
  }
  return out;
}

// ---- 6. scheme scaling -------------------------------------------------------------------------------

SchemeScaling scheme_scaling(const RopeSpec& spec, int64_t seq_len) {
  const Frequencies freqs = frequencies(spec, seq_len);
  const std::vector<double> reference = default_inv_freq(spec);
  SchemeScaling out;
  out.type = spec.scaling.type;
  out.seq_len = freqs.seq_len;
  out.effective_factor = freqs.effective_factor;
  out.attention_scaling = freqs.attention_scaling;
  out.attention_scaling_source = freqs.attention_scaling_source;
  out.longrope_factor_set = freqs.longrope_factor_set;
  out.pairs.resize(freqs.inv_freq.size());
  for (size_t i = 0; i < out.pairs.size(); ++i) {
    PairScaling& p = out.pairs[i];
    p.pair = static_cast<int64_t>(i);
    p.default_inv_freq = reference[i];
    p.inv_freq = freqs.inv_freq[i];
    p.factor_applied = freqs.pairs[i].factor_applied;
    p.default_wavelength_tokens =
        reference[i] > 0.0 ? kTwoPi / reference[i] : std::numeric_limits<double>::infinity();
    p.wavelength_tokens = freqs.pairs[i].wavelength_tokens;
    p.regime = freqs.pairs[i].regime;
    p.blend = freqs.pairs[i].blend;
  }
  return out;
}

}  // namespace rotary::analysis
