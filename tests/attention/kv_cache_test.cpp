// tests/attention/kv_cache_test.cpp: include/rotary/kv_cache.hpp — decode after prefill against
// attention recomputed over the whole sequence (the float64 reference with fused RoPE, and the
// fast fused path), context shift against a cache rebuilt at the new positions, and every
// refusal by its message.
//
// Tolerances (docs/attention.md, "The KV cache: error analysis"), u = 2^-24, u_fmt = 2^-8 (bf16)
// or 2^-11 (f16), the unit roundoff of the storage format:
//   decode:  attention's bound (attention_test.cpp) with the score error
//              E = ((d + 6) u + 2.01 u_fmt [bf16 / f16 only]) * max_j A_j
//            (the cache stores rotated k, and attend rotates q, in the storage format: one more
//            rounding of each rotated element, relative u_fmt, for q and for k).
//   shift:   per rotated element of a pair with inputs (a0, c0), S0 = s (|a0| + |c0|):
//              |shifted - rebuilt| <= (10 u + 4.01 u_fmt [bf16 / f16 only]) S0;
//            elements outside the rotary block and values: bitwise equal.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/attention.hpp"
#include "rotary/error.hpp"
#include "rotary/frequencies.hpp"
#include "rotary/kv_cache.hpp"
#include "rotary/presets.hpp"
#include "rotary/spec.hpp"
#include "rotary/table.hpp"
#include "rotary/tensor.hpp"
#include "core/system_memory.hpp"
#include "tests/support/elements.hpp"

namespace rotary {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

constexpr double kU = 0x1p-24;

double unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::BF16: return 0x1p-8;
    case DType::F16: return 0x1p-11;
    default: return 0.0;  // float32 storage adds nothing beyond the float32 math
  }
}
int mantissa_bits(DType dtype) { return dtype == DType::BF16 ? 7 : 10; }

using test::load_element;  // tests/support/elements.hpp
using test::store_element;

// A contiguous BSHD tensor [batch, seq, heads, dim] in its own buffer.
struct Tensor {
  std::vector<double> storage;
  TensorView view;
  int64_t batch, seq, heads, dim;
  Tensor(DType dtype, int64_t batch_, int64_t seq_, int64_t heads_, int64_t dim_)
      : storage(static_cast<size_t>(batch_ * seq_ * heads_ * dim_ + 1)), batch(batch_), seq(seq_), heads(heads_), dim(dim_) {
    view = contiguous_view(storage.data(), dtype, Layout::BSHD, {batch, seq, heads, dim});
  }
  int64_t index(int64_t b, int64_t s, int64_t h, int64_t e) const { return ((b * seq + s) * heads + h) * dim + e; }
  double at(int64_t b, int64_t s, int64_t h, int64_t e) const { return load_element(view.data, view.dtype, index(b, s, h, e)); }
  void set(int64_t b, int64_t s, int64_t h, int64_t e, double value) { store_element(view.data, view.dtype, index(b, s, h, e), value); }
  // Never zero: magnitude in [0.1, 1], random sign.
  void fill(std::mt19937_64& rng) {
    std::uniform_real_distribution<double> magnitude(0.1, 1.0);
    for (int64_t i = 0; i < batch * seq * heads * dim; ++i) {
      const double m = magnitude(rng);
      store_element(view.data, view.dtype, i, (rng() & 1) ? m : -m);
    }
  }
  // Tokens [first, first + count) of every sequence, in dtype.
  Tensor tokens(int64_t first, int64_t count, DType dtype) const {
    Tensor out(dtype, batch, count, heads, dim);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t s = 0; s < count; ++s)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t e = 0; e < dim; ++e) out.set(b, s, h, e, at(b, first + s, h, e));
    return out;
  }
};

RopeSpec preset_spec(const std::string& name) { return preset(name).spec; }

// |a||C| + |c||S| per element of a row rotated at `position` (the table's float32 values); the
// magnitude the rotation error scales with (apply's M). Elements outside the block: |x|.
std::vector<double> rotated_magnitudes(const Tensor& x, int64_t b, int64_t s, int64_t h, const CosSinTable& table,
                                       int64_t position, int64_t rotary_offset) {
  const int64_t num_pairs = table.num_pairs();
  std::vector<float> cos(static_cast<size_t>(num_pairs)), sin(static_cast<size_t>(num_pairs));
  if (num_pairs > 0) table.row(position, cos.data(), sin.data());
  std::vector<double> m(static_cast<size_t>(x.dim));
  for (int64_t e = 0; e < x.dim; ++e) m[static_cast<size_t>(e)] = std::abs(x.at(b, s, h, e));
  const bool neox = table.spec().style == Style::NeoX;
  for (int64_t i = 0; i < num_pairs; ++i) {
    const int64_t ia = rotary_offset + (neox ? i : 2 * i), ic = rotary_offset + (neox ? i + num_pairs : 2 * i + 1);
    const double a = std::abs(x.at(b, s, h, ia)), c = std::abs(x.at(b, s, h, ic));
    const double C = std::abs(cos[static_cast<size_t>(i)]), S = std::abs(sin[static_cast<size_t>(i)]);
    m[static_cast<size_t>(ia)] = a * C + c * S;
    m[static_cast<size_t>(ic)] = c * C + a * S;
  }
  return m;
}

struct DecodeCase {
  std::string preset;
  TableOptions table_options;
  std::vector<int64_t> starts;  // first position of each sequence
};

// Worst |cache - ref| / tolerance over all outputs, and the same for |cache - fused whole fast|.
struct Ratios {
  double vs_reference = 0, vs_fast = 0;
};

