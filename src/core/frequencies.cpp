// src/core/frequencies.cpp: inv_freq and attention scaling for every scheme.
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

#include "extended.hpp"
#include "rotary/error.hpp"

namespace rotary {

namespace {

using Real = detail::Extended;
using detail::ext_ceil;
using detail::ext_floor;
using detail::ext_log;
using detail::ext_pow;
using detail::ext_sqrt;
const Real kTwoPi = detail::ext_two_pi();

// base^(-2i/d): RoFormer's frequencies, HF `1 / base ** (arange(0, d, 2) / d)`.
Real default_theta(Real base, int64_t pair, int64_t dim) {
  return ext_pow(base, -static_cast<Real>(2 * pair) / static_cast<Real>(dim));
}

// The unscaled frequencies in long double. Proportional divides the exponent by head_dim and
// zeroes the pairs past int(partial_rotary_factor * head_dim // 2) (HF
// _compute_proportional_rope_parameters); Vision2D restarts the index for the column half
// (Qwen2-VL VisionRotaryEmbedding on head_dim/2, one half per axis).
std::vector<Real> default_theta_all(const RopeSpec& spec, Real base) {
  const int64_t num_pairs = spec.rotary_dim / 2;
  std::vector<Real> theta(static_cast<size_t>(num_pairs));
  if (spec.scaling.type == ScalingType::Proportional) {
    const auto rotated = static_cast<int64_t>(std::floor(spec.partial_rotary_factor * static_cast<double>(spec.head_dim) / 2.0));
    for (int64_t i = 0; i < num_pairs; ++i) {
      theta[i] = i < rotated ? default_theta(base, i, spec.head_dim) : Real(0);
    }
  } else if (spec.axes == PositionAxes::Vision2D) {
    const int64_t per_axis = num_pairs / 2;
    for (int64_t i = 0; i < num_pairs; ++i) theta[i] = default_theta(base, i % per_axis, spec.rotary_dim / 2);
  } else {
    for (int64_t i = 0; i < num_pairs; ++i) theta[i] = default_theta(base, i, spec.rotary_dim);
  }
  return theta;
}

// Rotary proportional pairs count, for classification.
bool is_unrotated(Real theta) { return theta == Real(0); }

// Fills the diagnostics from the final and the default frequencies.
void fill_diagnostics(Frequencies& out, const std::vector<Real>& theta, const std::vector<Real>& reference) {
  out.inv_freq.resize(theta.size());
  out.pairs.resize(theta.size());
  for (size_t i = 0; i < theta.size(); ++i) {
    out.inv_freq[i] = static_cast<double>(theta[i]);
    PairDiagnostics& pair = out.pairs[i];
    if (is_unrotated(theta[i])) {
      pair.wavelength_tokens = INFINITY;
      pair.factor_applied = 0.0;
      pair.regime = PairRegime::Unrotated;
      continue;
    }
    pair.wavelength_tokens = static_cast<double>(kTwoPi / theta[i]);
    pair.factor_applied = static_cast<double>(reference[i] / theta[i]);
  }
}

// Classifies NTK-style pairs: factor_applied grows from 1 (pair 0) to the full factor.
void classify_by_factor(Frequencies& out, double full_factor) {
  for (PairDiagnostics& pair : out.pairs) {
    if (pair.regime == PairRegime::Unrotated) continue;
    if (full_factor <= 1.0) {
      pair.regime = PairRegime::Unscaled;
      pair.blend = 0.0;
      continue;
    }
    const double blend = std::clamp(std::log(pair.factor_applied) / std::log(full_factor), 0.0, 1.0);
    pair.blend = blend;
    // 1e-9: the factors come out of pow() in long double; anything this close is the endpoint.
    if (blend < 1e-9) {
      pair.regime = PairRegime::Extrapolated;
      pair.blend = 0.0;
    } else if (blend > 1.0 - 1e-9) {
      pair.regime = PairRegime::Interpolated;
      pair.blend = 1.0;
    } else {
      pair.regime = PairRegime::Blended;
    }
  }
}

std::string fmt(double value) { return detail::shortest(value); }

}  // namespace

double yarn_mscale(double factor, double mscale) {
  // HF _compute_yarn_parameters.get_mscale; the YaRN paper's attention temperature,
  // sqrt(1/t) = 0.1 ln s + 1.
  if (factor <= 1.0) return 1.0;
  return static_cast<double>(Real(1) / 10 * mscale * ext_log(static_cast<Real>(factor)) + 1);
}

namespace {

// The correction range in long double: the ramp divides by (high - low), and with truncate =
// false a double-rounded range would cost up to ~3 ulps in the blended frequencies (measured on
// gpt-oss-20b, pair 17), because the blend 1 - ramp (1 - 1/s) amplifies the ramp's error.
std::pair<Real, Real> correction_range(const RopeSpec& spec) {
  // HF find_correction_dim: d * ln(L0 / (2 pi r)) / (2 ln base), with L0 the ORIGINAL context
  // (transformers <= 4.44 passed max_position_embeddings here, in modeling_rope_utils.py's
  // _compute_yarn_parameters; docs/formulas.md, YaRN, "Other engines").
  const Real dim = static_cast<Real>(spec.rotary_dim);
  const Real base = spec.theta_base;
  const Real original = static_cast<Real>(spec.original_context());
  auto correction_dim = [&](double rotations) {
    return dim * ext_log(original / (static_cast<Real>(rotations) * kTwoPi)) / (2 * ext_log(base));
  };
  Real low = correction_dim(spec.scaling.beta_fast);
  Real high = correction_dim(spec.scaling.beta_slow);
  if (spec.scaling.truncate) {
    low = ext_floor(low);
    high = ext_ceil(high);
  }
  return {std::max(low, Real(0)), std::min(high, dim - 1)};
}

}  // namespace

YarnCorrectionRange yarn_correction_range(const RopeSpec& spec) {
  const auto [low, high] = correction_range(spec);
  return {static_cast<double>(low), static_cast<double>(high)};
}

std::vector<double> default_inv_freq(const RopeSpec& spec) {
  validate(spec);
  const std::vector<Real> theta = default_theta_all(spec, spec.theta_base);
  return std::vector<double>(theta.begin(), theta.end());
}

namespace {

// The body of frequencies(); `theta_out` receives inv_freq before the rounding to double.
Frequencies compute_frequencies(const RopeSpec& spec, int64_t seq_len, std::vector<Real>* theta_out) {
  validate(spec);
  if (seq_len < 0) {
    throw Error(detail::concat("frequencies: seq_len must be >= 0 (got ", seq_len, ")"));
  }
  const Scaling& s = spec.scaling;
  const Real base = spec.theta_base;
  const int64_t dim = spec.rotary_dim;
  const int64_t num_pairs = dim / 2;

  Frequencies out;
  out.seq_len = seq_len;
  out.effective_theta_base = spec.theta_base;
  out.effective_factor = spec.resolved_factor();
  out.attention_scaling = 1.0;
  out.attention_scaling_source = "1 (" + std::string(to_string(s.type)) + " does not scale attention)";

  const std::vector<Real> reference = default_theta_all(spec, base);
  std::vector<Real> theta = reference;

  switch (s.type) {
    case ScalingType::Default:
      fill_diagnostics(out, theta, reference);
      break;

    case ScalingType::Linear: {
      // Position interpolation (Chen et al. 2023; HF _compute_linear_scaling_rope_parameters):
      // theta_i / s, the same as feeding positions p / s.
      const Real factor = *s.factor;
      for (Real& t : theta) t /= factor;
      fill_diagnostics(out, theta, reference);
      classify_by_factor(out, *s.factor);
      break;
    }

    case ScalingType::Proportional: {
      // HF _compute_proportional_rope_parameters: inv_freq /= factor (default 1).
      const Real factor = out.effective_factor;
      for (Real& t : theta) t /= factor;
      fill_diagnostics(out, theta, reference);
      classify_by_factor(out, out.effective_factor);
      break;
    }

    case ScalingType::Dynamic: {
      // HF _compute_dynamic_ntk_parameters:
      //   L = max(seq_len, Lmax);  base' = base * ((s * L / Lmax) - (s - 1)) ^ (d / (d - 2)).
      // At L = Lmax the bracket is exactly 1, so short sequences keep the original frequencies
      // (HF dynamic_rope_update restores them when a sequence shrinks below Lmax). Evaluated as
      // 1 + s (L - Lmax) / Lmax, the same value without the cancellation of s L / Lmax - (s - 1):
      // with s = 2.8e44 that difference was 0 even in binary128, and every inv_freq inf (found by
      // the one-hour hf_config fuzz run; HF's double arithmetic does the same).
      const Real lmax = static_cast<Real>(spec.max_position_embeddings);
      const Real length = std::max(static_cast<Real>(seq_len), lmax);
      const Real factor = *s.factor;
      const Real growth = 1 + factor * (length - lmax) / lmax;
      const Real new_base = base * ext_pow(growth, static_cast<Real>(dim) / static_cast<Real>(dim - 2));
      for (int64_t i = 0; i < num_pairs; ++i) theta[i] = default_theta(new_base, i, dim);
      out.effective_theta_base = static_cast<double>(new_base);
      out.effective_factor = static_cast<double>(growth);
      fill_diagnostics(out, theta, reference);
      classify_by_factor(out, out.effective_factor);
      break;
    }

    case ScalingType::NtkAlpha: {
      // Static NTK-aware scaling (bloc97; vLLM DynamicNTKAlphaRotaryEmbedding, Hunyuan):
      //   base' = base * alpha ^ (d / (d - 2)). The last pair's frequency is divided by alpha.
      const Real alpha = s.ntk_alpha;
      const Real new_base = base * ext_pow(alpha, static_cast<Real>(dim) / static_cast<Real>(dim - 2));
      for (int64_t i = 0; i < num_pairs; ++i) theta[i] = default_theta(new_base, i, dim);
      out.effective_theta_base = static_cast<double>(new_base);
      out.effective_factor = s.ntk_alpha;
      fill_diagnostics(out, theta, reference);
      classify_by_factor(out, s.ntk_alpha);
      break;
    }

    case ScalingType::Yarn: {
      // HF _compute_yarn_parameters; the YaRN paper's "NTK-by-parts" ramp and its temperature (mscale).
      const Real factor = out.effective_factor;
      auto [low, high] = correction_range(spec);
      if (low == high) high += Real(1) / 1000;  // HF linear_ramp_factor: "Prevent singularity"
      std::vector<double> ramps(static_cast<size_t>(num_pairs));
      for (int64_t i = 0; i < num_pairs; ++i) {
        // ramp 0: extrapolate (keep theta_i); ramp 1: interpolate (theta_i / s).
        const Real ramp = std::clamp((static_cast<Real>(i) - low) / (high - low), Real(0), Real(1));
        const Real extrapolation_share = 1 - ramp;
        theta[i] = (reference[i] / factor) * (1 - extrapolation_share) + reference[i] * extrapolation_share;
        ramps[i] = static_cast<double>(ramp);
      }
      fill_diagnostics(out, theta, reference);
      for (int64_t i = 0; i < num_pairs; ++i) {
        PairDiagnostics& pair = out.pairs[i];
        pair.blend = ramps[i];
        pair.regime = factor <= 1             ? PairRegime::Unscaled
                      : ramps[i] == 0.0      ? PairRegime::Extrapolated
                      : ramps[i] == 1.0      ? PairRegime::Interpolated
                                             : PairRegime::Blended;
      }
      // attention_factor: explicit value; else mscale(s, mscale) / mscale(s, mscale_all_dim) when
      // both are given and non-zero (HF tests truthiness); else mscale(s, 1) = 0.1 ln s + 1.
      const double f = out.effective_factor;
      if (s.attention_factor) {
        out.attention_scaling = *s.attention_factor;
        out.attention_scaling_source = fmt(*s.attention_factor) + " (attention_factor given in the config)";
      } else if (s.mscale && s.mscale_all_dim && *s.mscale != 0.0 && *s.mscale_all_dim != 0.0) {
        out.attention_scaling = static_cast<double>(static_cast<Real>(yarn_mscale(f, *s.mscale)) /
                                                    static_cast<Real>(yarn_mscale(f, *s.mscale_all_dim)));
        out.attention_scaling_source =
            "(0.1*" + fmt(*s.mscale) + "*ln(" + fmt(f) + ")+1) / (0.1*" + fmt(*s.mscale_all_dim) + "*ln(" +
            fmt(f) + ")+1) = " + fmt(out.attention_scaling) +
            " (YaRN mscale / mscale_all_dim; DeepSeek also multiplies the softmax scale by mscale(s, "
            "mscale_all_dim)^2, which is not part of RoPE)";
      } else {
        out.attention_scaling = yarn_mscale(f, 1.0);
        out.attention_scaling_source =
            f <= 1.0 ? std::string("1 (factor <= 1)")
                     : "0.1*ln(" + fmt(f) + ")+1 = " + fmt(out.attention_scaling) + " (YaRN mscale: 0.1 ln s + 1)";
      }
      break;
    }

    case ScalingType::LongRope: {
      // HF _compute_longrope_parameters: theta_i = 1 / (f_i * base^(2i/d)), f = long_factor when
      // seq_len > L0, else short_factor. attention: given, else sqrt(1 + ln s / ln L0) for s > 1.
      const int64_t original = spec.original_context();
      const bool use_long = seq_len > original;
      const std::vector<double>& factors = use_long ? s.long_factor : s.short_factor;
      out.longrope_factor_set = use_long ? LongRopeFactorSet::Long : LongRopeFactorSet::Short;
      for (int64_t i = 0; i < num_pairs; ++i) theta[i] = reference[i] / static_cast<Real>(factors[i]);
      fill_diagnostics(out, theta, reference);
      const double f = out.effective_factor;
      for (int64_t i = 0; i < num_pairs; ++i) {
        PairDiagnostics& pair = out.pairs[i];
        pair.regime = PairRegime::Rescaled;
        pair.blend = f > 1.0 ? std::clamp(std::log(factors[i]) / std::log(f), 0.0, 1.0) : 0.0;
      }
      if (s.attention_factor) {
        out.attention_scaling = *s.attention_factor;
        out.attention_scaling_source = fmt(*s.attention_factor) + " (attention_factor given in the config)";
      } else if (f <= 1.0) {
        out.attention_scaling = 1.0;
        out.attention_scaling_source = "1 (factor <= 1)";
      } else {
        out.attention_scaling = static_cast<double>(
            ext_sqrt(1 + ext_log(static_cast<Real>(f)) / ext_log(static_cast<Real>(original))));
        out.attention_scaling_source = "sqrt(1 + ln(" + fmt(f) + ")/ln(" + std::to_string(original) +
                                       ")) = " + fmt(out.attention_scaling) + " (LongRoPE, factor = " +
                                       (s.factor ? std::string("config factor") : std::string("max/original")) + ")";
      }
      break;
    }

    case ScalingType::Llama3: {
      // HF _compute_llama3_parameters (Meta's apply_scaling in llama-models):
      //   wavelength < L0/high_freq_factor: keep; > L0/low_freq_factor: divide by s;
      //   between: sigma = (L0/wavelength - low)/(high - low), theta' = (1-sigma) theta/s + sigma theta.
      const Real original = static_cast<Real>(spec.original_context());
      const Real factor = *s.factor;
      const Real low_ff = s.low_freq_factor;
      const Real high_ff = s.high_freq_factor;
      const Real low_freq_wavelength = original / low_ff;
      const Real high_freq_wavelength = original / high_ff;
      std::vector<PairRegime> regimes(static_cast<size_t>(num_pairs));
      std::vector<double> blends(static_cast<size_t>(num_pairs));
      for (int64_t i = 0; i < num_pairs; ++i) {
        const Real wavelength = kTwoPi / reference[i];
        if (wavelength < high_freq_wavelength) {
          regimes[i] = PairRegime::Extrapolated;
          blends[i] = 0.0;
        } else if (wavelength > low_freq_wavelength) {
          theta[i] = reference[i] / factor;
          regimes[i] = PairRegime::Interpolated;
          blends[i] = 1.0;
        } else {
          const Real sigma = (original / wavelength - low_ff) / (high_ff - low_ff);
          theta[i] = (1 - sigma) * reference[i] / factor + sigma * reference[i];
          regimes[i] = PairRegime::Blended;
          blends[i] = static_cast<double>(1 - sigma);
        }
      }
      fill_diagnostics(out, theta, reference);
      for (int64_t i = 0; i < num_pairs; ++i) {
        out.pairs[i].regime = factor == 1 ? PairRegime::Unscaled : regimes[i];
        out.pairs[i].blend = blends[i];
      }
      break;
    }
  }
  if (theta_out != nullptr) *theta_out = std::move(theta);
  return out;
}

}  // namespace

Frequencies frequencies(const RopeSpec& spec, int64_t seq_len) { return compute_frequencies(spec, seq_len, nullptr); }

int64_t frequency_seq_len(const RopeSpec& spec, int64_t seq_len) {
  if (seq_len < 0) throw Error(detail::concat("frequency_seq_len: seq_len must be >= 0 (got ", seq_len, ")"));
  switch (spec.scaling.type) {
    case ScalingType::Dynamic:  // L = max(seq_len, Lmax): the bracket is 1 up to Lmax (see above)
      return seq_len <= spec.max_position_embeddings ? 0 : seq_len;
    case ScalingType::LongRope:  // the long factors past the original context, the short below
      return seq_len > spec.original_context() ? spec.original_context() + 1 : 0;
    default:
      return 0;
  }
}

bool sequence_dependent(const RopeSpec& spec) {
  return spec.scaling.type == ScalingType::Dynamic || spec.scaling.type == ScalingType::LongRope;
}

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
