// tests/attention/special_values_test.cpp: attention on the inputs a careful caller never sends
// but a model can produce: NaN and infinities in q, k or v, and zero-sized head dims. The
// contract (attention_kernels-inl.h, docs/attention.md "Non-finite inputs"): the fast path is
// NaN exactly where the float64 reference is (IEEE arithmetic on m = max s_j, exp(s_j - m)), and
// infinite exactly where it is; a -inf score beside finite ones only drops its key. Head dim 0 is
// the empty dot product (every score 0: the mean of the visible values), v head dim 0 an empty
// output. Every case runs on every compiled SIMD target, in float32, bfloat16 and float16, in the
// decode form (rows < one vector), the prefill form (SIMD over rows) and the decode split over
// keys (chunks merged at the end).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/attention.hpp"
#include "rotary/table.hpp"
#include "rotary/spec.hpp"
#include "rotary/tensor.hpp"
#include "attention/amx_bf16.hpp"
#include "attention/plan.hpp"
#include "tests/attention/attention_tensors.hpp"
#include "tests/support/attention_bound.hpp"
#include "tests/support/cpu_scope.hpp"

namespace rotary {
namespace {

using test::ForcedTarget;
using test::make;
using test::Rng;
using test::Tensor;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

constexpr DType kTypes[] = {DType::F32, DType::BF16, DType::F16};

// One attention call in BSHD: q [1, q_seq, heads, dq], k / v [1, k_seq, kv_heads, dq / dv].
struct Call {
  DType dtype = DType::F32;
  int64_t q_seq = 1, k_seq = 8, heads = 4, kv_heads = 2, dq = 16, dv = 16;
  AttentionOptions options{.mask = Mask::Causal};
  Tensor q, k, v;