// Prefill `prefill` tokens, then decode one token at a time up to `total`, attending after each
// append; compares every output row with whole-sequence attention over `total` tokens.
// `decode_gap` adds that many positions before the first decode token (a test of the bound).
Ratios run_decode(const DecodeCase& c, DType dtype, int64_t prefill, int64_t total, int64_t decode_gap = 0) {
  const RopeSpec spec = preset_spec(c.preset);
  const CosSinTable table(spec, c.table_options);
  const int64_t batch = static_cast<int64_t>(c.starts.size()), kv_heads = 2, q_heads = 4, d = spec.head_dim, dv = 24;
  std::mt19937_64 rng(0x5eed0000 + static_cast<uint64_t>(total) * 31 + static_cast<uint64_t>(dtype));
  Tensor q(dtype, batch, total, q_heads, d), k(dtype, batch, total, kv_heads, d), v(dtype, batch, total, kv_heads, dv);
  q.fill(rng);
  k.fill(rng);
  v.fill(rng);
  std::vector<int64_t> positions(static_cast<size_t>(batch * total));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < total; ++s) positions[static_cast<size_t>(b * total + s)] = c.starts[static_cast<size_t>(b)] + s;

  // Whole sequence: the float64 reference on f64 copies, and the fast fused path.
  Tensor q64 = q.tokens(0, total, DType::F64), k64 = k.tokens(0, total, DType::F64), v64 = v.tokens(0, total, DType::F64);
  Tensor ref(DType::F64, batch, total, q_heads, dv), whole(dtype, batch, total, q_heads, dv);
  AttentionRope rope{&table, positions, positions};
  AttentionOptions causal;
  causal.mask = Mask::Causal;
  reference::attention(q64.view, k64.view, v64.view, ref.view, rope, causal);
  attention(q.view, k.view, v.view, whole.view, rope, causal);

  // The cache.
  KvCache cache(table, {.batch = batch, .kv_heads = kv_heads, .head_dim = d, .v_head_dim = dv, .capacity = total, .dtype = dtype});
  Tensor out(dtype, batch, total, q_heads, dv);
  auto attend_rows = [&](int64_t first, int64_t count) {
    Tensor qs = q.tokens(first, count, dtype), o(dtype, batch, count, q_heads, dv);
    cache.attend(qs.view, o.view);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t s = 0; s < count; ++s)
        for (int64_t h = 0; h < q_heads; ++h)
          for (int64_t e = 0; e < dv; ++e) out.set(b, first + s, h, e, o.at(b, s, h, e));
  };
  {
    Tensor kp = k.tokens(0, prefill, dtype), vp = v.tokens(0, prefill, dtype);
    std::vector<int64_t> pp;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t s = 0; s < prefill; ++s) pp.push_back(positions[static_cast<size_t>(b * total + s)]);
    cache.append(kp.view, vp.view, pp);
    attend_rows(0, prefill);
  }
  for (int64_t t = prefill; t < total; ++t) {
    Tensor kt = k.tokens(t, 1, dtype), vt = v.tokens(t, 1, dtype);
    if (t == prefill && decode_gap != 0) {
      std::vector<int64_t> pt;
      for (int64_t b = 0; b < batch; ++b) pt.push_back(positions[static_cast<size_t>(b * total + t)] + decode_gap);
      cache.append(kt.view, vt.view, pt);
    } else {
      cache.append(kt.view, vt.view);  // the next positions
    }
    attend_rows(t, 1);
  }

  // Bounds, per query (attention_test.cpp's, with the storage term of the cache).
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const double u_fmt = unit_roundoff(dtype);
  const int64_t group = q_heads / kv_heads;
  Ratios ratios;
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<std::vector<double>> k_mag(static_cast<size_t>(total * kv_heads));
    for (int64_t j = 0; j < total; ++j)
      for (int64_t g = 0; g < kv_heads; ++g)
        k_mag[static_cast<size_t>(j * kv_heads + g)] = rotated_magnitudes(k, b, j, g, table, positions[static_cast<size_t>(b * total + j)], 0);
    for (int64_t i = 0; i < total; ++i) {
      for (int64_t h = 0; h < q_heads; ++h) {
        const int64_t g = h / group;
        const std::vector<double> q_mag = rotated_magnitudes(q, b, i, h, table, positions[static_cast<size_t>(b * total + i)], 0);
        const int64_t n = i + 1;
        double a_max = 0;
        std::vector<double> v_bar(static_cast<size_t>(dv), 0.0);
        for (int64_t j = 0; j < n; ++j) {
          double a = 0;
          for (int64_t e = 0; e < d; ++e) a += q_mag[static_cast<size_t>(e)] * k_mag[static_cast<size_t>(j * kv_heads + g)][static_cast<size_t>(e)];
          a_max = std::max(a_max, scale * a);
          for (int64_t e = 0; e < dv; ++e) v_bar[static_cast<size_t>(e)] = std::max(v_bar[static_cast<size_t>(e)], std::abs(v.at(b, j, g, e)));
        }
        const double e_fast = (static_cast<double>(d) + 6) * kU * a_max;
        const double e_cache = e_fast + 2.01 * u_fmt * a_max;
        const double tiles = static_cast<double>((n + 63) / 64);
        const double acc = (static_cast<double>(n) + 2 * tiles + 4) * kU;
        auto weights = [&](double e_score) {
          const double eta = e_score + 110 * kU;
          return 2 * eta * (1 + 2 * eta) + 2 * acc;
        };
        for (int64_t e = 0; e < dv; ++e) {
          const double r = ref.at(b, i, h, e), got = out.at(b, i, h, e), fast = whole.at(b, i, h, e);
          auto storage = [&](double x) {
            if (dtype == DType::F32) return kU * std::abs(r);
            const double m = std::max(std::abs(x), std::abs(r));
            const double tiny = dtype == DType::BF16 ? 0x1p-133 : 0x1p-24;
            return m == 0 ? tiny : std::max(tiny, std::ldexp(1.0, std::ilogb(m) - mantissa_bits(dtype)));
          };
          const double tol_cache = v_bar[static_cast<size_t>(e)] * weights(e_cache) + storage(got);
          const double tol_fast = v_bar[static_cast<size_t>(e)] * weights(e_fast) + storage(fast);
          ratios.vs_reference = std::max(ratios.vs_reference, std::abs(got - r) / tol_cache);
          ratios.vs_fast = std::max(ratios.vs_fast, std::abs(got - fast) / (tol_cache + tol_fast));
        }
      }
    }
  }
  return ratios;
}

