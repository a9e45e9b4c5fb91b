// tests/attention/encodings_test.cpp: the position encodings inside attention (attention.hpp,
// "Other position encodings"; encodings.hpp): ALiBi's slopes against the paper's, the reference on
// a hand-worked ALiBi case, the absolute table against adding it by hand, the argument checks (and
// that nothing is written when they throw), and the demonstrations of what each encoding does, each able to fail:
//   - without positions (NoPE, no mask) attention is permutation-equivariant;
//   - with RoPE the output depends on position differences only: shifting every q and k position
//     by T leaves it unchanged within the table's rounding, while sinusoidal and learned absolute
//     encodings change it by far more than that tolerance.
// Measured values are printed ("[ measured ]") and recorded in docs/attention.md.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "rotary/attention.hpp"
#include "rotary/encodings.hpp"
#include "rotary/error.hpp"
#include "rotary/spec.hpp"
#include "rotary/table.hpp"
#include "tests/attention/attention_tensors.hpp"
#include "tests/support/cpu_scope.hpp"

namespace rotary {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;
using test::make;
using test::Rng;
using test::Tensor;

constexpr double kU = 0x1p-24;

// Random float32 q [1, seq, kv_heads * group, dim], k and v [1, seq, kv_heads, dim] (BSHD).
struct Qkv {
  Tensor q, k, v;
};
Qkv random_qkv(Rng& rng, int64_t seq, int64_t kv_heads, int64_t group, int64_t dim) {
  Qkv t{make(DType::F32, Layout::BSHD, 1, seq, kv_heads * group, dim), make(DType::F32, Layout::BSHD, 1, seq, kv_heads, dim),
        make(DType::F32, Layout::BSHD, 1, seq, kv_heads, dim)};
  t.q.fill(rng), t.k.fill(rng), t.v.fill(rng);
  return t;
}

// ---- ALiBi's slopes: the paper's, written out --------------------------------------------------

// Press et al. 2021 (arXiv:2108.12409), section 3 and get_slopes: 8 heads 2^-1 ... 2^-8; 16 heads
// 2^-0.5 ... 2^-8; 12 heads (not a power of two): the 8-head slopes, then every other one of the
// 16-head slopes (2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5).
TEST(AlibiSlopes, EqualThePapersForEightTwelveAndSixteenHeads) {
  const std::vector<double> eight{0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625};
  EXPECT_EQ(alibi_slopes(8), eight);  // powers of two: exact
  const std::vector<double> sixteen{0.7071067811865476, 0.5, 0.3535533905932738, 0.25, 0.1767766952966369, 0.125,
                                    0.08838834764831845, 0.0625, 0.04419417382415922, 0.03125, 0.02209708691207961,
                                    0.015625, 0.011048543456039806, 0.0078125, 0.005524271728019903, 0.00390625};
  const std::vector<double> got16 = alibi_slopes(16);
  ASSERT_EQ(got16.size(), 16u);
  for (size_t h = 0; h < 16; ++h) EXPECT_DOUBLE_EQ(got16[h], sixteen[h]) << "head " << h;
  std::vector<double> twelve = eight;
  for (const double extra : {0.7071067811865476, 0.3535533905932738, 0.1767766952966369, 0.08838834764831845}) twelve.push_back(extra);
  const std::vector<double> got12 = alibi_slopes(12);
  ASSERT_EQ(got12.size(), 12u);
  for (size_t h = 0; h < 12; ++h) EXPECT_DOUBLE_EQ(got12[h], twelve[h]) << "head " << h;
  EXPECT_THAT([] { (void)alibi_slopes(0); }, ThrowsMessage<Error>(HasSubstr("alibi_slopes: num_heads must be > 0 (got 0)")));
}

TEST(SinusoidalTable, RowsAreVaswanisEncodingRoundedToFloat32) {
  const std::vector<float> table = sinusoidal_table(50, 6);
  ASSERT_EQ(table.size(), 300u);
  for (int64_t p = 0; p < 50; ++p) {
    for (int64_t i = 0; i < 3; ++i) {
      const double angle = static_cast<double>(p) / std::pow(10000.0, static_cast<double>(2 * i) / 6.0);
      EXPECT_EQ(table[static_cast<size_t>(p * 6 + 2 * i)], static_cast<float>(std::sin(angle)));
      EXPECT_EQ(table[static_cast<size_t>(p * 6 + 2 * i + 1)], static_cast<float>(std::cos(angle)));
    }
  }
  EXPECT_THAT([] { (void)sinusoidal_table(4, 5); }, ThrowsMessage<Error>(HasSubstr("sinusoidal_table: d_model must be even and > 0 (got 5)")));
  EXPECT_THAT([] { (void)sinusoidal_table(-1, 4); }, ThrowsMessage<Error>(HasSubstr("sinusoidal_table: rows must be >= 0 (got -1)")));
}

// ---- the reference on hand-worked numbers ------------------------------------------------------

// attention_test.cpp's two tokens (q0 = (1, 0), q1 = (0, 1); k0 = (1, 0), k1 = (0, 2); v0 = (1, 2),
// v1 = (3, 4); scale 1) with ALiBi slope 0.5, no mask: bias -0.5 |i - j|.
//   Query 0 (position 0): scores (1, 0 - 0.5); w1 = 1 / (1 + e^1.5); out = v0 + 2 w1 (1, 1)
//     = (1.3648510476127127, 2.3648510476127127)
//   Query 1 (position 1): scores (0 - 0.5, 2); w1 = 1 / (1 + e^-2.5)
//     = (2.848283639957513, 3.848283639957513)
// With the causal mask and query offset 1 both queries sit one position later (1 and 2): query 0
// then sees both keys with bias (-0.5, 0), scores (0.5, 0): w1 = 1 / (1 + e^0.5).
TEST(AttentionReference, AlibiBiasOnTwoTokensMatchesHandComputedSoftmax) {
  Tensor q = make(DType::F64, Layout::BSHD, 1, 2, 1, 2), k = q, v = q, out = q;
  k = make(DType::F64, Layout::BSHD, 1, 2, 1, 2), v = make(DType::F64, Layout::BSHD, 1, 2, 1, 2);
  out = make(DType::F64, Layout::BSHD, 1, 2, 1, 2);
  q.set(0, 0, 0, 0, 1), q.set(0, 0, 0, 1, 0), q.set(0, 1, 0, 0, 0), q.set(0, 1, 0, 1, 1);
  k.set(0, 0, 0, 0, 1), k.set(0, 0, 0, 1, 0), k.set(0, 1, 0, 0, 0), k.set(0, 1, 0, 1, 2);
  v.set(0, 0, 0, 0, 1), v.set(0, 0, 0, 1, 2), v.set(0, 1, 0, 0, 3), v.set(0, 1, 0, 1, 4);
  const std::vector<float> slope{0.5f};
  reference::attention(q.view, k.view, v.view, out.view, {.scale = 1.0, .alibi_slopes = slope});
  EXPECT_NEAR(out.at(0, 0, 0, 0), 1.3648510476127127, 1e-15);
  EXPECT_NEAR(out.at(0, 0, 0, 1), 2.3648510476127127, 1e-15);
  EXPECT_NEAR(out.at(0, 1, 0, 0), 2.848283639957513, 1e-15);
  EXPECT_NEAR(out.at(0, 1, 0, 1), 3.848283639957513, 1e-15);
  reference::attention(q.view, k.view, v.view, out.view, {.scale = 1.0, .mask = Mask::Causal, .query_offset = 1, .alibi_slopes = slope});
  const double w1 = 1.0 / (1.0 + std::exp(0.5));
  EXPECT_NEAR(out.at(0, 0, 0, 0), 1.0 + 2 * w1, 1e-15);
  // The fast path agrees within its bound (here a few hundred u).
  Tensor q32 = make(DType::F32, Layout::BSHD, 1, 2, 1, 2), k32 = q32, v32 = q32, out32 = q32;
  k32 = make(DType::F32, Layout::BSHD, 1, 2, 1, 2), v32 = make(DType::F32, Layout::BSHD, 1, 2, 1, 2);
  out32 = make(DType::F32, Layout::BSHD, 1, 2, 1, 2);
  for (int64_t s = 0; s < 2; ++s)
    for (int64_t e = 0; e < 2; ++e) q32.set(0, s, 0, e, q.at(0, s, 0, e)), k32.set(0, s, 0, e, k.at(0, s, 0, e)), v32.set(0, s, 0, e, v.at(0, s, 0, e));
  attention(q32.view, k32.view, v32.view, out32.view, {.scale = 1.0, .alibi_slopes = slope});
  EXPECT_NEAR(out32.at(0, 0, 0, 0), 1.3648510476127127, 400 * kU);
  EXPECT_NEAR(out32.at(0, 1, 0, 1), 3.848283639957513, 400 * kU);
}

// The absolute table is added to q and k before the product: the same as adding it by hand.
// Reference: bitwise (the same double sums). Fast path, float32: bitwise too, since it forms
// fl32(q + P) as it loads, which is what the hand-added float32 tensor holds.
TEST(AttentionCpu, AbsoluteTableEqualsAddingItToQAndKByHand) {
  Rng rng(31);
  const int64_t seq = 45, kv_heads = 2, group = 2, dim = 20, rows = 64;
  Qkv qkv = random_qkv(rng, seq, kv_heads, group, dim);
  const Tensor &q = qkv.q, &k = qkv.k, &v = qkv.v;
  std::vector<float> table;
  for (int64_t i = 0; i < rows * dim; ++i) table.push_back(static_cast<float>(rng.value()));
  std::vector<int64_t> q_positions, k_positions;
  for (int64_t i = 0; i < seq; ++i) q_positions.push_back(rng.uniform(0, rows - 1)), k_positions.push_back(rng.uniform(0, rows - 1));
  const AttentionAbsolute absolute{.table = table, .rows = rows, .dim = dim, .q_positions = q_positions, .k_positions = k_positions};
  Tensor q_added = make(DType::F32, Layout::BSHD, 1, seq, kv_heads * group, dim), k_added = k;
  k_added = make(DType::F32, Layout::BSHD, 1, seq, kv_heads, dim);
  for (int64_t s = 0; s < seq; ++s)
    for (int64_t e = 0; e < dim; ++e) {
      const float pq = table[static_cast<size_t>(q_positions[static_cast<size_t>(s)] * dim + e)];
      const float pk = table[static_cast<size_t>(k_positions[static_cast<size_t>(s)] * dim + e)];
      for (int64_t h = 0; h < kv_heads * group; ++h) q_added.set(0, s, h, e, static_cast<float>(q.at(0, s, h, e)) + pq);
      for (int64_t h = 0; h < kv_heads; ++h) k_added.set(0, s, h, e, static_cast<float>(k.at(0, s, h, e)) + pk);
    }
  Tensor fused = make(DType::F32, Layout::BSHD, 1, seq, kv_heads * group, dim), by_hand = fused;
  by_hand = make(DType::F32, Layout::BSHD, 1, seq, kv_heads * group, dim);
  attention(q.view, k.view, v.view, fused.view, {.mask = Mask::Causal, .absolute = &absolute});
  attention(q_added.view, k_added.view, v.view, by_hand.view, {.mask = Mask::Causal});
  EXPECT_EQ(std::memcmp(fused.storage.data(), by_hand.storage.data(), fused.storage.size() * sizeof(double)), 0);

  Tensor q64 = q.widened(), k64 = k.widened(), v64 = v.widened();
  Tensor qa64 = make(DType::F64, Layout::BSHD, 1, seq, kv_heads * group, dim), ka64 = k64;
  ka64 = make(DType::F64, Layout::BSHD, 1, seq, kv_heads, dim);
  for (int64_t s = 0; s < seq; ++s)
    for (int64_t e = 0; e < dim; ++e) {
      const double pq = table[static_cast<size_t>(q_positions[static_cast<size_t>(s)] * dim + e)];
      const double pk = table[static_cast<size_t>(k_positions[static_cast<size_t>(s)] * dim + e)];
      for (int64_t h = 0; h < kv_heads * group; ++h) qa64.set(0, s, h, e, q64.at(0, s, h, e) + pq);
      for (int64_t h = 0; h < kv_heads; ++h) ka64.set(0, s, h, e, k64.at(0, s, h, e) + pk);
    }
  Tensor ref = make(DType::F64, Layout::BSHD, 1, seq, kv_heads * group, dim), ref_hand = ref;
  ref_hand = make(DType::F64, Layout::BSHD, 1, seq, kv_heads * group, dim);
  reference::attention(q64.view, k64.view, v64.view, ref.view, {.mask = Mask::Causal, .absolute = &absolute});
  reference::attention(qa64.view, ka64.view, v64.view, ref_hand.view, {.mask = Mask::Causal});
  EXPECT_EQ(std::memcmp(ref.storage.data(), ref_hand.storage.data(), ref.storage.size() * sizeof(double)), 0);
  // And the table matters: without it the output differs.
  Tensor plain = make(DType::F64, Layout::BSHD, 1, seq, kv_heads * group, dim);
  reference::attention(q64.view, k64.view, v64.view, plain.view, {.mask = Mask::Causal});
  EXPECT_NE(std::memcmp(ref.storage.data(), plain.storage.data(), ref.storage.size() * sizeof(double)), 0);
}

// ---- argument checks: each names the argument and the value; nothing is written ----------------

struct Call {
  Tensor q = make(DType::F32, Layout::BSHD, 2, 3, 4, 8);
  Tensor k = make(DType::F32, Layout::BSHD, 2, 5, 2, 8);
  Tensor v = make(DType::F32, Layout::BSHD, 2, 5, 2, 8);
  Tensor out = make(DType::F32, Layout::BSHD, 2, 3, 4, 8);
  Call() {
    Rng rng(2);
    q.fill(rng), k.fill(rng), v.fill(rng), out.fill(rng);
  }
};

// Runs `body` on the fast path and the reference; each must throw `message` and leave out as it was.
template <typename Body>
void expect_refused(Call& c, const std::string& message, Body body) {
  for (const bool fast : {true, false}) {
    SCOPED_TRACE(fast ? "fast" : "reference");
    const std::vector<double> before = c.out.storage;
    EXPECT_THAT([&] { body(fast); }, ThrowsMessage<Error>(HasSubstr(message)));
    EXPECT_EQ(c.out.storage, before) << "out was written by a call that threw";
  }
}

TEST(AttentionArgs, RejectsBadAlibiSlopesNamingThem) {
  Call c;
  const auto run = [&](bool fast, const AttentionOptions& options) {
    if (fast) attention(c.q.view, c.k.view, c.v.view, c.out.view, options);
    else reference::attention(c.q.view, c.k.view, c.v.view, c.out.view, options);
  };
  const std::vector<float> three{0.5f, 0.25f, 0.125f}, nan_slope{0.5f, 0.25f, NAN, 0.125f}, inf_slope{0.5f, INFINITY, 0.25f, 0.1f};
  const std::vector<float> huge{0.5f, 0.25f, 0.125f, -0x1p99f};  // |slope| * 4 = 2^101
  expect_refused(c, "attention: options.alibi_slopes must hold one slope per q head, 4 (got 3)",
                 [&](bool fast) { run(fast, {.alibi_slopes = three}); });
  expect_refused(c, "options.alibi_slopes[2] must be finite (got nan)", [&](bool fast) { run(fast, {.alibi_slopes = nan_slope}); });
  expect_refused(c, "options.alibi_slopes[1] must be finite (got inf)", [&](bool fast) { run(fast, {.alibi_slopes = inf_slope}); });
  expect_refused(c, "options.alibi_slopes[3] times the call's largest query-key distance 4 must be at most 2^100 in magnitude (got -6.33825",
                 [&](bool fast) { run(fast, {.alibi_slopes = huge}); });
}

TEST(AttentionArgs, RejectsBadAbsoluteTablesAndPositionsNamingThem) {
  Call c;
  const auto run = [&](bool fast, const AttentionAbsolute& absolute) {
    if (fast) attention(c.q.view, c.k.view, c.v.view, c.out.view, {.absolute = &absolute});
    else reference::attention(c.q.view, c.k.view, c.v.view, c.out.view, {.absolute = &absolute});
  };
  const std::vector<float> table = sinusoidal_table(10, 8), narrow = sinusoidal_table(10, 6);
  const std::vector<int64_t> q_pos{0, 1, 2, 3, 4, 5}, k_pos{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<int64_t> past = k_pos, negative = q_pos;
  past[7] = 10;
  negative[2] = -3;
  const std::vector<int64_t> short_q{0, 1, 2};
  expect_refused(c, "attention: absolute.dim must equal q's head dim, 8 (got 6)",
                 [&](bool fast) { run(fast, {.table = narrow, .rows = 10, .dim = 6, .q_positions = q_pos, .k_positions = k_pos}); });
  expect_refused(c, "absolute.table must hold rows * dim = 11 * 8 values (got 80)",
                 [&](bool fast) { run(fast, {.table = table, .rows = 11, .dim = 8, .q_positions = q_pos, .k_positions = k_pos}); });
  expect_refused(c, "absolute.k_positions[7] must be in [0, 9] (the table's rows) (got 10)",
                 [&](bool fast) { run(fast, {.table = table, .rows = 10, .dim = 8, .q_positions = q_pos, .k_positions = past}); });
  expect_refused(c, "absolute.q_positions[2] must be in [0, 9] (the table's rows) (got -3)",
                 [&](bool fast) { run(fast, {.table = table, .rows = 10, .dim = 8, .q_positions = negative, .k_positions = k_pos}); });
  expect_refused(c, "absolute.q_positions must hold one position per q token, 6 (got 3)",
                 [&](bool fast) { run(fast, {.table = table, .rows = 10, .dim = 8, .q_positions = short_q, .k_positions = k_pos}); });
  expect_refused(c, "absolute.rows must be >= 0 (got -1)",
                 [&](bool fast) { run(fast, {.table = table, .rows = -1, .dim = 8, .q_positions = q_pos, .k_positions = k_pos}); });
}

TEST(AttentionArgs, RefusesTwoPositionEncodingsInOneCall) {
  Call c;
  RopeSpec spec;
  spec.head_dim = 8;
  spec.rotary_dim = 8;
  const CosSinTable rope_table(spec, {.fixed_positions = 16});
  const std::vector<int64_t> q_pos{0, 1, 2, 3, 4, 5}, k_pos{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  const AttentionRope rope{.table = &rope_table, .q_positions = q_pos, .k_positions = k_pos};
  const std::vector<float> slopes{0.5f, 0.25f, 0.125f, 0.0625f}, table = sinusoidal_table(10, 8);
  const AttentionAbsolute absolute{.table = table, .rows = 10, .dim = 8, .q_positions = q_pos, .k_positions = k_pos};
  const auto with_rope = [&](bool fast, const AttentionOptions& options) {
    if (fast) attention(c.q.view, c.k.view, c.v.view, c.out.view, rope, options);
    else reference::attention(c.q.view, c.k.view, c.v.view, c.out.view, rope, options);
  };
  expect_refused(c, "options.alibi_slopes must be empty with fused RoPE: one position encoding per call (got 4 slopes)",
                 [&](bool fast) { with_rope(fast, {.alibi_slopes = slopes}); });
  expect_refused(c, "options.absolute must be null with fused RoPE: one position encoding per call (got a table)",
                 [&](bool fast) { with_rope(fast, {.absolute = &absolute}); });
  expect_refused(c, "options.alibi_slopes must be empty with an absolute table: one position encoding per call (got 4 slopes)",
                 [&](bool fast) {
                   if (fast) attention(c.q.view, c.k.view, c.v.view, c.out.view, {.alibi_slopes = slopes, .absolute = &absolute});
                   else reference::attention(c.q.view, c.k.view, c.v.view, c.out.view, {.alibi_slopes = slopes, .absolute = &absolute});
                 });
}

// ---- the demonstrations ------------------------------------------------------------------------

double max_difference(const Tensor& a, const Tensor& b, const std::vector<int64_t>& rows_of_b = {}) {
  double worst = 0;
  for (int64_t s = 0; s < a.axes.seq; ++s)
    for (int64_t h = 0; h < a.axes.heads; ++h)
      for (int64_t e = 0; e < a.axes.dim; ++e) {
        const int64_t t = rows_of_b.empty() ? s : rows_of_b[static_cast<size_t>(s)];
        worst = std::max(worst, std::abs(a.at(0, s, h, e) - b.at(0, t, h, e)));
      }
  return worst;
}

// Tokens of `t` reordered: result token s = t's token order[s].
Tensor permuted(const Tensor& t, const std::vector<int64_t>& order) {
  Tensor result = make(t.view.dtype, Layout::BSHD, 1, t.axes.seq, t.axes.heads, t.axes.dim);
  for (int64_t s = 0; s < t.axes.seq; ++s)
    for (int64_t h = 0; h < t.axes.heads; ++h)
      for (int64_t e = 0; e < t.axes.dim; ++e) result.set(0, s, h, e, t.at(0, order[static_cast<size_t>(s)], h, e));
  return result;
}

std::vector<int64_t> random_order(Rng& rng, int64_t n) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(rng.uniform(0, i))]);
  return order;
}

