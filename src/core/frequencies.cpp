// src/core/frequencies.cpp: inv_freq and attention scaling, through each scheme's row of
// src/core/scaling/registry.cpp (each scheme's formulas live in its file there).
//
// Sources (each formula is restated next to its code and in docs/formulas.md):
//   RoFormer (Su et al. 2021, arXiv:2104.09864): theta_i = base^(-2i/d) (1-based there: -2(i-1)/d).
//   Hugging Face transformers, src/transformers/modeling_rope_utils.py: _compute_*_parameters
//   (linear, dynamic, yarn, longrope, llama3, proportional) and dynamic_rope_update.
//   YaRN (Peng et al. 2023, arXiv:2309.00071), LongRoPE (Ding et al. 2024, arXiv:2402.13753),
//   NTK-aware scaling (bloc97, 2023; vLLM DynamicNTKAlphaRotaryEmbedding for alpha).
//
// Precision: every value is formed in detail::Extended (binary128 with GCC on x86-64, see
// extended.hpp) from the spec's double parameters and rounded once to double. inv_freq is
// therefore the correctly rounded exact value of the formula except within ~1e-33 of a rounding
// boundary (docs/numerics.md). Hugging Face computes the same formulas in float32 (pow,
// divisions and the YaRN ramp), which is 0-3 float32 ulps away.
#include "rotary/frequencies.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/extended.hpp"
#include "rotary/error.hpp"
#include "core/scaling/registry.hpp"
#include "core/scaling/scheme_support.hpp"