std::vector<DecodeCase> decode_cases() {
  TableOptions long_factors;
  long_factors.seq_len = 131072;  // Phi-3's long factors (seq_len > original 4096)
  return {
      {"llama-3.1-8b", {}, {0, 70000}},
      {"qwen2.5-7b-yarn", {}, {0, 100000}},           // YaRN, attention_scaling 1.1386
      {"phi-3-mini-128k", {}, {0, 4000}},             // LongRoPE, short factors: positions < 4096
      {"phi-3-mini-128k", long_factors, {5000, 60000}},  // LongRoPE, long factors: the sequence past 4096
  };
}

TEST(KvCache, DecodeAfterPrefillEqualsWholeSequenceAttention) {
  for (const DecodeCase& c : decode_cases()) {
    for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
      SCOPED_TRACE(c.preset + " table seq_len " + std::to_string(c.table_options.seq_len) + " " + std::string(to_string(dtype)) +
                   " target " + current_cpu_target());
      const Ratios r = run_decode(c, dtype, /*prefill=*/37, /*total=*/45);
      EXPECT_LE(r.vs_reference, 1.0);
      EXPECT_LE(r.vs_fast, 1.0);
      std::printf("  decode %-16s seq_len %-6lld %-8s worst/tol: vs ref64 %.4f, vs fused fast %.4f\n", c.preset.c_str(),
                  static_cast<long long>(c.table_options.seq_len), std::string(to_string(dtype)).c_str(), r.vs_reference, r.vs_fast);
    }
  }
}

TEST(KvCache, DecodeOnEverySimdTarget) {
  for (const std::string& target : cpu_targets()) {
    force_cpu_target(target);
    SCOPED_TRACE(target);
    const Ratios r = run_decode({"qwen2.5-7b-yarn", {}, {3, 20000}}, DType::F32, 20, 26);
    EXPECT_LE(r.vs_reference, 1.0);
    EXPECT_LE(r.vs_fast, 1.0);
  }
  force_cpu_target("");
}

TEST(KvCache, ToleranceRejectsAnOffByOneDecodePosition) {
  // The first decode token one position too far: the relative distances change and the bound,
  // float32, must flag it.
  const Ratios r = run_decode({"llama-3.1-8b", {}, {0, 5000}}, DType::F32, 30, 34, /*decode_gap=*/1);
  EXPECT_GT(r.vs_reference, 1.0);
}

// ---- context shift --------------------------------------------------------------------------------

struct ShiftCase {
  RopeSpec spec;
  TableOptions table_options;
  int64_t rotary_offset = 0;
};

std::vector<ShiftCase> shift_cases() {
  RopeSpec gptj = preset_spec("gpt-j-6b");  // GPT-J pairs, rotary_dim 64 of head_dim 256
  RopeSpec partial = preset_spec("llama-3.1-8b");
  partial.name = "llama3 rotary 32 of 128 at offset 48";
  partial.rotary_dim = 32;
  std::vector<ShiftCase> cases;
  cases.push_back({preset_spec("llama-3.1-8b"), {}, 0});
  cases.push_back({preset_spec("qwen2.5-7b-yarn"), {}, 0});  // attention_scaling != 1
  cases.push_back({preset_spec("phi-3-mini-128k"), {}, 0});  // LongRoPE within the short factors
  cases.push_back({gptj, {}, 0});
  cases.push_back({partial, {}, 48});
  return cases;
}

struct ShiftResult {
  double worst_ratio = 0;       // |shifted - rebuilt| / bound over rotated elements
  bool rest_bitwise = true;     // unrotated elements, values and positions
};

