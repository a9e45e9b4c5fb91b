// include/rotary/frequencies.hpp: inv_freq and attention scaling for one RopeSpec, in float64.
//
// Every formula is in src/core/frequencies.cpp or its scheme's file in src/core/scaling/, next
// to its source, and in docs/formulas.md with a worked example. Values are evaluated in extended
// precision (x86-64 long double) and rounded once to double, so inv_freq is within 1 double ulp
// of the exact value of the formula applied to the config's numbers (tested against tests/golden
// exact_f64).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rotary/spec.hpp"

namespace rotary {

// What the scheme did to one pair, relative to the default frequency base^(-2i/d).
enum class PairRegime {
  Unscaled,      // no scaling scheme, or the scheme is inactive at this seq_len (dynamic below max)
  Extrapolated,  // the scheme keeps the original frequency (YaRN/Llama 3 high-frequency pairs)
  Interpolated,  // the scheme divides the frequency by the full factor
  Blended,       // in between; `blend` says how far (YaRN ramp, Llama 3 smooth band, NTK)
  Rescaled,      // a per-pair factor from a list (LongRoPE)
  Unrotated,     // zero frequency (Proportional's pairs past partial_rotary_factor)
};

// Which of LongRoPE's two factor lists is in use (None for every other scheme).
enum class LongRopeFactorSet { None, Short, Long };
std::string_view to_string(LongRopeFactorSet set);  // "", "short", "long"

struct PairDiagnostics {
  double wavelength_tokens = 0.0;  // 2*pi / inv_freq: tokens per full turn (+inf if unrotated)
  double factor_applied = 1.0;     // default inv_freq / this inv_freq (0 if unrotated)
  PairRegime regime = PairRegime::Unscaled;
  // Interpolated share in [0, 1]: 0 = extrapolated, 1 = interpolated. For NTK-style schemes it
  // is log(factor_applied) / log(factor), the share of the factor this pair received.
  double blend = 0.0;
};

struct Frequencies {
  std::vector<double> inv_freq;     // [rotary_dim / 2], radians per token, in pair order
  double attention_scaling = 1.0;   // multiplies cos and sin (YaRN mscale, LongRoPE)
  std::vector<PairDiagnostics> pairs;  // [rotary_dim / 2]
  double effective_theta_base = 0.0;   // the base actually used (dynamic / ntk_alpha change it)
  double effective_factor = 1.0;       // the factor actually used (resolved from Lmax/L0 if absent)
  int64_t seq_len = 0;                 // the seq_len the values are for (0 = construction time)
  // How attention_scaling was obtained, for people: "0.1*ln(4)+1 = 1.1386 (YaRN mscale)".
  std::string attention_scaling_source;
  LongRopeFactorSet longrope_factor_set = LongRopeFactorSet::None;
};

// seq_len is read only by the sequence-dependent schemes, with Hugging Face's semantics:
//   Dynamic:  L = max(seq_len, max_position_embeddings); 0 means construction time (L = Lmax).
//   LongRope: the long factors when seq_len > original context, else the short ones (0 = short).
// Every other scheme ignores it. Throws rotary::ConfigError for an invalid spec (validate()).
Frequencies frequencies(const RopeSpec& spec, int64_t seq_len = 0);

// The seq_len a call's frequencies are for, by Hugging Face's rule (dynamic_rope_update): the
// largest position + 1 of the call, unless the caller names one. Every API of rotary that takes
// positions and a spec follows it (docs/python-arguments.md, "The seq_len rule").
//
// frequency_seq_len() maps a seq_len to the smallest seq_len with the same frequencies, so that
// frequencies(spec, a) and frequencies(spec, b) are identical exactly when
// frequency_seq_len(spec, a) == frequency_seq_len(spec, b):
//   Dynamic:   0 for seq_len <= max_position_embeddings (the original frequencies), else seq_len;
//   LongRope:  0 for seq_len <= original context (short factors), else original context + 1;
//   every other scheme: 0.
// sequence_dependent(spec) is true when some seq_len maps to a value other than 0.
int64_t frequency_seq_len(const RopeSpec& spec, int64_t seq_len);
bool sequence_dependent(const RopeSpec& spec);

// The unscaled frequencies base^(-2i/d) of the same geometry (the reference the diagnostics
// compare against). For Proportional, d is head_dim and unrotated pairs are 0; for Vision2D the
// index restarts for the column half.
std::vector<double> default_inv_freq(const RopeSpec& spec);

// YaRN's correction range (HF find_correction_range): the pair indices where the ramp from
// extrapolation (below low) to interpolation (above high) runs, after floor/ceil when truncate
// and clamping to [0, rotary_dim - 1].
struct YarnCorrectionRange {
  double low = 0.0;
  double high = 0.0;
};
YarnCorrectionRange yarn_correction_range(const RopeSpec& spec);

// YaRN's mscale(s, m) = 0.1 * m * ln(s) + 1 for s > 1, else 1.
double yarn_mscale(double factor, double mscale = 1.0);

// Context coverage of one pair: compares the angles a target context reaches with the angles
// pretraining showed (positions [0, trained_context) at the unscaled frequency).
struct PairCoverage {
  double max_angle_trained_rad = 0.0;  // trained_context * default inv_freq (positions [0, L0))
  double max_angle_target_rad = 0.0;   // (target_context - 1) * inv_freq
  double rotations_trained = 0.0;      // max_angle_trained_rad / 2 pi
  double rotations_target = 0.0;
  // True when the target reaches angles pretraining never produced: the trained range did not
  // complete a full turn and the target goes past it.
  bool out_of_distribution = false;
  double overshoot = 1.0;  // max_angle_target / max_angle_trained when out_of_distribution
};
std::vector<PairCoverage> context_coverage(const RopeSpec& spec, const Frequencies& freqs,
                                           int64_t trained_context, int64_t target_context);

std::string_view to_string(PairRegime regime);  // "unscaled", "extrapolated", ...

}  // namespace rotary
