// tests/analysis/diagnose_test.cpp: rotary::analysis::diagnose and compare_to_spec
// (include/rotary/diagnose.hpp). Each buggy implementation users meet is synthesized by hand
// from the spec's float64 inv_freq on random x, at most 8 rows, and must be named; correct
// implementations of four presets must give no mismatch.
#include "rotary/diagnose.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "rotary/error.hpp"
#include "rotary/frequencies.hpp"
#include "rotary/presets.hpp"

namespace rotary::analysis {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::ThrowsMessage;

enum class AngleMode { Exact, Float16CosSin, Float32Angle };

// A hand-written implementation: pair i = (pairs[i].first, pairs[i].second) turns by
// sign * (p + offset) * inv_freq[i], scaled by `scaling`; the other elements are copied.
struct Implementation {
  std::vector<double> inv_freq;
  std::vector<std::pair<int64_t, int64_t>> pairs;
  int64_t head_dim = 0;
  double scaling = 1.0;
  int64_t offset = 0;
  double sign = 1.0;
  AngleMode mode = AngleMode::Exact;
};

double round_to_float16(double value) {  // nearest float16 (normal range), ties to even
  if (value == 0.0) return 0.0;
  int exponent = 0;
  const double mantissa = std::frexp(value, &exponent);  // [0.5, 1)
  return std::ldexp(std::nearbyint(std::ldexp(mantissa, 11)), exponent - 11);
}

std::vector<std::pair<int64_t, int64_t>> neox_pairs(int64_t rotary_dim, int64_t offset = 0) {
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (int64_t i = 0; i < rotary_dim / 2; ++i) pairs.emplace_back(offset + i, offset + i + rotary_dim / 2);
  return pairs;
}
std::vector<std::pair<int64_t, int64_t>> gptj_pairs(int64_t rotary_dim, int64_t offset = 0) {
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (int64_t i = 0; i < rotary_dim / 2; ++i) pairs.emplace_back(offset + 2 * i, offset + 2 * i + 1);
  return pairs;
}

// Positions diverse enough to unwrap every pair (docs/analysis.md, "Diagnose"): a difference of
// 1, then ratios of about 8, up to 3e5.
const std::vector<int64_t> kPositions = {0, 1, 9, 70, 600, 5000, 40000, 300000};

struct Samples {
  std::vector<double> x, y;
  std::vector<int64_t> positions;
  int64_t head_dim = 0;
  DiagnoseSamples view() const { return {x, y, positions, head_dim}; }
};

Samples synthesize(const Implementation& impl, const std::vector<int64_t>& positions = kPositions,
                   uint64_t seed = 20) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  Samples s;
  s.head_dim = impl.head_dim;
  s.positions = positions;
  const size_t rows = positions.size();
  s.x.resize(rows * static_cast<size_t>(impl.head_dim));
  for (double& value : s.x) value = normal(rng);
  s.y = s.x;
  for (size_t r = 0; r < rows; ++r) {
    const double p = static_cast<double>(positions[r] + impl.offset);
    for (size_t i = 0; i < impl.pairs.size(); ++i) {
      double angle = impl.sign * p * impl.inv_freq[i];
      if (impl.mode == AngleMode::Float32Angle) {
        angle = impl.sign * static_cast<double>(static_cast<float>(p) * static_cast<float>(impl.inv_freq[i]));
      }
      double c = impl.scaling * std::cos(angle), sn = impl.scaling * std::sin(angle);
      if (impl.mode == AngleMode::Float16CosSin) {
        c = round_to_float16(c);
        sn = round_to_float16(sn);
      }
      const auto [a, b] = impl.pairs[i];
      const size_t base = r * static_cast<size_t>(impl.head_dim);
      const double xa = s.x[base + a], xb = s.x[base + b];
      s.y[base + a] = xa * c - xb * sn;
      s.y[base + b] = xb * c + xa * sn;
    }
  }
  return s;
}