// Fills `length` tokens per sequence (sequence b at starts[b] + s), shifts (n_keep, n_discard)
// per sequence, and compares with a cache built from the same inputs at the new positions.
// rebuild_error adds that many positions to the rebuild's moved tokens (a test of the bound).
ShiftResult run_shift(const ShiftCase& c, DType dtype, int64_t length, const std::vector<int64_t>& starts,
                      const std::vector<int64_t>& n_keep, const std::vector<int64_t>& n_discard, int64_t rebuild_error = 0) {
  const CosSinTable table(c.spec, c.table_options);
  const int64_t batch = static_cast<int64_t>(starts.size()), kv_heads = 2, d = c.spec.head_dim, dv = 8;
  std::mt19937_64 rng(0x5eed1000 + static_cast<uint64_t>(length));
  Tensor k(dtype, batch, length, kv_heads, d), v(dtype, batch, length, kv_heads, dv);
  k.fill(rng);
  v.fill(rng);
  const KvCacheShape shape{.batch = batch, .kv_heads = kv_heads, .head_dim = d, .v_head_dim = dv, .capacity = length + 3,
                           .dtype = dtype, .rotary_offset = c.rotary_offset};
  KvCache cache(table, shape);
  std::vector<int64_t> positions;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < length; ++s) positions.push_back(starts[static_cast<size_t>(b)] + s);
  cache.append(k.view, v.view, positions);
  bool all_same = std::all_of(n_keep.begin(), n_keep.end(), [&](int64_t x) { return x == n_keep[0]; }) &&
                  std::all_of(n_discard.begin(), n_discard.end(), [&](int64_t x) { return x == n_discard[0]; });
  if (all_same) {
    cache.shift(n_keep[0], n_discard[0]);
  } else {
    for (int64_t b = 0; b < batch; ++b) cache.shift(b, n_keep[static_cast<size_t>(b)], n_discard[static_cast<size_t>(b)]);
  }

  // The rebuilt cache: one sequence at a time (different lengths), tokens kept at their
  // positions, moved tokens at position - n_discard.
  ShiftResult result;
  const double s_scale = table.attention_scaling(), u_fmt = unit_roundoff(dtype);
  const int64_t num_pairs = table.num_pairs();
  const bool neox = c.spec.style == Style::NeoX;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t keep = n_keep[static_cast<size_t>(b)], discard = n_discard[static_cast<size_t>(b)];
    const int64_t new_length = length - discard;
    KvCacheShape one = shape;
    one.batch = 1;
    KvCache rebuilt(table, one);
    Tensor kb(dtype, 1, new_length, kv_heads, d), vb(dtype, 1, new_length, kv_heads, dv);
    std::vector<int64_t> new_positions;
    for (int64_t s = 0; s < new_length; ++s) {
      const int64_t src = s < keep ? s : s + discard;
      for (int64_t h = 0; h < kv_heads; ++h) {
        for (int64_t e = 0; e < d; ++e) kb.set(0, s, h, e, k.at(b, src, h, e));
        for (int64_t e = 0; e < dv; ++e) vb.set(0, s, h, e, v.at(b, src, h, e));
      }
      new_positions.push_back(starts[static_cast<size_t>(b)] + src - (s < keep ? 0 : discard - rebuild_error));
    }
    rebuilt.append(kb.view, vb.view, new_positions);
    EXPECT_EQ(cache.length(b), new_length);
    const TensorView ck = cache.keys(), rk = rebuilt.keys(), cv = cache.values(), rv = rebuilt.values();
    for (int64_t s = 0; s < new_length; ++s) {
      if (cache.position(b, s) != new_positions[static_cast<size_t>(s)] - (s < keep ? 0 : rebuild_error)) result.rest_bitwise = false;
      for (int64_t h = 0; h < kv_heads; ++h) {
        const int64_t c_off = ((b * kv_heads + h) * shape.capacity + s) * d, r_off = (h * shape.capacity + s) * d;
        std::vector<bool> rotated(static_cast<size_t>(d), false);
        for (int64_t i = 0; i < num_pairs; ++i) {
          const int64_t ia = c.rotary_offset + (neox ? i : 2 * i), ic = c.rotary_offset + (neox ? i + num_pairs : 2 * i + 1);
          rotated[static_cast<size_t>(ia)] = rotated[static_cast<size_t>(ic)] = true;
          const double s0 = s_scale * (std::abs(kb.at(0, s, h, ia)) + std::abs(kb.at(0, s, h, ic)));
          const double bound = (10 * kU + 4.01 * u_fmt) * s0;
          for (int64_t e : {ia, ic}) {
            const double diff = std::abs(load_element(ck.data, dtype, c_off + e) - load_element(rk.data, dtype, r_off + e));
            result.worst_ratio = std::max(result.worst_ratio, diff / bound);
          }
        }
        for (int64_t e = 0; e < d; ++e) {
          if (!rotated[static_cast<size_t>(e)] && load_element(ck.data, dtype, c_off + e) != load_element(rk.data, dtype, r_off + e)) result.rest_bitwise = false;
        }
        for (int64_t e = 0; e < dv; ++e) {
          const int64_t cvo = ((b * kv_heads + h) * shape.capacity + s) * dv + e, rvo = (h * shape.capacity + s) * dv + e;
          if (load_element(cv.data, dtype, cvo) != load_element(rv.data, dtype, rvo)) result.rest_bitwise = false;
        }
      }
    }
  }
  return result;
}

TEST(KvCache, ContextShiftEqualsCacheRebuiltAtNewPositions) {
  for (const ShiftCase& c : shift_cases()) {
    for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
      SCOPED_TRACE(c.spec.name + " " + std::string(to_string(dtype)));
      // llama.cpp's shape (n_keep, then half of the rest discarded) for all sequences, and
      // different shifts per sequence, far positions included.
      const ShiftResult all = run_shift(c, dtype, 40, {0, 3000}, {4, 4}, {18, 18});
      EXPECT_LE(all.worst_ratio, 1.0);
      EXPECT_TRUE(all.rest_bitwise);
      const ShiftResult each = run_shift(c, dtype, 33, {0, 1}, {0, 7}, {5, 26});
      EXPECT_LE(each.worst_ratio, 1.0);
      EXPECT_TRUE(each.rest_bitwise);
      std::printf("  shift %-40s %-8s worst/bound %.4f %.4f\n", c.spec.name.c_str(), std::string(to_string(dtype)).c_str(),
                  all.worst_ratio, each.worst_ratio);
    }
  }
}

TEST(KvCache, ToleranceRejectsAnOffByOneShiftDelta) {
  // A rebuild at positions one off (as a shift by n_discard - 1 would give) must fail the bound,
  // in float32 and in bf16, with YaRN's scaling.
  const ShiftCase c{preset_spec("qwen2.5-7b-yarn"), {}, 0};
  EXPECT_GT(run_shift(c, DType::F32, 24, {0}, {2}, {9}, /*rebuild_error=*/1).worst_ratio, 1.0);
  EXPECT_GT(run_shift(c, DType::BF16, 24, {0}, {2}, {9}, /*rebuild_error=*/1).worst_ratio, 1.0);
  EXPECT_GT(run_shift(c, DType::F32, 24, {5}, {0}, {9}, /*rebuild_error=*/-1).worst_ratio, 1.0);
}