// NoPE without a mask: attention(q, K P, V P) = attention(q, K, V) for a permutation P of the keys
// (with their values), and attention(P q, K, V) = P attention(q, K, V). The reference shows it to
// 1e-15 (double sums in another order); the fast path within twice its bound of the reference
// (the key order changes its summation order): d = 32, |q|, |k| <= 1, A <= sqrt(32), n = 70:
// 2 (2 (38 * 5.66 + 110) + 2 * 80 + 1) u = 1622 u, so 1700 u. Shown to fail: with the causal mask, or with ALiBi,
// the same key permutation moves the output by far more than the tolerance.
TEST(AttentionDemonstration, WithoutPositionsAttentionIsPermutationEquivariant) {
  for (const std::string& target : cpu_targets()) {
    test::ForcedTarget forced(target);
    SCOPED_TRACE("target " + target);
    Rng rng(41);
    const int64_t seq = 70, kv_heads = 2, group = 2, dim = 32;
    Qkv qkv = random_qkv(rng, seq, kv_heads, group, dim);
    const Tensor &q = qkv.q, &k = qkv.k, &v = qkv.v;
    const std::vector<int64_t> key_order = random_order(rng, seq), query_order = random_order(rng, seq);
    const Tensor k_perm = permuted(k, key_order), v_perm = permuted(v, key_order), q_perm = permuted(q, query_order);
    const auto run = [&](const Tensor& qq, const Tensor& kk, const Tensor& vv, const AttentionOptions& options, bool fast) {
      Tensor out = make(fast ? DType::F32 : DType::F64, Layout::BSHD, 1, seq, kv_heads * group, dim);
      if (fast) {
        attention(qq.view, kk.view, vv.view, out.view, options);
      } else {
        const Tensor q64 = qq.widened(), k64 = kk.widened(), v64 = vv.widened();
        reference::attention(q64.view, k64.view, v64.view, out.view, options);
      }
      return out;
    };
    for (const bool fast : {false, true}) {
      SCOPED_TRACE(fast ? "fast" : "reference");
      const double tolerance = fast ? 1700 * kU : 1e-15;
      const Tensor base = run(q, k, v, {}, fast);
      const double keys_moved = max_difference(run(q, k_perm, v_perm, {}, fast), base);
      const double queries_moved = max_difference(run(q_perm, k, v, {}, fast), base, query_order);
      EXPECT_LE(keys_moved, tolerance);
      EXPECT_LE(queries_moved, tolerance);
      // The check can fail: order matters once positions do.
      const double causal = max_difference(run(q, k_perm, v_perm, {.mask = Mask::Causal}, fast), run(q, k, v, {.mask = Mask::Causal}, fast));
      std::vector<float> slopes;
      for (const double s : alibi_slopes(kv_heads * group)) slopes.push_back(static_cast<float>(s));
      const double alibi = max_difference(run(q, k_perm, v_perm, {.alibi_slopes = slopes}, fast), run(q, k, v, {.alibi_slopes = slopes}, fast));
      EXPECT_GT(causal, 100 * tolerance);
      EXPECT_GT(alibi, 100 * tolerance);
      if (target == cpu_targets().front()) {
        std::printf("[ measured ] %s NoPE permutation: keys+values %.3g, queries %.3g (tolerance %.3g); causal %.3g, ALiBi %.3g\n",
                    fast ? "fast f32" : "reference f64", keys_moved, queries_moved, tolerance, causal, alibi);
      }
    }
  }
}

