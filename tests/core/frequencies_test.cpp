// tests/core/frequencies_test.cpp: the formulas of frequencies.hpp, checked against values
// computed here independently in plain double arithmetic (each from the formula as the paper /
// Hugging Face writes it), plus the properties each scheme promises.
//
// Tolerance: the library works in long double and rounds once; the expectations here are plain
// double chains of at most ~6 operations including one pow(), each within a few ulps, so a
// relative 1e-14 separates a formula error (always >= 1e-6 here) from rounding.
#include "rotary/frequencies.hpp"
#include "rotary/table.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "rotary/error.hpp"
#include "tests/support/spec_builder.hpp"

namespace rotary {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

constexpr double kRel = 1e-14;
constexpr double kPi = std::numbers::pi;

RopeSpec base_spec(int64_t head_dim = 128, double theta = 10000.0) {
  return test::rope_spec({.head_dim = head_dim, .theta_base = theta});
}

double plain_default(double base, int64_t i, int64_t d) {
  return 1.0 / std::pow(base, static_cast<double>(2 * i) / static_cast<double>(d));
}

void expect_rel(double actual, double expected, const std::string& what) {
  EXPECT_NEAR(actual, expected, kRel * std::abs(expected)) << what;
}

TEST(Frequencies, DefaultIsBasePowerMinusTwoIOverD) {
  const RopeSpec spec = base_spec();
  const Frequencies f = frequencies(spec);
  ASSERT_EQ(f.inv_freq.size(), 64u);
  EXPECT_EQ(f.inv_freq[0], 1.0);
  for (int64_t i = 0; i < 64; ++i) expect_rel(f.inv_freq[i], plain_default(1e4, i, 128), "pair " + std::to_string(i));
  EXPECT_EQ(f.attention_scaling, 1.0);
  for (const PairDiagnostics& p : f.pairs) EXPECT_EQ(p.regime, PairRegime::Unscaled);
  expect_rel(f.pairs[1].wavelength_tokens, 2 * kPi / plain_default(1e4, 1, 128), "wavelength");
}

TEST(Frequencies, DefaultIsStrictlyDecreasing) {
  const Frequencies f = frequencies(base_spec(256, 1e6));
  for (size_t i = 1; i < f.inv_freq.size(); ++i) EXPECT_LT(f.inv_freq[i], f.inv_freq[i - 1]);
}

TEST(Frequencies, PartialRotaryUsesRotaryDimInTheExponent) {
  RopeSpec spec = base_spec(96);
  spec.rotary_dim = 24;  // GPT-NeoX-20B
  const Frequencies f = frequencies(spec);
  ASSERT_EQ(f.inv_freq.size(), 12u);
  expect_rel(f.inv_freq[11], plain_default(1e4, 11, 24), "last pair");
}

TEST(Frequencies, LinearDividesEveryFrequencyByTheFactor) {
  RopeSpec spec = base_spec();
  spec.scaling.type = ScalingType::Linear;
  spec.scaling.factor = 4.0;
  const Frequencies f = frequencies(spec);
  for (int64_t i = 0; i < 64; ++i) {
    expect_rel(f.inv_freq[i], plain_default(1e4, i, 128) / 4.0, "pair " + std::to_string(i));
    EXPECT_EQ(f.pairs[i].regime, PairRegime::Interpolated);
    EXPECT_NEAR(f.pairs[i].factor_applied, 4.0, 1e-15);
  }
}

TEST(Frequencies, DynamicKeepsDefaultUpToMaxPositionEmbeddings) {
  RopeSpec spec = base_spec();
  spec.scaling.type = ScalingType::Dynamic;
  spec.scaling.factor = 2.0;
  const Frequencies reference = frequencies(base_spec());
  for (int64_t seq_len : {int64_t{0}, int64_t{1}, int64_t{4000}, int64_t{4096}}) {
    const Frequencies f = frequencies(spec, seq_len);
    EXPECT_EQ(f.inv_freq, reference.inv_freq) << "seq_len " << seq_len;
    EXPECT_EQ(f.effective_theta_base, 1e4);
    EXPECT_EQ(f.pairs[63].regime, PairRegime::Unscaled);
  }
}

TEST(Frequencies, DynamicGrowsTheBaseWithHuggingFacesRule) {
  RopeSpec spec = base_spec();
  spec.scaling.type = ScalingType::Dynamic;
  spec.scaling.factor = 2.0;
  const int64_t seq_len = 8192;  // 2 * Lmax
  const Frequencies f = frequencies(spec, seq_len);
  // base' = base * ((s * L / Lmax) - (s - 1)) ^ (d / (d - 2)) = 1e4 * 3^(128/126)
  const double new_base = 1e4 * std::pow(2.0 * 8192 / 4096 - 1.0, 128.0 / 126.0);
  expect_rel(f.effective_theta_base, new_base, "base");
  for (int64_t i = 0; i < 64; ++i) expect_rel(f.inv_freq[i], plain_default(new_base, i, 128), "pair");
  // The last pair is divided by exactly the growth 3; pair 0 is untouched.
  EXPECT_NEAR(f.pairs[63].factor_applied, 3.0, 1e-12);
  EXPECT_EQ(f.pairs[63].regime, PairRegime::Interpolated);
  EXPECT_EQ(f.pairs[0].regime, PairRegime::Extrapolated);
  EXPECT_EQ(f.pairs[30].regime, PairRegime::Blended);
  EXPECT_NEAR(f.pairs[30].blend, 60.0 / 126.0, 1e-12);  // log share 2i/(d-2)
}

TEST(Frequencies, NtkAlphaDividesTheLastPairByAlpha) {
  RopeSpec spec = base_spec();
  spec.scaling.type = ScalingType::NtkAlpha;
  spec.scaling.ntk_alpha = 8.0;
  const Frequencies f = frequencies(spec);
  const double new_base = 1e4 * std::pow(8.0, 128.0 / 126.0);
  expect_rel(f.effective_theta_base, new_base, "base");
  EXPECT_NEAR(f.pairs[63].factor_applied, 8.0, 1e-12);
  EXPECT_EQ(f.inv_freq[0], 1.0);
}

RopeSpec yarn_spec() {
  RopeSpec spec = base_spec(128, 1e6);  // Qwen2.5-7B with YaRN x4
  spec.max_position_embeddings = 131072;
  spec.scaling.type = ScalingType::Yarn;
  spec.scaling.factor = 4.0;
  spec.scaling.original_max_position_embeddings = 32768;
  return spec;
}

TEST(Frequencies, YarnCorrectionRangeUsesTheOriginalContext) {
  const RopeSpec spec = yarn_spec();
  auto corr = [](double rotations) { return 128.0 * std::log(32768.0 / (rotations * 2 * kPi)) / (2 * std::log(1e6)); };
  const YarnCorrectionRange range = yarn_correction_range(spec);
  EXPECT_EQ(range.low, std::floor(corr(32.0)));
  EXPECT_EQ(range.high, std::ceil(corr(1.0)));
}

TEST(Frequencies, YarnBlendsByTheRampAndScalesAttention) {
  const RopeSpec spec = yarn_spec();
  const Frequencies f = frequencies(spec);
  const YarnCorrectionRange range = yarn_correction_range(spec);
  for (int64_t i = 0; i < 64; ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - range.low) / (range.high - range.low), 0.0, 1.0);
    const double theta = plain_default(1e6, i, 128);
    expect_rel(f.inv_freq[i], theta / 4.0 * ramp + theta * (1.0 - ramp), "pair " + std::to_string(i));
    const PairRegime expected = ramp == 0.0 ? PairRegime::Extrapolated
                                : ramp == 1.0 ? PairRegime::Interpolated
                                              : PairRegime::Blended;
    EXPECT_EQ(f.pairs[i].regime, expected) << "pair " << i;
  }
  expect_rel(f.attention_scaling, 0.1 * std::log(4.0) + 1.0, "mscale");
  EXPECT_THAT(f.attention_scaling_source, HasSubstr("0.1*ln(4)+1"));
}