TEST(KvCache, ShiftThenDecodeEqualsRebuiltDecode) {
  // After a shift, decoding continues at the next positions, as in a cache built at them.
  const RopeSpec spec = preset_spec("qwen2.5-7b-yarn");
  const CosSinTable table(spec);
  const int64_t d = spec.head_dim;
  std::mt19937_64 rng(77);
  Tensor k(DType::F32, 1, 30, 1, d), v(DType::F32, 1, 30, 1, d), q(DType::F32, 1, 1, 2, d);
  k.fill(rng);
  v.fill(rng);
  q.fill(rng);
  KvCache cache(table, {.batch = 1, .kv_heads = 1, .head_dim = d, .capacity = 32});
  cache.append(k.tokens(0, 29, DType::F32).view, v.tokens(0, 29, DType::F32).view);
  cache.shift(3, 10);
  EXPECT_EQ(cache.length(0), 19);
  EXPECT_EQ(cache.last_position(0), 18);
  cache.append(k.tokens(29, 1, DType::F32).view, v.tokens(29, 1, DType::F32).view);
  EXPECT_EQ(cache.last_position(0), 19);
  Tensor out(DType::F32, 1, 1, 2, d), expect(DType::F32, 1, 1, 2, d);
  cache.attend(q.view, out.view);

  KvCache rebuilt(table, {.batch = 1, .kv_heads = 1, .head_dim = d, .capacity = 32});
  Tensor kr(DType::F32, 1, 20, 1, d), vr(DType::F32, 1, 20, 1, d);
  for (int64_t s = 0; s < 20; ++s) {
    const int64_t src = s < 3 ? s : s + 10;
    for (int64_t e = 0; e < d; ++e) {
      kr.set(0, s, 0, e, k.at(0, src, 0, e));
      vr.set(0, s, 0, e, v.at(0, src, 0, e));
    }
  }
  rebuilt.append(kr.view, vr.view);
  rebuilt.attend(q.view, expect.view);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t e = 0; e < d; ++e) EXPECT_NEAR(out.at(0, 0, h, e), expect.at(0, 0, h, e), 1e-5) << h << " " << e;
}

// ---- refusals ------------------------------------------------------------------------------------

KvCacheShape small_shape(const RopeSpec& spec, int64_t capacity = 8, DType dtype = DType::F32) {
  return {.batch = 1, .kv_heads = 1, .head_dim = spec.head_dim, .capacity = capacity, .dtype = dtype};
}

TEST(KvCache, RefusesCapacityOverflowNamingIt) {
  const RopeSpec spec = preset_spec("llama-3.1-8b");
  const CosSinTable table(spec);
  KvCache cache(table, small_shape(spec, 4));
  Tensor k(DType::F32, 1, 3, 1, spec.head_dim), v(DType::F32, 1, 3, 1, spec.head_dim);
  std::mt19937_64 rng(1);
  k.fill(rng);
  v.fill(rng);
  cache.append(k.view, v.view);
  EXPECT_THAT([&] { cache.append(k.view, v.view); },
              ThrowsMessage<Error>(AllOf(HasSubstr("KvCache::append: k new tokens must fit the capacity 4"), HasSubstr("holds 3"),
                                         HasSubstr("(got 3: 6 > 4)"))));
  EXPECT_EQ(cache.length(0), 3);  // nothing written
}

TEST(KvCache, RefusesPositionsGoingBackwardsNamingThem) {
  const RopeSpec spec = preset_spec("llama-3.1-8b");
  const CosSinTable table(spec);
  KvCache cache(table, small_shape(spec));
  Tensor k(DType::F32, 1, 2, 1, spec.head_dim), v(DType::F32, 1, 2, 1, spec.head_dim);
  std::mt19937_64 rng(2);
  k.fill(rng);
  v.fill(rng);
  const std::vector<int64_t> first{10, 11}, same{11, 12}, inside{12, 12};
  cache.append(k.view, v.view, first);
  EXPECT_THAT([&] { cache.append(k.view, v.view, same); },
              ThrowsMessage<Error>(HasSubstr("positions[0] of sequence 0 must be > 11, the sequence's last position (got 11)")));
  EXPECT_THAT([&] { cache.append(k.view, v.view, inside); },
              ThrowsMessage<Error>(HasSubstr("positions[1] of sequence 0 must be > 12, the token before it (got 12)")));
  const std::vector<int64_t> short_list{12};
  EXPECT_THAT([&] { cache.append(k.view, v.view, short_list); },
              ThrowsMessage<Error>(HasSubstr("positions must hold batch x new tokens = 1 x 2 = 2 values")));
  EXPECT_EQ(cache.length(0), 2);
}

TEST(KvCache, RefusesAShiftLargerThanTheSequence) {
  const RopeSpec spec = preset_spec("llama-3.1-8b");
  const CosSinTable table(spec);
  KvCacheShape shape = small_shape(spec);
  shape.batch = 2;
  KvCache cache(table, shape);
  Tensor k(DType::F32, 2, 5, 1, spec.head_dim), v(DType::F32, 2, 5, 1, spec.head_dim);
  std::mt19937_64 rng(3);
  k.fill(rng);
  v.fill(rng);
  cache.append(k.view, v.view);
  EXPECT_THAT([&] { cache.shift(2, 4); },
              ThrowsMessage<Error>(HasSubstr("KvCache::shift: n_keep + n_discard must be <= the length 5 of sequence 0 (got 2 + 4)")));
  EXPECT_THAT([&] { cache.shift(1, 2, -1); }, ThrowsMessage<Error>(HasSubstr("n_discard must be >= 0 (got -1)")));
  EXPECT_THAT([&] { cache.shift(-1, 2); }, ThrowsMessage<Error>(HasSubstr("n_keep must be >= 0 (got -1)")));
  EXPECT_THAT([&] { cache.shift(2, 0, 1); }, ThrowsMessage<Error>(HasSubstr("sequence must be in [0, 2) (got 2)")));
  cache.shift(0, 5);  // the whole sequence: allowed, empties it
  EXPECT_EQ(cache.length(0), 0);
  EXPECT_EQ(cache.length(1), 0);
}