  Call(DType type, int64_t q_seq_, int64_t k_seq_, int64_t heads_, int64_t kv_heads_, int64_t dq_, int64_t dv_, uint64_t seed)
      : dtype(type), q_seq(q_seq_), k_seq(k_seq_), heads(heads_), kv_heads(kv_heads_), dq(dq_), dv(dv_),
        q(make(type, Layout::BSHD, 1, q_seq_, heads_, dq_)), k(make(type, Layout::BSHD, 1, k_seq_, kv_heads_, dq_)),
        v(make(type, Layout::BSHD, 1, k_seq_, kv_heads_, dv_)) {
    options.query_offset = k_seq - q_seq;  // bottom-right causal: the last query sees every key
    Rng rng(seed);
    q.fill(rng);
    k.fill(rng);
    v.fill(rng);
  }
  // The fast path's output (storage type) and the float64 reference's.
  std::pair<Tensor, Tensor> run() const {
    Tensor fast = make(dtype, Layout::BSHD, 1, q_seq, heads, dv);
    attention(q.view, k.view, v.view, fast.view, options);
    const Tensor q64 = q.widened(), k64 = k.widened(), v64 = v.widened();
    Tensor ref = make(DType::F64, Layout::BSHD, 1, q_seq, heads, dv);
    reference::attention(q64.view, k64.view, v64.view, ref.view, options);
    return {std::move(fast), std::move(ref)};
  }
};

// Per element: NaN where the reference is NaN, the same infinity where it is infinite, and
// elsewhere within the fast path's error bound (docs/attention.md, "Error analysis";
// tests/support/attention_bound.hpp) with the call-wide maxima of the finite inputs: |q|, |k|,
// |v| <= 1 (Rng values and the few set by hand), no ALiBi, n <= k_seq keys; plus the output's
// rounding to its storage type (the reference here is float64, unrounded). Returns the number of
// disagreeing elements; the first is described in `first`.
int64_t compare(const Tensor& fast, const Tensor& ref, const Call& c, std::string& first) {
  const double scale = c.dq > 0 ? 1.0 / std::sqrt(static_cast<double>(c.dq)) : 1.0;
  const double max_a = scale * static_cast<double>(c.dq);  // scale * d * max|q| * max|k|
  const double arithmetic = test::attention_arithmetic_bound(c.dtype, c.dq, false, max_a, 0.0, c.k_seq, 1.0);
  int64_t failures = 0;
  for (int64_t s = 0; s < ref.axes.seq; ++s)
    for (int64_t h = 0; h < ref.axes.heads; ++h)
      for (int64_t e = 0; e < ref.axes.dim; ++e) {
        const double f = fast.at(0, s, h, e), r = ref.at(0, s, h, e);
        // The storage term is taken only where both are finite (it has no meaning otherwise).
        const auto within_bound = [&] {
          const double larger = std::max(std::abs(f), std::abs(r));
          const double storage =
              c.dtype == DType::F32 ? test::kUnitRoundoff32 * larger : test::storage_ulp(c.dtype, larger);
          return std::abs(f - r) <= arithmetic + storage;
        };
        const bool ok = std::isnan(r)   ? std::isnan(f)
                        : std::isinf(r) ? f == r
                                        : std::isfinite(f) && within_bound();
        if (!ok && failures++ == 0) {
          first = "query " + std::to_string(s) + " head " + std::to_string(h) + " element " + std::to_string(e) +
                  ": fast " + std::to_string(f) + ", reference " + std::to_string(r);
        }
      }
  return failures;
}

// Counts the NaN elements of a tensor (to show a case is not vacuous).
int64_t nan_count(const Tensor& t) {
  int64_t n = 0;
  for (int64_t s = 0; s < t.axes.seq; ++s)
    for (int64_t h = 0; h < t.axes.heads; ++h)
      for (int64_t e = 0; e < t.axes.dim; ++e) n += std::isnan(t.at(0, s, h, e)) ? 1 : 0;
  return n;
}

// The shapes of the three forms: decode (one query, a GQA group of 2 rows), prefill (64 queries x
// 2 rows per kv head: SIMD over rows on every target) and a decode split over keys (past
// kMinChunkKeys).
struct Form {
  const char* name;
  int64_t q_seq, k_seq;
};
constexpr Form kForms[] = {{"decode", 1, 150}, {"prefill", 64, 150}, {"split", 1, attention_internal::kMinChunkKeys * 3 + 7}};

// The example: q = ones, two keys of ones, one with a NaN element, values 10 and 20:
// the reference and torch's SDPA give NaN; a kernel that let max and a clamped exp drop the NaN
// gave 10 (the NaN key silently ignored).
TEST(AttentionSpecialValues, NanInOneKeyIsNanNotTheOtherKeysAverage) {
  for (const std::string& target : cpu_targets()) {
    ForcedTarget forced(target);
    for (const DType dtype : kTypes) {
      SCOPED_TRACE(target + " " + std::string(to_string(dtype)));
      Tensor q = make(dtype, Layout::BSHD, 1, 1, 1, 4), k = make(dtype, Layout::BSHD, 1, 2, 1, 4);
      Tensor v = make(dtype, Layout::BSHD, 1, 2, 1, 4), out = make(dtype, Layout::BSHD, 1, 1, 1, 4);
      for (int64_t e = 0; e < 4; ++e) {
        q.set(0, 0, 0, e, 1.0);
        k.set(0, 0, 0, e, 1.0);
        k.set(0, 1, 0, e, e == 0 ? kNaN : 1.0);
        v.set(0, 0, 0, e, 10.0);
        v.set(0, 1, 0, e, 20.0);
      }
      attention(q.view, k.view, v.view, out.view, AttentionOptions{});
      for (int64_t e = 0; e < 4; ++e) EXPECT_TRUE(std::isnan(out.at(0, 0, 0, e))) << e << ": " << out.at(0, 0, 0, e);
    }
  }
}

// An infinite q element makes the scores infinite: +inf anywhere gives NaN (exp(inf - inf)), as
// in the reference; it was all zeros, which reads as a row that sees no key.
TEST(AttentionSpecialValues, InfiniteQueryIsNanNotZeros) {
  for (const std::string& target : cpu_targets()) {
    ForcedTarget forced(target);
    for (const DType dtype : kTypes) {
      for (const Form& form : kForms) {
        SCOPED_TRACE(target + " " + std::string(to_string(dtype)) + " " + form.name);
        Call c(dtype, form.q_seq, form.k_seq, 4, 2, 16, 16, 5);
        for (int64_t s = 0; s < c.q_seq; ++s) c.q.set(0, s, 1, 3, kInf);  // head 1 of every query
        auto [fast, ref] = c.run();
        ASSERT_EQ(nan_count(ref), c.q_seq * 16);  // head 1's rows, all of them
        std::string first;
        EXPECT_EQ(compare(fast, ref, c, first), 0) << first;
      }
    }
  }
}

// Keys whose score is -inf (a -inf k element against a positive q element) carry weight 0: the
// rest of the row is finite and equals attention without those keys; a row whose visible scores
// are all -inf is NaN (exp(-inf + inf) in the reference). The first keys come first: a row whose
// first tiles hold only -inf scores must not carry exp(-inf + inf) into the later tiles.
TEST(AttentionSpecialValues, MinusInfinityScoresDropTheirKeysAndAnAllMinusInfinityRowIsNan) {
  for (const std::string& target : cpu_targets()) {
    ForcedTarget forced(target);
    for (const DType dtype : kTypes) {
      for (const Form& form : kForms) {
        SCOPED_TRACE(target + " " + std::string(to_string(dtype)) + " " + form.name);
        Call c(dtype, form.q_seq, form.k_seq, 4, 2, 16, 16, 6);
        for (int64_t s = 0; s < c.q_seq; ++s)
          for (int64_t h = 0; h < c.heads; ++h) c.q.set(0, s, h, 0, 0.5);  // element 0 positive
        // kv head 0: the first 100 keys score -inf (two tiles and a half), or in a split call
        // the whole first chunk and 50 keys of the second; kv head 1: every key does.
        const int64_t chunk = attention_internal::key_split(2, c.k_seq).chunk_keys;
        ASSERT_EQ(chunk > 0, form.k_seq > 1000);  // the split form is split (2 items: 2 kv heads)
        const int64_t minus_inf_keys = chunk > 0 ? chunk + 50 : 100;
        for (int64_t j = 0; j < c.k_seq; ++j) {
          if (j < minus_inf_keys) c.k.set(0, j, 0, 0, -kInf);
          c.k.set(0, j, 1, 0, -kInf);
        }
        c.options.mask = Mask::None;
        auto [fast, ref] = c.run();
        ASSERT_EQ(nan_count(ref), c.q_seq * 2 * 16);  // heads 2 and 3 (kv head 1) only
        std::string first;
        EXPECT_EQ(compare(fast, ref, c, first), 0) << first;
      }
    }
  }
}

// NaN, +inf and -inf at random places of q, k and v, on random small calls in every form: NaN
// and infinities exactly where the reference has them, the rest within rounding.
TEST(AttentionSpecialValues, RandomNonFiniteInputsMatchTheReferencePattern) {
  const double specials[] = {kNaN, kInf, -kInf};
  for (const std::string& target : cpu_targets()) {
    ForcedTarget forced(target);
    Rng rng(4242);
    int64_t nan_rows_seen = 0, inf_elements_seen = 0;
    for (int trial = 0; trial < 36; ++trial) {
      const DType dtype = kTypes[trial % 3];
      const Form& form = kForms[(trial / 3) % 3];
      const int64_t kv_heads = rng.uniform(1, 2), group = rng.uniform(1, 3), dq = rng.uniform(1, 40), dv = rng.uniform(1, 40);
      Call c(dtype, form.q_seq, form.k_seq, kv_heads * group, kv_heads, dq, dv, static_cast<uint64_t>(trial));
      if (trial % 2 == 1) c.options.window = rng.uniform(1, c.k_seq);
      Tensor* targets[] = {&c.q, &c.k, &c.v};
      for (int n = 0; n < 3; ++n) {
        Tensor& t = *targets[rng.uniform(0, 2)];
        t.set(0, rng.uniform(0, t.axes.seq - 1), rng.uniform(0, t.axes.heads - 1), rng.uniform(0, t.axes.dim - 1),
              specials[rng.uniform(0, 2)]);
      }
      SCOPED_TRACE(target + " trial " + std::to_string(trial) + " " + std::string(to_string(dtype)) + " " + form.name);
      auto [fast, ref] = c.run();
      nan_rows_seen += nan_count(ref) > 0 ? 1 : 0;
      for (int64_t s = 0; s < ref.axes.seq; ++s)
        for (int64_t h = 0; h < ref.axes.heads; ++h)
          for (int64_t e = 0; e < ref.axes.dim; ++e) inf_elements_seen += std::isinf(ref.at(0, s, h, e)) ? 1 : 0;
      std::string first;
      ASSERT_EQ(compare(fast, ref, c, first), 0) << first;
    }
    EXPECT_GT(nan_rows_seen, 5) << target;  // the trials exercise NaN outputs
    EXPECT_GT(inf_elements_seen, 0) << target;  // and infinite ones (inf in v)
  }
}

// The bf16 prefill on AMX tiles multiplies every key of a V tile by every row's weight, so a
// NaN or an infinity in V would reach rows that cannot see its key (0 * inf = NaN). Such a tile
// is refused and takes the float32 p.v over each row's visible keys: here inf at key 120 and NaN
// at key 130 of a causal 64 x 150 call (queries see keys up to 86 + i), so rows before them stay
// finite and the rest follow the reference; the fallback must have run where the CPU has AMX.
TEST(AttentionSpecialValues, AmxPrefillKeepsNonFiniteValuesToTheRowsThatSeeThem) {
  Call c(DType::BF16, 64, 150, 4, 1, 64, 64, 77);
  c.v.set(0, 120, 0, 5, kInf);
  c.v.set(0, 130, 0, 9, kNaN);
  const int64_t before = attention_internal::amx_value_fallbacks.load();
  const int64_t items_before = attention_internal::amx_prefill_items.load();
  auto [fast, ref] = c.run();
  std::string first;
  EXPECT_EQ(compare(fast, ref, c, first), 0) << first;
  int64_t finite_rows = 0;
  for (int64_t s = 0; s < 34; ++s) finite_rows += std::isfinite(fast.at(0, s, 0, 5)) && std::isfinite(fast.at(0, s, 0, 9)) ? 1 : 0;
  EXPECT_EQ(finite_rows, 34);  // queries 0..33 see neither key
  EXPECT_TRUE(std::isinf(fast.at(0, 40, 0, 5)));
  EXPECT_TRUE(std::isnan(fast.at(0, 50, 0, 9)));
  if (attention_internal::cpu_has_amx_bf16()) {
    EXPECT_GT(attention_internal::amx_prefill_items.load(), items_before);
    EXPECT_GT(attention_internal::amx_value_fallbacks.load(), before);
  }
}

// The bf16 prefill with fused RoPE on AMX splits q' and k' into bf16 hi + lo, which an infinity
// cannot be (inf - inf is NaN): a product of an infinite hi with the other factor's zero lo half
// would turn an -inf score (weight 0) into NaN. Such tiles and items take the float32 scores.
// Head dim 32, the first 16 columns rotated (NeoX): -inf in an unrotated k column at key 1
// against q's positive column there (an -inf score for every query: rows stay finite); NaN in a
// rotated k column at key 40 (rows that see key 40 are NaN); then an infinite q element (its
// item goes to the float32 form: its rows NaN or finite exactly as the reference's).
TEST(AttentionSpecialValues, AmxSplitScoresKeepInfinitiesWhereTheReferenceHasThem) {
  RopeSpec spec;
  spec.head_dim = 32;
  spec.rotary_dim = 16;
  const CosSinTable table(spec);
  std::vector<int64_t> positions(64);
  for (int64_t i = 0; i < 64; ++i) positions[static_cast<size_t>(i)] = i;
  const AttentionRope rope{.table = &table, .q_positions = positions, .k_positions = positions};
  for (const bool infinite_q : {false, true}) {
    SCOPED_TRACE(infinite_q ? "an infinite q element too" : "infinite and NaN k elements");
    Call c(DType::BF16, 64, 64, 4, 1, 32, 32, 93);
    for (int64_t s = 0; s < 64; ++s)
      for (int64_t h = 0; h < 4; ++h) c.q.set(0, s, h, 20, 0.5);
    c.k.set(0, 1, 0, 20, -kInf);
    c.k.set(0, 40, 0, 3, kNaN);
    if (infinite_q) c.q.set(0, 10, 2, 25, kInf);
    const int64_t before = attention_internal::amx_prefill_items.load();
    Tensor fast = make(DType::BF16, Layout::BSHD, 1, 64, 4, 32);
    attention(c.q.view, c.k.view, c.v.view, fast.view, rope, c.options);
    const Tensor q64 = c.q.widened(), k64 = c.k.widened(), v64 = c.v.widened();
    Tensor ref = make(DType::F64, Layout::BSHD, 1, 64, 4, 32);
    reference::attention(q64.view, k64.view, v64.view, ref.view, rope, c.options);
    int64_t nan_rows = 0, finite_rows = 0;
    for (int64_t s = 0; s < 64; ++s)
      for (int64_t h = 0; h < 4; ++h) {
        const bool ref_nan = std::isnan(ref.at(0, s, h, 0));
        nan_rows += ref_nan ? 1 : 0;
        finite_rows += ref_nan ? 0 : 1;
        for (int64_t e = 0; e < 32; ++e) {
          const double f = fast.at(0, s, h, e), r = ref.at(0, s, h, e);
          ASSERT_EQ(std::isnan(f), std::isnan(r)) << "query " << s << " head " << h << " element " << e;
          if (std::isfinite(r)) {  // the bound with |q'|, |k'| <= sqrt(2) (rotated |q|, |k| <= 1): A <= 2 scale d
            const double bound = test::attention_arithmetic_bound(DType::BF16, 32, false, 2 * 32 / std::sqrt(32.0), 0.0, 64, 1.0) +
                                 test::storage_ulp(DType::BF16, std::max(std::abs(f), std::abs(r)));
            ASSERT_LE(std::abs(f - r), bound) << "query " << s << " head " << h << " element " << e;
          }
        }
      }
    EXPECT_GT(nan_rows, 0);
    EXPECT_GT(finite_rows, 100);  // queries before key 40 (and, with the infinite q, its other rows)
    if (attention_internal::cpu_has_amx_bf16()) {
      EXPECT_GT(attention_internal::amx_prefill_items.load(), before);
    }
  }
}

// Head dim 0 for q and k: every score is the empty sum 0, so each row is the mean of its visible
// values (the reference's answer). The decode form divided by the head dim's vector count: SIGFPE.
// v head dim 0: nothing to write, nothing read.
TEST(AttentionSpecialValues, ZeroHeadDimsEqualTheReference) {
  for (const std::string& target : cpu_targets()) {
    ForcedTarget forced(target);
    for (const DType dtype : kTypes) {
      for (const Form& form : kForms) {
        SCOPED_TRACE(target + " " + std::string(to_string(dtype)) + " " + form.name);
        {
          Call c(dtype, form.q_seq, form.k_seq, 4, 2, 0, 8, 7);
          auto [fast, ref] = c.run();
          std::string first;
          EXPECT_EQ(compare(fast, ref, c, first), 0) << first;
          EXPECT_NE(ref.at(0, 0, 0, 0), 0.0);  // a real mean, not the no-key zeros
        }
        {
          Call c(dtype, form.q_seq, form.k_seq, 4, 2, 8, 0, 8);
          auto [fast, ref] = c.run();  // must not crash; nothing to compare
          EXPECT_EQ(fast.axes.dim, 0);
        }
      }
    }
  }
}

// A view with a head dim of 0 holds no element and may have null data (the checks accept it, as
// for any empty view). The fuzz target's first run with such dims found the bf16 scores
// (vdpbf16ps) and the float32 in-place K / V rows stepping the null pointer to each key's row;
// under UBSan (make sanitize) this test fails the same way without the fix. Every target, dtype
// and form; the answer is the reference's (the mean of the values; nothing for v head dim 0).
TEST(AttentionSpecialValues, ZeroHeadDimsWithNullDataOnEveryPath) {
  for (const std::string& target : cpu_targets()) {
    ForcedTarget forced(target);
    for (const DType dtype : kTypes) {
      for (const Form& form : kForms) {
        SCOPED_TRACE(target + " " + std::string(to_string(dtype)) + " " + form.name);
        Call c(dtype, form.q_seq, form.k_seq, 4, 2, 0, 8, 9);
        TensorView q = c.q.view, k = c.k.view;
        q.data = nullptr;
        k.data = nullptr;
        Tensor fast = make(dtype, Layout::BSHD, 1, c.q_seq, 4, 8);
        attention(q, k, c.v.view, fast.view, c.options);
        const Tensor q64 = c.q.widened(), k64 = c.k.widened(), v64 = c.v.widened();
        TensorView q_ref = q64.view, k_ref = k64.view;
        q_ref.data = nullptr;
        k_ref.data = nullptr;
        Tensor ref = make(DType::F64, Layout::BSHD, 1, c.q_seq, 4, 8);
        reference::attention(q_ref, k_ref, v64.view, ref.view, c.options);  // reads no q or k element either
        std::string first;
        EXPECT_EQ(compare(fast, ref, c, first), 0) << first;

        Call d(dtype, form.q_seq, form.k_seq, 4, 2, 8, 0, 10);
        TensorView v = d.v.view, out = make(dtype, Layout::BSHD, 1, d.q_seq, 4, 0).view;
        v.data = nullptr;
        out.data = nullptr;
        attention(d.q.view, d.k.view, v, out, d.options);  // nothing to write, nothing read
      }
    }
  }
}

}  // namespace
}  // namespace rotary
