// tests/attention/attention_test.cpp: include/rotary/attention.hpp — the float64 reference on
// hand-computed cases, the argument checks (messages), and the fast path against the reference on
// random shapes, strides, layouts, dtypes, GQA ratios, masks, windows, offsets, lengths and fused
// RoPE, on every compiled SIMD target.
//
// Tolerance of the fast path (docs/attention.md, "Error analysis"), per output element e of a
// query with n visible keys, u = 2^-24:
//   E   = (d + 6) u * max_j A_j,  A_j = scale * sum_e |q~_e| |k~_je|        score error bound
//         (d roundings in the float32 dot product whatever the lane split, 2 for q * fl32(scale),
//         2 + 2 for the float32 rotations of q and k; q~ = |a||C| + |c||S| on rotated elements)
//   eta = E + 110 u                                     relative error of each exp weight (exp is
//         1 ulp; the rounding of s - m costs u |s - m| <= 104 u where the weight is not 0)
//   acc = (n + 2 * tiles + 4) u                          float32 sums over n keys, a rescale per tile
//   |fast - ref64| <= Vbar_e * (2 eta (1 + 2 eta) + 2 acc) + storage
//         Vbar_e = max_{visible j} |v_je|; storage = u |ref| (float32), storage_ulp(max(|fast|, |ref|))
//         (bfloat16 / float16: p = 7 / 10 bits, at least the smallest subnormal).
// The reference runs on float64 copies of the inputs (exact widening), so `ref64` has no storage
// rounding. ToleranceRejectsAnOffByOneMask shows the bound is tight enough to catch a wrong mask.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/attention.hpp"
#include "rotary/encodings.hpp"
#include "rotary/error.hpp"
#include "rotary/spec.hpp"
#include "rotary/table.hpp"
#include "rotary/tensor.hpp"
#include "tests/support/attention_bound.hpp"
#include "tests/support/elements.hpp"
#include "tests/support/cpu_scope.hpp"
#include "attention/amx_bf16.hpp"
#include "attention/bf16_dot.hpp"
#include "attention/kernels.hpp"
#include "attention/plan.hpp"
#include "tests/attention/attention_tensors.hpp"

namespace rotary {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

constexpr double kU = 0x1p-24;

using test::ForcedTarget;
using test::SavedThreadCount;

using test::make;  // tests/attention/attention_tensors.hpp
using test::Rng;
using test::Tensor;

// ---- the reference on numbers worked by hand ----------------------------------------------------

// One sequence of 2 tokens, 1 head, head_dim 2, scale 1:
//   q0 = (1, 0), q1 = (0, 1); k0 = (1, 0), k1 = (0, 2); v0 = (1, 2), v1 = (3, 4).
//   Query 0: scores (1, 0): weights e/(1+e), 1/(1+e) = 0.7310585786300049, 0.2689414213699951
//            out = (1, 2) + 2 * 0.2689414213699951 * (1, 1) = (1.5378828427399902, 2.5378828427399902)
//   Query 1: scores (0, 2): weights 1/(1+e^2), e^2/(1+e^2) = 0.11920292202211755, 0.8807970779778825
//            out = (1, 2) + 2 * 0.8807970779778825 * (1, 1) = (2.7615941559557646, 3.7615941559557646)
struct TwoTokens {
  Tensor q = make(DType::F64, Layout::BSHD, 1, 2, 1, 2), k = q, v = q, out = q;
  TwoTokens() {
    k = make(DType::F64, Layout::BSHD, 1, 2, 1, 2);
    v = make(DType::F64, Layout::BSHD, 1, 2, 1, 2);
    out = make(DType::F64, Layout::BSHD, 1, 2, 1, 2);
    q.set(0, 0, 0, 0, 1), q.set(0, 0, 0, 1, 0), q.set(0, 1, 0, 0, 0), q.set(0, 1, 0, 1, 1);
    k.set(0, 0, 0, 0, 1), k.set(0, 0, 0, 1, 0), k.set(0, 1, 0, 0, 0), k.set(0, 1, 0, 1, 2);
    v.set(0, 0, 0, 0, 1), v.set(0, 0, 0, 1, 2), v.set(0, 1, 0, 0, 3), v.set(0, 1, 0, 1, 4);
  }
  std::array<double, 4> run(const AttentionOptions& options) {
    reference::attention(q.view, k.view, v.view, out.view, options);
    return {out.at(0, 0, 0, 0), out.at(0, 0, 0, 1), out.at(0, 1, 0, 0), out.at(0, 1, 0, 1)};
  }
};

TEST(AttentionReference, TwoTokensNoMaskMatchesHandComputedSoftmax) {
  TwoTokens t;
  const auto out = t.run({.scale = 1.0});
  EXPECT_NEAR(out[0], 1.5378828427399902, 1e-15);
  EXPECT_NEAR(out[1], 2.5378828427399902, 1e-15);
  EXPECT_NEAR(out[2], 2.7615941559557646, 1e-15);
  EXPECT_NEAR(out[3], 3.7615941559557646, 1e-15);
}

TEST(AttentionReference, TwoTokensCausalFirstQuerySeesOnlyItself) {
  TwoTokens t;
  const auto out = t.run({.scale = 1.0, .mask = Mask::Causal});
  EXPECT_EQ(out[0], 1.0);
  EXPECT_EQ(out[1], 2.0);
  EXPECT_NEAR(out[2], 2.7615941559557646, 1e-15);
  EXPECT_NEAR(out[3], 3.7615941559557646, 1e-15);
}

TEST(AttentionReference, TwoTokensWindowOfOneSeesOnlyTheOwnPosition) {
  TwoTokens t;
  const auto out = t.run({.scale = 1.0, .mask = Mask::Causal, .window = 1});
  EXPECT_EQ(out[0], 1.0);
  EXPECT_EQ(out[1], 2.0);
  EXPECT_EQ(out[2], 3.0);
  EXPECT_EQ(out[3], 4.0);
}

TEST(AttentionReference, TwoTokensQueryOffsetShiftsTheCausalEdge) {
  // Offset 1: query 0 sits at position 1 and sees both keys (the no-mask result); query 1 too.
  TwoTokens t;
  const auto out = t.run({.scale = 1.0, .mask = Mask::Causal, .query_offset = 1});
  EXPECT_NEAR(out[0], 1.5378828427399902, 1e-15);
  EXPECT_NEAR(out[2], 2.7615941559557646, 1e-15);
}

TEST(AttentionReference, DefaultScaleIsOneOverSqrtHeadDim) {
  // Query 1 with scale 1/sqrt(2): scores (0, sqrt(2)); out = (1, 2) + 2 * w1 with
  // w1 = 1 / (1 + exp(-sqrt(2))) = 0.8044296825069569.
  TwoTokens t;
  const auto out = t.run({});
  EXPECT_NEAR(out[2], 1.0 + 2 * 0.8044296825069569, 1e-14);
}

TEST(AttentionReference, FullyMaskedRowIsZeros) {
  TwoTokens t;
  const std::vector<int64_t> no_keys{0};
  const auto out = t.run({.scale = 1.0, .kv_lengths = no_keys});
  EXPECT_THAT(out, ::testing::Each(0.0));
}

TEST(AttentionReference, TwoTokensKvStartHidesTheKeysBeforeIt) {
  // kv_starts {1}: key 0 is padding. Causal: query 0 (position 0) sees no key (zeros), query 1
  // sees key 1 alone (v_1); no mask: both see key 1 alone.
  TwoTokens t;
  const std::vector<int64_t> start_1{1};
  EXPECT_EQ(t.run({.scale = 1.0, .mask = Mask::Causal, .kv_starts = start_1}), (std::array<double, 4>{0, 0, 3, 4}));
  EXPECT_EQ(t.run({.scale = 1.0, .kv_starts = start_1}), (std::array<double, 4>{3, 4, 3, 4}));
}

// ---- argument checks -----------------------------------------------------------------------------

struct Small {
  Tensor q = make(DType::F32, Layout::BSHD, 2, 3, 4, 8);
  Tensor k = make(DType::F32, Layout::BSHD, 2, 5, 2, 8);
  Tensor v = make(DType::F32, Layout::BSHD, 2, 5, 2, 8);
  Tensor out = make(DType::F32, Layout::BSHD, 2, 3, 4, 8);
};

TEST(AttentionArgs, RejectsKvHeadsThatDoNotDivideQHeadsNamingBoth) {
  Small s;
  Tensor k3 = make(DType::F32, Layout::BSHD, 2, 5, 3, 8), v3 = make(DType::F32, Layout::BSHD, 2, 5, 3, 8);
  EXPECT_THAT([&] { attention(s.q.view, k3.view, v3.view, s.out.view); },
              ThrowsMessage<Error>(HasSubstr("attention: k heads must divide q heads, 4 (got 3)")));
}

TEST(AttentionArgs, RejectsNegativeWindowNamingIt) {
  Small s;
  EXPECT_THAT([&] { attention(s.q.view, s.k.view, s.v.view, s.out.view, {.window = -2}); },
              ThrowsMessage<Error>(HasSubstr("options.window must be >= 0 (0 = no window) (got -2)")));
}

TEST(AttentionArgs, RejectsKvLengthsThatDisagreeWithTheTensors) {
  Small s;
  const std::vector<int64_t> three{1, 2, 3}, too_long{1, 6};
  EXPECT_THAT([&] { attention(s.q.view, s.k.view, s.v.view, s.out.view, {.kv_lengths = three}); },
              ThrowsMessage<Error>(HasSubstr("options.kv_lengths must hold one value per sequence, 2 (got 3)")));
  EXPECT_THAT([&] { attention(s.q.view, s.k.view, s.v.view, s.out.view, {.kv_lengths = too_long}); },
              ThrowsMessage<Error>(HasSubstr("options.kv_lengths[1] must be in [0, 5] (k's seq) (got 6)")));
}

TEST(AttentionArgs, RejectsKvStartsThatDisagreeWithTheTensors) {
  Small s;
  const std::vector<int64_t> three{1, 2, 3}, past_k{0, 6}, negative{-1, 0}, lengths{5, 2}, past_length{0, 3};
  EXPECT_THAT([&] { attention(s.q.view, s.k.view, s.v.view, s.out.view, {.kv_starts = three}); },
              ThrowsMessage<Error>(HasSubstr("options.kv_starts must hold one value per sequence, 2 (got 3)")));
  EXPECT_THAT([&] { attention(s.q.view, s.k.view, s.v.view, s.out.view, {.kv_starts = past_k}); },
              ThrowsMessage<Error>(HasSubstr("options.kv_starts[1] must be in [0, 5] (k's seq) (got 6)")));
  EXPECT_THAT([&] { attention(s.q.view, s.k.view, s.v.view, s.out.view, {.kv_starts = negative}); },
              ThrowsMessage<Error>(HasSubstr("options.kv_starts[0] must be in [0, 5] (k's seq) (got -1)")));
  EXPECT_THAT([&] { reference::attention(s.q.view, s.k.view, s.v.view, s.out.view, {.kv_lengths = lengths, .kv_starts = past_length}); },
              ThrowsMessage<Error>(HasSubstr("options.kv_starts[1] must be in [0, 2] (its kv_lengths) (got 3)")));
  Tensor q = make(DType::F32, Layout::THD, 1, 6, 2, 8), k = make(DType::F32, Layout::THD, 1, 6, 2, 8);
  Tensor v = make(DType::F32, Layout::THD, 1, 6, 2, 8), out = make(DType::F32, Layout::THD, 1, 6, 2, 8);
  const std::vector<int64_t> cu{0, 2, 6}, starts{0, 1};
  EXPECT_THAT([&] { attention(q.view, k.view, v.view, out.view, {.kv_starts = starts, .cu_seqlens_q = cu, .cu_seqlens_k = cu}); },
              ThrowsMessage<Error>(HasSubstr("options.kv_starts must be empty for layout thd")));
}

// Left padding two ways: kv_starts on the whole batch, and each sequence's own call on the keys
// from its start (the query offset moved back by the start, so every position relation is the
// same). The float64 reference gives the same bits both ways (the same keys, in the same order);
// the fast path agrees within float32 rounding, on every dtype's float32 form.
TEST(AttentionCpu, KvStartsEqualEachSequenceOnItsKeysFromTheStart) {
  Rng rng(7);
  const int64_t batch = 3, q_seq = 5, k_seq = 40, kv_heads = 2, group = 2, dim = 16;
  const std::vector<int64_t> starts{0, 7, 33}, offsets{35, 35, 35}, lengths{40, 38, 40};
  for (const bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "no mask");
    Tensor q(DType::F64, Layout::BHSD, batch, q_seq, kv_heads * group, dim), k(DType::F64, Layout::BHSD, batch, k_seq, kv_heads, dim);
    Tensor v(DType::F64, Layout::BHSD, batch, k_seq, kv_heads, dim), out(DType::F64, Layout::BHSD, batch, q_seq, kv_heads * group, dim);
    q.fill(rng), k.fill(rng), v.fill(rng);
    const Mask mask = causal ? Mask::Causal : Mask::None;
    reference::attention(q.view, k.view, v.view, out.view,
                         {.mask = mask, .query_offsets = offsets, .kv_lengths = lengths, .kv_starts = starts});
    Tensor q32(DType::F32, Layout::BHSD, batch, q_seq, kv_heads * group, dim), k32(DType::F32, Layout::BHSD, batch, k_seq, kv_heads, dim);
    Tensor v32(DType::F32, Layout::BHSD, batch, k_seq, kv_heads, dim), out32(DType::F32, Layout::BHSD, batch, q_seq, kv_heads * group, dim);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < kv_heads * group; ++h)
        for (int64_t e = 0; e < dim; ++e) {
          for (int64_t i = 0; i < q_seq; ++i) q32.set(b, i, h, e, q.at(b, i, h, e));
          for (int64_t j = 0; j < k_seq && h < kv_heads; ++j) k32.set(b, j, h, e, k.at(b, j, h, e)), v32.set(b, j, h, e, v.at(b, j, h, e));
        }
    attention(q32.view, k32.view, v32.view, out32.view,
              {.mask = mask, .query_offsets = offsets, .kv_lengths = lengths, .kv_starts = starts});
    for (int64_t b = 0; b < batch; ++b) {
      const auto ub = static_cast<size_t>(b);
      const int64_t keys = lengths[ub] - starts[ub];
      // Sequence b alone, its keys from the start: views into the same buffers.
      const auto slice = [&](const Tensor& t, int64_t first, int64_t count) {
        TensorView view = t.view;
        view.data = static_cast<char*>(t.view.data) + (b * t.axes.stride_batch + first * t.axes.stride_seq) * dtype_size(t.view.dtype);
        view.shape[0] = 1;
        view.shape[2] = count;
        return view;
      };
      Tensor alone(DType::F64, Layout::BHSD, 1, q_seq, kv_heads * group, dim), alone32(DType::F32, Layout::BHSD, 1, q_seq, kv_heads * group, dim);
      const AttentionOptions shifted{.mask = mask, .query_offset = offsets[ub] - starts[ub]};
      reference::attention(slice(q, 0, q_seq), slice(k, starts[ub], keys), slice(v, starts[ub], keys), alone.view, shifted);
      attention(slice(q32, 0, q_seq), slice(k32, starts[ub], keys), slice(v32, starts[ub], keys), alone32.view, shifted);
      for (int64_t h = 0; h < kv_heads * group; ++h)
        for (int64_t i = 0; i < q_seq; ++i)
          for (int64_t e = 0; e < dim; ++e) {
            ASSERT_EQ(out.at(b, i, h, e), alone.at(0, i, h, e)) << "b " << b << " h " << h << " i " << i << " e " << e;
            ASSERT_NEAR(out32.at(b, i, h, e), alone32.at(0, i, h, e), 1e-6) << "b " << b << " h " << h << " i " << i;
            ASSERT_NEAR(out32.at(b, i, h, e), alone.at(0, i, h, e), 1e-5) << "b " << b << " h " << h << " i " << i;
          }
    }
  }
}