TEST(KvCache, RefusesLongRopeFactorSwitchSayingWhy) {
  const RopeSpec spec = preset_spec("phi-3-mini-128k");  // original context 4096
  const CosSinTable short_table(spec);
  KvCache cache(short_table, small_shape(spec));
  Tensor k(DType::F32, 1, 2, 1, spec.head_dim), v(DType::F32, 1, 2, 1, spec.head_dim);
  std::mt19937_64 rng(4);
  k.fill(rng);
  v.fill(rng);
  const std::vector<int64_t> edge{4094, 4095}, past{4096, 4097};
  cache.append(k.view, v.view, edge);  // seq_len 4096: still the short factors
  EXPECT_THAT([&] { cache.append(k.view, v.view, past); },
              ThrowsMessage<Error>(AllOf(HasSubstr("KvCache::append: positions of sequence 0 must keep the frequencies of the cache's table"),
                                         HasSubstr("(got largest position 4097, seq_len 4098)"),
                                         HasSubstr("LongRoPE switches between its short and long factors at original_max_position_embeddings 4096"))));
  EXPECT_EQ(cache.length(0), 2);

  // A table of the long factors: refused while the sequence is short, and shifts that would take
  // it back below the switch.
  TableOptions long_options;
  long_options.seq_len = 131072;
  const CosSinTable long_table(spec, long_options);
  KvCache long_cache(long_table, small_shape(spec));
  const std::vector<int64_t> early{0, 1};
  EXPECT_THAT([&] { long_cache.append(k.view, v.view, early); },
              ThrowsMessage<Error>(AllOf(HasSubstr("(got largest position 1, seq_len 2)"), HasSubstr("LongRoPE"))));
  Tensor k8(DType::F32, 1, 8, 1, spec.head_dim), v8(DType::F32, 1, 8, 1, spec.head_dim);
  k8.fill(rng);
  v8.fill(rng);
  const std::vector<int64_t> far{4094, 4095, 4096, 4097, 4098, 4099, 4100, 4101};
  long_cache.append(k8.view, v8.view, far);
  ASSERT_EQ(long_cache.length(0), 8);
  EXPECT_THAT([&] { long_cache.shift(1, 6); },
              ThrowsMessage<Error>(AllOf(HasSubstr("KvCache::shift: n_discard must keep the frequencies of the cache's table"),
                                         HasSubstr("(got 6: the sequence's seq_len would become 4096"), HasSubstr("longrope"))));
  EXPECT_EQ(long_cache.length(0), 8);
  long_cache.shift(1, 5);  // 4101 -> 4096: seq_len 4097, still the long factors
  EXPECT_EQ(long_cache.last_position(0), 4096);
}

TEST(KvCache, RefusesDynamicNtkGrowthSayingWhy) {
  RopeSpec spec = preset_spec("llama-2-7b");
  spec.name = "dynamic";
  spec.scaling.type = ScalingType::Dynamic;
  spec.scaling.factor = 2.0;
  spec.max_position_embeddings = 64;
  const CosSinTable table(spec);
  KvCache cache(table, small_shape(spec));
  Tensor k(DType::F32, 1, 2, 1, spec.head_dim), v(DType::F32, 1, 2, 1, spec.head_dim);
  std::mt19937_64 rng(5);
  k.fill(rng);
  v.fill(rng);
  const std::vector<int64_t> inside{10, 63}, past{64, 65};
  cache.append(k.view, v.view, inside);
  EXPECT_THAT([&] { cache.append(k.view, v.view, past); },
              ThrowsMessage<Error>(AllOf(HasSubstr("(got largest position 65, seq_len 66)"),
                                         HasSubstr("dynamic NTK recomputes its frequencies for every length past max_position_embeddings 64"))));
  cache.shift(1, 0);  // no-op, allowed
  EXPECT_EQ(cache.length(0), 2);
}

TEST(KvCache, RefusesMRopeAndXposAtConstruction) {
  const RopeSpec mrope = preset_spec("qwen2-vl-7b");
  const CosSinTable mrope_table(mrope);
  EXPECT_THAT([&] { KvCache cache(mrope_table, small_shape(mrope)); },
              ThrowsMessage<Error>(AllOf(HasSubstr("KvCache: spec.axes must be single (got mrope)"), HasSubstr("one position per stream"))));
  RopeSpec xpos = preset_spec("llama-2-7b");
  xpos.xpos = XPos{};
  const CosSinTable xpos_table(xpos);
  EXPECT_THAT([&] { KvCache cache(xpos_table, small_shape(xpos)); },
              ThrowsMessage<Error>(AllOf(HasSubstr("KvCache: spec.xpos must be unset (got scale_base 512"), HasSubstr("zeta^-e(p)"))));
}

// Found by fuzz/kv_cache_ops_fuzz.cpp (tests/reliability/fuzz_crashes/kv_cache_ops/
// huge_batch_of_capacity_0): a cache of capacity 0 has no K or V bytes, so the int64 check passed
// for any batch, and the constructor then sized its per-sequence lengths to 2^62 entries: a
// std::length_error (or bad_alloc) instead of rotary::Error. The positions and lengths are now in
// the byte count.
TEST(KvCache, RefusesAHugeBatchOfCapacityZeroNamingIt) {
  const RopeSpec spec = preset_spec("llama-3.1-8b");
  const CosSinTable table(spec);
  KvCacheShape shape = small_shape(spec, 0);
  shape.batch = int64_t{1} << 62;
  EXPECT_THAT([&] { KvCache c(table, shape); },
              ThrowsMessage<Error>(HasSubstr("KvCache: shape.capacity 0 with batch 4611686018427387904")));
  shape.batch = 3;
  KvCache empty(table, shape);  // capacity 0 with a sane batch is a valid (useless) cache
  EXPECT_EQ(empty.length(2), 0);
}