TEST(Frequencies, YarnTruncateFalseKeepsTheFractionalRange) {
  RopeSpec spec = yarn_spec();
  spec.scaling.truncate = false;
  const YarnCorrectionRange range = yarn_correction_range(spec);
  EXPECT_NE(range.low, std::floor(range.low));
  EXPECT_NE(range.high, std::ceil(range.high));
}

TEST(Frequencies, YarnEqualBoundsAvoidTheSingularity) {
  RopeSpec spec = yarn_spec();
  spec.scaling.beta_fast = 4.0;
  spec.scaling.beta_slow = 4.0;
  spec.scaling.truncate = false;  // low == high exactly
  const Frequencies f = frequencies(spec);
  for (double v : f.inv_freq) EXPECT_TRUE(std::isfinite(v));
}

TEST(Frequencies, YarnAttentionFactorPrecedence) {
  RopeSpec spec = yarn_spec();
  spec.scaling.mscale = 0.707;
  spec.scaling.mscale_all_dim = 1.0;
  expect_rel(frequencies(spec).attention_scaling,
             (0.1 * 0.707 * std::log(4.0) + 1.0) / (0.1 * std::log(4.0) + 1.0), "mscale ratio");
  spec.scaling.mscale_all_dim = 0.707;  // DeepSeek: equal -> exactly 1
  EXPECT_EQ(frequencies(spec).attention_scaling, 1.0);
  spec.scaling.mscale_all_dim = 0.0;  // falsy in HF: the plain mscale formula
  expect_rel(frequencies(spec).attention_scaling, 0.1 * std::log(4.0) + 1.0, "falsy mscale_all_dim");
  spec.scaling.attention_factor = 1.25;  // explicit wins
  EXPECT_EQ(frequencies(spec).attention_scaling, 1.25);
}