TEST(AttentionArgs, RejectsCuSeqlensThatDoNotEndAtTheTokenCount) {
  Tensor q = make(DType::F32, Layout::THD, 1, 6, 2, 8), k = make(DType::F32, Layout::THD, 1, 6, 2, 8);
  Tensor v = make(DType::F32, Layout::THD, 1, 6, 2, 8), out = make(DType::F32, Layout::THD, 1, 6, 2, 8);
  const std::vector<int64_t> good{0, 2, 6}, bad{0, 2, 5};
  EXPECT_THAT([&] { attention(q.view, k.view, v.view, out.view, {.cu_seqlens_q = good, .cu_seqlens_k = bad}); },
              ThrowsMessage<Error>(HasSubstr("options.cu_seqlens_k must end at the token count 6 (got 5)")));
  EXPECT_THAT([&] { attention(q.view, k.view, v.view, out.view); },
              ThrowsMessage<Error>(HasSubstr("options.cu_seqlens_q is required for layout thd")));
}

TEST(AttentionArgs, RejectsMismatchedShapesNullDataAndOverlap) {
  Small s;
  Tensor k_dim = make(DType::F32, Layout::BSHD, 2, 5, 2, 6);
  EXPECT_THAT([&] { attention(s.q.view, k_dim.view, s.v.view, s.out.view); },
              ThrowsMessage<Error>(HasSubstr("attention: k head_dim must equal q's, 8 (got 6)")));
  TensorView null_q = s.q.view;
  null_q.data = nullptr;
  EXPECT_THAT([&] { attention(null_q, s.k.view, s.v.view, s.out.view); },
              ThrowsMessage<Error>(HasSubstr("q.data must not be null")));
  EXPECT_THAT([&] { attention(s.q.view, s.k.view, s.v.view, s.q.view); },
              ThrowsMessage<Error>(HasSubstr("out must not overlap q")));
  TensorView bad_dtype = s.out.view;
  bad_dtype.dtype = DType::BF16;
  EXPECT_THAT([&] { attention(s.q.view, s.k.view, s.v.view, bad_dtype); },
              ThrowsMessage<Error>(HasSubstr("out.dtype must equal q's, float32 (got bfloat16)")));
  EXPECT_THAT([&] { attention(s.q.view, s.k.view, s.v.view, s.out.view, {.query_offset = -1}); },
              ThrowsMessage<Error>(HasSubstr("options.query_offset must be in [0, 2^62) (got -1)")));
  EXPECT_THAT([&] { attention(s.q.view, s.k.view, s.v.view, s.out.view, {.scale = -1.0}); },
              ThrowsMessage<Error>(HasSubstr("options.scale must be finite and > 0 (got -1)")));
  TensorView negative = s.k.view;
  negative.stride_elems[1] = -16;
  EXPECT_THAT([&] { attention(s.q.view, negative, s.v.view, s.out.view); },
              ThrowsMessage<Error>(HasSubstr("k.stride_elems[1] must be >= 0 (got -16)")));
  TensorView strided_dim = s.v.view;
  strided_dim.stride_elems[3] = 2;
  EXPECT_THAT([&] { attention(s.q.view, s.k.view, strided_dim, s.out.view); },
              ThrowsMessage<Error>(HasSubstr("v: the head dim must have unit stride (got stride 2)")));
  TensorView shared_heads = s.out.view;
  shared_heads.stride_elems[2] = 0;  // every head of out at the same address
  EXPECT_THAT([&] { attention(s.q.view, s.k.view, s.v.view, shared_heads); },
              ThrowsMessage<Error>(HasSubstr("out: elements must not share addresses")));
  TensorView huge = s.q.view;
  huge.shape[0] = int64_t{1} << 62;
  EXPECT_THAT([&] { attention(huge, s.k.view, s.v.view, s.out.view); }, ThrowsMessage<Error>(HasSubstr("q")));
}

// Found by fuzz/attention_args_fuzz.cpp (tests/reliability/fuzz_crashes/attention_args/
// scale_1e39_past_float32): a scale that is finite in double but not in float32 was accepted,
// and the fast path, which multiplies q by fl32(scale) = inf, returned NaN for every output while
// reference::attention returned finite values — a silent wrong answer. Now refused by both.
TEST(AttentionArgs, RejectsAScalePastFloat32NamingIt) {
  Small s;
  Rng rng(7);
  s.q.fill(rng), s.k.fill(rng), s.v.fill(rng);
  const std::vector<double> before = s.out.storage;
  for (const double scale : {1e39, 3.5e38}) {
    SCOPED_TRACE(scale);
    EXPECT_THAT([&] { attention(s.q.view, s.k.view, s.v.view, s.out.view, {.scale = scale}); },
                ThrowsMessage<Error>(HasSubstr("options.scale must be finite in float32, at most 3.4028235e+38")));
    EXPECT_THAT([&] { reference::attention(s.q.view, s.k.view, s.v.view, s.out.view, {.scale = scale}); },
                ThrowsMessage<Error>(HasSubstr("options.scale must be finite in float32")));
    EXPECT_EQ(s.out.storage, before);
  }
  // The largest float32 is a scale the fast path holds exactly: accepted (the scores of these
  // inputs overflow float32, a data range the checks cannot see; see docs/attention.md).
  EXPECT_NO_THROW(check_attention_arguments(s.q.view, s.k.view, s.v.view, s.out.view,
                                            {.scale = static_cast<double>(std::numeric_limits<float>::max())}));
}

// Found by fuzz/attention_args_fuzz.cpp (fuzz_crashes/attention_args/q_seq_int64_max): a shape
// whose element count overflows int64, or a negative extent, was refused with tensor.cpp's
// message "tensor q: ..." instead of one starting "attention: " like every other argument error.
TEST(AttentionArgs, AbsurdShapesAreRefusedWithTheAttentionPrefix) {
  Small s;
  TensorView huge = s.q.view;
  huge.shape[1] = std::numeric_limits<int64_t>::max();
  EXPECT_THAT([&] { attention(huge, s.k.view, s.v.view, s.out.view); },
              ThrowsMessage<Error>(HasSubstr("attention: tensor q: element count must fit in int64 (got shape")));
  TensorView negative = s.v.view;
  negative.shape[2] = -3;
  EXPECT_THAT([&] { reference::attention(s.q.view, s.k.view, negative, s.out.view); },
              ThrowsMessage<Error>(HasSubstr("attention: v.shape[2] must be >= 0 (got -3)")));
}

