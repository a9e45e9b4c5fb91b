// tests/analysis/analysis_test.cpp: include/rotary/analysis.hpp.
//
// Every property check passes on every built-in preset, and each one is shown to FAIL on a
// deliberately broken input (a rotation whose cos^2 + sin^2 != m^2, float32-rounded rows, a k
// shifted by a different offset, an angle not linear in the position, frequency sets without
// decay, the other pairing convention), so that a passing check means something.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "rotary/analysis.hpp"
#include "rotary/apply.hpp"
#include "rotary/error.hpp"
#include "rotary/presets.hpp"
#include "rotary/table.hpp"
#include "tests/support/spec_builder.hpp"

namespace rotary::analysis {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

// Every spec the presets define: the main one and each per-layer-type one.
std::vector<RopeSpec> every_preset_spec() {
  std::vector<RopeSpec> specs;
  for (const PresetInfo& info : list_presets()) {
    const HfRopeConfig config = preset(info.name);
    specs.push_back(config.spec);
    for (const auto& [layer_type, spec] : config.layer_type_specs) {
      RopeSpec named = spec;
      named.name = info.name + " / " + layer_type;
      specs.push_back(named);
    }
  }
  return specs;
}

RopeSpec default_spec(double theta_base, int64_t rotary_dim = 128, int64_t context = 4096) {
  return test::rope_spec(
      {.name = "test-default", .head_dim = rotary_dim, .theta_base = theta_base, .max_position_embeddings = context});
}

// A rotation built from another, with its rows altered by `edit(position, cos, sin, num_pairs)`.
template <typename Edit>
Rotation edited(Rotation base, Edit edit) {
  Rotation out = base;
  out.row = [base, edit](int64_t position, double* cos_out, double* sin_out) {
    base.row(position, cos_out, sin_out);
    edit(position, cos_out, sin_out, base.num_pairs);
  };
  return out;
}

// ---- every check on every preset -------------------------------------------------------------

TEST(RunChecks, EveryCheckPassesOnEveryBuiltInPreset) {
  const std::vector<RopeSpec> specs = every_preset_spec();
  ASSERT_GE(specs.size(), 26u);
  for (const RopeSpec& spec : specs) {
    SCOPED_TRACE(spec.name + ", cpu target " + current_cpu_target());
    const CheckReport report = run_checks(spec);
    ASSERT_EQ(report.checks.size(), 5u);
    for (const CheckResult& check : report.checks) {
      EXPECT_TRUE(check.passed) << check.name << ": measured " << check.measured << " vs threshold "
                                << check.threshold << "\n"
                                << check.explanation;
      EXPECT_GT(check_margin(check), 1.0) << check.name;
    }
    EXPECT_TRUE(report.all_passed());
  }
}

TEST(RunChecks, ReportsEachCheckWithItsThresholdAndExplanation) {
  const CheckReport report = run_checks(preset(kDefaultPreset).spec);
  EXPECT_EQ(report.context, 131072);
  EXPECT_EQ(report.trained_context, 8192);
  EXPECT_EQ(report.decay_distance, 131072);
  const std::vector<std::string> names = {"norm_preserved_f64", "norm_preserved_f32_kernel",
                                          "relative_position_invariance", "long_term_decay_bound",
                                          "pairing_convention"};
  const std::vector<double> thresholds = {kNormThresholdF64, kNormThresholdF32, kInvarianceThresholdF64,
                                          kDecayMinRatio, kNormThresholdF64};
  ASSERT_EQ(report.checks.size(), names.size());
  for (size_t c = 0; c < names.size(); ++c) {
    EXPECT_EQ(report.checks[c].name, names[c]);
    EXPECT_EQ(report.checks[c].threshold, thresholds[c]);
    EXPECT_FALSE(report.checks[c].explanation.empty());
    EXPECT_EQ(report.checks[c].bound, names[c] == "long_term_decay_bound" ? Bound::AtLeast : Bound::AtMost);
  }
  // Llama 3.1 divides its slow pairs by 8 (8192 -> 65536 tokens); 131072 drives them past that.
  EXPECT_GT(report.extrapolation.num_out_of_distribution, 0);
  EXPECT_NEAR(report.extrapolation.largest_overshoot, 2.0, 1e-3);
}

TEST(RunChecks, ShortContextsStillEvaluateTheDecayOver2048Tokens) {
  const CheckReport report = run_checks(preset("llama-2-7b").spec, 100);
  EXPECT_EQ(report.context, 100);
  EXPECT_EQ(report.decay_distance, kDecayMinDistance);
  EXPECT_TRUE(report.all_passed());
}

TEST(RunChecks, DecayCheckFailsForABaseSoLargeThatEveryPairStaysInPhase) {
  // theta_i = 1e30^(-2i/d): all but the first few pairs have wavelengths far beyond any context,
  // so the partial sums never lose phase: no long-term decay. The other checks still pass: the
  // rotation itself is fine.
  const CheckReport report = run_checks(default_spec(1e30));
  EXPECT_FALSE(report.all_passed());
  for (const CheckResult& check : report.checks) {
    EXPECT_EQ(check.passed, check.name != "long_term_decay_bound") << check.name << " " << check.measured;
  }
  EXPECT_LT(check_margin(report.checks[3]), 1.0);
}

TEST(RunChecks, ProportionalRopeLeavesItsUnrotatedPairsOutOfTheDecay) {
  // Gemma-4-style global layers: 32 of 128 pairs rotate (theta_i = b^(-2i/D)), the other 96 have
  // theta = 0 and pass through. Counted in the bound they would be a constant in-phase term
  // (ratio 1.23); left out, as dims past rotary_dim are, the rotated pairs decay (2.14).
  RopeSpec spec = default_spec(1e6, 256, 131072);
  spec.name = "proportional-0.25";
  spec.partial_rotary_factor = 0.25;
  spec.scaling.type = ScalingType::Proportional;
  const CheckReport report = run_checks(spec);
  EXPECT_TRUE(report.all_passed());
  const LongTermDecay decay = long_term_decay(spec, 4096, 8);
  EXPECT_DOUBLE_EQ(decay.bound_at_zero, 16.5);  // (32 + 1) / 2
  EXPECT_GT(decay.decay_ratio, 2.0);
  EXPECT_NEAR(decay.score_identical_ones.front().value, 1.0, 1e-15);
}

TEST(RunChecks, ASinglePairCannotDecayAndXposIsLeftOutOfTheRotationChecks) {
  RopeSpec one_pair = default_spec(10000.0, 2, 2048);
  one_pair.head_dim = 64;  // rotary_dim 2: |S_1| = 1 at every distance
  const CheckReport report = run_checks(one_pair);
  EXPECT_EQ(report.checks[3].measured, 1.0);
  EXPECT_FALSE(report.checks[3].passed);
  EXPECT_TRUE(report.checks[4].passed);  // a single pair reads as "ambiguous", which is right

  RopeSpec xpos = default_spec(10000.0, 64, 2048);
  xpos.xpos = XPos{};
  const CheckReport with_xpos = run_checks(xpos);
  EXPECT_TRUE(with_xpos.all_passed());
  EXPECT_THAT(with_xpos.checks[0].explanation, HasSubstr("xPos"));
}

TEST(RunChecks, RejectsAContextPastTheLargestPosition) {
  EXPECT_THAT([] { run_checks(preset("llama-2-7b").spec, kMaxPosition + 1); },
              ThrowsMessage<Error>(HasSubstr("run_checks: context must be in [1, 2147483647] (got 2147483648)")));
}

TEST(RunChecks, InvalidSpecIsAConfigErrorNamingTheField) {
  RopeSpec spec = default_spec(10000.0);
  spec.rotary_dim = 63;
  EXPECT_THAT([&] { run_checks(spec); }, ThrowsMessage<ConfigError>(HasSubstr("rotary_dim")));
}

TEST(CheckMargin, IsThresholdOverMeasuredOrTheReverse) {
  EXPECT_DOUBLE_EQ(check_margin({"a", true, 1e-15, 1e-12, Bound::AtMost, ""}), 1000.0);
  EXPECT_DOUBLE_EQ(check_margin({"b", true, 3.0, 1.5, Bound::AtLeast, ""}), 2.0);
  EXPECT_TRUE(std::isinf(check_margin({"c", true, 0.0, 1e-12, Bound::AtMost, ""})));
}

// ---- 1. norm preservation ----------------------------------------------------------------------

TEST(NormPreservation, NormPreservedInFloat64AndByTheFloat32Kernel) {
  const NormPreservation norm = norm_preservation(preset("qwen2.5-7b-yarn").spec);  // m = 1.1386
  EXPECT_LE(norm.max_deviation_f64, kNormThresholdF64);
  EXPECT_LE(norm.max_deviation_f32, kNormThresholdF32);
  EXPECT_GT(norm.max_deviation_f32, 0.0);  // float32 rounding is visible: the kernel really ran
  EXPECT_EQ(norm.num_samples, 256);
  EXPECT_TRUE(norm.passed());
}

TEST(NormPreservation, Float32KernelWithinItsBoundOnEveryCpuTarget) {
  const RopeSpec spec = preset("gpt-j-6b").spec;  // GPT-J pairing, 64 of 256 dims rotated
  for (const std::string& target : cpu_targets()) {
    SCOPED_TRACE("cpu target " + target);
    force_cpu_target(target);
    NormOptions options;
    options.seed = 11;
    EXPECT_LE(norm_preservation(spec, options).max_deviation_f32, kNormThresholdF32);
  }
  force_cpu_target("");
}

TEST(NormPreservation, FailsWhenCosSquaredPlusSinSquaredIsNotOne) {
  // A broken table: cos scaled by 1.001 (e.g. the attention scaling applied to cos only).
  const Rotation broken = edited(exact_rotation(preset("llama-2-7b").spec),
                                 [](int64_t, double* c, double*, int64_t n) {
                                   for (int64_t i = 0; i < n; ++i) c[i] *= 1.001;
                                 });
  const NormPreservation norm = norm_preservation(broken);
  EXPECT_FALSE(norm.passed());
  EXPECT_GT(norm.max_deviation_f64, 1e-5);
  EXPECT_TRUE(std::isnan(norm.max_deviation_f32));  // no kernel figure without a spec
}

TEST(NormPreservation, FailsOnRowsRoundedToFloat32) {
  // The threshold is tight enough to see a float32 table (~6e-8 relative per value).
  const Rotation rounded = edited(exact_rotation(preset("llama-2-7b").spec),
                                  [](int64_t, double* c, double* s, int64_t n) {
                                    for (int64_t i = 0; i < n; ++i) {
                                      c[i] = static_cast<float>(c[i]);
                                      s[i] = static_cast<float>(s[i]);
                                    }
                                  });
  const NormPreservation norm = norm_preservation(rounded);
  EXPECT_GT(norm.max_deviation_f64, kNormThresholdF64);
  EXPECT_LT(norm.max_deviation_f64, 1e-6);
}

TEST(NormPreservation, AttentionScalingIsPartOfTheExpectedNorm) {
  // The same rows, but the rotation claims m = 1 while YaRN's rows carry m = 1.1386.
  Rotation wrong_scale = exact_rotation(preset("qwen2.5-7b-yarn").spec);
  const double m = wrong_scale.attention_scaling;
  ASSERT_NEAR(m, 0.1 * std::log(4.0) + 1.0, 1e-15);
  wrong_scale.attention_scaling = 1.0;
  EXPECT_NEAR(norm_preservation(wrong_scale).max_deviation_f64, m - 1.0, 1e-12);
}

TEST(NormPreservation, RejectsAnEmptyRotationNamingTheField) {
  Rotation empty;
  EXPECT_THAT([&] { norm_preservation(empty); },
              ThrowsMessage<Error>(HasSubstr("norm_preservation: rotation.num_pairs must be > 0 (got 0)")));
  NormOptions options;
  options.num_samples = 0;
  EXPECT_THAT([&] { norm_preservation(preset("llama-2-7b").spec, options); },
              ThrowsMessage<Error>(HasSubstr("num_samples must be >= 1 (got 0)")));
}

// ---- 2. relative-position invariance -----------------------------------------------------------

TEST(RelativeInvariance, ScoreDependsOnlyOnRelativePosition) {
  for (const char* name : {"llama-3.1-8b", "gpt-j-6b", "phi-3-mini-128k", "qwen3-vl-8b", "deepseek-v3"}) {
    SCOPED_TRACE(name);
    const RelativeInvariance r = relative_invariance(preset(name).spec);
    EXPECT_TRUE(r.passed()) << r.max_deviation;
    EXPECT_EQ(r.num_samples, 256);
  }
}

TEST(RelativeInvariance, FailsWhenKIsShiftedByADifferentOffsetInOneEvaluation) {
  // <R_m q, R_n k> vs <R_(m+t) q, R_(n+t+1) k>
  const RelativeInvariance r = fault_injection::relative_invariance_with_k_shift(preset("llama-2-7b").spec, {}, 1);
  EXPECT_FALSE(r.passed());
  EXPECT_GT(r.max_deviation, 0.01);
}

TEST(RelativeInvariance, FailsForAnAngleNotLinearInThePosition) {
  // angle = p theta + 1e-9 p^2 theta: a tiny curvature already breaks invariance.
  const RopeSpec spec = preset("llama-2-7b").spec;
  const Frequencies freqs = frequencies(spec);
  Rotation curved;
  curved.num_pairs = spec.num_pairs();
  curved.max_position = 1 << 20;
  curved.row = [theta = freqs.inv_freq](int64_t p, double* c, double* s) {
    const auto x = static_cast<double>(p);
    for (size_t i = 0; i < theta.size(); ++i) {
      const double angle = std::fmod((x + 1e-9 * x * x) * theta[i], 2.0 * std::numbers::pi);
      c[i] = std::cos(angle);
      s[i] = std::sin(angle);
    }
  };
  EXPECT_TRUE(norm_preservation(curved).passed());  // still a rotation at every position...
  EXPECT_FALSE(relative_invariance(curved).passed());  // ...but not a relative one
}

TEST(RelativeInvariance, HuggingFaceFloat32AnglesBreakItAtLargePositions) {
  // HFCompat reproduces transformers' float32 angle fl32(fl32(p) * inv_freq): its error grows
  // with p (docs/numerics.md), so scores at p and p + t no longer agree.
  const RopeSpec spec = preset("llama-2-7b").spec;
  TableOptions options;
  options.precision = Precision::HFCompat;
  options.storage = Storage::OnTheFly;
  auto table = std::make_shared<const CosSinTable>(spec, options);
  Rotation hf;
  hf.num_pairs = table->num_pairs();
  hf.attention_scaling = table->attention_scaling();
  hf.max_position = table->max_position();
  hf.row = [table](int64_t p, double* c, double* s) { table->row_f64(p, c, s); };
  const RelativeInvariance r = relative_invariance(hf);
  EXPECT_FALSE(r.passed());
  EXPECT_GT(r.max_deviation, 1e-3);
}

TEST(RelativeInvariance, RejectsAnInjectedOffsetLargerThanTheRange) {
  InvarianceOptions options;
  options.max_position = 100;
  EXPECT_THAT([&] { fault_injection::relative_invariance_with_k_shift(preset("llama-2-7b").spec, options, 50); },
              ThrowsMessage<Error>(HasSubstr("k_shift_extra must be within a quarter of max_position 100 (got 50)")));
}

// ---- 3. long-term decay -------------------------------------------------------------------------

TEST(LongTermDecay, BoundMatchesRoFormerPartialSumsByHand) {
  // inv_freq {1, 0.5} at r = 1: S_1 = e^{i}, S_2 = e^{i} + e^{i/2}, |S_2| = 2 cos(1/4).
  const std::vector<double> theta = {1.0, 0.5};
  EXPECT_NEAR(decay_bound(theta, 1.0), (1.0 + 2.0 * std::cos(0.25)) / 2.0, 1e-15);
  EXPECT_DOUBLE_EQ(decay_bound(theta, 0.0), 1.5);  // (d/2 + 1) / 2
}

TEST(LongTermDecay, BoundDecaysForGeometricFrequencies) {
  const RopeSpec spec = preset("llama-2-7b").spec;
  const LongTermDecay decay = long_term_decay(spec, 4096, 32);
  EXPECT_TRUE(decay.passed()) << decay.decay_ratio;
  EXPECT_GT(decay.decay_ratio, 4.0);  // 4.19 measured
  EXPECT_DOUBLE_EQ(decay.bound_at_zero, 32.5);
  ASSERT_FALSE(decay.bound.empty());
  EXPECT_EQ(decay.bound.front().distance_tokens, 0.0);
  EXPECT_NEAR(decay.bound.front().value, 32.5, 1e-12);
  EXPECT_EQ(decay.bound.back().distance_tokens, 4096.0);
  EXPECT_LT(decay.bound.back().value, decay.bound.front().value / 4);
}

TEST(LongTermDecay, RandomNonGeometricFrequenciesDoNotDecay) {
  // Frequencies uniform in [0, pi]: no slow pairs, so the phases are scrambled from r = 1 on and
  // the bound is as low at r = 8 as at r = 8192.
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> uniform(0.0, std::numbers::pi);
  std::vector<double> theta(64);
  for (double& t : theta) t = uniform(rng);
  DecayOptions options;
  options.max_distance = 8192;
  const LongTermDecay decay = long_term_decay(theta, 1.0, options);
  EXPECT_FALSE(decay.passed()) << decay.decay_ratio;
  EXPECT_LT(decay.decay_ratio, 1.4);
  // The same number of pairs with geometric frequencies passes.
  const LongTermDecay geometric = long_term_decay(frequencies(default_spec(10000.0)).inv_freq, 1.0, options);
  EXPECT_TRUE(geometric.passed()) << geometric.decay_ratio;
}

TEST(LongTermDecay, IdenticalOnesScoreIsTheMeanCosine) {
  const RopeSpec spec = preset("llama-2-7b").spec;
  const LongTermDecay decay = long_term_decay(spec, 4096, 8);
  const std::vector<double> theta = frequencies(spec, 4096).inv_freq;
  for (const CurvePoint& point : decay.score_identical_ones) {
    double mean_cos = 0.0;
    for (double t : theta) mean_cos += std::cos(point.distance_tokens * t);
    mean_cos /= static_cast<double>(theta.size());
    EXPECT_NEAR(point.value, mean_cos, 1e-12) << point.distance_tokens;
  }
  EXPECT_NEAR(decay.score_identical_random.front().value, 1.0, 1e-12);  // r = 0: <q, q> / |q|^2
}

TEST(LongTermDecay, IndependentRandomVectorsShowNoDecay) {
  // For uncorrelated q and k, |score| / (|q||k|) is about 1/sqrt(d) at every distance: the decay
  // is a property of correlated vectors (and of the bound), not of every pair of vectors.
  const LongTermDecay decay = long_term_decay(preset("llama-2-7b").spec, 4096, 256);
  const double at_zero = decay.score_independent_random.front().value;
  const double at_end = decay.score_independent_random.back().value;
  EXPECT_NEAR(at_zero, std::sqrt(2.0 / std::numbers::pi) / std::sqrt(128.0), 0.02);
  EXPECT_GT(at_end / at_zero, 0.7);
  EXPECT_LT(at_end / at_zero, 1.4);
}

TEST(LongTermDecay, RejectsADistanceInsideTheNearRange) {
  EXPECT_THAT([] { long_term_decay(preset("llama-2-7b").spec, 16, 4); },
              ThrowsMessage<Error>(HasSubstr("long_term_decay: max_distance must be > 16")));
}

TEST(LogDistanceGrid, StartsAtZeroAndEndsAtTheMaximum) {
  const std::vector<double> grid = log_distance_grid(1000, 4);
  EXPECT_EQ(grid.front(), 0.0);
  EXPECT_EQ(grid[1], 1.0);
  EXPECT_EQ(grid.back(), 1000.0);
  for (size_t j = 1; j < grid.size(); ++j) EXPECT_GT(grid[j], grid[j - 1]);
}

// ---- 4, 5, 6. rotations, extrapolation, scheme scaling -------------------------------------------

TEST(PairRotations, CountFullTurnsOverTheContext) {
  const RopeSpec spec = preset("llama-2-7b").spec;
  const std::vector<PairRotation> rotations = pair_rotations(spec, 4096);
  ASSERT_EQ(rotations.size(), 64u);
  EXPECT_NEAR(rotations[0].rotations, 4095.0 / (2.0 * std::numbers::pi), 1e-9);
  EXPECT_NEAR(rotations[0].wavelength_tokens, 2.0 * std::numbers::pi, 1e-12);
  // Pair 45 turns once within 4096 tokens, pair 46 does not (docs/formulas.md section 13).
  EXPECT_GT(rotations[45].rotations, 1.0);
  EXPECT_LT(rotations[46].rotations, 1.0);
}

TEST(Extrapolation, Llama2At16kTokensPutsPairs46To63OutOfDistribution) {
  const Extrapolation e = extrapolation(preset("llama-2-7b").spec, 4096, 16384);
  EXPECT_EQ(e.num_pairs, 64);
  EXPECT_EQ(e.num_out_of_distribution, 18);
  EXPECT_EQ(e.num_full_turn_in_training, 46);
  for (int64_t i = 0; i < 64; ++i) EXPECT_EQ(e.pairs[static_cast<size_t>(i)].out_of_distribution, i >= 46) << i;
  EXPECT_NEAR(e.largest_overshoot, 16383.0 / 4096.0, 1e-12);
  EXPECT_GE(e.largest_overshoot_pair, 46);
}

TEST(Extrapolation, NothingIsOutOfDistributionWithinTheTrainedContext) {
  const Extrapolation e = extrapolation(preset("llama-2-7b").spec, 4096, 4096);
  EXPECT_EQ(e.num_out_of_distribution, 0);
  EXPECT_EQ(e.largest_overshoot_pair, -1);
}

TEST(SchemeScaling, Llama3KeepsFastPairsAndDividesSlowOnesByTheFactor) {
  const SchemeScaling s = scheme_scaling(preset("llama-3.1-8b").spec);
  EXPECT_EQ(s.type, ScalingType::Llama3);
  ASSERT_EQ(s.pairs.size(), 64u);
  EXPECT_EQ(s.pairs.front().factor_applied, 1.0);
  EXPECT_EQ(s.pairs.front().regime, PairRegime::Extrapolated);
  EXPECT_NEAR(s.pairs.back().factor_applied, 8.0, 1e-12);
  EXPECT_EQ(s.pairs.back().regime, PairRegime::Interpolated);
  int blended = 0;
  for (const PairScaling& p : s.pairs) {
    blended += p.regime == PairRegime::Blended;
    EXPECT_NEAR(p.default_inv_freq / p.inv_freq, p.factor_applied, 1e-12 * p.factor_applied);
    EXPECT_NEAR(p.wavelength_tokens / p.default_wavelength_tokens, p.factor_applied, 1e-12 * p.factor_applied);
  }
  EXPECT_GT(blended, 0);
}

TEST(SchemeScaling, YarnCarriesItsAttentionScalingAndLongRopeItsFactorSet) {
  const SchemeScaling yarn = scheme_scaling(preset("qwen2.5-7b-yarn").spec);
  EXPECT_NEAR(yarn.attention_scaling, 0.1 * std::log(4.0) + 1.0, 1e-15);
  EXPECT_EQ(yarn.pairs.front().regime, PairRegime::Extrapolated);
  EXPECT_EQ(yarn.pairs.back().regime, PairRegime::Interpolated);

  const RopeSpec phi = preset("phi-3-mini-128k").spec;
  const SchemeScaling short_set = scheme_scaling(phi, 4096);
  const SchemeScaling long_set = scheme_scaling(phi, 4097);
  EXPECT_EQ(short_set.longrope_factor_set, LongRopeFactorSet::Short);
  EXPECT_EQ(long_set.longrope_factor_set, LongRopeFactorSet::Long);
  for (size_t i = 0; i < long_set.pairs.size(); ++i) {
    EXPECT_NEAR(long_set.pairs[i].factor_applied, phi.scaling.long_factor[i], 1e-12 * phi.scaling.long_factor[i]);
  }
}

// ---- 7. other encodings -------------------------------------------------------------------------

TEST(Alibi, SlopesForEightHeadsAreOneHalfToOne256th) {
  const std::vector<double> slopes = alibi_slopes(8);
  ASSERT_EQ(slopes.size(), 8u);
  for (int h = 0; h < 8; ++h) EXPECT_EQ(slopes[static_cast<size_t>(h)], std::ldexp(1.0, -(h + 1))) << h;
}

TEST(Alibi, TwelveHeadsTakeEightSlopesThenEveryOtherOfSixteen) {
  // Press et al.'s get_slopes(12): get_slopes(8) + get_slopes(16)[0::2][:4].
  const std::vector<double> slopes = alibi_slopes(12);
  ASSERT_EQ(slopes.size(), 12u);
  for (int h = 0; h < 8; ++h) EXPECT_EQ(slopes[static_cast<size_t>(h)], std::ldexp(1.0, -(h + 1))) << h;
  const double expected_tail[] = {std::pow(2.0, -0.5), std::pow(2.0, -1.5), std::pow(2.0, -2.5),
                                  std::pow(2.0, -3.5)};
  for (int j = 0; j < 4; ++j) EXPECT_DOUBLE_EQ(slopes[static_cast<size_t>(8 + j)], expected_tail[j]) << j;
}

TEST(Alibi, BiasIsMinusSlopeTimesDistance) {
  EXPECT_EQ(alibi_bias(0.5, 10, 3), -3.5);
  EXPECT_EQ(alibi_bias(0.25, 7, 7), 0.0);
  EXPECT_EQ(alibi_bias(0.25, 3, 7), -1.0);  // symmetric form for keys after the query
  EXPECT_THAT([] { alibi_slopes(0); }, ThrowsMessage<Error>(HasSubstr("alibi_slopes: num_heads must be > 0 (got 0)")));
}

TEST(Sinusoidal, ValuesMatchVaswaniFormulaAtSeveralPositions) {
  // PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(p / 10000^(2i/d)).
  const std::vector<double> at_zero = sinusoidal_encoding(0, 6);
  EXPECT_EQ(at_zero, (std::vector<double>{0, 1, 0, 1, 0, 1}));
  const std::vector<double> at_one = sinusoidal_encoding(1, 4);  // 10000^(2/4) = 100
  EXPECT_DOUBLE_EQ(at_one[0], std::sin(1.0));
  EXPECT_DOUBLE_EQ(at_one[1], std::cos(1.0));
  EXPECT_DOUBLE_EQ(at_one[2], std::sin(0.01));
  EXPECT_DOUBLE_EQ(at_one[3], std::cos(0.01));
  const std::vector<double> at_500 = sinusoidal_encoding(500, 8);  // 10000^(2/8) = 10, ^(4/8) = 100
  EXPECT_NEAR(at_500[2], std::sin(50.0), 1e-13);
  EXPECT_NEAR(at_500[5], std::cos(5.0), 1e-14);
  EXPECT_NEAR(at_500[7], std::cos(500.0 / 1000.0), 1e-15);
  EXPECT_THAT([] { sinusoidal_encoding(3, 5); },
              ThrowsMessage<Error>(HasSubstr("sinusoidal_encoding: d_model must be even and > 0 (got 5)")));
}

TEST(LearnedStandIn, HasNoRowPastItsLengthAndIsReproducible) {
  const LearnedEncodingStandIn table(1024, 64, 9);
  EXPECT_EQ(table.row(5), LearnedEncodingStandIn(1024, 64, 9).row(5));
  EXPECT_NE(table.row(5), table.row(6));
  EXPECT_THAT([&] { table.row(1024); },
              ThrowsMessage<Error>(HasSubstr("position must be in [0, 1024) (got 1024): a learned table has no row")));
  // N(0, 1) entries: mean ~0, variance ~1 over 64 rows.
  double sum = 0.0, sum_sq = 0.0;
  for (int64_t p = 0; p < 64; ++p) {
    for (double v : table.row(p)) {
      sum += v;
      sum_sq += v * v;
    }
  }
  EXPECT_NEAR(sum / 4096.0, 0.0, 0.1);
  EXPECT_NEAR(sum_sq / 4096.0, 1.0, 0.1);
}

TEST(CompareEncodings, RopeAndAlibiAreRelativeSinusoidalAndLearnedAreNot) {
  const std::vector<EncodingComparison> all = compare_encodings(preset("llama-2-7b").spec);
  ASSERT_EQ(all.size(), 4u);
  const char* names[] = {"rope", "sinusoidal", "learned", "alibi"};
  const bool relative[] = {true, false, false, true};
  const bool defined_past[] = {true, true, false, true};
  for (size_t e = 0; e < 4; ++e) {
    SCOPED_TRACE(names[e]);
    EXPECT_EQ(all[e].name, names[e]);
    EXPECT_EQ(all[e].relative_only, relative[e]) << all[e].shift_deviation;
    EXPECT_EQ(all[e].defined_past_trained, defined_past[e]);
    ASSERT_FALSE(all[e].decay.empty());
    EXPECT_EQ(all[e].decay.front().distance_tokens, 0.0);
    EXPECT_NEAR(all[e].decay.front().value, 1.0, 1e-12);
    EXPECT_FALSE(all[e].decay_meaning.empty());
    EXPECT_FALSE(all[e].past_trained_note.empty());
  }
  EXPECT_GT(all[1].shift_deviation, 1e-3);  // content-position cross terms
  EXPECT_GT(all[2].shift_deviation, 1e-3);
  EXPECT_EQ(all[3].shift_deviation, 0.0);
  // The curves run to twice the trained length, except the learned one, which stops at its end.
  EXPECT_EQ(all[0].decay.back().distance_tokens, 8192.0);
  EXPECT_LT(all[2].decay.back().distance_tokens, 4096.0);
  EXPECT_THAT(all[0].past_trained_note, HasSubstr("18 of 64 pairs"));  // at 8192 tokens
}

// ---- 8. convention mismatch --------------------------------------------------------------------

TEST(ConventionMismatch, OtherPairingDoesNotPreserveTheNorm) {
  for (const char* name : {"llama-2-7b", "gpt-j-6b"}) {
    SCOPED_TRACE(name);
    const ConventionMismatch m = convention_mismatch(preset(name).spec);
    EXPECT_LE(m.matched_deviation, kNormThresholdF64);
    EXPECT_GT(m.neox_layout_gptj_pairing_deviation, 0.5);  // O(1), not 1e-12
    EXPECT_GT(m.gptj_layout_neox_pairing_deviation, 0.5);
    // Near position 0 every angle is small and both conventions are near the identity: the
    // mismatch shows only as positions grow ("a few good tokens, then garbage").
    ASSERT_GE(m.mismatch_by_position.size(), 3u);
    EXPECT_EQ(m.mismatch_by_position.front().distance_tokens, 0.0);
    EXPECT_LT(m.mismatch_by_position.front().value, 1e-15);
    EXPECT_GT(m.mismatch_by_position.back().value, 0.5);
  }
}

TEST(ConventionMismatch, DetectorSaysWhichConventionWasMeant) {
  const RopeSpec spec = preset("llama-2-7b").spec;
  const ConventionMismatch m = convention_mismatch(spec);
  EXPECT_EQ(m.detected_from_neox_layout, DetectedConvention::NeoX);
  EXPECT_EQ(m.detected_from_gptj_layout, DetectedConvention::GPTJ);

  const CosSinTable table(spec);
  std::vector<float> c(64), s(64);
  table.row(0, c.data(), s.data());  // cos = 1, sin = 0 everywhere: both patterns hold
  EXPECT_EQ(detect_convention(std::span<const float>(expand_row(c.data(), 64, Style::NeoX)),
                              std::span<const float>(expand_row(s.data(), 64, Style::NeoX))),
            DetectedConvention::Ambiguous);
  table.row(100, c.data(), s.data());
  const std::vector<float> gptj_cos = expand_row(c.data(), 64, Style::GPTJ);
  const std::vector<float> gptj_sin = expand_row(s.data(), 64, Style::GPTJ);
  EXPECT_EQ(detect_convention(std::span<const float>(gptj_cos), std::span<const float>(gptj_sin)),
            DetectedConvention::GPTJ);
  // The pair rows themselves (not expanded) are neither layout.
  EXPECT_EQ(detect_convention(std::span<const float>(c), std::span<const float>(s)), DetectedConvention::Unknown);
  // Odd length, mismatched lengths.
  const std::vector<double> three = {1, 1, 1};
  EXPECT_EQ(detect_convention(std::span<const double>(three), std::span<const double>(three)),
            DetectedConvention::Unknown);
  const std::vector<double> two = {1, 1};
  const std::vector<double> four = {1, 1, 1, 1};
  EXPECT_EQ(detect_convention(std::span<const double>(two), std::span<const double>(four)),
            DetectedConvention::Unknown);
  EXPECT_EQ(to_string(DetectedConvention::GPTJ), "gptj");
}

// Applies an expanded row to x as Hugging Face does: x * cos + rotate(x) * sin.
std::vector<double> hf_apply(const std::vector<double>& x, const std::vector<double>& cos_row,
                             const std::vector<double>& sin_row, Style pairing) {
  const size_t n = x.size();
  std::vector<double> rotated(n);
  for (size_t j = 0; j < n; ++j) {
    if (pairing == Style::NeoX) {
      rotated[j] = j < n / 2 ? -x[j + n / 2] : x[j - n / 2];  // rotate_half
    } else {
      rotated[j] = j % 2 == 0 ? -x[j + 1] : x[j - 1];  // rotate_every_two
    }
  }
  std::vector<double> out(n);
  for (size_t j = 0; j < n; ++j) out[j] = x[j] * cos_row[j] + rotated[j] * sin_row[j];
  return out;
}

TEST(ConventionMismatch, SingularValueBoundMatchesRandomVectorsThroughHuggingFaceFormula) {
  const RopeSpec spec = preset("llama-2-7b").spec;
  const Rotation rotation = exact_rotation(spec);
  std::vector<double> c(64), s(64);
  rotation.row(1000, c.data(), s.data());
  const std::vector<double> neox_cos = expand_row_f64(c, Style::NeoX);
  const std::vector<double> neox_sin = expand_row_f64(s, Style::NeoX);
  const double bound = expanded_rotation_norm_deviation(neox_cos, neox_sin, Style::GPTJ, 1.0);
  EXPECT_LE(expanded_rotation_norm_deviation(neox_cos, neox_sin, Style::NeoX, 1.0), 1e-15);
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal;
  double worst_matched = 0.0, worst_mismatched = 0.0;
  for (int sample = 0; sample < 64; ++sample) {
    std::vector<double> x(128);
    for (double& v : x) v = normal(rng);
    double norm_x = 0.0;
    for (double v : x) norm_x += v * v;
    auto ratio = [&](Style pairing) {
      double sum = 0.0;
      for (double v : hf_apply(x, neox_cos, neox_sin, pairing)) sum += v * v;
      return std::abs(std::sqrt(sum / norm_x) - 1.0);
    };
    worst_matched = std::max(worst_matched, ratio(Style::NeoX));
    worst_mismatched = std::max(worst_mismatched, ratio(Style::GPTJ));
  }
  EXPECT_LE(worst_matched, 1e-14);
  EXPECT_GT(worst_mismatched, 1e-3);         // random vectors see the damage...
  EXPECT_LE(worst_mismatched, bound + 1e-12);  // ...never more than the exact worst case
}

TEST(ConventionMismatch, RejectsRowsOfDifferentLengths) {
  const std::vector<double> two = {1, 0};
  const std::vector<double> four = {1, 0, 1, 0};
  EXPECT_THAT([&] { expanded_rotation_norm_deviation(two, four, Style::NeoX, 1.0); },
              ThrowsMessage<Error>(HasSubstr("sin_row must have the length of cos_row 2 (got 4)")));
}

}  // namespace
}  // namespace rotary::analysis
