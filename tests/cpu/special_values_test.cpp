// tests/cpu/special_values_test.cpp: apply() and its backward on NaN and infinite inputs. A
// rotation is a*C - c*S, c*C + a*S per pair: IEEE arithmetic carries NaN and infinities through
// (inf * 0 at position 0, where S = 0, is NaN; inf - inf is NaN), and the kernels compute the same
// products as the float64 reference, so the fast path must be NaN exactly where the reference is,
// infinite (with the same sign) exactly where it is, and within rounding elsewhere. Elements
// outside the rotated block pass through unchanged, NaN included. Every compiled SIMD target,
// float32 / bfloat16 / float16, both pairings, partial rotary, forward and backward, positions
// that include 0.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/spec.hpp"
#include "rotary/table.hpp"
#include "rotary/tensor.hpp"
#include "tests/support/attention_bound.hpp"  // storage_ulp: one unit of bf16 / f16
#include "tests/support/cpu_scope.hpp"
#include "tests/support/elements.hpp"

namespace rotary {
namespace {

using test::ForcedTarget;
using test::load_element;
using test::store_element;

TEST(ApplySpecialValues, NanAndInfinityPropagateAsInTheReference) {
  constexpr int64_t kBatch = 1, kSeq = 9, kHeads = 3, kDim = 40;
  const double specials[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity()};
  for (const std::string& target : cpu_targets()) {
    ForcedTarget forced(target);
    std::mt19937_64 rng(17);
    int64_t nan_seen = 0, inf_seen = 0;
    for (int trial = 0; trial < 24; ++trial) {
      const DType dtype = std::array<DType, 3>{DType::F32, DType::BF16, DType::F16}[trial % 3];
      RopeSpec spec;
      spec.head_dim = kDim;
      spec.rotary_dim = trial % 2 == 0 ? kDim : 24;  // partial: 16 elements pass through
      spec.style = (trial / 2) % 2 == 0 ? Style::NeoX : Style::GPTJ;
      const CosSinTable table(spec);
      const Direction direction = (trial / 4) % 2 == 0 ? Direction::Forward : Direction::Backward;
      const int64_t count = kBatch * kSeq * kHeads * kDim;
      std::vector<double> x_storage(static_cast<size_t>(count / 2 + 2)), fast_storage(x_storage.size());
      std::vector<double> x64(static_cast<size_t>(count)), ref64(static_cast<size_t>(count));
      std::uniform_real_distribution<double> value(-1.0, 1.0);
      for (int64_t i = 0; i < count; ++i) store_element(x_storage.data(), dtype, i, value(rng));
      for (int n = 0; n < 6; ++n) {  // specials at random places, in and outside the rotated block
        store_element(x_storage.data(), dtype, static_cast<int64_t>(rng() % static_cast<uint64_t>(count)), specials[rng() % 3]);
      }
      for (int64_t i = 0; i < count; ++i) x64[static_cast<size_t>(i)] = load_element(x_storage.data(), dtype, i);
      std::vector<int64_t> positions(static_cast<size_t>(kBatch * kSeq));
      for (int64_t s = 0; s < kSeq; ++s) positions[static_cast<size_t>(s)] = s == 0 ? 0 : static_cast<int64_t>(rng() % 5000);
      const TensorView x = contiguous_view(x_storage.data(), dtype, Layout::BSHD, {kBatch, kSeq, kHeads, kDim});
      const TensorView fast = contiguous_view(fast_storage.data(), dtype, Layout::BSHD, {kBatch, kSeq, kHeads, kDim});
      const TensorView x_ref = contiguous_view(x64.data(), DType::F64, Layout::BSHD, {kBatch, kSeq, kHeads, kDim});
      const TensorView ref = contiguous_view(ref64.data(), DType::F64, Layout::BSHD, {kBatch, kSeq, kHeads, kDim});
      const Positions per_token = Positions::per_token(positions);
      apply(x, TensorView{}, fast, TensorView{}, per_token, table, {.direction = direction});
      reference::apply(x_ref, TensorView{}, ref, TensorView{}, per_token, table, {.direction = direction});
      // docs/numerics.md, "The SIMD kernels": 2u M plus each side's rounding, M = |a C| + |c S| <= 2
      // for finite inputs in [-1, 1] (attention scaling 1): float32 u |ref|, bf16 / f16 one unit.
      constexpr double kArithmetic = 2 * 0x1p-24 * 2 + 0x1p-50 * 2;
      for (int64_t i = 0; i < count; ++i) {
        const double f = load_element(fast_storage.data(), dtype, i), r = ref64[static_cast<size_t>(i)];
        SCOPED_TRACE(target + " trial " + std::to_string(trial) + " element " + std::to_string(i));
        if (std::isnan(r)) {
          ++nan_seen;
          ASSERT_TRUE(std::isnan(f)) << f;
        } else if (std::isinf(r)) {
          ++inf_seen;
          ASSERT_EQ(f, r);
        } else {
          ASSERT_TRUE(std::isfinite(f)) << f << " vs " << r;
          const double larger = std::max(std::abs(f), std::abs(r));
          const double storage = dtype == DType::F32 ? 0x1p-24 * std::abs(r) : test::storage_ulp(dtype, larger);
          ASSERT_LE(std::abs(f - r), kArithmetic + storage) << f << " vs " << r;
        }
      }
    }
    EXPECT_GT(nan_seen, 20) << target;  // the cases are not vacuous
    EXPECT_GT(inf_seen, 5) << target;
  }
}

}  // namespace
}  // namespace rotary