// Found by fuzz/attention_args_fuzz.cpp with a random seed (fuzz_crashes/
// attention_args/empty_batch_times_seq_overflows): q with no heads, batch 3 and 2^62 tokens per
// sequence has no elements, so its element count passed, and the plan's first token of sequence 2
// (2 x 2^62) overflowed int64 (UBSan). An empty view's token count and reach must fit too.
TEST(AttentionArgs, EmptyViewsWhoseTokensOrOffsetsOverflowAreRefused) {
  for (const bool fast : {true, false}) {
    SCOPED_TRACE(fast ? "fast" : "reference");
    const auto call = [&](const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out) {
      if (fast) {
        attention(q, k, v, out);
      } else {
        reference::attention(q, k, v, out);
      }
    };
    const int64_t tokens = int64_t{1} << 62;
    TensorView q{nullptr, DType::F32, Layout::BSHD, {3, tokens, 0, 8}, {0, 0, 8, 1}};
    TensorView out = q;
    TensorView k{nullptr, DType::F32, Layout::BSHD, {3, 5, 0, 8}, {0, 0, 8, 1}};
    EXPECT_THAT([&] { call(q, k, k, out); },
                ThrowsMessage<Error>(HasSubstr("attention: q: the token count (batch x seq) must fit in int64 (got shape bshd (3, 4611686018427387904, 0, 8))")));
    // Token counts that fit, but a batch stride that 2 sequences already take past int64.
    TensorView wide_q{nullptr, DType::F32, Layout::BSHD, {3, 4, 0, 8}, {tokens, 8, 8, 1}};
    TensorView wide_out = wide_q;
    wide_out.stride_elems[0] = 32;
    EXPECT_THAT([&] { call(wide_q, k, k, wide_out); },
                ThrowsMessage<Error>(HasSubstr("attention: q: element offsets must fit in int64 (got shape bshd (3, 4, 0, 8))")));
    // The same shapes with ordinary strides are valid empty calls.
    TensorView fine_q{nullptr, DType::F32, Layout::BSHD, {3, 4, 0, 8}, {0, 0, 8, 1}};
    EXPECT_NO_THROW(call(fine_q, k, k, fine_q));

    // THD with an empty last sequence: its first token is cu_seqlens_q[-1] = 5, whose base offset
    // 5 x stride_seq overflowed int64 for an out of head dim 0 (no elements, strides unchecked
    // past (5 - 1) x stride_seq: UBSan, found by attention_args drawing zero head dims).
    std::vector<float> q_data(5 * 2 * 4, 0.5f), k_data(3 * 2 * 4, 0.25f);
    const TensorView thd_q = contiguous_view(q_data.data(), DType::F32, Layout::THD, {5, 2, 4});
    const TensorView thd_k = contiguous_view(k_data.data(), DType::F32, Layout::THD, {3, 2, 4});
    TensorView thd_v{nullptr, DType::F32, Layout::THD, {3, 2, 0}, {0, 0, 1}};
    TensorView thd_out{nullptr, DType::F32, Layout::THD, {5, 2, 0}, {1880844493789995811, 0, 1}};
    const std::vector<int64_t> cu_q{0, 5, 5}, cu_k{0, 3, 3};
    const AttentionOptions thd{.cu_seqlens_q = cu_q, .cu_seqlens_k = cu_k};
    const auto thd_call = [&] {
      if (fast) {
        attention(thd_q, thd_k, thd_v, thd_out, thd);
      } else {
        reference::attention(thd_q, thd_k, thd_v, thd_out, thd);
      }
    };
    EXPECT_THAT(thd_call, ThrowsMessage<Error>(HasSubstr("attention: out: element offsets must fit in int64 (got shape thd (5, 2, 0))")));
    thd_out.stride_elems[0] = 0;
    EXPECT_NO_THROW(thd_call());
  }
}

TEST(AttentionArgs, RejectsRopePositionsOfTheWrongCountOrPastTheTable) {
  Small s;
  RopeSpec spec;
  spec.head_dim = 8;
  spec.rotary_dim = 8;
  const CosSinTable table(spec, {.fixed_positions = 16});
  const std::vector<int64_t> q_positions(6, 1), k_positions(10, 2), short_k(9, 2);
  std::vector<int64_t> far = k_positions;
  far[4] = 16;
  EXPECT_THAT([&] { attention(s.q.view, s.k.view, s.v.view, s.out.view, {.table = &table, .q_positions = q_positions, .k_positions = short_k}); },
              ThrowsMessage<Error>(HasSubstr("rope.k_positions must hold one position per k token, 10 (got 9)")));
  EXPECT_THAT([&] { attention(s.q.view, s.k.view, s.v.view, s.out.view, {.table = &table, .q_positions = q_positions, .k_positions = far}); },
              ThrowsMessage<Error>(HasSubstr("rope.k_positions[4] must be in [0, 15] (got 16)")));
  EXPECT_THAT([&] { attention(s.q.view, s.k.view, s.v.view, s.out.view, {.q_positions = q_positions, .k_positions = k_positions}); },
              ThrowsMessage<Error>(HasSubstr("rope.table must not be null")));
}

// A table wider than the head is the table's fault, named as such; it was reported as
// "rope.rotary_offset must be in [0, head_dim - rotary_dim] = [0, -8] (got 0)", an argument the
// caller never set.
TEST(AttentionArgs, RejectsATableWiderThanTheHeadNamingTheTable) {
  Small s;  // head_dim 8
  RopeSpec spec;
  spec.head_dim = 16;
  spec.rotary_dim = 16;
  const CosSinTable table(spec, {.fixed_positions = 16});
  const std::vector<int64_t> q_positions(6, 1), k_positions(10, 2);
  EXPECT_THAT([&] { attention(s.q.view, s.k.view, s.v.view, s.out.view, {.table = &table, .q_positions = q_positions, .k_positions = k_positions}); },
              ThrowsMessage<Error>(HasSubstr("attention: q and k head_dim must be >= rope.table's rotary_dim 16 (got 8)")));
}

TEST(AttentionScale, DefaultIsInverseSqrtAndDeepSeekYarnFoldsMscaleAllDimSquared) {
  RopeSpec spec;
  spec.head_dim = 64;
  spec.rotary_dim = 64;
  EXPECT_DOUBLE_EQ(attention_scale(spec, 128), 1.0 / std::sqrt(128.0));
  spec.scaling.mscale_all_dim = 1.0;  // ignored without a scaling scheme (HF: rope_type != "default")
  EXPECT_DOUBLE_EQ(attention_scale(spec, 128), 1.0 / std::sqrt(128.0));
  // DeepSeek-V3 config: yarn, factor 40, mscale 1.0, mscale_all_dim 1.0, qk_head_dim 128 + 64.
  spec.scaling.type = ScalingType::Yarn;
  spec.scaling.factor = 40.0;
  spec.scaling.mscale = 1.0;
  const double mscale = 0.1 * std::log(40.0) + 1.0;  // 1.3688879454113936
  EXPECT_NEAR(mscale, 1.3688879454113936, 1e-15);
  EXPECT_DOUBLE_EQ(attention_scale(spec, 192), mscale * mscale / std::sqrt(192.0));
  spec.scaling.mscale_all_dim = 0.0;  // falsy: no correction
  EXPECT_DOUBLE_EQ(attention_scale(spec, 192), 1.0 / std::sqrt(192.0));
  EXPECT_THAT([&] { (void)attention_scale(spec, 0); }, ThrowsMessage<Error>(HasSubstr("qk_head_dim must be >= 1 (got 0)")));
}

// Empty extents are valid calls that write nothing (and read no null pointer): no q heads, no
// tokens, no keys (then every row is zeros), head dims of 0.
TEST(AttentionArgs, EmptyExtentsAreValidAndWriteNothingOutside) {
  for (const bool fast : {true, false}) {
    SCOPED_TRACE(fast ? "fast" : "reference");
    const auto call = [&](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const AttentionOptions& options) {
      if (fast) {
        attention(q.view, k.view, v.view, out.view, options);
      } else {
        reference::attention(q.view, k.view, v.view, out.view, options);
      }
    };
    TensorView no_heads_q{nullptr, DType::F32, Layout::BSHD, {1, 3, 0, 8}, {24, 8, 8, 1}};
    TensorView no_heads_out = no_heads_q;
    Tensor k = make(DType::F32, Layout::BSHD, 1, 5, 2, 8), v = make(DType::F32, Layout::BSHD, 1, 5, 2, 8);
    if (fast) {
      EXPECT_NO_THROW(attention(no_heads_q, k.view, v.view, no_heads_out, AttentionOptions{}));
    } else {
      EXPECT_NO_THROW(reference::attention(no_heads_q, k.view, v.view, no_heads_out, AttentionOptions{}));
    }
    Tensor q = make(DType::F32, Layout::BSHD, 1, 3, 4, 8), out = make(DType::F32, Layout::BSHD, 1, 3, 4, 8);
    Tensor k0 = make(DType::F32, Layout::BSHD, 1, 0, 2, 8), v0 = make(DType::F32, Layout::BSHD, 1, 0, 2, 8);
    Rng rng(1);
    q.fill(rng), out.fill(rng);
    call(q, k0, v0, out, {.mask = Mask::Causal});
    for (int64_t s = 0; s < 3; ++s)
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t e = 0; e < 8; ++e) EXPECT_EQ(out.at(0, s, h, e), 0.0);
    // An empty view with all-zero strides (what NumPy gives an empty array) has no two elements
    // at one address: not an overlap.
    float dummy[8] = {};
    TensorView zero_strides_q{dummy, DType::F32, Layout::BSHD, {1, 0, 4, 8}, {0, 0, 0, 0}};
    TensorView zero_strides_out{dummy + 4, DType::F32, Layout::BSHD, {1, 0, 4, 8}, {0, 0, 0, 0}};
    if (fast) {
      EXPECT_NO_THROW(attention(zero_strides_q, k.view, v.view, zero_strides_out, AttentionOptions{}));
    } else {
      EXPECT_NO_THROW(reference::attention(zero_strides_q, k.view, v.view, zero_strides_out, AttentionOptions{}));
    }
  }
}

// ---- the fast path against the reference --------------------------------------------------------

struct Case {
  DType dtype = DType::F32;
  Layout layout = Layout::BSHD;
  int64_t batch = 1, q_seq = 1, k_seq = 1, kv_heads = 1, group = 1, qk_dim = 8, v_dim = 8;
  std::array<int64_t, 3> pad{};
  AttentionOptions options;
  std::vector<int64_t> kv_lengths, kv_starts, query_offsets, cu_q, cu_k;
  bool rope = false;
  Style style = Style::NeoX;
  Storage storage = Storage::Stored;
  int64_t rotary_dim = 0, rotary_offset = 0;
  // The other encodings (exclusive with rope): ALiBi slopes per q head, or an absolute table.
  bool alibi = false, absolute = false;
};

// The visible key range of the reference's rule, recomputed here independently.
std::pair<int64_t, int64_t> keys_of(const Case& c, int64_t position, int64_t first_key, int64_t num_keys) {
  int64_t first = first_key, last = num_keys;
  if (c.options.mask == Mask::Causal) last = std::min(last, position + 1);
  if (c.options.window > 0) first = std::max<int64_t>(first, position - c.options.window + 1);
  return {first, std::max(first, last)};
}

struct Outcome {
  double worst_ratio = 0;  // max |fast - ref| / tolerance
  int64_t failures = 0;
  std::string first_failure;
};