// A shape that fits int64 but not in this machine's memory and swap, or this process's cgroup
// limit and swap (batch 2 x 10^14 of capacity 1: 3.2 PB), is a rotary::Error naming the shape and
// the bytes, refused before allocating: not std::bad_alloc (the fuzz target's note), and not,
// under vm.overcommit_memory = 1 or a cgroup limit, an allocation that succeeds and whose zero
// fill meets the OOM killer. Nothing is allocated, so this runs under AddressSanitizer too.
TEST(KvCache, RefusesAShapeLargerThanTheMachineNamingIt) {
  const RopeSpec spec = preset_spec("llama-3.1-8b");
  const CosSinTable table(spec);
  KvCacheShape shape = small_shape(spec, 1);
  shape.batch = 200'000'000'000'000;
  EXPECT_THAT([&] { KvCache c(table, shape); },
              ThrowsMessage<Error>(AllOf(HasSubstr("KvCache: shape.capacity 1 with batch 200000000000000"),
                                         HasSubstr("bytes, more than this "))));
  // At the edge: one slot more than the ceiling (memory + swap, or a cgroup limit + swap; its
  // parts are tested in tests/core/system_memory_test.cpp), one sequence, one float32 kv head of
  // 128: 2 x 512 bytes of K and V and 8 of position per slot, 8 of length.
  const detail::MemoryCeiling ceiling = detail::memory_ceiling();
  ASSERT_GT(ceiling.bytes, 0);
  shape = small_shape(spec, 1);
  shape.batch = 1;
  shape.kv_heads = 1;
  shape.head_dim = shape.v_head_dim = 128;
  shape.dtype = DType::F32;
  constexpr int64_t kSlotBytes = 2 * 128 * 4 + 8;
  shape.capacity = (ceiling.bytes - 8) / kSlotBytes + 1;
  const int64_t bytes = shape.capacity * kSlotBytes + 8;
  ASSERT_GT(bytes, ceiling.bytes);
  EXPECT_THAT([&] { KvCache c(table, shape); },
              ThrowsMessage<Error>(HasSubstr("needs " + std::to_string(bytes) + " bytes, more than " + ceiling.what + " (" +
                                             std::to_string(ceiling.bytes) + " bytes)")));
}

// A llama-3.1-8b cache holding one random token (two kv heads), and a random query for it with
// its output: what the refusal tests below attend with.
struct OneTokenCache {
  explicit OneTokenCache(uint64_t seed)
      : spec(preset_spec("llama-3.1-8b")), table(spec), cache(table, small_shape(spec)),
        k(DType::F32, 1, 2, 1, spec.head_dim), v(DType::F32, 1, 2, 1, spec.head_dim),
        q(DType::F32, 1, 1, 2, spec.head_dim), out(DType::F32, 1, 1, 2, spec.head_dim) {
    std::mt19937_64 rng(seed);
    k.fill(rng), v.fill(rng), q.fill(rng);
    cache.append(k.view, v.view);
  }
  RopeSpec spec;
  CosSinTable table;
  KvCache cache;
  Tensor k, v, q, out;
};

// Found by fuzz/kv_cache_ops_fuzz.cpp (fuzz_crashes/kv_cache_ops/attend_scale_1e39): attend handed
// a scale past float32's range to rotary::attention, whose output was NaN (the attention_args
// finding, through the cache). Refused now, and the cache is unchanged.
TEST(KvCache, AttendRefusesAScalePastFloat32) {
  OneTokenCache c(8);
  const RopeSpec& spec = c.spec;
  KvCache& cache = c.cache;
  Tensor &q = c.q, &out = c.out;
  const std::vector<double> before = out.storage;
  EXPECT_THAT([&] { cache.attend(q.view, out.view, {.scale = 1e39}); },
              ThrowsMessage<Error>(HasSubstr("attention: options.scale must be finite in float32")));
  EXPECT_EQ(out.storage, before);
  cache.attend(q.view, out.view, {.scale = 0.5});
  for (int64_t e = 0; e < spec.head_dim; ++e) EXPECT_TRUE(std::isfinite(out.at(0, 0, 1, e)));
}

// Found by fuzz/kv_cache_ops_fuzz.cpp (fuzz_crashes/kv_cache_ops/out_element_count_overflows):
// a q, out, k or v whose element count overflows int64 was refused with tensor.cpp's message
// ("tensor out: element count must fit in int64 ...") without the operation's prefix.
TEST(KvCache, OverflowingShapesAreRefusedWithTheOperationsPrefix) {
  OneTokenCache c(9);
  KvCache& cache = c.cache;
  Tensor &k = c.k, &v = c.v, &q = c.q, &out = c.out;
  TensorView huge_out = out.view;
  huge_out.shape[1] = int64_t{1} << 59;
  EXPECT_THAT([&] { cache.attend(q.view, huge_out); },
              ThrowsMessage<Error>(HasSubstr("KvCache::attend: tensor out: element count must fit in int64")));
  TensorView huge_v = v.view;
  huge_v.shape[1] = int64_t{1} << 59;
  EXPECT_THAT([&] { cache.append(k.view, huge_v); },
              ThrowsMessage<Error>(HasSubstr("KvCache::append: tensor v: element count must fit in int64")));
  EXPECT_EQ(cache.length(0), 2);
}