// RoPE: <R_m q, R_n k> depends on m - n only, so shifting every q and k position by T leaves the
// output unchanged up to the table's float32 rounding. Per rotated element the table's value is
// within half a float32 ulp of the exact cos / sin (an Exact table), so each score is within
// u A_j of the exact relative-only score (A_j = scale sum |q~||k~|), each run's weights within
// eta = u max A, and the two outputs within 2 Vbar 2 eta (1 + 2 eta) of each other:
//     tolerance = 4.01 u max_A Vbar + 1e-14  (the reference; the fast path adds twice its bound).
// Sinusoidal and learned absolute encodings at the same positions: the outputs change by far more.
TEST(AttentionDemonstration, RopeDependsOnlyOnPositionDifferencesAbsoluteEncodingsDoNot) {
  Rng rng(43);
  const int64_t seq = 48, kv_heads = 2, group = 2, dim = 64, shift = 1000;
  Qkv qkv = random_qkv(rng, seq, kv_heads, group, dim);
  const Tensor &q = qkv.q, &k = qkv.k, &v = qkv.v;
  const Tensor q64 = q.widened(), k64 = k.widened(), v64 = v.widened();
  std::vector<int64_t> positions(static_cast<size_t>(seq)), shifted(static_cast<size_t>(seq));
  for (int64_t i = 0; i < seq; ++i) {
    positions[static_cast<size_t>(i)] = 5 + 3 * i;  // gaps: positions need not be consecutive
    shifted[static_cast<size_t>(i)] = positions[static_cast<size_t>(i)] + shift;
  }
  RopeSpec spec;
  spec.head_dim = dim;
  spec.rotary_dim = dim;
  const CosSinTable table(spec);
  const AttentionOptions options{.mask = Mask::Causal};
  // |q|, |k| <= 1 and |cos| + |sin| <= sqrt(2): A <= scale * d * 2 = 16; Vbar <= 1.
  const double max_a = 1.0 / std::sqrt(static_cast<double>(dim)) * static_cast<double>(dim) * 2.0;
  const double tolerance = 4.01 * kU * max_a + 1e-14;

  const auto reference_rope = [&](const std::vector<int64_t>& p) {
    Tensor out = make(DType::F64, Layout::BSHD, 1, seq, kv_heads * group, dim);
    reference::attention(q64.view, k64.view, v64.view, out.view, {.table = &table, .q_positions = p, .k_positions = p}, options);
    return out;
  };
  const auto fast_rope = [&](const std::vector<int64_t>& p) {
    Tensor out = make(DType::F32, Layout::BSHD, 1, seq, kv_heads * group, dim);
    attention(q.view, k.view, v.view, out.view, {.table = &table, .q_positions = p, .k_positions = p}, options);
    return out;
  };
  const double rope_reference = max_difference(reference_rope(shifted), reference_rope(positions));
  const double rope_fast = max_difference(fast_rope(shifted), fast_rope(positions));
  EXPECT_LE(rope_reference, tolerance);
  // Fast: each run within its attention bound of its reference (E = (d + 6) u A, eta = E + 110 u,
  // n <= 48: <= 2 (70 * 16 + 110) + 2 * 56 = 2572 u), plus the reference difference.
  const double fast_tolerance = 2 * 2572 * kU + tolerance;
  EXPECT_LE(rope_fast, fast_tolerance);

  const int64_t rows = positions.back() + shift + 1;
  std::vector<float> learned;
  for (int64_t i = 0; i < rows * dim; ++i) learned.push_back(static_cast<float>(rng.value()));
  const std::vector<float> sinusoidal = sinusoidal_table(rows, dim);
  const auto reference_absolute = [&](const std::vector<float>& values, const std::vector<int64_t>& p) {
    Tensor out = make(DType::F64, Layout::BSHD, 1, seq, kv_heads * group, dim);
    const AttentionAbsolute absolute{.table = values, .rows = rows, .dim = dim, .q_positions = p, .k_positions = p};
    reference::attention(q64.view, k64.view, v64.view, out.view, {.mask = Mask::Causal, .absolute = &absolute});
    return out;
  };
  const double sinusoidal_moved = max_difference(reference_absolute(sinusoidal, shifted), reference_absolute(sinusoidal, positions));
  const double learned_moved = max_difference(reference_absolute(learned, shifted), reference_absolute(learned, positions));
  EXPECT_GT(sinusoidal_moved, 1000 * fast_tolerance);
  EXPECT_GT(learned_moved, 1000 * fast_tolerance);
  std::printf("[ measured ] shift by %lld: RoPE reference %.3g (tolerance %.3g), RoPE fast f32 %.3g (tolerance %.3g); "
              "sinusoidal %.3g, learned %.3g\n",
              static_cast<long long>(shift), rope_reference, tolerance, rope_fast, fast_tolerance, sinusoidal_moved, learned_moved);
  // The RoPE check can fail: shifting the keys alone (not the queries) changes m - n.
  Tensor moved_keys = make(DType::F64, Layout::BSHD, 1, seq, kv_heads * group, dim);
  reference::attention(q64.view, k64.view, v64.view, moved_keys.view, {.table = &table, .q_positions = positions, .k_positions = shifted}, options);
  EXPECT_GT(max_difference(moved_keys, reference_rope(positions)), 1000 * tolerance);
}

}  // namespace
}  // namespace rotary