// Runs `c` through the fast path and the float64 reference; compares with the tolerance above.
// `shift_offset` moves the reference's query offset (ToleranceRejectsAnOffByOneMask).
Outcome run_case(Case c, uint64_t seed, int64_t shift_offset = 0) {
  Rng rng(seed);
  const bool thd = c.layout == Layout::THD;
  Tensor q(c.dtype, c.layout, thd ? 1 : c.batch, c.q_seq, c.kv_heads * c.group, c.qk_dim, c.pad);
  Tensor k(c.dtype, c.layout, thd ? 1 : c.batch, c.k_seq, c.kv_heads, c.qk_dim, c.pad);
  Tensor v(c.dtype, c.layout, thd ? 1 : c.batch, c.k_seq, c.kv_heads, c.v_dim, c.pad);
  Tensor out(c.dtype, c.layout, thd ? 1 : c.batch, c.q_seq, c.kv_heads * c.group, c.v_dim, c.pad);
  q.fill(rng), k.fill(rng), v.fill(rng);
  c.options.kv_lengths = c.kv_lengths;
  c.options.kv_starts = c.kv_starts;
  c.options.query_offsets = c.query_offsets;
  c.options.cu_seqlens_q = c.cu_q;
  c.options.cu_seqlens_k = c.cu_k;

  RopeSpec spec;
  spec.head_dim = c.qk_dim;
  spec.rotary_dim = c.rotary_dim;
  spec.style = c.style;
  std::unique_ptr<CosSinTable> table;
  std::vector<int64_t> q_positions, k_positions;
  AttentionRope rope;
  if (c.rope) {
    table = std::make_unique<CosSinTable>(spec, TableOptions{.storage = c.storage});
    const int64_t q_tokens = thd ? c.q_seq : c.batch * c.q_seq, k_tokens = thd ? c.k_seq : c.batch * c.k_seq;
    for (int64_t i = 0; i < q_tokens; ++i) q_positions.push_back(rng.uniform(0, 5000));
    for (int64_t i = 0; i < k_tokens; ++i) k_positions.push_back(rng.uniform(0, 5000));
    rope = {.table = table.get(), .q_positions = q_positions, .k_positions = k_positions, .rotary_offset = c.rotary_offset};
  }
  // ALiBi: the paper's slopes, or random ones (either sign, up to 1); absolute: a random table
  // ("learned") or the sinusoidal one, rows past every position used.
  std::vector<float> slopes, abs_table;
  AttentionAbsolute absolute;
  std::vector<int64_t> abs_q_positions, abs_k_positions;
  if (c.alibi) {
    const int64_t q_heads = c.kv_heads * c.group;
    if (rng.percent(50)) {
      for (const double slope : alibi_slopes(q_heads)) slopes.push_back(static_cast<float>(slope));
    } else {
      for (int64_t h = 0; h < q_heads; ++h) slopes.push_back(static_cast<float>(rng.value()));
    }
    c.options.alibi_slopes = slopes;
  }
  if (c.absolute) {
    const int64_t rows = rng.uniform(1, 300);
    if (c.qk_dim % 2 == 0 && rng.percent(50)) {
      abs_table = sinusoidal_table(rows, c.qk_dim);
    } else {
      for (int64_t i = 0; i < rows * c.qk_dim; ++i) abs_table.push_back(static_cast<float>(rng.value()));
    }
    const int64_t q_tokens = thd ? c.q_seq : c.batch * c.q_seq, k_tokens = thd ? c.k_seq : c.batch * c.k_seq;
    for (int64_t i = 0; i < q_tokens; ++i) abs_q_positions.push_back(rng.uniform(0, rows - 1));
    for (int64_t i = 0; i < k_tokens; ++i) abs_k_positions.push_back(rng.uniform(0, rows - 1));
    absolute = {.table = abs_table, .rows = rows, .dim = c.qk_dim, .q_positions = abs_q_positions, .k_positions = abs_k_positions};
    c.options.absolute = &absolute;
  }
  if (c.rope) {
    attention(q.view, k.view, v.view, out.view, rope, c.options);
  } else {
    attention(q.view, k.view, v.view, out.view, c.options);
  }
  Tensor q64 = q.widened(), k64 = k.widened(), v64 = v.widened();
  Tensor ref(DType::F64, c.layout, thd ? 1 : c.batch, c.q_seq, c.kv_heads * c.group, c.v_dim);
  AttentionOptions shifted = c.options;
  std::vector<int64_t> shifted_offsets = c.query_offsets;
  for (int64_t& o : shifted_offsets) o += shift_offset;
  if (!shifted_offsets.empty()) shifted.query_offsets = shifted_offsets;
  else shifted.query_offset += shift_offset;
  if (c.rope) {
    reference::attention(q64.view, k64.view, v64.view, ref.view, rope, shifted);
  } else {
    reference::attention(q64.view, k64.view, v64.view, ref.view, shifted);
  }

  // Magnitudes for the bound: |q~| per element (rotated: |a||C| + |c||S|; absolute: |q + P|).
  const double scale = c.options.scale.value_or(1.0 / std::sqrt(static_cast<double>(c.qk_dim)));
  std::vector<float> cos_row(static_cast<size_t>(c.rotary_dim / 2)), sin_row(cos_row.size());
  const auto magnitudes = [&](const Tensor& t, int64_t b, int64_t s, int64_t h, int64_t position) {
    std::vector<double> m(static_cast<size_t>(c.qk_dim));
    for (int64_t e = 0; e < c.qk_dim; ++e) m[static_cast<size_t>(e)] = std::abs(t.at(b, s, h, e));
    if (c.absolute) {
      for (int64_t e = 0; e < c.qk_dim; ++e) {
        m[static_cast<size_t>(e)] = std::abs(t.at(b, s, h, e) + abs_table[static_cast<size_t>(position * c.qk_dim + e)]);
      }
    }
    if (c.rope && c.rotary_dim > 0) {
      table->row(position, cos_row.data(), sin_row.data());
      const int64_t pairs = c.rotary_dim / 2;
      std::vector<double> r = m;
      for (int64_t i = 0; i < pairs; ++i) {
        const int64_t first = c.rotary_offset + (c.style == Style::NeoX ? i : 2 * i);
        const int64_t second = c.rotary_offset + (c.style == Style::NeoX ? i + pairs : 2 * i + 1);
        const double C = std::abs(cos_row[static_cast<size_t>(i)]), S = std::abs(sin_row[static_cast<size_t>(i)]);
        r[static_cast<size_t>(first)] = m[static_cast<size_t>(first)] * C + m[static_cast<size_t>(second)] * S;
        r[static_cast<size_t>(second)] = m[static_cast<size_t>(second)] * C + m[static_cast<size_t>(first)] * S;
      }
      return r;
    }
    return m;
  };

  Outcome outcome;
  const int64_t num_sequences = thd ? static_cast<int64_t>(c.cu_q.size()) - 1 : c.batch;
  for (int64_t b = 0; b < num_sequences; ++b) {
    const int64_t q0 = thd ? c.cu_q[static_cast<size_t>(b)] : 0, k0 = thd ? c.cu_k[static_cast<size_t>(b)] : 0;
    const int64_t nq = thd ? c.cu_q[static_cast<size_t>(b) + 1] - q0 : c.q_seq;
    int64_t nk = thd ? c.cu_k[static_cast<size_t>(b) + 1] - k0 : c.k_seq;
    if (!c.kv_lengths.empty()) nk = c.kv_lengths[static_cast<size_t>(b)];
    const int64_t k_first = c.kv_starts.empty() ? 0 : c.kv_starts[static_cast<size_t>(b)];
    const int64_t offset = c.query_offsets.empty() ? c.options.query_offset : c.query_offsets[static_cast<size_t>(b)];
    const int64_t tb = thd ? 0 : b;
    for (int64_t h = 0; h < c.kv_heads * c.group; ++h) {
      const int64_t g = h / c.group;
      for (int64_t i = 0; i < nq; ++i) {
        const auto [first, last] = keys_of(c, offset + i, k_first, nk);
        const int64_t q_token = thd ? q0 + i : b * c.q_seq + i;
        const std::vector<double> qm = magnitudes(q, tb, q0 + i, h, c.rope ? q_positions[static_cast<size_t>(q_token)] : c.absolute ? abs_q_positions[static_cast<size_t>(q_token)] : 0);
        double max_a = 0, max_bias = 0;
        std::vector<double> vbar(static_cast<size_t>(c.v_dim), 0.0);
        for (int64_t j = first; j < last; ++j) {
          const int64_t k_token = thd ? k0 + j : b * c.k_seq + j;
          const std::vector<double> km = magnitudes(k, tb, k0 + j, g, c.rope ? k_positions[static_cast<size_t>(k_token)] : c.absolute ? abs_k_positions[static_cast<size_t>(k_token)] : 0);
          max_a = std::max(max_a, scale * std::inner_product(qm.begin(), qm.end(), km.begin(), 0.0));
          if (c.alibi) max_bias = std::max(max_bias, std::abs(alibi_bias(slopes[static_cast<size_t>(h)], offset + i, j)));
          for (int64_t e = 0; e < c.v_dim; ++e) vbar[static_cast<size_t>(e)] = std::max(vbar[static_cast<size_t>(e)], std::abs(v.at(tb, k0 + j, g, e)));
        }
        const int64_t n = last - first;
        // docs/attention.md, "Error analysis". ALiBi: one more rounding of the score (u A) and the
        // bias's own (3u |b|). The split over keys (flash-decoding) adds one exp per chunk to each
        // weight (106u) and a rescale and a sum per chunk to l and o (at most one chunk per tile):
        // counted always, split or not. (+ the absolute term of vdpbf16ps's flushing of
        // subnormals, bf16_dot.hpp: negligible for these inputs, counted for every bf16 call.)
        // The formula: tests/support/attention_bound.hpp (the fuzz targets use it too).
        for (int64_t e = 0; e < c.v_dim; ++e) {
          const double fast = out.at(tb, q0 + i, h, e), want = ref.at(tb, q0 + i, h, e);
          double tolerance = test::attention_arithmetic_bound(c.dtype, c.qk_dim, c.alibi, max_a, max_bias, n, vbar[static_cast<size_t>(e)]);
          tolerance += c.dtype == DType::F32 ? kU * std::abs(want) : test::storage_ulp(c.dtype, std::max(std::abs(fast), std::abs(want)));
          if (n == 0) tolerance = 0;  // zeros, exactly
          const double error = std::abs(fast - want);
          const double ratio = tolerance > 0 ? error / tolerance : (error > 0 ? INFINITY : 0.0);
          outcome.worst_ratio = std::max(outcome.worst_ratio, ratio);
          if (!(error <= tolerance)) {
            if (outcome.failures++ == 0) {
              outcome.first_failure = "seq " + std::to_string(b) + " head " + std::to_string(h) + " query " + std::to_string(i) +
                                      " elem " + std::to_string(e) + ": fast " + std::to_string(fast) + " ref " +
                                      std::to_string(want) + " tol " + std::to_string(tolerance);
            }
          }
        }
      }
    }
  }
  return outcome;
}

std::string describe(const Case& c) {
  std::string text = std::string(to_string(c.dtype)) + " " + std::string(to_string(c.layout)) + " batch " +
                     std::to_string(c.batch) + " q_seq " + std::to_string(c.q_seq) + " k_seq " + std::to_string(c.k_seq) +
                     " kv_heads " + std::to_string(c.kv_heads) + " group " + std::to_string(c.group) + " dims " +
                     std::to_string(c.qk_dim) + "/" + std::to_string(c.v_dim) + " mask " +
                     (c.options.mask == Mask::Causal ? "causal" : "none") + " window " + std::to_string(c.options.window) +
                     " offset " + std::to_string(c.options.query_offset) + " offsets " + std::to_string(c.query_offsets.size()) +
                     " kv_lengths " + std::to_string(c.kv_lengths.size()) + " kv_starts " + std::to_string(c.kv_starts.size());
  if (c.rope) text += " rope " + std::string(to_string(c.style)) + " rotary_dim " + std::to_string(c.rotary_dim) + " at " + std::to_string(c.rotary_offset);
  if (c.alibi) text += " alibi";
  if (c.absolute) text += " absolute";
  return text;
}