TEST(Frequencies, YarnFactorDefaultsToMaxOverOriginal) {
  RopeSpec spec = yarn_spec();
  spec.scaling.factor.reset();
  const Frequencies f = frequencies(spec);
  EXPECT_EQ(f.effective_factor, 4.0);  // 131072 / 32768
}

TEST(Frequencies, YarnMscale) {
  EXPECT_EQ(yarn_mscale(1.0), 1.0);
  EXPECT_EQ(yarn_mscale(0.5, 3.0), 1.0);
  expect_rel(yarn_mscale(40.0, 1.0), 0.1 * std::log(40.0) + 1.0, "40");
  expect_rel(yarn_mscale(40.0, 0.707), 0.1 * 0.707 * std::log(40.0) + 1.0, "40, 0.707");
}

RopeSpec longrope_spec() {
  RopeSpec spec = base_spec(96);
  spec.max_position_embeddings = 131072;
  spec.scaling.type = ScalingType::LongRope;
  spec.scaling.original_max_position_embeddings = 4096;
  for (int i = 0; i < 48; ++i) {
    spec.scaling.short_factor.push_back(1.0 + 0.01 * i);
    spec.scaling.long_factor.push_back(1.0 + 1.3 * i);
  }
  return spec;
}

TEST(Frequencies, LongRopeSwitchesFactorSetsPastTheOriginalContext) {
  const RopeSpec spec = longrope_spec();
  for (int64_t seq_len : {int64_t{0}, int64_t{4096}, int64_t{4097}, int64_t{131072}}) {
    const Frequencies f = frequencies(spec, seq_len);
    const bool use_long = seq_len > 4096;
    EXPECT_EQ(f.longrope_factor_set, use_long ? LongRopeFactorSet::Long : LongRopeFactorSet::Short);
    const auto& factors = use_long ? spec.scaling.long_factor : spec.scaling.short_factor;
    for (int64_t i = 0; i < 48; ++i) {
      expect_rel(f.inv_freq[i], 1.0 / (factors[i] * std::pow(1e4, 2.0 * static_cast<double>(i) / 96.0)), "pair");
      EXPECT_EQ(f.pairs[i].regime, PairRegime::Rescaled);
    }
  }
}

TEST(Frequencies, LongRopeAttentionScaling) {
  RopeSpec spec = longrope_spec();
  // factor absent: s = 131072 / 4096 = 32, scaling sqrt(1 + ln 32 / ln 4096) (Phi-3: 1.19024).
  expect_rel(frequencies(spec).attention_scaling, std::sqrt(1.0 + std::log(32.0) / std::log(4096.0)), "derived");
  spec.scaling.factor = 1.0;
  EXPECT_EQ(frequencies(spec).attention_scaling, 1.0);
  spec.scaling.attention_factor = 1.5;
  EXPECT_EQ(frequencies(spec).attention_scaling, 1.5);
}

RopeSpec llama31_spec() {
  RopeSpec spec = base_spec(128, 500000.0);
  spec.max_position_embeddings = 131072;
  spec.scaling.type = ScalingType::Llama3;
  spec.scaling.factor = 8.0;
  spec.scaling.low_freq_factor = 1.0;
  spec.scaling.high_freq_factor = 4.0;
  spec.scaling.original_max_position_embeddings = 8192;
  return spec;
}