TEST(KvCache, RefusesBadShapesAndDtypesNamingThem) {
  const RopeSpec spec = preset_spec("llama-3.1-8b");  // head_dim 128
  const CosSinTable table(spec);
  KvCacheShape shape = small_shape(spec);
  shape.dtype = DType::F64;
  EXPECT_THAT([&] { KvCache c(table, shape); }, ThrowsMessage<Error>(HasSubstr("shape.dtype must be float32, bfloat16 or float16 (got float64)")));
  shape = small_shape(spec);
  shape.capacity = -1;
  EXPECT_THAT([&] { KvCache c(table, shape); }, ThrowsMessage<Error>(HasSubstr("shape.capacity must be >= 0 (got -1)")));
  shape = small_shape(spec);
  shape.head_dim = 64;
  EXPECT_THAT([&] { KvCache c(table, shape); },
              ThrowsMessage<Error>(HasSubstr("shape.rotary_offset + rotary_dim must be <= head_dim 64 (got 0 + 128)")));
  shape = small_shape(spec);
  shape.capacity = int64_t{1} << 62;
  EXPECT_THAT([&] { KvCache c(table, shape); }, ThrowsMessage<Error>(HasSubstr("must fit in int64 bytes")));

  KvCache cache(table, small_shape(spec, 8, DType::BF16));
  Tensor k(DType::F32, 1, 2, 1, 128), v(DType::BF16, 1, 2, 1, 128), k2(DType::BF16, 1, 2, 2, 128), kb(DType::BF16, 1, 2, 1, 128);
  EXPECT_THAT([&] { cache.append(k.view, v.view); }, ThrowsMessage<Error>(HasSubstr("KvCache::append: k dtype must be the cache's bfloat16 (got float32)")));
  EXPECT_THAT([&] { cache.append(k2.view, v.view); }, ThrowsMessage<Error>(HasSubstr("k heads must be the cache's kv_heads 1 (got 2)")));
  TensorView thd = kb.view;
  thd.layout = Layout::THD;
  EXPECT_THAT([&] { cache.append(thd, v.view); }, ThrowsMessage<Error>(HasSubstr("k layout must be bshd, bhsd or sbhd")));
  TensorView huge = v.view;
  huge.stride_elems[1] = int64_t{1} << 62;
  EXPECT_THAT([&] { cache.append(kb.view, huge); }, ThrowsMessage<Error>(HasSubstr("v strides must keep byte offsets within int64")));
  EXPECT_EQ(cache.length(0), 0);
  cache.append(kb.view, v.view);
  Tensor q(DType::BF16, 1, 3, 2, 128), out(DType::BF16, 1, 3, 2, 128), q3(DType::BF16, 1, 1, 3, 128);
  EXPECT_THAT([&] { cache.attend(q.view, out.view); },
              ThrowsMessage<Error>(HasSubstr("KvCache::attend: q seq must be <= the length 2 of sequence 0")));
  Tensor out_small(DType::BF16, 1, 2, 2, 64), q2(DType::BF16, 1, 2, 2, 128);
  EXPECT_THAT([&] { cache.attend(q2.view, out_small.view); }, ThrowsMessage<Error>(HasSubstr("attention: ")));
  KvCacheShape two_heads = small_shape(spec, 8, DType::BF16);
  two_heads.kv_heads = 2;
  KvCache cache2(table, two_heads);
  cache2.append(k2.view, Tensor(DType::BF16, 1, 2, 2, 128).view);
  EXPECT_THAT([&] { cache2.attend(q3.view, out.view); },
              ThrowsMessage<Error>(HasSubstr("q heads must be a positive multiple of the cache's kv_heads 2 (got 3)")));
  EXPECT_THAT([&] { (void)cache.position(0, 2); }, ThrowsMessage<Error>(HasSubstr("slot must be in [0, 2) (got 2)")));
}

// Threads appending to one cache past its capacity (a Python probe of two threads doing 20 appends
// each to a cache of 16 corrupted the heap: the length reached 17, then "double free or
// corruption"). The calls are serialized (kv_cache.hpp, "Threads"): exactly `capacity` appends
// land, the others are refused as capacity overflows, and every slot holds one whole token, its key the appended key rotated at
// the slot's position, its value the appended value, positions in slot order. Readers (attend,
// length) run beside them. Under ThreadSanitizer (make sanitize: "Concurrent" tests) this also
// shows the members free of data races.
TEST(KvCache, ConcurrentAppendsAreSerializedAndNeverOverflow) {
  const RopeSpec spec = preset_spec("llama-3.1-8b");
  const CosSinTable table(spec);
  constexpr int64_t kCapacity = 64;
  constexpr int kThreads = 4, kAppends = 40, kRounds = 5;
  KvCache cache(table, small_shape(spec, kCapacity));
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    cache.clear();
    // Thread t's token i has every key and value element t * 100 + i + 1 (so a slot tells which
    // append it came from and that it was not torn).
    std::atomic<int> landed{0}, refused{0}, other_errors{0};
    std::atomic<bool> stop_reader{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        Tensor k(DType::F32, 1, 1, 1, spec.head_dim), v(DType::F32, 1, 1, 1, spec.head_dim);
        for (int i = 0; i < kAppends; ++i) {
          for (int64_t e = 0; e < spec.head_dim; ++e) k.set(0, 0, 0, e, t * 100 + i + 1), v.set(0, 0, 0, e, t * 100 + i + 1);
          try {
            cache.append(k.view, v.view);
            ++landed;
          } catch (const Error& error) {
            (std::string(error.what()).find("capacity") != std::string::npos ? refused : other_errors)++;
          }
        }
      });
    }
    std::thread reader([&] {  // attend and length beside the writers
      Tensor q(DType::F32, 1, 1, 2, spec.head_dim), out(DType::F32, 1, 1, 2, spec.head_dim);
      std::mt19937_64 rng(3);
      q.fill(rng);
      while (!stop_reader.load()) {
        if (cache.length(0) > 0) cache.attend(q.view, out.view);
      }
    });
    for (std::thread& thread : threads) thread.join();
    stop_reader = true;
    reader.join();
    EXPECT_EQ(landed.load(), kCapacity);
    EXPECT_EQ(refused.load(), kThreads * kAppends - kCapacity);
    EXPECT_EQ(other_errors.load(), 0);
    ASSERT_EQ(cache.length(0), kCapacity);
    // Each slot: the value tags one append; the key is that token rotated at the slot's position.
    const TensorView keys = cache.keys(), values = cache.values();
    for (int64_t slot = 0; slot < kCapacity; ++slot) {
      EXPECT_EQ(cache.position(0, slot), slot);
      const double tag = load_element(values.data, DType::F32, slot * spec.head_dim);
      for (int64_t e = 0; e < spec.head_dim; ++e) {
        ASSERT_EQ(load_element(values.data, DType::F32, slot * spec.head_dim + e), tag) << slot << " " << e;
      }
      Tensor expected(DType::F32, 1, 1, 1, spec.head_dim);
      for (int64_t e = 0; e < spec.head_dim; ++e) expected.set(0, 0, 0, e, tag);
      const std::vector<int64_t> position{slot};
      apply(expected.view, TensorView{}, expected.view, TensorView{}, Positions::per_token(position), table);
      for (int64_t e = 0; e < spec.head_dim; ++e) {
        ASSERT_EQ(load_element(keys.data, DType::F32, slot * spec.head_dim + e), expected.at(0, 0, 0, e)) << slot << " " << e;
      }
    }
  }
}

}  // namespace
}  // namespace rotary
