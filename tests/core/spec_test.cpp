// tests/core/spec_test.cpp: RopeSpec validation and enum names (spec.hpp).
#include "rotary/spec.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "rotary/error.hpp"
#include "tests/support/spec_builder.hpp"

namespace rotary {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

RopeSpec valid_spec() { return test::rope_spec({.name = "unit"}); }

TEST(Spec, ValidSpecPasses) { EXPECT_NO_THROW(validate(valid_spec())); }

struct SpecCase {
  const char* name;
  std::function<void(RopeSpec&)> mutate;
  std::string message;
};

std::vector<SpecCase> invalid_specs() {
  return {
      {"HeadDimZero", [](RopeSpec& s) { s.head_dim = 0; }, "head_dim must be in [2, 65536] (got 0)"},
      {"RotaryDimOdd", [](RopeSpec& s) { s.rotary_dim = 127; }, "rotary_dim must be even (got 127)"},
      {"RotaryDimZero", [](RopeSpec& s) { s.rotary_dim = 0; }, "rotary_dim must be > 0 (got 0)"},
      {"RotaryDimAboveHead", [](RopeSpec& s) { s.rotary_dim = 130; }, "rotary_dim must be <= head_dim 128 (got 130)"},
      {"ThetaOne", [](RopeSpec& s) { s.theta_base = 1.0; }, "rope_theta must be a finite number > 1 (got 1)"},
      {"ThetaNaN", [](RopeSpec& s) { s.theta_base = NAN; }, "rope_theta must be a finite number > 1 (got nan)"},
      {"PartialAboveOne", [](RopeSpec& s) { s.partial_rotary_factor = 2.0; },
       "partial_rotary_factor must be in (0, 1] (got 2)"},
      {"KvHeadsDoNotDivide",
       [](RopeSpec& s) {
         s.num_attention_heads = 32;
         s.num_key_value_heads = 6;
       },
       "num_key_value_heads must divide num_attention_heads 32 (got 6)"},
      {"LinearWithoutFactor", [](RopeSpec& s) { s.scaling.type = ScalingType::Linear; },
       "factor is required for linear scaling"},
      {"FactorBelowOne",
       [](RopeSpec& s) {
         s.scaling.type = ScalingType::Linear;
         s.scaling.factor = 0.5;
       },
       "factor must be a finite number >= 1 for linear (got 0.5)"},
      {"DynamicWithoutMax",
       [](RopeSpec& s) {
         s.scaling.type = ScalingType::Dynamic;
         s.scaling.factor = 2.0;
         s.max_position_embeddings = 0;
       },
       "max_position_embeddings must be > 0 for dynamic scaling (got 0)"},
      {"DynamicRotaryDimTwo",
       [](RopeSpec& s) {
         s.scaling.type = ScalingType::Dynamic;
         s.scaling.factor = 2.0;
         s.rotary_dim = 2;
       },
       "rotary_dim must be > 2 for dynamic"},
      {"NtkAlphaZero",
       [](RopeSpec& s) {
         s.scaling.type = ScalingType::NtkAlpha;
         s.scaling.ntk_alpha = 0.0;
       },
       "alpha must be a finite number > 0 (got 0)"},
      {"YarnBetaOrder",
       [](RopeSpec& s) {
         s.scaling.type = ScalingType::Yarn;
         s.scaling.factor = 4.0;
         s.scaling.beta_fast = 1.0;
         s.scaling.beta_slow = 2.0;
       },
       "beta_fast must be >= beta_slow 2 (got 1)"},
      {"YarnAttentionFactorZero",
       [](RopeSpec& s) {
         s.scaling.type = ScalingType::Yarn;
         s.scaling.factor = 4.0;
         s.scaling.attention_factor = 0.0;
       },
       "attention_factor must be a finite number > 0 (got 0)"},
      {"LongRopeListLength",
       [](RopeSpec& s) {
         s.scaling.type = ScalingType::LongRope;
         s.scaling.short_factor.assign(63, 1.0);
         s.scaling.long_factor.assign(64, 1.0);
       },
       "short_factor must have rotary_dim/2 = 64 elements (got 63)"},
      {"LongRopeEntryNaN",
       [](RopeSpec& s) {
         s.scaling.type = ScalingType::LongRope;
         s.scaling.short_factor.assign(64, 1.0);
         s.scaling.long_factor.assign(64, 1.0);
         s.scaling.long_factor[5] = NAN;
       },
       "long_factor[5] must be a finite number > 0 (got nan)"},
      {"Llama3BandOrder",
       [](RopeSpec& s) {
         s.scaling.type = ScalingType::Llama3;
         s.scaling.factor = 8.0;
         s.scaling.low_freq_factor = 4.0;
         s.scaling.high_freq_factor = 1.0;
       },
       "low_freq_factor must be < high_freq_factor 1 (got 4)"},
      {"ProportionalPartialRotaryDim",
       [](RopeSpec& s) {
         s.scaling.type = ScalingType::Proportional;
         s.rotary_dim = 64;
       },
       "rotary_dim must equal head_dim 128 for proportional RoPE"},
      {"XposScaleBase", [](RopeSpec& s) { s.xpos = XPos{-1.0}; }, "xpos.scale_base must be a finite number > 0 (got -1)"},
      {"MropeSum",
       [](RopeSpec& s) {
         s.axes = PositionAxes::MRope;
         s.mrope.pairs = {16, 24, 16};
       },
       "mrope_section must sum to rotary_dim/2 = 64 (got [16, 24, 16], sum 56)"},
      {"Vision2DNotMultipleOfFour",
       [](RopeSpec& s) {
         s.axes = PositionAxes::Vision2D;
         s.rotary_dim = 126;
       },
       "rotary_dim must be a multiple of 4 for 2-D vision RoPE"},
      {"Vision2DWithYarn",
       [](RopeSpec& s) {
         s.axes = PositionAxes::Vision2D;
         s.scaling.type = ScalingType::Yarn;
         s.scaling.factor = 2.0;
       },
       "2-D vision RoPE supports default and linear scaling only (got yarn)"},
  };
}

class SpecInvalid : public ::testing::TestWithParam<SpecCase> {};

TEST_P(SpecInvalid, RejectedNamingFieldAndValue) {
  RopeSpec spec = valid_spec();
  GetParam().mutate(spec);
  EXPECT_THAT([&] { validate(spec); },
              ThrowsMessage<ConfigError>(HasSubstr("RopeSpec unit: " + GetParam().message)));
}

INSTANTIATE_TEST_SUITE_P(Cases, SpecInvalid, ::testing::ValuesIn(invalid_specs()),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(Spec, OriginalContextFallsBackToMaxPositionEmbeddings) {
  RopeSpec spec = valid_spec();
  EXPECT_EQ(spec.original_context(), 4096);
  spec.scaling.original_max_position_embeddings = 1024;
  EXPECT_EQ(spec.original_context(), 1024);
}

TEST(Spec, NamesRoundTrip) {
  for (ScalingType type : {ScalingType::Default, ScalingType::Linear, ScalingType::Dynamic, ScalingType::NtkAlpha,
                           ScalingType::Yarn, ScalingType::LongRope, ScalingType::Llama3, ScalingType::Proportional}) {
    EXPECT_EQ(parse_scaling_type(to_string(type)), type);
  }
  EXPECT_EQ(parse_scaling_type("su"), ScalingType::LongRope);
  EXPECT_EQ(parse_scaling_type("nope"), std::nullopt);
  EXPECT_EQ(parse_style("neox"), Style::NeoX);
  EXPECT_EQ(parse_style("gpt-j"), Style::GPTJ);
  EXPECT_EQ(parse_style("interleaved"), Style::GPTJ);
  EXPECT_EQ(parse_style("sideways"), std::nullopt);
  EXPECT_EQ(to_string(PositionAxes::MRope), "mrope");
  EXPECT_EQ(to_string(MRopeAssignment::Interleaved), "interleaved");
}

}  // namespace
}  // namespace rotary