TEST(Frequencies, Llama3KeepsHighDividesLowBlendsBetween) {
  const Frequencies f = frequencies(llama31_spec());
  int counts[3] = {0, 0, 0};
  for (int64_t i = 0; i < 64; ++i) {
    const double theta = plain_default(5e5, i, 128);
    const double wavelength = 2 * kPi / theta;
    if (wavelength < 8192.0 / 4.0) {
      expect_rel(f.inv_freq[i], theta, "high band");
      EXPECT_EQ(f.pairs[i].regime, PairRegime::Extrapolated);
      ++counts[0];
    } else if (wavelength > 8192.0) {
      expect_rel(f.inv_freq[i], theta / 8.0, "low band");
      EXPECT_EQ(f.pairs[i].regime, PairRegime::Interpolated);
      ++counts[1];
    } else {
      const double sigma = (8192.0 / wavelength - 1.0) / 3.0;
      expect_rel(f.inv_freq[i], (1 - sigma) * theta / 8.0 + sigma * theta, "blend");
      EXPECT_EQ(f.pairs[i].regime, PairRegime::Blended);
      EXPECT_NEAR(f.pairs[i].blend, 1 - sigma, 1e-12);
      ++counts[2];
    }
  }
  // Llama 3.1 8B: wavelengths run from 6.3 to ~3.9e6 tokens; all three bands are populated.
  EXPECT_GT(counts[0], 0);
  EXPECT_GT(counts[1], 0);
  EXPECT_GT(counts[2], 0);
  EXPECT_EQ(f.attention_scaling, 1.0);
}

TEST(Frequencies, ProportionalZeroesTheUnrotatedPairs) {
  RopeSpec spec = base_spec(256, 1e6);
  spec.scaling.type = ScalingType::Proportional;
  spec.partial_rotary_factor = 0.25;  // int(0.25 * 256 // 2) = 32 rotated pairs of 128
  const Frequencies f = frequencies(spec);
  ASSERT_EQ(f.inv_freq.size(), 128u);
  for (int64_t i = 0; i < 128; ++i) {
    if (i < 32) {
      expect_rel(f.inv_freq[i], plain_default(1e6, i, 256), "rotated");  // exponent over head_dim
    } else {
      EXPECT_EQ(f.inv_freq[i], 0.0);
      EXPECT_EQ(f.pairs[i].regime, PairRegime::Unrotated);
      EXPECT_TRUE(std::isinf(f.pairs[i].wavelength_tokens));
    }
  }
}

TEST(Frequencies, ProportionalDividesByFactor) {
  RopeSpec spec = base_spec(64, 1e4);
  spec.scaling.type = ScalingType::Proportional;
  spec.scaling.factor = 2.0;
  const Frequencies f = frequencies(spec);
  expect_rel(f.inv_freq[5], plain_default(1e4, 5, 64) / 2.0, "factor");
}

TEST(Frequencies, Vision2DRestartsTheIndexPerAxis) {
  RopeSpec spec = base_spec(80);  // Qwen2-VL vision head_dim 80: 20 pairs per axis
  spec.axes = PositionAxes::Vision2D;
  const Frequencies f = frequencies(spec);
  ASSERT_EQ(f.inv_freq.size(), 40u);
  for (int64_t j = 0; j < 20; ++j) {
    expect_rel(f.inv_freq[j], plain_default(1e4, j, 40), "row");
    EXPECT_EQ(f.inv_freq[j + 20], f.inv_freq[j]);
  }
}

TEST(Frequencies, NegativeSeqLenIsAnError) {
  EXPECT_THAT([] { frequencies(base_spec(), -1); }, ThrowsMessage<Error>(HasSubstr("seq_len must be >= 0 (got -1)")));
}

TEST(Frequencies, InvalidSpecIsAConfigError) {
  RopeSpec spec = base_spec();
  spec.rotary_dim = 7;
  EXPECT_THAT([&] { frequencies(spec); }, ThrowsMessage<ConfigError>(HasSubstr("rotary_dim must be even (got 7)")));
}

