// src/analysis/checks.cpp: run_checks (9 in include/rotary/analysis.hpp, docs/analysis.md):
// every property check of a spec at one context, each with its measured value, its threshold
// and a sentence saying what was measured, as `rotary check` prints them.
#include "rotary/analysis.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "rotary/apply.hpp"
#include "rotary/error.hpp"
#include "analysis/rotation_only.hpp"

namespace rotary::analysis {
namespace {

using detail::rotation_only;

std::string describe_number(double value) { return detail::shortest(value); }

// 4 significant digits, for explanations.
std::string format_short(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.4g", value);
  return buffer;
}

}  // namespace

// ---- 9. every check ----------------------------------------------------------------------------------

bool CheckReport::all_passed() const {
  return std::all_of(checks.begin(), checks.end(), [](const CheckResult& c) { return c.passed; });
}

double check_margin(const CheckResult& check) {
  if (check.bound == Bound::AtMost) {
    return check.measured > 0.0 ? check.threshold / check.measured : std::numeric_limits<double>::infinity();
  }
  return check.threshold > 0.0 ? check.measured / check.threshold : std::numeric_limits<double>::infinity();
}

CheckReport run_checks(const RopeSpec& spec, int64_t context) {
  validate(spec);
  CheckReport report;
  report.spec_name = spec.name;
  report.trained_context = default_trained_context(spec);
  report.context = context > 0 ? context : default_target_context(spec);
  if (report.context < 1 || report.context > kMaxPosition) {
    throw Error(detail::concat("run_checks: context must be in [1, ", kMaxPosition, "] (got ", report.context, ")"));
  }
  report.decay_distance = std::max(report.context, kDecayMinDistance);
  const int64_t seq_len = report.context;
  const RopeSpec checked = rotation_only(spec);
  const std::string xpos_note =
      spec.xpos ? " xPos (a deliberate scale of q by zeta^e and k by zeta^-e) is left out: the check is of the "
                  "rotation."
                : "";

  NormOptions norm_options;
  norm_options.seq_len = seq_len;
  const NormPreservation norm = norm_preservation(checked, norm_options);
  report.checks.push_back(
      {"norm_preserved_f64", norm.max_deviation_f64 <= norm.threshold_f64, norm.max_deviation_f64, norm.threshold_f64,
       Bound::AtMost,
       detail::concat("max | |R_p q| / (m |q|) - 1 | over ", norm.num_samples,
                      " random q at positions log-uniform in [0, 2^31 - 1] (worst at p = ", norm.worst_position_f64,
                      "), float64 rotation of the exact table rows; m = attention scaling. Rounding alone gives "
                      "<= ~1e-13.",
                      xpos_note)});
  report.checks.push_back(
      {"norm_preserved_f32_kernel", norm.max_deviation_f32 <= norm.threshold_f32, norm.max_deviation_f32,
       norm.threshold_f32, Bound::AtMost,
       detail::concat("the same ratio for rotary::apply (float32 SIMD kernel, target ", current_cpu_target(),
                      ") on ", norm.num_samples, " float32 heads in ", to_string(spec.style),
                      " layout; the threshold is the kernel's derived error bound (8e-7 of a pair's norm), rounded "
                      "up.")});

  InvarianceOptions invariance_options;
  invariance_options.seq_len = seq_len;
  const RelativeInvariance invariance = relative_invariance(checked, invariance_options);
  report.checks.push_back(
      {"relative_position_invariance", invariance.passed(), invariance.max_deviation, invariance.threshold,
       Bound::AtMost,
       detail::concat("max |<R_m q, R_n k> - <R_(m+t) q, R_(n+t) k>| / (m^2 |q| |k|) over ", invariance.num_samples,
                      " random (q, k, m, n, t) with positions up to 2^31 - 1 (worst m = ", invariance.worst_m,
                      ", n = ", invariance.worst_n, ", t = ", invariance.worst_t,
                      "): the score depends on n - m only (RoFormer section 3).")});

  DecayOptions decay_options;
  decay_options.max_distance = report.decay_distance;
  decay_options.seq_len = seq_len;
  const LongTermDecay decay = long_term_decay(checked, decay_options);
  report.checks.push_back(
      {"long_term_decay_bound", decay.passed(), decay.decay_ratio, decay.threshold, Bound::AtLeast,
       detail::concat("RoFormer's relative bound (1/(d/2)) sum_j |S_j(r)| (section 3, long-term decay) is ",
                      describe_number(decay.bound_at_zero), " at r = 0; its mean over r = 1..16 is ",
                      format_short(decay.near_mean), " and over r in [", report.decay_distance / 2, ", ",
                      report.decay_distance, "] ", format_short(decay.far_mean),
                      "; the measured value is their ratio. Geometric frequencies keep the slow pairs in phase at "
                      "small r and let them drift apart at large r; without slow pairs (or with only slow pairs) "
                      "the ratio stays near 1.")});

  ConventionOptions convention_options;
  convention_options.max_position = report.context;
  convention_options.seq_len = seq_len;
  const ConventionMismatch convention = convention_mismatch(checked, convention_options);
  const DetectedConvention detected =
      spec.style == Style::NeoX ? convention.detected_from_neox_layout : convention.detected_from_gptj_layout;
  const bool detected_ok = (detected == DetectedConvention::NeoX && spec.style == Style::NeoX) ||
                           (detected == DetectedConvention::GPTJ && spec.style == Style::GPTJ) ||
                           (detected == DetectedConvention::Ambiguous && spec.num_pairs() == 1);
  const double other_deviation = spec.style == Style::NeoX ? convention.neox_layout_gptj_pairing_deviation
                                                           : convention.gptj_layout_neox_pairing_deviation;
  report.checks.push_back(
      {"pairing_convention", detected_ok && convention.matched_deviation <= kNormThresholdF64,
       convention.matched_deviation, kNormThresholdF64, Bound::AtMost,
       detail::concat("the expanded (Hugging Face layout) row applied with its own ", to_string(spec.style),
                      " pairing is a rotation (max norm change over all vectors, positions up to ", report.context,
                      "), and the detector reads the layout as ", to_string(detected),
                      ". Applied with the other pairing the same rows change norms by up to ",
                      format_short(other_deviation), " (not a rotation).")});

  report.extrapolation = extrapolation(spec, report.trained_context, report.context);
  return report;
}

}  // namespace rotary::analysis