std::vector<int64_t> random_cu(Rng& rng, int64_t sequences, int64_t tokens) {
  std::vector<int64_t> cu{0};
  for (int64_t s = 1; s < sequences; ++s) cu.push_back(rng.uniform(0, tokens));
  std::sort(cu.begin(), cu.end());
  cu.push_back(tokens);
  return cu;
}

Case random_case(Rng& rng) {
  Case c;
  const std::array<DType, 3> dtypes{DType::F32, DType::BF16, DType::F16};
  const std::array<Layout, 4> layouts{Layout::BSHD, Layout::BHSD, Layout::SBHD, Layout::THD};
  c.dtype = dtypes[static_cast<size_t>(rng.uniform(0, 2))];
  c.layout = layouts[static_cast<size_t>(rng.uniform(0, 3))];
  c.batch = rng.uniform(1, 3);
  c.q_seq = rng.uniform(1, 40);
  c.k_seq = rng.percent(50) ? c.q_seq : rng.uniform(1, 90);
  c.kv_heads = rng.uniform(1, 3);
  c.group = std::array<int64_t, 4>{1, 2, 4, 8}[static_cast<size_t>(rng.uniform(0, 3))];
  c.qk_dim = rng.percent(30) ? rng.uniform(1, 80) : 2 * rng.uniform(1, 40);
  c.v_dim = rng.percent(20) ? rng.uniform(1, 70) : c.qk_dim;
  if (rng.percent(40)) c.pad = {rng.uniform(0, 3), rng.uniform(0, 3), rng.uniform(0, 3)};
  if (rng.percent(40)) c.options.scale = 0.05 + 0.3 * static_cast<double>(rng.uniform(0, 100)) / 100.0;
  c.options.mask = rng.percent(60) ? Mask::Causal : Mask::None;
  if (rng.percent(40)) c.options.window = rng.uniform(1, 30);
  const bool thd = c.layout == Layout::THD;
  const int64_t sequences = thd ? rng.uniform(1, 4) : c.batch;
  if (thd) {
    c.q_seq = rng.uniform(1, 60);
    c.k_seq = rng.percent(50) ? c.q_seq : rng.uniform(1, 120);
    c.cu_q = random_cu(rng, sequences, c.q_seq);
    c.cu_k = c.k_seq == c.q_seq && rng.percent(50) ? c.cu_q : random_cu(rng, sequences, c.k_seq);
  }
  if (rng.percent(30)) {
    for (int64_t s = 0; s < sequences; ++s) c.query_offsets.push_back(rng.uniform(0, 60));
  } else if (rng.percent(40)) {
    c.options.query_offset = rng.uniform(0, 60);
  }
  if (!thd && rng.percent(30)) {
    for (int64_t s = 0; s < sequences; ++s) c.kv_lengths.push_back(rng.uniform(0, c.k_seq));
  }
  if (rng.percent(40) && c.qk_dim >= 2) {
    c.rope = true;
    c.style = rng.percent(50) ? Style::NeoX : Style::GPTJ;
    c.storage = rng.percent(70) ? Storage::Stored : Storage::OnTheFly;
    c.rotary_dim = 2 * rng.uniform(1, c.qk_dim / 2);
    c.rotary_offset = rng.uniform(0, c.qk_dim - c.rotary_dim);
  } else if (rng.percent(40)) {
    c.alibi = true;
  } else if (rng.percent(40)) {
    c.absolute = true;
  }
  // Left padding: a first visible key per sequence (drawn last, so the draws above are as before).
  if (!thd && rng.percent(30)) {
    for (int64_t s = 0; s < sequences; ++s) {
      const int64_t keys = c.kv_lengths.empty() ? c.k_seq : c.kv_lengths[static_cast<size_t>(s)];
      c.kv_starts.push_back(rng.uniform(0, keys));
    }
  }
  return c;
}

TEST(AttentionCpu, MatchesReferenceOnRandomCallsOnEveryTarget) {
  for (const std::string& target : cpu_targets()) {
    ForcedTarget forced(target);
    SCOPED_TRACE("target " + target);
    Rng rng(20261125 + std::hash<std::string>{}(target) % 1000);
    std::array<double, 3> worst{};  // per dtype: float32, bfloat16, float16
    std::array<double, 4> worst_f32{};  // float32 per encoding: none, rope, alibi, absolute
    for (int trial = 0; trial < 60; ++trial) {
      const Case c = random_case(rng);
      const uint64_t seed = static_cast<uint64_t>(rng.uniform(0, 1 << 30));
      SCOPED_TRACE("trial " + std::to_string(trial) + " seed " + std::to_string(seed) + ": " + describe(c));
      const Outcome outcome = run_case(c, seed);
      double& w = worst[c.dtype == DType::F32 ? 0 : (c.dtype == DType::BF16 ? 1 : 2)];
      w = std::max(w, outcome.worst_ratio);
      if (c.dtype == DType::F32) {
        double& e = worst_f32[c.rope ? 1 : c.alibi ? 2 : c.absolute ? 3 : 0];
        e = std::max(e, outcome.worst_ratio);
      }
      ASSERT_EQ(outcome.failures, 0) << outcome.first_failure;
    }
    std::printf("[ target %s ] worst |fast - ref| / tolerance: float32 %.3g, bfloat16 %.3g, float16 %.3g; "
                "float32 by encoding: none %.3g, rope %.3g, alibi %.3g, absolute %.3g\n",
                target.c_str(), worst[0], worst[1], worst[2], worst_f32[0], worst_f32[1], worst_f32[2], worst_f32[3]);
  }
}

// Llama-like shapes: head_dim 128, GQA 4, long enough for several key tiles and both threads.
TEST(AttentionCpu, MatchesReferenceOnLlamaShapesAndLongCausalRuns) {
  SavedThreadCount saved;
  set_num_threads(2);
  for (const DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    Case c;
    c.dtype = dtype;
    c.batch = 1;
    c.q_seq = 150;
    c.k_seq = 150;
    c.kv_heads = 2;
    c.group = 4;
    c.qk_dim = c.v_dim = 128;
    c.options.mask = Mask::Causal;
    SCOPED_TRACE(describe(c));
    const Outcome outcome = run_case(c, 7);
    EXPECT_EQ(outcome.failures, 0) << outcome.first_failure;
    c.q_seq = 1;  // decode: one query at position 149
    c.options.query_offset = 149;
    c.rope = true;
    c.rotary_dim = 128;
    const Outcome decode = run_case(c, 8);
    EXPECT_EQ(decode.failures, 0) << decode.first_failure;
    // ALiBi and an absolute table over several key tiles, in both score forms.
    c.rope = false;
    for (const bool alibi : {true, false}) {
      c.alibi = alibi;
      c.absolute = !alibi;
      c.q_seq = 150;
      c.options.query_offset = 0;
      const Outcome prefill_encoded = run_case(c, 9);
      EXPECT_EQ(prefill_encoded.failures, 0) << prefill_encoded.first_failure;
      c.q_seq = 1;
      c.options.query_offset = 149;
      const Outcome decode_encoded = run_case(c, 10);
      EXPECT_EQ(decode_encoded.failures, 0) << decode_encoded.first_failure;
    }
  }
}

// The tolerance is not vacuous: moving the reference's causal edge by one key is detected.
TEST(AttentionCpu, ToleranceRejectsAnOffByOneMask) {
  Case c;
  c.q_seq = c.k_seq = 20;
  c.qk_dim = c.v_dim = 16;
  c.kv_heads = 1;
  c.group = 2;
  c.options.mask = Mask::Causal;
  EXPECT_EQ(run_case(c, 3).failures, 0);
  EXPECT_GT(run_case(c, 3, /*shift_offset=*/1).failures, 0);
  c.options.window = 5;
  EXPECT_EQ(run_case(c, 4).failures, 0);
  EXPECT_GT(run_case(c, 4, /*shift_offset=*/1).failures, 0);
  // The decode form (fewer rows than a vector): one query at position 20 of 40 keys.
  c.q_seq = 1;
  c.k_seq = 40;
  c.options.query_offset = 20;
  for (const DType dtype : {DType::F32, DType::BF16}) {
    c.dtype = dtype;
    EXPECT_EQ(run_case(c, 5).failures, 0);
    EXPECT_GT(run_case(c, 5, /*shift_offset=*/1).failures, 0);
  }
}

// The same for ALiBi without a mask: a reference whose queries sit one position later (so every
// bias moves by one slope) is flagged, in both score forms.
TEST(AttentionCpu, ToleranceRejectsAnAlibiBiasOffByOnePosition) {
  Case c;
  c.q_seq = c.k_seq = 20;
  c.qk_dim = c.v_dim = 16;
  c.kv_heads = 1;
  c.group = 2;
  c.alibi = true;
  EXPECT_EQ(run_case(c, 6).failures, 0);
  EXPECT_GT(run_case(c, 6, /*shift_offset=*/1).failures, 0);
  c.q_seq = 1;  // the decode form
  c.k_seq = 40;
  c.options.query_offset = 20;
  EXPECT_EQ(run_case(c, 7).failures, 0);
  EXPECT_GT(run_case(c, 7, /*shift_offset=*/1).failures, 0);
}

TEST(AttentionCpu, FullyMaskedRowsAreZerosAndOthersUntouchedByThem) {
  Case c;
  c.batch = 2;
  c.q_seq = 4;
  c.k_seq = 6;
  c.kv_heads = 2;
  c.group = 2;
  c.kv_lengths = {0, 6};
  c.options.mask = Mask::Causal;
  const Outcome outcome = run_case(c, 11);
  EXPECT_EQ(outcome.failures, 0) << outcome.first_failure;
}