TEST(Frequencies, ContextCoverageFlagsPairsPastTheirTrainedAngles) {
  const RopeSpec spec = base_spec();  // Llama 2: trained on 4096
  const Frequencies f = frequencies(spec);
  const std::vector<PairCoverage> same = context_coverage(spec, f, 4096, 4096);
  for (const PairCoverage& c : same) EXPECT_FALSE(c.out_of_distribution);
  const std::vector<PairCoverage> longer = context_coverage(spec, f, 4096, 16384);
  for (size_t i = 0; i < longer.size(); ++i) {
    const bool slow = 4096.0 * f.inv_freq[i] < 2 * kPi;
    EXPECT_EQ(longer[i].out_of_distribution, slow) << "pair " << i;
    if (slow) {
      EXPECT_NEAR(longer[i].overshoot, 16383.0 / 4096.0, 1e-12);
    }
  }
  EXPECT_TRUE(longer.back().out_of_distribution);
  EXPECT_FALSE(longer.front().out_of_distribution);
}

TEST(Frequencies, LinearScalingKeepsTheTargetWithinTrainedAngles) {
  RopeSpec spec = base_spec();
  spec.scaling.type = ScalingType::Linear;
  spec.scaling.factor = 4.0;
  const Frequencies f = frequencies(spec);
  // Positions [0, 16385) scaled by 1/4 end at 4096 = the end of the trained range [0, 4096).
  for (const PairCoverage& c : context_coverage(spec, f, 4096, 4 * 4096 + 1)) EXPECT_FALSE(c.out_of_distribution);
  // One more token and the slowest pairs step past it (16385 / 4 = 4096.25).
  EXPECT_TRUE(context_coverage(spec, f, 4096, 4 * 4096 + 2).back().out_of_distribution);
}

// frequency_seq_len() is the seq_len rule's key: two seq_lens share it exactly when their
// frequencies (the exact ones and Hugging Face's float32 chain) are identical.
TEST(Frequencies, FrequencySeqLenKeysExactlyTheSeqLensWithEqualFrequencies) {
  RopeSpec dynamic = base_spec();
  dynamic.scaling.type = ScalingType::Dynamic;
  dynamic.scaling.factor = 2.0;
  RopeSpec linear = base_spec();
  linear.scaling.type = ScalingType::Linear;
  linear.scaling.factor = 4.0;
  const std::vector<int64_t> seq_lens = {0, 1, 4095, 4096, 4097, 4098, 8192, 131072, 131073, 1000000};
  for (const RopeSpec& spec : {dynamic, longrope_spec(), linear, base_spec()}) {
    EXPECT_EQ(sequence_dependent(spec), spec.scaling.type == ScalingType::Dynamic ||
                                            spec.scaling.type == ScalingType::LongRope);
    for (int64_t a : seq_lens) {
      for (int64_t b : seq_lens) {
        const bool same_key = frequency_seq_len(spec, a) == frequency_seq_len(spec, b);
        const Frequencies fa = frequencies(spec, a);
        const Frequencies fb = frequencies(spec, b);
        const bool same = fa.inv_freq == fb.inv_freq && fa.attention_scaling == fb.attention_scaling;
        EXPECT_EQ(same_key, same) << to_string(spec.scaling.type) << " seq_len " << a << " vs " << b;
        EXPECT_EQ(same_key, detail::hf_inv_freq_f32(spec, a) == detail::hf_inv_freq_f32(spec, b))
            << to_string(spec.scaling.type) << " seq_len " << a << " vs " << b << " (float32 chain)";
      }
    }
  }
  EXPECT_EQ(frequency_seq_len(dynamic, 4096), 0);
  EXPECT_EQ(frequency_seq_len(dynamic, 4097), 4097);
  EXPECT_EQ(frequency_seq_len(longrope_spec(), 4097), 4097);
  EXPECT_EQ(frequency_seq_len(longrope_spec(), 100000), 4097);
  EXPECT_THAT([&] { frequency_seq_len(dynamic, -1); },
              ThrowsMessage<Error>(HasSubstr("frequency_seq_len: seq_len must be >= 0 (got -1)")));
}

TEST(Frequencies, ContextCoverageRejectsBadContexts) {
  const RopeSpec spec = base_spec();
  const Frequencies f = frequencies(spec);
  EXPECT_THAT([&] { context_coverage(spec, f, 0, 10); },
              ThrowsMessage<Error>(HasSubstr("trained_context must be > 0 (got 0)")));
  EXPECT_THAT([&] { context_coverage(spec, f, 10, -5); },
              ThrowsMessage<Error>(HasSubstr("target_context must be > 0 (got -5)")));
}

}  // namespace
}  // namespace rotary