// The correct implementation of a spec (NeoX or GPT-J pairing, its inv_freq and scaling at the
// samples' seq_len).
Implementation correct(const RopeSpec& spec, int64_t seq_len = kPositions.back() + 1) {
  const Frequencies f = frequencies(spec, seq_len);
  Implementation impl;
  impl.inv_freq = f.inv_freq;
  impl.scaling = f.attention_scaling;
  impl.head_dim = spec.head_dim;
  impl.pairs = spec.style == Style::NeoX ? neox_pairs(spec.rotary_dim) : gptj_pairs(spec.rotary_dim);
  return impl;
}

RopeSpec preset_spec(const char* name) { return preset(name).spec; }

std::vector<std::string> aspects(const std::vector<Mismatch>& mismatches) {
  std::vector<std::string> out;
  for (const Mismatch& m : mismatches) out.push_back(m.aspect);
  return out;
}

std::string all_messages(const std::vector<Mismatch>& mismatches) {
  std::string out;
  for (const Mismatch& m : mismatches) out += m.message + "\n";
  return out;
}

// ---- correct implementations: every finding right, no mismatch --------------------------------

TEST(Diagnose, CorrectImplementationsOfFourPresetsHaveNoMismatch) {
  for (const char* name : {"llama-3.1-8b", "qwen2.5-7b-yarn", "gpt-j-6b", "gpt-neox-20b"}) {
    SCOPED_TRACE(name);
    const RopeSpec spec = preset_spec(name);
    const Samples s = synthesize(correct(spec));
    const Diagnosis d = diagnose(s.view());
    EXPECT_EQ(d.rotary_dim, spec.rotary_dim);
    EXPECT_EQ(d.rotated_offset, 0);
    EXPECT_EQ(d.pairing, spec.style == Style::NeoX ? Pairing::HalfSplit : Pairing::Interleaved);
    EXPECT_EQ(d.direction, Direction::Forward);
    EXPECT_EQ(d.position_offset, 0);
    EXPECT_EQ(d.precision, PrecisionClass::Exact) << d.max_residual_rad;
    EXPECT_NEAR(d.attention_scaling, frequencies(spec, 300001).attention_scaling, 1e-12);
    const std::vector<double> expected = frequencies(spec, 300001).inv_freq;
    ASSERT_EQ(d.pairs.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(d.pairs[i].inv_freq / expected[i], 1.0, 1e-9) << i;
    ASSERT_FALSE(d.candidates.empty());
    EXPECT_TRUE(d.candidates.front().matches);
    const std::vector<Mismatch> mismatches = compare_to_spec(d, spec);
    EXPECT_TRUE(mismatches.empty()) << all_messages(mismatches);
  }
}

TEST(Diagnose, NearestPresetAndSchemeAreNamed) {
  const Diagnosis llama = diagnose(synthesize(correct(preset_spec("llama-3.1-8b"))).view());
  EXPECT_EQ(llama.nearest_preset, "llama-3.1-8b");
  EXPECT_EQ(llama.scheme, "per-pair scaling (llama3)");
  const Diagnosis neox = diagnose(synthesize(correct(preset_spec("gpt-neox-20b"))).view());
  EXPECT_EQ(neox.scheme, "default");
  EXPECT_NEAR(neox.fitted_theta_base.value_or(0.0), 10000.0, 1e-6);
  EXPECT_NEAR(neox.fitted_linear_factor.value_or(0.0), 1.0, 1e-9);
  const Diagnosis yarn = diagnose(synthesize(correct(preset_spec("qwen2.5-7b-yarn"))).view());
  EXPECT_EQ(yarn.nearest_preset, "qwen2.5-7b-yarn");
  EXPECT_NEAR(yarn.attention_scaling, 0.1 * std::log(4.0) + 1.0, 1e-12);
}

// ---- the buggy implementations -----------------------------------------------------

// Seed 000's bug: a half-split model rotated with interleaved pairing.
TEST(Diagnose, NamesInterleavedPairingOfAHalfSplitModel) {
  const RopeSpec spec = preset_spec("llama-3.1-8b");
  Implementation impl = correct(spec);
  impl.pairs = gptj_pairs(spec.rotary_dim);
  const Diagnosis d = diagnose(synthesize(impl).view());
  EXPECT_EQ(d.pairing, Pairing::Interleaved);
  const std::vector<Mismatch> m = compare_to_spec(d, spec);
  EXPECT_EQ(aspects(m), std::vector<std::string>{"pairing"}) << all_messages(m);
  EXPECT_THAT(all_messages(m), HasSubstr("your implementation pairs (x[2i], x[2i+1]) (interleaved, GPT-J); this "
                                         "model pairs (x[i], x[i+64]) (half-split, NeoX)"));
}

TEST(Diagnose, NamesOffByOnePositions) {
  const RopeSpec spec = preset_spec("llama-3.1-8b");
  Implementation impl = correct(spec);
  impl.offset = 1;
  const Diagnosis d = diagnose(synthesize(impl).view());
  EXPECT_EQ(d.position_offset, 1);
  const std::vector<Mismatch> m = compare_to_spec(d, spec);
  EXPECT_EQ(aspects(m), std::vector<std::string>{"position_offset"}) << all_messages(m);
  EXPECT_THAT(all_messages(m), HasSubstr("your implementation rotates position p by the angle of position p+1"));
}

TEST(Diagnose, NamesAWrongTheta) {
  RopeSpec spec = preset_spec("qwen2.5-7b");  // default, theta 1e6
  RopeSpec wrong = spec;
  wrong.theta_base = 10000.0;
  Implementation impl = correct(wrong);
  const Diagnosis d = diagnose(synthesize(impl).view());
  EXPECT_EQ(d.scheme, "default");
  EXPECT_NEAR(d.fitted_theta_base.value_or(0.0) / 10000.0, 1.0, 1e-6);
  const std::vector<Mismatch> m = compare_to_spec(d, spec);
  EXPECT_EQ(aspects(m), std::vector<std::string>{"theta"}) << all_messages(m);
  EXPECT_THAT(all_messages(m), HasSubstr("your implementation uses rope_theta 10000"));
  EXPECT_THAT(all_messages(m), HasSubstr("this model uses rope_theta 1e+06"));
}

// A subtle error: theta 10% off moves ln(inv_freq) by at most 0.095, and the tolerance (~1e-6 for
// exact samples) must still see it.
TEST(Diagnose, NamesAThetaTenPercentOff) {
  const RopeSpec spec = preset_spec("qwen2.5-7b");
  RopeSpec wrong = spec;
  wrong.theta_base = 1.1e6;
  const std::vector<Mismatch> m = compare_to_spec(diagnose(synthesize(correct(wrong)).view()), spec);
  EXPECT_EQ(aspects(m), std::vector<std::string>{"theta"}) << all_messages(m);
  EXPECT_THAT(all_messages(m), HasSubstr("your implementation uses rope_theta 1.1e+06"));
}

TEST(Diagnose, NamesAForgottenLinearFactor) {
  const HfRopeConfig config = preset("gemma-3-27b");  // global layers: linear x8
  const RopeSpec& spec = config.spec;
  ASSERT_EQ(spec.scaling.type, ScalingType::Linear);
  RopeSpec forgot = spec;
  forgot.scaling = Scaling{};
  const Diagnosis d = diagnose(synthesize(correct(forgot)).view());
  const std::vector<Mismatch> m = compare_to_spec(d, spec);
  EXPECT_EQ(aspects(m), std::vector<std::string>{"factor"}) << all_messages(m);
  EXPECT_THAT(all_messages(m), HasSubstr("your implementation uses inv_freq 8x the model's at every pair"));
  EXPECT_THAT(all_messages(m), HasSubstr("linear scaling missing"));
  EXPECT_THAT(all_messages(m), HasSubstr("this model divides inv_freq by its linear factor 8"));
}

TEST(Diagnose, NamesTheWrongHalfRotatedInPartialRotary) {
  const RopeSpec spec = preset_spec("gpt-neox-20b");  // 24 of 96 dims
  Implementation impl = correct(spec);
  impl.pairs = neox_pairs(spec.rotary_dim, spec.head_dim - spec.rotary_dim);
  const Diagnosis d = diagnose(synthesize(impl).view());
  EXPECT_EQ(d.rotated_offset, 72);
  EXPECT_EQ(d.rotary_dim, 24);
  EXPECT_EQ(d.pass_through_dims.size(), 72u);
  const std::vector<Mismatch> m = compare_to_spec(d, spec);
  EXPECT_EQ(aspects(m), std::vector<std::string>{"rotated_dims"}) << all_messages(m);
  EXPECT_THAT(all_messages(m), HasSubstr("your implementation rotates dims [72, 96) (24 dims) and passes the other 72 "
                                         "through; this model rotates dims [0, 24) (24 dims) and passes [24, 96) "
                                         "through"));
}

TEST(Diagnose, NamesAConjugateRotation) {
  const RopeSpec spec = preset_spec("gpt-j-6b");
  Implementation impl = correct(spec);
  impl.sign = -1.0;
  const Diagnosis d = diagnose(synthesize(impl).view());
  EXPECT_EQ(d.direction, Direction::Backward);
  EXPECT_EQ(d.num_pairs_against_direction, 0);
  const std::vector<Mismatch> m = compare_to_spec(d, spec);
  EXPECT_EQ(aspects(m), std::vector<std::string>{"direction"}) << all_messages(m);
  EXPECT_THAT(all_messages(m), HasSubstr("your implementation rotates by -p*theta (the inverse, conjugate rotation"));
}

TEST(Diagnose, NamesFloat16Angles) {
  const RopeSpec spec = preset_spec("llama-3.1-8b");
  Implementation impl = correct(spec);
  impl.mode = AngleMode::Float16CosSin;
  const Diagnosis d = diagnose(synthesize(impl).view());
  EXPECT_EQ(d.precision, PrecisionClass::Float16) << d.small_angle_residual_rad;
  const std::vector<Mismatch> m = compare_to_spec(d, spec);
  EXPECT_EQ(aspects(m), std::vector<std::string>{"precision"}) << all_messages(m);
  EXPECT_THAT(all_messages(m), HasSubstr("your implementation computes its angles or cos/sin in float16"));
}

TEST(Diagnose, NamesLongRopeWithTheWrongFactorSet) {
  const RopeSpec spec = preset_spec("phi-3-mini-128k");
  // Positions up to 3000 < 4096: the model uses short_factor; the implementation uses the long one.
  const std::vector<int64_t> positions = {0, 1, 7, 30, 150, 600, 1500, 3000};
  Implementation impl = correct(spec, spec.original_context() + 1);
  impl.scaling = frequencies(spec, 3001).attention_scaling;  // the same attention factor in both sets
  const Diagnosis d = diagnose(synthesize(impl, positions).view());
  EXPECT_EQ(d.nearest_preset, "phi-3-mini-128k (long factors)");
  const std::vector<Mismatch> m = compare_to_spec(d, spec);
  EXPECT_EQ(aspects(m), std::vector<std::string>{"factor_set"}) << all_messages(m);
  EXPECT_THAT(all_messages(m), HasSubstr("your implementation uses LongRoPE's long_factor at positions up to 3000; "
                                         "this model uses short_factor there (seq_len 3001 <= original context 4096)"));
}

// ---- more findings ---------------------------------------------------------------------------

TEST(Diagnose, Float32AngleDriftIsTellApartFromExactAndFloat16) {
  const RopeSpec spec = preset_spec("qwen2.5-7b");
  Implementation impl = correct(spec);
  impl.mode = AngleMode::Float32Angle;
  const Diagnosis d = diagnose(synthesize(impl).view());
  EXPECT_EQ(d.precision, PrecisionClass::Float32AngleDrift) << d.small_angle_residual_rad << " " << d.max_residual_rad;
  EXPECT_GT(d.residual_per_radian, 1e-10);
  // Drift is what Hugging Face's float32 path does: not a mismatch.
  EXPECT_TRUE(compare_to_spec(d, spec).empty()) << all_messages(compare_to_spec(d, spec));
}

TEST(Diagnose, AttentionScalingMismatchIsNamed) {
  const RopeSpec spec = preset_spec("qwen2.5-7b-yarn");
  Implementation impl = correct(spec);
  impl.scaling = 1.0;  // mscale forgotten
  const std::vector<Mismatch> m = compare_to_spec(diagnose(synthesize(impl).view()), spec);
  EXPECT_EQ(aspects(m), std::vector<std::string>{"attention_scaling"}) << all_messages(m);
  EXPECT_THAT(all_messages(m), HasSubstr("your implementation scales cos and sin by 1 (|y_pair| / |x_pair|); this "
                                         "model scales them by 1.13863"));
}

TEST(Diagnose, RowsSharingPositionsAreAccepted) {
  const RopeSpec spec = preset_spec("gpt-neox-20b");
  // Two heads per token: positions repeat.
  const Samples s = synthesize(correct(spec), {0, 0, 1, 1, 40, 40, 2000, 2000});
  const Diagnosis d = diagnose(s.view());
  EXPECT_EQ(d.num_distinct_positions, 4);
  EXPECT_TRUE(compare_to_spec(d, spec).empty()) << all_messages(compare_to_spec(d, spec));
}

TEST(Diagnose, AnotherPermutationIsListed) {
  Implementation impl = correct(preset_spec("gpt-neox-20b"));
  // Pair i = (i, 23 - i) inside the 24 rotated dims.
  impl.pairs.clear();
  for (int64_t i = 0; i < 12; ++i) impl.pairs.emplace_back(i, 23 - i);
  const Diagnosis d = diagnose(synthesize(impl).view());
  EXPECT_EQ(d.pairing, Pairing::Other);
  ASSERT_EQ(d.pairs.size(), 12u);
  for (int64_t i = 0; i < 12; ++i) {
    EXPECT_EQ(d.pairs[static_cast<size_t>(i)].first, i);
    EXPECT_EQ(d.pairs[static_cast<size_t>(i)].second, 23 - i);
  }
  const std::vector<Mismatch> m = compare_to_spec(d, preset_spec("gpt-neox-20b"));
  EXPECT_THAT(all_messages(m), HasSubstr("your implementation pairs (x[0], x[23]), (x[1], x[22])"));
}

TEST(Diagnose, NotesSayWhatTheSamplesLeaveUncertain) {
  const RopeSpec spec = preset_spec("llama-3.1-8b");
  // Small positions only, starting with a step of 4: the slowest pairs barely turn, and the
  // fastest pair turns by 4 rad in the first step.
  const Diagnosis d = diagnose(synthesize(correct(spec), {0, 4, 9, 30}).view());
  ASSERT_GE(d.notes.size(), 1u);
  EXPECT_THAT(d.notes[0], HasSubstr("rad over the sampled positions: its partner and inv_freq are uncertain"));
  // The steps 4 and 5 together tell every pair's aliases apart: the first step's size leaves
  // nothing uncertain, and no note says it does.
  EXPECT_EQ(d.num_pairs_identified, static_cast<int64_t>(d.pairs.size()));
  for (const std::string& note : d.notes) EXPECT_THAT(note, Not(HasSubstr("the first position step")));
  // Every step a multiple of 4: the fastest pair's inv_freq 1 and 1 - 2 pi / 4 fit alike.
  const Diagnosis aliased = diagnose(synthesize(correct(spec), {0, 4, 8, 32}).view());
  EXPECT_LT(aliased.num_pairs_identified, static_cast<int64_t>(aliased.pairs.size()));
  bool step_note = false;
  for (const std::string& note : aliased.notes) step_note |= note.find("the first position step, 4, turns the fastest pair by") != std::string::npos;
  EXPECT_TRUE(step_note);
  EXPECT_TRUE(diagnose(synthesize(correct(spec)).view()).notes.empty());
}

// ---- bad input ---------------------------------------------------------------------------------

TEST(Diagnose, RejectsBadInputNamingTheArgument) {
  const Samples good = synthesize(correct(preset_spec("gpt-neox-20b")));
  Samples s = good;
  s.y.pop_back();
  EXPECT_THAT([&] { diagnose(s.view()); },
              ThrowsMessage<Error>(HasSubstr("diagnose: y must hold rows * head_dim = 8 * 96 = 768 values")));
  s = good;
  s.x[100] = std::nan("");
  EXPECT_THAT([&] { diagnose(s.view()); },
              ThrowsMessage<Error>(HasSubstr("diagnose: x must be finite (got nan at row 1, column 4)")));
  s = good;
  s.positions.assign(8, 5);
  EXPECT_THAT([&] { diagnose(s.view()); },
              ThrowsMessage<Error>(HasSubstr("positions must hold at least 2 distinct values to separate theta from "
                                             "the offset (got all 8 rows at position 5)")));
  Samples one = good;
  one.positions = {3};
  one.x.resize(96);
  one.y.resize(96);
  EXPECT_THAT([&] { diagnose(one.view()); },
              ThrowsMessage<Error>(HasSubstr("diagnose: positions must hold at least 2 rows (got 1)")));
  s = good;
  s.y = s.x;
  EXPECT_THAT([&] { diagnose(s.view()); }, ThrowsMessage<Error>(HasSubstr("diagnose: y must differ from x")));
  s = good;
  s.positions[2] = -4;
  EXPECT_THAT([&] { diagnose(s.view()); }, ThrowsMessage<Error>(HasSubstr("(got -4 at row 2)")));
}

// ---- y that is not a rotation, and what the samples cannot tell -------------------------------

TEST(Diagnose, RefusesSamplesThatAreNotARotationWithTheReason) {
  const Samples good = synthesize(correct(preset_spec("llama-3.1-8b")));
  Samples s = good;
  for (size_t k = 0; k < s.y.size(); ++k) s.y[k] = 2.0 * s.x[k];
  EXPECT_THAT([&] { diagnose(s.view()); },
              ThrowsMessage<Error>(HasSubstr("diagnose: y is not a rotation of x by a position-dependent angle: every "
                                             "pair has the same angle at all 8 distinct positions (y = 2 * x: nothing "
                                             "rotates)")));
  // -x turns every pair by pi, at every position: a rotation, but not RoPE (no theta to infer).
  for (size_t k = 0; k < s.y.size(); ++k) s.y[k] = -s.x[k];
  EXPECT_THAT([&] { diagnose(s.view()); },
              ThrowsMessage<Error>(HasSubstr("(y = -1 * x: every pair turned by pi)")));
  s.y.assign(s.y.size(), 0.0);
  EXPECT_THAT([&] { diagnose(s.view()); },
              ThrowsMessage<Error>(HasSubstr("diagnose: y is not a rotation of x: y is 0 at all 128 changed elements "
                                             "in all 8 rows")));
  std::mt19937_64 rng(5);
  std::normal_distribution<double> normal;
  for (double& value : s.y) value = normal(rng);
  EXPECT_THAT([&] { diagnose(s.view()); },
              ThrowsMessage<Error>(HasSubstr("diagnose: y is not a rotation of x pair by pair: no pairing keeps each "
                                             "pair's norm ratio |y_pair|^2 / |x_pair|^2 the same in all 8 rows")));
}

// A pair with theta 0 but scaled (not a pass-through dim) fits inv_freq ~0: its log deviation from
// any preset is huge or infinite, and so was its tolerance (8 noise / (theta span)); neither
// inf <= inf nor a tolerance blown up by the near-zero theta may match.
TEST(Diagnose, NoCandidateMatchesAPairThatDoesNotTurn) {
  const RopeSpec spec = preset_spec("qwen2.5-7b-yarn");  // attention scaling 1.1386
  Implementation impl = correct(spec);
  impl.inv_freq.back() = 0.0;
  const Diagnosis d = diagnose(synthesize(impl).view());
  ASSERT_FALSE(d.candidates.empty());
  EXPECT_LT(d.pairs.back().inv_freq, 1e-15);
  for (const FrequencyCandidate& candidate : d.candidates) {
    EXPECT_FALSE(candidate.matches) << candidate.name;
    EXPECT_GT(candidate.max_log_deviation, 10.0) << candidate.name;
  }
  EXPECT_EQ(d.scheme, "per-pair scaling (unknown)");
  const std::vector<Mismatch> m = compare_to_spec(d, spec);
  EXPECT_EQ(aspects(m), std::vector<std::string>{"inv_freq"}) << all_messages(m);
  EXPECT_THAT(all_messages(m), HasSubstr("this model has inv_freq[63] = 3.10234e-07 (yarn, rope_theta 1e+06)"));
}

// Eight sorted random positions in [0, 8192): no step of 1, so the running-slope unwrapping
// fails on the fast pairs. The result may say "cannot tell" or be right, never a false mismatch.
std::vector<int64_t> sorted_random_positions(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> uniform(0, 8191);
  std::set<int64_t> drawn;
  while (drawn.size() < 8) drawn.insert(uniform(rng));
  return {drawn.begin(), drawn.end()};
}

TEST(Diagnose, InterleavedPairingBugAtRandomPositionsNamesNoFalseMismatch) {
  const RopeSpec spec = preset_spec("llama-3.1-8b");
  Implementation impl;
  for (const uint64_t seed : {1, 2, 3, 4}) {
    const std::vector<int64_t> positions = sorted_random_positions(seed);
    SCOPED_TRACE(::testing::PrintToString(positions));
    impl = correct(spec, positions.back() + 1);
    impl.pairs = gptj_pairs(spec.rotary_dim);
    const Diagnosis d = diagnose(synthesize(impl, positions).view());
    EXPECT_EQ(d.pairing, Pairing::Interleaved);
    if (d.direction) EXPECT_EQ(*d.direction, Direction::Forward);
    if (d.position_offset) EXPECT_EQ(*d.position_offset, 0);
    if (d.precision) EXPECT_EQ(*d.precision, PrecisionClass::Exact);
    if (!d.scheme.empty()) EXPECT_EQ(d.nearest_preset, "llama-3.1-8b");
    const std::vector<Mismatch> m = compare_to_spec(d, spec);
    EXPECT_EQ(aspects(m), std::vector<std::string>{"pairing"}) << all_messages(m);
  }
}

TEST(Diagnose, ThetaBugAtRandomPositionsIsNamedOrLeftUntold) {
  const RopeSpec spec = preset_spec("qwen2.5-7b");  // theta 1e6
  RopeSpec wrong = spec;
  wrong.theta_base = 10000.0;
  for (const uint64_t seed : {1, 2, 3, 4}) {
    const std::vector<int64_t> positions = sorted_random_positions(seed);
    SCOPED_TRACE(::testing::PrintToString(positions));
    const Diagnosis d = diagnose(synthesize(correct(wrong, positions.back() + 1), positions).view());
    if (d.position_offset) EXPECT_EQ(*d.position_offset, 0);
    if (d.precision) EXPECT_EQ(*d.precision, PrecisionClass::Exact);
    if (d.direction) EXPECT_EQ(*d.direction, Direction::Forward);
    for (size_t i = 0; i < d.pairs.size(); ++i) {
      if (!d.pairs[i].identified) continue;
      const double expected = std::pow(10000.0, -2.0 * static_cast<double>(i) / 128.0);
      EXPECT_NEAR(std::log(d.pairs[i].inv_freq / expected), 0.0, d.inv_freq_tolerance[i]) << i;
    }
    const std::vector<Mismatch> m = compare_to_spec(d, spec);
    ASSERT_EQ(m.size(), 1u) << all_messages(m);  // the bug, in either words
    if (d.fitted_theta_base) {
      EXPECT_EQ(m[0].aspect, "theta");
      EXPECT_THAT(m[0].message, HasSubstr("your implementation uses rope_theta 10000"));
    } else {
      EXPECT_EQ(m[0].aspect, "inv_freq");
      EXPECT_THAT(m[0].message, HasSubstr(std::string(kCannotTell)));
    }
  }
}

// Positions 0, 4, 8, 12: every difference is a multiple of 4, so theta and theta + pi/2 fit the
// same angles. The fast pairs cannot be identified; nothing is claimed about theta.
TEST(Diagnose, AliasedPositionsSayCannotTell) {
  const RopeSpec spec = preset_spec("llama-3.1-8b");
  const std::vector<int64_t> positions = {0, 4, 8, 12, 16, 20, 24, 28};
  const Diagnosis d = diagnose(synthesize(correct(spec, 29), positions).view());
  EXPECT_LT(d.num_pairs_identified, 64);
  EXPECT_FALSE(d.pairs.front().identified);
  EXPECT_THAT(d.cannot_tell, ::testing::Contains("theta"));
  EXPECT_FALSE(d.fitted_theta_base.has_value());
  EXPECT_TRUE(d.scheme.empty());
  EXPECT_TRUE(d.nearest_preset.empty());
  EXPECT_TRUE(d.candidates.empty());
  for (const Mismatch& m : compare_to_spec(d, spec)) {
    EXPECT_NE(m.aspect, "theta");
    EXPECT_NE(m.aspect, "inv_freq");
    EXPECT_NE(m.aspect, "factor");
  }
}

// cos and sin swapped: y = x sin(p theta) + rotate_half(x) cos(p theta) turns each pair by
// pi/2 - p theta (a backward slope and a constant pi/2), named as the swap.
TEST(Diagnose, NamesSwappedCosAndSin) {
  const RopeSpec spec = preset_spec("llama-3.1-8b");
  Samples s = synthesize(correct(spec));
  const Frequencies f = frequencies(spec, kPositions.back() + 1);
  for (size_t r = 0; r < kPositions.size(); ++r) {
    for (size_t i = 0; i < 64; ++i) {
      const double angle = static_cast<double>(kPositions[r]) * f.inv_freq[i];
      const size_t a = r * 128 + i, b = a + 64;
      s.y[a] = s.x[a] * std::sin(angle) - s.x[b] * std::cos(angle);
      s.y[b] = s.x[b] * std::sin(angle) + s.x[a] * std::cos(angle);
    }
  }
  const Diagnosis d = diagnose(s.view());
  EXPECT_TRUE(d.cos_sin_swapped);
  EXPECT_NEAR(d.constant_phase_rad, std::numbers::pi / 2, 1e-15);
  EXPECT_EQ(d.position_offset, std::optional<int64_t>(0));
  const std::vector<Mismatch> m = compare_to_spec(d, spec);
  EXPECT_EQ(aspects(m), std::vector<std::string>{"cos_sin"}) << all_messages(m);
  EXPECT_THAT(all_messages(m), HasSubstr("your implementation swaps cos and sin (y = x * sin + rotate_half(x) * cos: "
                                         "every pair turns by pi/2 - p*theta)"));
}

// The findings are not constant: the same synthesis with the bug removed gives no mismatch, so each
// test above fails if diagnose() stops seeing its bug (the tests can fail).
TEST(Diagnose, EachBugDisappearsWhenFixed) {
  const RopeSpec spec = preset_spec("llama-3.1-8b");
  Implementation impl = correct(spec);
  impl.offset = 3;
  EXPECT_EQ(diagnose(synthesize(impl).view()).position_offset, 3);
  impl.offset = -2;
  EXPECT_EQ(diagnose(synthesize(impl).view()).position_offset, -2);
  impl.offset = 0;
  EXPECT_TRUE(compare_to_spec(diagnose(synthesize(impl).view()), spec).empty());
}

}  // namespace
}  // namespace rotary::analysis