// GQA is MHA with each kv head repeated over its group of q heads (reference: bitwise; fast:
// within its bound).
TEST(AttentionCpu, GqaEqualsMhaWithRepeatedKvHeads) {
  Rng rng(5);
  const int64_t seq = 37, kv_heads = 2, group = 3, dim = 24;
  Tensor q = make(DType::F32, Layout::BSHD, 1, seq, kv_heads * group, dim);
  Tensor k = make(DType::F32, Layout::BSHD, 1, seq, kv_heads, dim), v = k;
  v = make(DType::F32, Layout::BSHD, 1, seq, kv_heads, dim);
  q.fill(rng), k.fill(rng), v.fill(rng);
  Tensor k_rep = make(DType::F32, Layout::BSHD, 1, seq, kv_heads * group, dim), v_rep = k_rep;
  v_rep = make(DType::F32, Layout::BSHD, 1, seq, kv_heads * group, dim);
  for (int64_t s = 0; s < seq; ++s)
    for (int64_t h = 0; h < kv_heads * group; ++h)
      for (int64_t e = 0; e < dim; ++e) {
        k_rep.set(0, s, h, e, k.at(0, s, h / group, e));
        v_rep.set(0, s, h, e, v.at(0, s, h / group, e));
      }
  for (const bool fast : {true, false}) {
    Tensor gqa = make(DType::F32, Layout::BSHD, 1, seq, kv_heads * group, dim), mha = gqa;
    mha = make(DType::F32, Layout::BSHD, 1, seq, kv_heads * group, dim);
    const AttentionOptions options{.mask = Mask::Causal, .window = 9};
    if (fast) {
      attention(q.view, k.view, v.view, gqa.view, options);
      attention(q.view, k_rep.view, v_rep.view, mha.view, options);
    } else {
      reference::attention(q.view, k.view, v.view, gqa.view, options);
      reference::attention(q.view, k_rep.view, v_rep.view, mha.view, options);
    }
    if (!fast) {
      // Bitwise: each q head sees the same key and value numbers in the same order.
      EXPECT_EQ(std::memcmp(gqa.storage.data(), mha.storage.data(), gqa.storage.size() * sizeof(double)), 0);
      continue;
    }
    // The fast path may take another form for items of other row counts (SIMD over rows or over
    // the head dim: other summation orders), so within twice its bound of the reference: with
    // |q|, |k| <= 1, d = 24, scale 1/sqrt(24), n <= 37: 2 * (2 * (30 * 4.9 + 110) + 2 * 45 + 1) u.
    double worst = 0;
    for (int64_t s = 0; s < seq; ++s)
      for (int64_t h = 0; h < kv_heads * group; ++h)
        for (int64_t e = 0; e < dim; ++e) worst = std::max(worst, std::abs(gqa.at(0, s, h, e) - mha.at(0, s, h, e)));
    EXPECT_LE(worst, 1212 * kU);
  }
}

// Whether bf16 attention of random q [1, q_seq, kv_heads * group, dim] and k, v [1, k_seq,
// kv_heads, dim] gives the same bits on one thread and on two.
bool same_bits_for_one_and_two_threads(int64_t q_seq, int64_t k_seq, int64_t kv_heads, int64_t group, int64_t dim,
                                       const AttentionOptions& options, uint64_t seed) {
  SavedThreadCount saved;
  Rng rng(seed);
  Tensor q = make(DType::BF16, Layout::BSHD, 1, q_seq, kv_heads * group, dim);
  Tensor k = make(DType::BF16, Layout::BSHD, 1, k_seq, kv_heads, dim), v = k;
  v = make(DType::BF16, Layout::BSHD, 1, k_seq, kv_heads, dim);
  q.fill(rng), k.fill(rng), v.fill(rng);
  Tensor one = make(DType::BF16, Layout::BSHD, 1, q_seq, kv_heads * group, dim), two = one;
  two = make(DType::BF16, Layout::BSHD, 1, q_seq, kv_heads * group, dim);
  set_num_threads(1);
  attention(q.view, k.view, v.view, one.view, options);
  set_num_threads(2);
  attention(q.view, k.view, v.view, two.view, options);
  return std::memcmp(one.storage.data(), two.storage.data(), one.storage.size() * sizeof(double)) == 0;
}

// Results do not depend on the thread count (items are computed independently).
TEST(AttentionCpu, BitwiseIdenticalForOneAndTwoThreads) {
  EXPECT_TRUE(same_bits_for_one_and_two_threads(256, 256, 2, 4, 64, {.mask = Mask::Causal}, 9));
}

// Decode split over keys (flash-decoding, plan.hpp key_split): one query against long caches,
// cut into chunks merged at the end. Lengths at the chunk boundaries (a chunk of one key, of a
// whole tile, exactly full), with windows and per-sequence kv_lengths, against the float64
// reference; and bitwise the same for one and two threads.
TEST(AttentionCpu, DecodeSplitOverKeysMatchesReferenceAtChunkBoundaries) {
  using attention_internal::key_split;
  SavedThreadCount saved;
  set_num_threads(2);
  std::vector<int64_t> lengths;
  for (const int64_t keys : {1024, 4096, 8192, 40000}) {
    const int64_t chunk = key_split(2, keys).chunk_keys;
    ASSERT_GT(chunk, 0) << keys;
    lengths.insert(lengths.end(), {keys, keys + 1, keys - 1, 2 * chunk + 1, 2 * chunk - 1, chunk + 64});
  }
  lengths.push_back(attention_internal::kMinChunkKeys + 1);  // the shortest split
  Rng rng(77);
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int64_t keys = lengths[i];
    ASSERT_GT(key_split(2, keys).chunks, 1) << keys;  // the case runs the split path
    Case c;
    c.dtype = std::array<DType, 3>{DType::F32, DType::BF16, DType::F16}[i % 3];
    c.layout = i % 2 == 0 ? Layout::BSHD : Layout::BHSD;
    c.q_seq = 1;
    c.k_seq = keys;
    c.kv_heads = 2;
    c.group = 4;
    c.qk_dim = c.v_dim = i % 4 == 3 ? 72 : 128;
    c.options.mask = Mask::Causal;
    c.options.query_offset = keys - 1;
    if (i % 5 == 4 && keys > 600) c.options.window = rng.uniform(600, keys);  // still split: > 512 keys
    if (i % 7 == 6) {
      c.rope = true;
      c.rotary_dim = c.qk_dim;
    } else if (i % 7 == 2) {
      c.alibi = true;  // the bias of a chunk's keys is taken at their absolute positions
    } else if (i % 7 == 4) {
      c.absolute = true;  // the table's rows of a chunk's keys, and never through vdpbf16ps
    }
    SCOPED_TRACE(describe(c));
    const Outcome outcome = run_case(c, 100 + i);
    EXPECT_EQ(outcome.failures, 0) << outcome.first_failure;
  }
  // Two sequences of different visible lengths (the split follows the longer block's range).
  Case c;
  c.batch = 2;
  c.q_seq = 1;
  c.k_seq = 5000;
  c.kv_heads = 1;
  c.group = 8;
  c.qk_dim = c.v_dim = 64;
  c.kv_lengths = {5000, 1700};
  c.query_offsets = {4999, 1699};
  c.options.mask = Mask::Causal;
  const Outcome outcome = run_case(c, 9);
  EXPECT_EQ(outcome.failures, 0) << outcome.first_failure;

  // Thread counts: the chunks are a function of the shapes only.
  ASSERT_GT(key_split(2, 9000).chunks, 1);
  EXPECT_TRUE(same_bits_for_one_and_two_threads(1, 9000, 2, 4, 128, {.mask = Mask::Causal, .query_offset = 8999}, 78));
}

// The bf16 decode's scores through vdpbf16ps (bf16_dot.hpp) where the CPU has AVX512_BF16, and
// the float32 fallback always: both against the float64 reference on decode-form items (rows <
// one vector), head dims around the 32-element steps of the instruction (masked tails), GQA
// groups, windows, kv_lengths and padded strides. Where the CPU has it, the path must have run
// (attention_internal::bf16_dot_items), and never with the switch off.
TEST(AttentionCpu, Bf16DotScoresMatchReferenceAndTheFallback) {
  Rng rng(31);
  const bool has = attention_internal::cpu_has_avx512_bf16();
  int64_t dot_items = 0;
  for (int trial = 0; trial < 24; ++trial) {
    Case c;
    c.dtype = DType::BF16;
    c.layout = std::array<Layout, 3>{Layout::BSHD, Layout::BHSD, Layout::SBHD}[static_cast<size_t>(trial % 3)];
    c.batch = rng.uniform(1, 2);
    c.group = std::array<int64_t, 4>{1, 2, 4, 8}[static_cast<size_t>(trial % 4)];
    c.q_seq = c.group <= 4 ? rng.uniform(1, 2) : 1;  // rows = group x queries < 16 lanes
    c.k_seq = rng.uniform(1, 300);
    c.kv_heads = rng.uniform(1, 2);
    c.qk_dim = std::array<int64_t, 8>{1, 7, 31, 32, 33, 64, 100, 128}[static_cast<size_t>(trial % 8)];
    c.v_dim = c.qk_dim;
    if (rng.percent(40)) c.pad = {rng.uniform(0, 3), rng.uniform(0, 3), rng.uniform(0, 3)};
    c.options.mask = Mask::Causal;
    c.options.query_offset = c.k_seq - c.q_seq;
    if (rng.percent(30)) c.options.window = rng.uniform(1, 200);
    if (rng.percent(30)) {
      for (int64_t b = 0; b < c.batch; ++b) c.kv_lengths.push_back(rng.uniform(0, c.k_seq));
    }
    // ALiBi's bias goes on the dot products' scores; an absolute table changes q and k, so those
    // calls must not take the stored-bf16 path at all.
    c.alibi = trial % 5 == 1;
    c.absolute = trial % 5 == 3;
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + describe(c));
    for (const bool dot : {true, false}) {
      attention_internal::use_avx512_bf16 = dot;
      const int64_t before = attention_internal::bf16_dot_items.load();
      const Outcome outcome = run_case(c, 500 + static_cast<uint64_t>(trial));
      EXPECT_EQ(outcome.failures, 0) << (dot ? "vdpbf16ps: " : "fallback: ") << outcome.first_failure;
      const int64_t used = attention_internal::bf16_dot_items.load() - before;
      if (dot) dot_items += used;
      if (!dot || c.absolute) {
        EXPECT_EQ(used, 0);  // the fallback really is the fallback
      }
    }
    attention_internal::use_avx512_bf16 = true;
  }
  attention_internal::use_avx512_bf16 = true;
  if (has) {
    EXPECT_GT(dot_items, 0) << "the vdpbf16ps path never ran";
  } else {
    std::printf("[ note ] this CPU has no AVX512_BF16: the fallback alone ran\n");
  }
}

// bf16 and f16 decode read K rows in place, widened as they load (DecodeScores), where the
// head dim is whole vectors; otherwise from the widened tile. Widening is exact and the float32
// arithmetic is the float32 path's, so on every target the 16-bit output is the float32 call's on
// the widened inputs, rounded once, bit for bit (vdpbf16ps off: it rounds differently by design).
// The in-place path must have run (k_in_place_16bit_items) where the head dim allows it, and never
// for an odd head dim, whose rows end inside a vector.
TEST(AttentionCpu, SixteenBitDecodeReadsKeysInPlaceWithTheFloat32PathsBits) {
  attention_internal::use_avx512_bf16 = false;
  for (const std::string& target : cpu_targets()) {
    ForcedTarget forced(target);
    for (const DType dtype : {DType::BF16, DType::F16}) {
      Rng rng(90 + static_cast<uint64_t>(dtype == DType::F16));
      int64_t in_place = 0;
      for (int trial = 0; trial < 12; ++trial) {
        const int64_t dim = std::array<int64_t, 4>{64, 128, 48, 33}[static_cast<size_t>(trial % 4)];
        const int64_t group = std::array<int64_t, 3>{1, 3, 4}[static_cast<size_t>(trial % 3)];
        const int64_t keys = rng.uniform(1, 300), kv_heads = 2;
        const std::array<int64_t, 3> pad{rng.uniform(0, 3), rng.uniform(0, 3), rng.uniform(0, 3)};
        SCOPED_TRACE(target + " " + std::string(to_string(dtype)) + " trial " + std::to_string(trial) + ": dim " +
                     std::to_string(dim) + ", group " + std::to_string(group) + ", keys " + std::to_string(keys));
        Tensor q(dtype, Layout::BSHD, 1, 1, kv_heads * group, dim, pad), k(dtype, Layout::BSHD, 1, keys, kv_heads, dim, pad);
        Tensor v(dtype, Layout::BSHD, 1, keys, kv_heads, dim, pad), out(dtype, Layout::BSHD, 1, 1, kv_heads * group, dim);
        q.fill(rng), k.fill(rng), v.fill(rng);
        const auto as_f32 = [](const Tensor& t) {
          Tensor wide(DType::F32, Layout::BSHD, t.axes.batch, t.axes.seq, t.axes.heads, t.axes.dim);
          for (int64_t s = 0; s < t.axes.seq; ++s)
            for (int64_t h = 0; h < t.axes.heads; ++h)
              for (int64_t e = 0; e < t.axes.dim; ++e) wide.set(0, s, h, e, t.at(0, s, h, e));
          return wide;
        };
        Tensor q32 = as_f32(q), k32 = as_f32(k), v32 = as_f32(v), out32 = as_f32(out);
        const AttentionOptions options{.mask = Mask::Causal, .query_offset = keys - 1};
        const int64_t before = attention_internal::k_in_place_16bit_items.load();
        attention(q.view, k.view, v.view, out.view, options);
        const int64_t used = attention_internal::k_in_place_16bit_items.load() - before;
        if (dim % 2 == 1) {
          EXPECT_EQ(used, 0);
        }
        in_place += used;
        attention(q32.view, k32.view, v32.view, out32.view, options);
        Tensor rounded(dtype, Layout::BSHD, 1, 1, kv_heads * group, dim);
        for (int64_t h = 0; h < kv_heads * group; ++h)
          for (int64_t e = 0; e < dim; ++e) {
            rounded.set(0, 0, h, e, out32.at(0, 0, h, e));
            ASSERT_EQ(out.at(0, 0, h, e), rounded.at(0, 0, h, e)) << "head " << h << ", element " << e;
          }
      }
      if (target != "SCALAR") {
        EXPECT_GT(in_place, 0) << target << " " << to_string(dtype) << ": K was never read in place";
      }
    }
  }
  attention_internal::use_avx512_bf16 = true;
}

