// tests/analysis/divergence_test.cpp: analysis::engine_divergence against a direct computation
// with the tables themselves, its buckets, engines that cannot reproduce a spec, and bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <limits>
#include <map>
#include <cmath>

#include "rotary/analysis.hpp"
#include "rotary/error.hpp"
#include "rotary/presets.hpp"
#include "tests/support/spec_builder.hpp"

namespace rotary::analysis {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

// Float32 steps: of one sign, the float32 values between; across zero, each value's own ulps down
// to zero, so that a sign change near zero does not count the ~2^30 tiny float32 values between.
TEST(Divergence, Float32StepsCountThroughZeroInEachValuesOwnUlps) {
  const float below_one = std::nextafter(1.0f, 0.0f);
  EXPECT_EQ(float32_steps(1.0f, below_one), 1);
  EXPECT_EQ(float32_steps(-below_one, -1.0f), 1);
  EXPECT_EQ(float32_steps(1e-3f, 3e-3f), 12683575);  // one sign: the float32 values between
  // Opposite signs near zero: 8,589,935 steps of 1e-3's ulp (2^-33) each way, not the
  // 1,963,336,926 float32 values between -1e-3 and 1e-3.
  EXPECT_EQ(float32_steps(-1e-3f, 1e-3f), 17179870);
  EXPECT_EQ(float32_steps(1e-3f, -1e-3f), 17179870);
  EXPECT_EQ(float32_steps(-1e-3f, 2e-3f), 17179870);  // 2e-3 = 2 * 1e-3: the same significand
  EXPECT_EQ(float32_steps(1e-3f, 0.0f), 8589935);
  EXPECT_EQ(float32_steps(1e-3f, -0.0f), 8589935);
  EXPECT_EQ(float32_steps(0.0f, -0.0f), 0);
  const float tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(float32_steps(-tiny, tiny), 2);
  EXPECT_EQ(float32_steps(0.0f, tiny), 1);
}

// Llama 3.1's hf cos/sin cross zero against the correctly rounded value at long positions (an
// error of ~8e-3 where the value is ~1e-3): counted through zero that is below 2^25 steps; every
// float32 between them was 1,968,911,631.
TEST(Divergence, ASignChangeNearZeroCountsFewerThan2To25Steps) {
  const Divergence d = engine_divergence(preset("llama-3.1-8b").spec);
  for (const EngineDivergence& e : d.engines) {
    SCOPED_TRACE(e.label);
    EXPECT_GT(e.max_ulps, 1 << 23);
    EXPECT_LT(e.max_ulps, 1 << 25);
  }
}

TEST(Divergence, MatchesADirectComputationWithTheTables) {
  const RopeSpec spec = preset("llama-3.1-8b").spec;
  const std::vector<int64_t> positions = {0, 1, 5, 6, 1000, 70000, 131071};
  const Divergence d = engine_divergence(spec, {.positions = {70000, 0, 1, 5, 6, 1000, 131071, 5}});
  EXPECT_EQ(d.positions, positions);  // sorted, unique
  EXPECT_EQ(d.seq_len, 131072);
  ASSERT_EQ(d.engines.size(), 3u);
  const CosSinTable exact(spec, {.storage = Storage::OnTheFly});
  for (const EngineDivergence& e : d.engines) {
    SCOPED_TRACE(e.label);
    ASSERT_TRUE(e.available) << e.reason;
    TableOptions options{.precision = e.precision, .storage = Storage::OnTheFly};
    if (e.precision == Precision::Vllm) options.fixed_positions = 131072;
    const CosSinTable table(spec, options);
    // Recompute the worst abs error per octave and per pair directly.
    std::map<int64_t, double> bucket_worst;
    std::vector<double> pair_worst(64, 0.0);
    std::vector<int64_t> pair_ulps(64, 0);
    std::vector<double> ec(64), es(64);
    std::vector<float> rc(64), rs(64), c(64), s(64);
    for (const int64_t p : positions) {
      exact.row_f64(p, ec.data(), es.data());
      exact.row(p, rc.data(), rs.data());
      table.row(p, c.data(), s.data());
      const int64_t octave = p == 0 ? 0 : static_cast<int64_t>(std::bit_width(static_cast<uint64_t>(p)));
      for (int i = 0; i < 64; ++i) {
        const double err = std::max(std::abs(c[i] - ec[i]), std::abs(s[i] - es[i]));
        bucket_worst[octave] = std::max(bucket_worst[octave], err);
        pair_worst[i] = std::max(pair_worst[i], err);
        pair_ulps[i] = std::max({pair_ulps[i], float32_steps(c[i], rc[i]), float32_steps(s[i], rs[i])});
      }
    }
    ASSERT_EQ(e.buckets.size(), bucket_worst.size());
    for (const DivergenceBucket& b : e.buckets) {
      const int64_t octave = b.first == 0 ? 0 : static_cast<int64_t>(std::bit_width(static_cast<uint64_t>(b.first)));
      EXPECT_EQ(b.max_abs_error, bucket_worst[octave]) << b.first;
      EXPECT_EQ(b.last, b.first == 0 ? 0 : 2 * b.first - 1);
    }
    for (int i = 0; i < 64; ++i) {
      EXPECT_EQ(e.pairs[i].max_abs_error, pair_worst[i]) << i;
      EXPECT_EQ(e.pairs[i].max_ulps, pair_ulps[i]) << i;
    }
    // Every engine is exact at position 0 and drifts far out (a float32 angle of ~1e5 radians).
    EXPECT_LT(e.buckets.front().max_abs_error, 1e-7);
    EXPECT_GT(e.buckets.back().max_abs_error, 1e-3);
  }
}

TEST(Divergence, DefaultPositionsSampleEveryOctaveWithItsEnds) {
  const RopeSpec spec = test::rope_spec({.head_dim = 16, .max_position_embeddings = 100});
  const Divergence d = engine_divergence(spec, {.samples_per_bucket = 4});
  EXPECT_EQ(d.positions.front(), 0);
  EXPECT_EQ(d.positions.back(), 99);
  for (const int64_t end : {1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 63, 64}) {
    EXPECT_TRUE(std::binary_search(d.positions.begin(), d.positions.end(), end)) << end;
  }
  EXPECT_EQ(d.engines[0].buckets.size(), 8u);  // 0, 1, [2,3], ..., [64,127] clipped at 99
  EXPECT_EQ(d.engines[0].buckets.back().positions, 4);
}

TEST(Divergence, AnEngineThatCannotReproduceTheSpecSaysWhy) {
  RopeSpec dynamic = test::rope_spec({.name = "dyn", .head_dim = 16, .max_position_embeddings = 64});
  dynamic.scaling.type = ScalingType::Dynamic;
  dynamic.scaling.factor = 2.0;
  const Divergence d = engine_divergence(dynamic, {.positions = {0, 10, 200}});
  ASSERT_EQ(d.engines.size(), 3u);
  EXPECT_TRUE(d.engines[0].available);
  EXPECT_FALSE(d.engines[1].available);
  EXPECT_THAT(d.engines[1].reason, HasSubstr("llama.cpp has no dynamic NTK"));
  EXPECT_TRUE(d.engines[1].buckets.empty());
  EXPECT_FALSE(d.engines[2].available);
  EXPECT_THAT(d.engines[2].reason, HasSubstr("rope_type dynamic changes with the sequence length"));
}

TEST(Divergence, VllmCastToBf16IsDominatedByTheCast) {
  const RopeSpec spec = preset("llama-2-7b").spec;
  const Divergence d =
      engine_divergence(spec, {.positions = {3, 100}, .precisions = {Precision::Vllm}, .vllm_dtype = DType::BF16});
  ASSERT_EQ(d.engines.size(), 1u);
  EXPECT_EQ(d.engines[0].label, "vllm (bfloat16 cache)");
  EXPECT_GT(d.engines[0].max_abs_error, 1e-4);   // bf16 rounding, far above the angle's error here
  EXPECT_LE(d.engines[0].max_abs_error, 0x1p-9);  // half a bf16 ulp of values below 1, plus the angle's
}

TEST(Divergence, RefusesBadOptionsNamingThem) {
  const RopeSpec spec = test::rope_spec();
  EXPECT_THAT([&] { engine_divergence(spec, {.positions = {-1}}); },
              ThrowsMessage<Error>(HasSubstr("positions must be in [0, 2147483647] (got -1)")));
  EXPECT_THAT([&] { engine_divergence(spec, {.samples_per_bucket = 1}); },
              ThrowsMessage<Error>(HasSubstr("samples_per_bucket must be >= 2 (got 1)")));
  EXPECT_THAT([&] { engine_divergence(spec, {.max_position = -5}); },
              ThrowsMessage<Error>(HasSubstr("max_position must be in [1, 2147483648] (got -5)")));
  std::vector<int64_t> many(100001);
  for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<int64_t>(i);
  EXPECT_THAT([&] { engine_divergence(spec, {.positions = many}); },
              ThrowsMessage<Error>(HasSubstr("positions must number at most 100000 (got 100001)")));
}

}  // namespace
}  // namespace rotary::analysis