namespace rotary {

namespace {

using scaling::Real;

// The unscaled frequencies in extended precision. Proportional divides the exponent by head_dim
// and zeroes the pairs past int(partial_rotary_factor * head_dim // 2) (HF
// _compute_proportional_rope_parameters); Vision2D restarts the index for the column half
// (Qwen2-VL VisionRotaryEmbedding on head_dim/2, one half per axis).
std::vector<Real> default_theta_all(const RopeSpec& spec, Real base) {
  const int64_t num_pairs = spec.rotary_dim / 2;
  std::vector<Real> theta(static_cast<size_t>(num_pairs));
  if (scaling::scheme(spec.scaling.type).rotates_whole_head) {
    const auto rotated = static_cast<int64_t>(std::floor(spec.partial_rotary_factor * static_cast<double>(spec.head_dim) / 2.0));
    for (int64_t i = 0; i < num_pairs; ++i) {
      theta[i] = i < rotated ? scaling::default_theta(base, i, spec.head_dim) : Real(0);
    }
  } else if (spec.axes == PositionAxes::Vision2D) {
    const int64_t per_axis = num_pairs / 2;
    for (int64_t i = 0; i < num_pairs; ++i) theta[i] = scaling::default_theta(base, i % per_axis, spec.rotary_dim / 2);
  } else {
    for (int64_t i = 0; i < num_pairs; ++i) theta[i] = scaling::default_theta(base, i, spec.rotary_dim);
  }
  return theta;
}

}  // namespace

std::vector<double> default_inv_freq(const RopeSpec& spec) {
  validate(spec);
  const std::vector<Real> theta = default_theta_all(spec, spec.theta_base);
  return std::vector<double>(theta.begin(), theta.end());
}

namespace {

// The body of frequencies(); `theta_out` receives inv_freq before the rounding to double. The
// scheme's own step is its row's `frequencies` (src/core/scaling/).
Frequencies compute_frequencies(const RopeSpec& spec, int64_t seq_len, std::vector<Real>* theta_out) {
  validate(spec);
  if (seq_len < 0) {
    throw Error(detail::concat("frequencies: seq_len must be >= 0 (got ", seq_len, ")"));
  }
  scaling::FrequencyWork work;
  work.seq_len = seq_len;
  work.out.seq_len = seq_len;
  work.out.effective_theta_base = spec.theta_base;
  work.out.effective_factor = spec.resolved_factor();
  work.out.attention_scaling = 1.0;
  work.out.attention_scaling_source =
      "1 (" + std::string(to_string(spec.scaling.type)) + " does not scale attention)";
  work.reference = default_theta_all(spec, spec.theta_base);
  work.theta = work.reference;
  scaling::scheme(spec.scaling.type).frequencies(spec, work);
  if (theta_out != nullptr) *theta_out = std::move(work.theta);
  return std::move(work.out);
}

}  // namespace

Frequencies frequencies(const RopeSpec& spec, int64_t seq_len) { return compute_frequencies(spec, seq_len, nullptr); }

int64_t frequency_seq_len(const RopeSpec& spec, int64_t seq_len) {
  if (seq_len < 0) throw Error(detail::concat("frequency_seq_len: seq_len must be >= 0 (got ", seq_len, ")"));
  return scaling::scheme(spec.scaling.type).frequency_seq_len(spec, seq_len);
}

bool sequence_dependent(const RopeSpec& spec) { return scaling::scheme(spec.scaling.type).sequence_dependent; }

std::vector<detail::Extended> detail::inv_freq_extended(const RopeSpec& spec, int64_t seq_len) {
  std::vector<Real> theta;
  compute_frequencies(spec, seq_len, &theta);
  return theta;
}

std::vector<PairCoverage> context_coverage(const RopeSpec& spec, const Frequencies& freqs,
                                           int64_t trained_context, int64_t target_context) {
  if (trained_context <= 0) {
    throw Error(detail::concat("context_coverage: trained_context must be > 0 (got ", trained_context, ")"));
  }
  if (target_context <= 0) {
    throw Error(detail::concat("context_coverage: target_context must be > 0 (got ", target_context, ")"));
  }
  const std::vector<double> reference = default_inv_freq(spec);
  if (reference.size() != freqs.inv_freq.size()) {
    throw Error(detail::concat("context_coverage: freqs has ", freqs.inv_freq.size(),
                               " pairs but the spec has ", reference.size()));
  }
  std::vector<PairCoverage> coverage(reference.size());
  const double two_pi = 2.0 * std::numbers::pi;
  for (size_t i = 0; i < reference.size(); ++i) {
    PairCoverage& c = coverage[i];
    // The trained range ends one position past the last trained one: interpolation maps the
    // target's positions onto fractional positions in [0, trained_context), which are not new.
    c.max_angle_trained_rad = static_cast<double>(trained_context) * reference[i];
    c.max_angle_target_rad = static_cast<double>(target_context - 1) * freqs.inv_freq[i];
    c.rotations_trained = c.max_angle_trained_rad / two_pi;
    c.rotations_target = c.max_angle_target_rad / two_pi;
    // A pair whose trained angles already covered a full turn has seen every angle; otherwise
    // any target angle beyond the trained maximum is new to the model.
    c.out_of_distribution = c.max_angle_trained_rad < two_pi &&
                            c.max_angle_target_rad > c.max_angle_trained_rad * (1.0 + 1e-12);
    c.overshoot = c.out_of_distribution && c.max_angle_trained_rad > 0.0
                      ? c.max_angle_target_rad / c.max_angle_trained_rad
                      : 1.0;
  }
  return coverage;
}

std::string_view to_string(LongRopeFactorSet set) {
  switch (set) {
    case LongRopeFactorSet::None: return "";
    case LongRopeFactorSet::Short: return "short";
    case LongRopeFactorSet::Long: return "long";
  }
  return "?";
}

std::string_view to_string(PairRegime regime) {
  switch (regime) {
    case PairRegime::Unscaled: return "unscaled";
    case PairRegime::Extrapolated: return "extrapolated";
    case PairRegime::Interpolated: return "interpolated";
    case PairRegime::Blended: return "blended";
    case PairRegime::Rescaled: return "rescaled";
    case PairRegime::Unrotated: return "unrotated";
  }
  return "?";
}

}  // namespace rotary