// A random bf16 call for the prefill paths' tests (trial: which layout, group, head dim and
// encoding): items of at least a vector of rows, head dims around the pairs and the 16-row blocks
// (odd ones: the last pair's zero half; 1 and 127 included), GQA groups 1-8, causal / window /
// kv_lengths / no mask, query offsets, packed varlen (THD), padded strides, ALiBi, and every
// sixth trial fused RoPE or an absolute table (which keep the float32 form).
// Sets attention_internal::use_amx_bf16 for a scope (the vdpbf16ps tests below turn AMX off to
// reach their path on a CPU with AMX), and turns it back on.
struct AmxSwitch {
  explicit AmxSwitch(bool on) { attention_internal::use_amx_bf16 = on; }
  ~AmxSwitch() { attention_internal::use_amx_bf16 = true; }
  AmxSwitch(const AmxSwitch&) = delete;
  AmxSwitch& operator=(const AmxSwitch&) = delete;
};

Case random_bf16_prefill_case(Rng& rng, int trial) {
  const std::array<int64_t, 12> dims{1, 2, 7, 31, 32, 33, 64, 72, 100, 127, 128, 47};
  Case c;
  c.dtype = DType::BF16;
  c.layout = std::array<Layout, 4>{Layout::BSHD, Layout::BHSD, Layout::SBHD, Layout::THD}[static_cast<size_t>(trial % 4)];
  const bool thd = c.layout == Layout::THD;
  c.group = std::array<int64_t, 5>{1, 2, 3, 4, 8}[static_cast<size_t>(trial % 5)];
  c.kv_heads = rng.uniform(1, 2);
  c.qk_dim = dims[static_cast<size_t>(trial % 12)];
  c.v_dim = rng.percent(25) ? rng.uniform(1, 80) : c.qk_dim;
  if (rng.percent(40)) c.pad = {rng.uniform(0, 3), rng.uniform(0, 3), rng.uniform(0, 3)};
  if (rng.percent(30)) c.options.scale = 0.05 + 0.3 * static_cast<double>(rng.uniform(0, 100)) / 100.0;
  c.options.mask = rng.percent(75) ? Mask::Causal : Mask::None;
  if (rng.percent(30)) c.options.window = rng.uniform(1, 100);
  if (thd) {
    const int64_t sequences = rng.uniform(1, 3);
    c.q_seq = rng.uniform(40, 150);
    c.k_seq = rng.percent(50) ? c.q_seq : rng.uniform(40, 200);
    c.cu_q = random_cu(rng, sequences, c.q_seq);
    c.cu_k = c.k_seq == c.q_seq && rng.percent(50) ? c.cu_q : random_cu(rng, sequences, c.k_seq);
  } else {
    c.batch = rng.uniform(1, 2);
    c.q_seq = rng.uniform(16, 150);  // rows = group x queries >= 16: the transposed form
    c.k_seq = rng.percent(50) ? c.q_seq : rng.uniform(1, 260);
    if (rng.percent(30)) {
      for (int64_t b = 0; b < c.batch; ++b) c.kv_lengths.push_back(rng.uniform(0, c.k_seq));
    }
  }
  const int64_t sequences = thd ? static_cast<int64_t>(c.cu_q.size()) - 1 : c.batch;
  if (rng.percent(30)) {
    for (int64_t s = 0; s < sequences; ++s) c.query_offsets.push_back(rng.uniform(0, 100));
  } else if (rng.percent(40)) {
    c.options.query_offset = rng.uniform(0, 100);
  }
  // ALiBi's bias goes on the finished scores; fused RoPE and an absolute table must keep the
  // float32 form.
  c.alibi = trial % 6 == 1 || trial % 6 == 4;
  c.absolute = trial % 6 == 3;
  if (trial % 6 == 5 && c.qk_dim >= 2) {
    c.rope = true;
    c.style = trial % 12 == 5 ? Style::NeoX : Style::GPTJ;
    c.rotary_dim = c.qk_dim / 2 * 2;
  }
  return c;
}

// The bf16 prefill's scores through vdpbf16ps (bf16_dot.hpp scores_bf16_dot_transposed: q in bf16
// pairs x 16 rows, K pairs broadcast) where the CPU has AVX512_BF16, and the float32 transposed
// form always: both against the float64 reference on items of at least a vector of rows, head
// dims around the pairs and the 16-row blocks (odd ones: the last pair's zero half; 1 and 127
// included), GQA groups 1-8, causal / window / kv_lengths / no mask, query offsets, packed varlen
// (THD, cu_seqlens), padded strides and ALiBi. Where the CPU has it the prefill path must have run
// in every non-THD trial (attention_internal::bf16_dot_prefill_items: a THD call's sequences may
// all be short enough for the decode form), and never with the switch off, with fused RoPE or
// with an absolute table (those change q and k away from the stored values).
TEST(AttentionCpu, Bf16DotPrefillScoresMatchReferenceAndTheFallback) {
  const AmxSwitch amx(false);
  Rng rng(41);
  const bool has = attention_internal::cpu_has_avx512_bf16();
  int64_t prefill_items = 0;
  for (int trial = 0; trial < 36; ++trial) {
    const Case c = random_bf16_prefill_case(rng, trial);
    const bool thd = c.layout == Layout::THD;
    const bool eligible = !c.absolute && !c.rope;
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + describe(c));
    for (const bool dot : {true, false}) {
      attention_internal::use_avx512_bf16 = dot;
      const int64_t before = attention_internal::bf16_dot_prefill_items.load();
      const Outcome outcome = run_case(c, 700 + static_cast<uint64_t>(trial));
      EXPECT_EQ(outcome.failures, 0) << (dot ? "vdpbf16ps: " : "fallback: ") << outcome.first_failure;
      const int64_t used = attention_internal::bf16_dot_prefill_items.load() - before;
      if (dot) prefill_items += used;
      if (!dot || !eligible || !has) {
        EXPECT_EQ(used, 0);  // the fallback really is the fallback
      } else if (!thd) {
        EXPECT_GT(used, 0) << "the vdpbf16ps prefill path did not run";
      }
    }
    attention_internal::use_avx512_bf16 = true;
  }
  attention_internal::use_avx512_bf16 = true;
  if (has) {
    EXPECT_GT(prefill_items, 0) << "the vdpbf16ps prefill path never ran";
  } else {
    std::printf("[ note ] this CPU has no AVX512_BF16: the fallback alone ran\n");
  }
}

// Llama-3-8B's shape (head_dim 128, GQA 4) over several tiles, the prefill through vdpbf16ps and
// through the float32 form: both within the bound of the reference, and the two forms' outputs
// close to each other (each within its bound, so within twice it) but not bitwise equal for
// every element (the scale comes after the dot product instead of being folded into q: if they
// were equal everywhere the new path would not be running). Bitwise 1 vs 2 threads with it on;
// and on targets below AVX-512 the path never runs.
TEST(AttentionCpu, Bf16DotPrefillOnLlamaShapesAndThreadCounts) {
  const AmxSwitch amx(false);
  SavedThreadCount saved;
  set_num_threads(2);
  Case c;
  c.dtype = DType::BF16;
  c.q_seq = c.k_seq = 200;
  c.kv_heads = 2;
  c.group = 4;
  c.qk_dim = c.v_dim = 128;
  c.options.mask = Mask::Causal;
  for (const bool dot : {true, false}) {
    attention_internal::use_avx512_bf16 = dot;
    const Outcome outcome = run_case(c, 19);
    EXPECT_EQ(outcome.failures, 0) << (dot ? "vdpbf16ps: " : "fallback: ") << outcome.first_failure;
  }
  attention_internal::use_avx512_bf16 = true;
  if (!attention_internal::cpu_has_avx512_bf16()) GTEST_SKIP() << "no AVX512_BF16: the fallback alone ran";
  // The same call both ways on the same inputs: the outputs differ somewhere.
  Rng rng(23);
  Tensor q = make(DType::BF16, Layout::BSHD, 1, 200, 8, 128);
  Tensor k = make(DType::BF16, Layout::BSHD, 1, 200, 2, 128), v = k;
  v = make(DType::BF16, Layout::BSHD, 1, 200, 2, 128);
  q.fill(rng), k.fill(rng), v.fill(rng);
  Tensor on = make(DType::BF16, Layout::BSHD, 1, 200, 8, 128), off = on;
  off = make(DType::BF16, Layout::BSHD, 1, 200, 8, 128);
  const int64_t before = attention_internal::bf16_dot_prefill_items.load();
  attention(q.view, k.view, v.view, on.view, {.mask = Mask::Causal});
  EXPECT_GT(attention_internal::bf16_dot_prefill_items.load(), before);
  attention_internal::use_avx512_bf16 = false;
  attention(q.view, k.view, v.view, off.view, {.mask = Mask::Causal});
  attention_internal::use_avx512_bf16 = true;
  EXPECT_NE(std::memcmp(on.storage.data(), off.storage.data(), on.storage.size() * sizeof(double)), 0);
  // Thread counts, an odd head dim and a group of 3 among them.
  const int64_t before_bits = attention_internal::bf16_dot_prefill_items.load();
  EXPECT_TRUE(same_bits_for_one_and_two_threads(300, 300, 2, 4, 128, {.mask = Mask::Causal}, 29));
  EXPECT_TRUE(same_bits_for_one_and_two_threads(130, 170, 2, 3, 33, {.mask = Mask::Causal, .window = 40}, 31));
  EXPECT_GT(attention_internal::bf16_dot_prefill_items.load(), before_bits);
  // Targets below AVX-512 (AVX2, SSE4, ...) keep the float32 form with the switch on: the path is
  // compiled for AVX-512 targets only. Each still matches the reference.
  for (const std::string& target : cpu_targets()) {
    if (target.rfind("AVX3", 0) == 0) continue;
    ForcedTarget forced(target);
    SCOPED_TRACE("target " + target);
    const int64_t before_target = attention_internal::bf16_dot_prefill_items.load();
    const Outcome outcome = run_case(c, 37);
    EXPECT_EQ(outcome.failures, 0) << outcome.first_failure;
    EXPECT_EQ(attention_internal::bf16_dot_prefill_items.load(), before_target);
  }
}

// The bf16 prefill reads nothing past a row of K: with an odd head dim the last element has no
// partner and is loaded alone. Here q, k, v and out live in buffers of exactly their size (the test
// tensors keep 16 bytes of slack), K's last row ending the allocation, so that AddressSanitizer
// builds flag a read past it; in every build the result must equal, bitwise, the same call on the
// slack-backed copies.
TEST(AttentionCpu, Bf16DotPrefillReadsNoElementPastTheTensors) {
  for (const bool amx_on : {false, true})
  for (const int64_t dim : {1, 33, 127, 64, 128}) {
    const AmxSwitch amx(amx_on);
    SCOPED_TRACE("head dim " + std::to_string(dim) + (amx_on ? ", AMX" : ", vdpbf16ps"));
    const int64_t seq = 40, kv_heads = 1, group = 4;
    Rng rng(static_cast<uint64_t>(50 + dim));
    Tensor q = make(DType::BF16, Layout::BSHD, 1, seq, kv_heads * group, dim);
    Tensor k = make(DType::BF16, Layout::BSHD, 1, seq, kv_heads, dim), v = k;
    v = make(DType::BF16, Layout::BSHD, 1, seq, kv_heads, dim);
    Tensor out = make(DType::BF16, Layout::BSHD, 1, seq, kv_heads * group, dim);
    q.fill(rng), k.fill(rng), v.fill(rng);
    const auto exact = [](const Tensor& t) {
      std::vector<uint16_t> bits(static_cast<size_t>(t.view.shape[0] * t.view.shape[1] * t.view.shape[2] * t.view.shape[3]));
      std::memcpy(bits.data(), t.view.data, bits.size() * sizeof(uint16_t));  // contiguous BSHD, no padding
      return bits;
    };
    std::vector<uint16_t> q_bits = exact(q), k_bits = exact(k), v_bits = exact(v), out_bits(q_bits.size());
    const TensorView q_view = contiguous_view(q_bits.data(), DType::BF16, Layout::BSHD, {1, seq, kv_heads * group, dim});
    const TensorView k_view = contiguous_view(k_bits.data(), DType::BF16, Layout::BSHD, {1, seq, kv_heads, dim});
    const TensorView v_view = contiguous_view(v_bits.data(), DType::BF16, Layout::BSHD, {1, seq, kv_heads, dim});
    const TensorView out_view = contiguous_view(out_bits.data(), DType::BF16, Layout::BSHD, {1, seq, kv_heads * group, dim});
    const int64_t before = attention_internal::bf16_dot_prefill_items.load();
    const int64_t before_amx = attention_internal::amx_prefill_items.load();
    attention(q_view, k_view, v_view, out_view, {.mask = Mask::Causal});
    attention(q.view, k.view, v.view, out.view, {.mask = Mask::Causal});
    if (amx_on && attention_internal::cpu_has_amx_bf16()) {
      EXPECT_GT(attention_internal::amx_prefill_items.load(), before_amx);
    } else if (attention_internal::cpu_has_avx512_bf16()) {
      EXPECT_GT(attention_internal::bf16_dot_prefill_items.load(), before);
    }
    EXPECT_EQ(std::memcmp(out_bits.data(), out.view.data, out_bits.size() * sizeof(uint16_t)), 0);
  }
}

// The bf16 prefill on AMX tiles (amx_bf16.hpp: scores from q and K as stored, p.v from V^T as
// stored with each weight split into bf16 hi + lo) against the float64 reference, on the random
// calls of the vdpbf16ps test above (head dims that are not whole tiles, v dims that are not whole
// vectors, partial key tiles, windows whose tiles do not start at a multiple of 64 and so bypass
// the per-thread V^T cache, two sequences and two kv heads sharing one thread's cache, THD, ALiBi).
// With fused RoPE or an absolute table (every sixth trial each) q' and k' are float32 values
// split into bf16 hi + lo (three products per score). Where the CPU and the OS allow AMX the
// path must have run in every non-THD trial (attention_internal::amx_prefill_items), and never
// with its switch off; the bound is docs/attention.md's with the AMX terms
// (tests/support/attention_bound.hpp).
TEST(AttentionCpu, AmxPrefillMatchesReference) {
  const bool has = attention_internal::cpu_has_amx_bf16();
  Rng rng(43);
  int64_t amx_items = 0;
  for (int trial = 0; trial < 48; ++trial) {
    const Case c = random_bf16_prefill_case(rng, trial);
    const bool thd = c.layout == Layout::THD;
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + describe(c));
    for (const bool on : {true, false}) {
      const AmxSwitch amx(on);
      const int64_t before = attention_internal::amx_prefill_items.load();
      const Outcome outcome = run_case(c, 900 + static_cast<uint64_t>(trial));
      EXPECT_EQ(outcome.failures, 0) << (on ? "AMX: " : "without AMX: ") << outcome.first_failure;
      const int64_t used = attention_internal::amx_prefill_items.load() - before;
      if (on) amx_items += used;
      if (!on || !has) {
        EXPECT_EQ(used, 0);
      } else if (!thd) {
        EXPECT_GT(used, 0) << "the AMX prefill path did not run";
      }
    }
  }
  if (has) {
    EXPECT_GT(amx_items, 0) << "the AMX prefill path never ran";
  } else {
    std::printf("[ note ] this CPU (or OS) has no AMX-BF16: the other paths alone ran\n");
  }
}

// Llama-3-8B's shape (head_dim 128, GQA 4) over 600 keys (ten tiles, the last partial), on AMX
// and without: both within the bound, and their outputs not bitwise equal everywhere (else the
// AMX path would not be running); bitwise equal for 1 and 2 threads with AMX on (the V^T cache
// is per thread, and what it holds does not depend on which thread packed it).
TEST(AttentionCpu, AmxPrefillOnLlamaShapesAndThreadCounts) {
  SavedThreadCount saved;
  set_num_threads(2);
  Case c;
  c.dtype = DType::BF16;
  c.q_seq = c.k_seq = 600;
  c.kv_heads = 2;
  c.group = 4;
  c.qk_dim = c.v_dim = 128;
  c.options.mask = Mask::Causal;
  for (const bool on : {true, false}) {
    const AmxSwitch amx(on);
    const Outcome outcome = run_case(c, 47);
    EXPECT_EQ(outcome.failures, 0) << (on ? "AMX: " : "without AMX: ") << outcome.first_failure;
  }
  if (!attention_internal::cpu_has_amx_bf16()) GTEST_SKIP() << "no AMX-BF16 here: the other paths alone ran";
  Rng rng(53);
  Tensor q = make(DType::BF16, Layout::BSHD, 1, 600, 8, 128);
  Tensor k = make(DType::BF16, Layout::BSHD, 1, 600, 2, 128);
  Tensor v = make(DType::BF16, Layout::BSHD, 1, 600, 2, 128);
  q.fill(rng), k.fill(rng), v.fill(rng);
  Tensor on = make(DType::BF16, Layout::BSHD, 1, 600, 8, 128);
  Tensor off = make(DType::BF16, Layout::BSHD, 1, 600, 8, 128);
  const int64_t before = attention_internal::amx_prefill_items.load();
  attention(q.view, k.view, v.view, on.view, {.mask = Mask::Causal});
  EXPECT_GT(attention_internal::amx_prefill_items.load(), before);
  {
    const AmxSwitch amx(false);
    attention(q.view, k.view, v.view, off.view, {.mask = Mask::Causal});
  }
  EXPECT_NE(std::memcmp(on.storage.data(), off.storage.data(), on.storage.size() * sizeof(double)), 0);
  const int64_t before_bits = attention_internal::amx_prefill_items.load();
  EXPECT_TRUE(same_bits_for_one_and_two_threads(300, 300, 2, 4, 128, {.mask = Mask::Causal}, 59));
  EXPECT_TRUE(same_bits_for_one_and_two_threads(130, 170, 2, 3, 33, {.mask = Mask::Causal, .window = 40}, 61));
  EXPECT_GT(attention_internal::amx_prefill_items.load(), before_bits);
}

// Fused RoPE equals rotary::apply (fast) on q and k followed by attention, within the bound above
// (float32 storage: apply rounds the rotated values to float32, which fused keeps in registers —
// the same float32 values, so the two agree to the attention bound alone).
TEST(AttentionCpu, FusedRopeEqualsApplyThenAttention) {
  for (const Style style : {Style::NeoX, Style::GPTJ}) {
    SCOPED_TRACE(std::string(to_string(style)));
    Rng rng(style == Style::NeoX ? 21 : 22);
    const int64_t seq = 70, kv_heads = 2, group = 2, dim = 64;
    RopeSpec spec;
    spec.head_dim = dim;
    spec.rotary_dim = dim;
    spec.style = style;
    const CosSinTable table(spec);
    Tensor q = make(DType::F32, Layout::BSHD, 1, seq, kv_heads * group, dim);
    Tensor k = make(DType::F32, Layout::BSHD, 1, seq, kv_heads, dim), v = k;
    v = make(DType::F32, Layout::BSHD, 1, seq, kv_heads, dim);
    q.fill(rng), k.fill(rng), v.fill(rng);
    std::vector<int64_t> positions(static_cast<size_t>(seq));
    for (int64_t i = 0; i < seq; ++i) positions[static_cast<size_t>(i)] = 1000 + 3 * i;
    Tensor fused = make(DType::F32, Layout::BSHD, 1, seq, kv_heads * group, dim), plain = fused;
    plain = make(DType::F32, Layout::BSHD, 1, seq, kv_heads * group, dim);
    const AttentionOptions options{.mask = Mask::Causal};
    attention(q.view, k.view, v.view, fused.view, {.table = &table, .q_positions = positions, .k_positions = positions}, options);
    Tensor q_rot = make(DType::F32, Layout::BSHD, 1, seq, kv_heads * group, dim), k_rot = q_rot;
    k_rot = make(DType::F32, Layout::BSHD, 1, seq, kv_heads, dim);
    apply(q.view, k.view, q_rot.view, k_rot.view, Positions::per_token(positions), table);
    attention(q_rot.view, k_rot.view, v.view, plain.view, options);
    // Both are within the fast path's bound of the same reference; their difference within twice
    // that. Scores are O(1) here (|q|, |k| <= 1, d = 64, scale 1/8): E <= 70u * 8, so
    // 2 * Vbar * (2 eta + 2 acc) + 2u <= 2 * (2 * (560 + 110) + 2 * 80 + 2) u = 3004 u.
    double worst = 0;
    for (int64_t s = 0; s < seq; ++s)
      for (int64_t h = 0; h < kv_heads * group; ++h)
        for (int64_t e = 0; e < dim; ++e) worst = std::max(worst, std::abs(fused.at(0, s, h, e) - plain.at(0, s, h, e)));
    EXPECT_LE(worst, 3004 * kU);
  }
}

}  // namespace
}  // namespace rotary
