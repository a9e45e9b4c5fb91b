// src/attention/attention_kernels-inl.h: blocked online-softmax attention (FlashAttention's
// forward loop, Dao et al. 2022, Algorithm 1; the online normaliser of Milakov & Gimelshein 2018)
// as Highway templates over the storage type. attention_kernels_f32.cpp, _bf16.cpp and _f16.cpp
// include it once per target (Highway's foreach_target.h: one source compiled per SIMD target,
// dispatched at run time) and instantiate their type.
//
// One item (kernels.hpp) = the q heads of one kv head x a block of queries, R rows in all. Per row
// r it keeps m_r (running max of the scores), l_r (running sum of exp(s - m_r)) and an
// unnormalised output o_r, in float32. For each tile of kKeyBlock keys:
//   K and V rows are loaded once for the R rows, widened to float32 (and K rotated, fused RoPE,
//   or an absolute encoding's row added);
//   s_rj = <q'_r, k_j> (- slope_r |p_r - j| with ALiBi)   with q' = scale * q (rotated, or with
//   its absolute row added), over the row's visible keys only (bf16 storage with neither, on a
//   CPU with AVX512_BF16: s_rj = scale * <q_r, k_j> from q and K as stored, vdpbf16ps, both
//   forms: bf16_dot.hpp);
//   m' = max(m_r, max_j s_rj);  alpha = exp(m_r - m');  p_j = exp(s_rj - m')
//   l_r = alpha * l_r + sum_j p_j;  o_r = alpha * o_r + sum_j p_j v_j;  m_r = m'
// and at the end out_r = o_r / l_r, rounded once to the storage type (zeros when the row has no
// visible key). Non-finite inputs propagate as in the float64 reference (reference.cpp), which
// takes m = max s_j and exp(s_j - m): a row with a NaN or +inf score among its visible keys, or
// whose visible scores are all -inf, is NaN throughout (exp(NaN), exp(inf - inf) and
// exp(-inf + inf) are NaN there); a -inf score beside finite ones only gets weight 0; NaN or inf
// in V reaches o through p_j v_j. The online loop cannot get there by IEEE arithmetic alone (exp's
// argument is clamped, and max drops NaN), so it flags such rows (Scratch::bad) and writes them
// as NaN. Tiles hold rows padded with zeros to a whole number of vectors, so the dot
// products and the accumulation run on full vectors; loads from the tensors stop at the head dim.
// exp is Highway's contrib Exp (max error 1 ulp, 0 below -104). docs/attention.md derives the
// error bound.
#if defined(ROTARY_SRC_ATTENTION_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ROTARY_SRC_ATTENTION_KERNELS_INL_H_
#undef ROTARY_SRC_ATTENTION_KERNELS_INL_H_
#else
#define ROTARY_SRC_ATTENTION_KERNELS_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "hwy/cache_control.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "src/attention/bf16_dot.hpp"
#include "src/attention/kernels.hpp"
#include "src/attention/prefetch.hpp"
// The storage loads and stores (widening; round-to-nearest-even narrowing) of apply()'s kernels.
#include "src/cpu/rotate_kernels-inl.h"

HWY_BEFORE_NAMESPACE();
namespace rotary::attention_internal::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace cpu = rotary::cpu::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// One row of `count` elements from storage into a float32 buffer (padded: the rest stays as is).
template <DType kType>
HWY_INLINE void LoadRow(const void* base, int64_t index, int64_t count, float* HWY_RESTRICT row) {
  const DF df;
  const auto N = static_cast<int64_t>(hn::Lanes(df));
  int64_t e = 0;
  for (; e + N <= count; e += N) hn::StoreU(cpu::LoadF32<kType>(base, index + e), df, row + e);
  for (; e < count; ++e) row[e] = cpu::LoadOne<kType>(base, index + e);
}

// Rotates the block [offset, offset + 2 * num_pairs) of a float32 row by cos / sin (apply()'s
// forward formula, the same roundings as rotate_kernels-inl.h: a' = a*C - c*S, c' = c*C + a*S
// with one fused rounding over one rounded product where the target has FMA).
HWY_INLINE void RotateRow(float* HWY_RESTRICT row, const float* HWY_RESTRICT cos_sin, int64_t num_pairs, int64_t offset,
                          Style style) {
  const float* cos = cos_sin;
  const float* sin = cos_sin + num_pairs;
  float* block = row + offset;
  int64_t i = 0;
  if (style == Style::NeoX) {
    const DF df;
    const auto N = static_cast<int64_t>(hn::Lanes(df));
    for (; i + N <= num_pairs; i += N) {
      const VF a = hn::LoadU(df, block + i), c = hn::LoadU(df, block + num_pairs + i);
      const VF C = hn::LoadU(df, cos + i), S = hn::LoadU(df, sin + i);
      hn::StoreU(hn::MulSub(a, C, hn::Mul(c, S)), df, block + i);
      hn::StoreU(hn::MulAdd(c, C, hn::Mul(a, S)), df, block + num_pairs + i);
    }
  }
  for (; i < num_pairs; ++i) {
    const int64_t first = style == Style::NeoX ? i : 2 * i, second = style == Style::NeoX ? i + num_pairs : 2 * i + 1;
    const float a = block[first], c = block[second];
    block[first] = std::fma(a, cos[i], -(c * sin[i]));
    block[second] = std::fma(c, cos[i], a * sin[i]);
  }
}

// row[0, count) += add[0, count): an absolute encoding's row added to a loaded q or k row, in
// float32 (one rounding per element; docs/attention.md). Reads no element of `add` past count.
HWY_INLINE void AddRow(float* HWY_RESTRICT row, const float* HWY_RESTRICT add, int64_t count) {
  const DF df;
  const auto N = static_cast<int64_t>(hn::Lanes(df));
  int64_t e = 0;
  for (; e + N <= count; e += N) hn::StoreU(hn::Add(hn::LoadU(df, row + e), hn::LoadU(df, add + e)), df, row + e);
  for (; e < count; ++e) row[e] += add[e];
}

// ALiBi on one row of scores, keys [j0, j1) of a tile (whole vectors from j0: the row has a vector
// of slack): s_j += neg_slope * |from - j|, from = the query's position minus the tile's first key
// (exact below 2^24; above, within u relative: two roundings of u/2). MulAdd: one rounding where
// the target has FMA, two otherwise (docs/attention.md counts two).
HWY_INLINE void AddAlibiRow(float* HWY_RESTRICT s, float neg_slope, float from, int64_t j0, int64_t j1) {
  const DF df;
  const auto N = static_cast<int64_t>(hn::Lanes(df));
  const VF slope = hn::Set(df, neg_slope), position = hn::Set(df, from), lanes = hn::Iota(df, 0.0f);
  for (int64_t j = j0; j < j1; j += N) {
    const VF distance = hn::Abs(hn::Sub(position, hn::Add(lanes, hn::Set(df, static_cast<float>(j)))));
    hn::StoreU(hn::MulAdd(slope, distance, hn::LoadU(df, s + j)), df, s + j);
  }
}

// o[0, width) = alpha * o + sum_j p_j v_j[0, width), a vector at a time (width: whole vectors).
// V rows are v_stride elements apart (a float32 tile's dv_pad, or the tensor's seq stride when
// decode reads V in place, widened on load: exact).
template <DType kV = DType::F32>
HWY_INLINE void AccumulateTail(float* HWY_RESTRICT o, float alpha, const float* HWY_RESTRICT p, int64_t p_stride,
                               const void* HWY_RESTRICT v, int64_t v_stride, int64_t width, int64_t j0, int64_t j1) {
  const DF df;
  const auto N = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t e = 0; e < width; e += N) {
    VF o0 = hn::Mul(hn::LoadU(df, o + e), hn::Set(df, alpha));
    for (int64_t j = j0; j < j1; ++j) o0 = hn::MulAdd(hn::Set(df, p[j * p_stride]), cpu::LoadF32<kV>(v, j * v_stride + e), o0);
    hn::StoreU(o0, df, o + e);
  }
}

// 16-bit V rows read in place are prefetched a row at a time as the p.v loop reaches each key
// (with rows j .. j + count - 1, the same rows `ahead` keys later, width elements each, those below
// ahead_end, counted from the tile). float32 K and V rows take the paced PrefetchCursor instead
// (prefetch.hpp): measured, the pacing is what float32 needs, while the 16-bit loops, with half
// the bytes per FMA, ran 4-8% faster with these cheaper per-row bursts (docs/performance.md).
template <DType kT = DType::F32>
HWY_INLINE void PrefetchAhead(const void* rows, int64_t stride, int64_t width, int64_t j, int64_t count, int64_t ahead,
                              int64_t ahead_end) {
  constexpr int64_t kBytes = kT == DType::F32 ? 4 : 2;
  if (ahead <= 0) return;
  for (int64_t c = 0; c < count && j + c + ahead < ahead_end; ++c) {
    const char* row = static_cast<const char*>(rows) + (j + c + ahead) * stride * kBytes;
    for (int64_t offset = 0; offset < width * kBytes; offset += 64) hwy::Prefetch(row + offset);
  }
}

constexpr int64_t kPrefetchKeys = 2;  // p.v moves the float32 cursor every this many keys

// Rows that see the same keys share every V load (a decode item's rows all do: the q heads of one
// kv head, one query). Up to kBlockRows rows at a time, each holding four vectors of o in
// registers across the keys: for R rows, 4 V loads and R broadcasts per 4R FMAs. AVX3 has 32
// vector registers (4 x 4 accumulators + 4 V + 1 p); the other targets 16 (2 x 4 + 4 + 1).
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3  // AVX3 and its successors (a lower value is a newer target)
constexpr int64_t kBlockRows = 4;
#else
constexpr int64_t kBlockRows = 2;
#endif

// For rows r < R: o_r = alpha_r * o_r + sum_{j in [j0, j1)} p_r[j * p_key_stride] v_j, over `width`
// floats (whole vectors; V rows v_stride floats apart, readable over the width), o_r at
// o + r * o_stride, p_r at p + r * p_row_stride. Each row's arithmetic is the one-row loop's, in
// the same order (one rounding of alpha * o, then one FMA per key in key order): grouping rows
// changes no result bit.
template <int64_t R, DType kV = DType::F32>
HWY_INLINE void AccumulateValuesRows(float* HWY_RESTRICT o, int64_t o_stride, const float* HWY_RESTRICT alpha,
                                     const float* HWY_RESTRICT p, int64_t p_row_stride, int64_t p_key_stride,
                                     const void* HWY_RESTRICT v, int64_t v_stride, int64_t width, int64_t j0, int64_t j1,
                                     int64_t ahead = 0, int64_t ahead_end = 0, PrefetchCursor* prefetch = nullptr) {
  const DF df;
  const auto N = static_cast<int64_t>(hn::Lanes(df));
  // The cursor's pacing (prefetch.hpp): pass p of `passes` over the keys reads 1 / passes of each
  // row, so after key j of pass p the loop has read (p * keys + j - j0 + 1) / passes rows' lines;
  // the cursor is moved every kPrefetchKeys keys.
  const int64_t passes = width / (4 * N), keys = j1 - j0;
  const int64_t row_lines = prefetch != nullptr ? prefetch->row_lines() : 0;
  const int64_t per_key = passes > 0 ? (row_lines + passes - 1) / passes : 0;
  int64_t e = 0;
  for (int64_t pass = 0; e + 4 * N <= width; e += 4 * N, ++pass) {
    VF acc[R][4];
    for (int64_t r = 0; r < R; ++r) {
      const VF a = hn::Set(df, alpha[r]);
      for (int64_t i = 0; i < 4; ++i) acc[r][i] = hn::Mul(hn::LoadU(df, o + r * o_stride + e + i * N), a);
    }
    for (int64_t j = j0; j < j1; ++j) {
      if (e == 0) PrefetchAhead<kV>(v, v_stride, width, j, 1, ahead, ahead_end);
      if (prefetch != nullptr && ((j - j0) % kPrefetchKeys == kPrefetchKeys - 1 || j + 1 == j1)) {
        prefetch->follow(j0, std::min((pass * keys + j - j0 + 1) * per_key, keys * row_lines), 2 * kPrefetchKeys * per_key);
      }
      const int64_t v_row = j * v_stride + e;
      const VF v0 = cpu::LoadF32<kV>(v, v_row), v1 = cpu::LoadF32<kV>(v, v_row + N);
      const VF v2 = cpu::LoadF32<kV>(v, v_row + 2 * N), v3 = cpu::LoadF32<kV>(v, v_row + 3 * N);
      for (int64_t r = 0; r < R; ++r) {
        const VF pr = hn::Set(df, p[r * p_row_stride + j * p_key_stride]);
        acc[r][0] = hn::MulAdd(pr, v0, acc[r][0]);
        acc[r][1] = hn::MulAdd(pr, v1, acc[r][1]);
        acc[r][2] = hn::MulAdd(pr, v2, acc[r][2]);
        acc[r][3] = hn::MulAdd(pr, v3, acc[r][3]);
      }
    }
    for (int64_t r = 0; r < R; ++r)
      for (int64_t i = 0; i < 4; ++i) hn::StoreU(acc[r][i], df, o + r * o_stride + e + i * N);
  }
  if (e < width) {  // the last vectors: row by row
    if (passes == 0 && prefetch != nullptr) prefetch->follow(j1, 0, 2 * row_lines * keys);
    for (int64_t r = 0; r < R; ++r) {
      AccumulateTail<kV>(o + r * o_stride + e, alpha[r], p + r * p_row_stride, p_key_stride,
                         static_cast<const char*>(v) + e * (kV == DType::F32 ? 4 : 2), v_stride, width - e, j0, j1);
    }
  }
}

// out[0..3] = the lane sums of a0..a3, in one tree: pairs of vectors are interleaved and added per
// 128-bit block (32-bit, then 64-bit lanes), leaving per block the four partial sums in order;
// then the blocks are added by halves. 9-13 operations for four sums where four SumOfLanes take
// about 30 on AVX3. Any summation order is within the analysis (docs/attention.md).
HWY_INLINE void SumOfFour(VF a0, VF a1, VF a2, VF a3, float* HWY_RESTRICT out) {
  const DF df;
#if HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
  out[0] = hn::GetLane(hn::SumOfLanes(df, a0));
  out[1] = hn::GetLane(hn::SumOfLanes(df, a1));
  out[2] = hn::GetLane(hn::SumOfLanes(df, a2));
  out[3] = hn::GetLane(hn::SumOfLanes(df, a3));
#else
  const hn::Repartition<uint64_t, DF> d64;
  const VF s01 = hn::Add(hn::InterleaveLower(df, a0, a1), hn::InterleaveUpper(df, a0, a1));  // a0 a1 a0 a1
  const VF s23 = hn::Add(hn::InterleaveLower(df, a2, a3), hn::InterleaveUpper(df, a2, a3));  // a2 a3 a2 a3
  const VF lo = hn::BitCast(df, hn::InterleaveLower(d64, hn::BitCast(d64, s01), hn::BitCast(d64, s23)));
  const VF hi = hn::BitCast(df, hn::InterleaveUpper(d64, hn::BitCast(d64, s01), hn::BitCast(d64, s23)));
  const VF sum = hn::Add(lo, hi);  // per 128-bit block: a0 a1 a2 a3
  if constexpr (hn::MaxLanes(DF()) == 4) {
    hn::StoreU(sum, df, out);
  } else if constexpr (hn::MaxLanes(DF()) == 8) {
    const hn::Half<DF> dh;
    hn::StoreU(hn::Add(hn::LowerHalf(dh, sum), hn::UpperHalf(dh, sum)), dh, out);
  } else {  // 16 lanes (AVX3); Highway's x86 float vectors have 4, 8 or 16
    const hn::Half<DF> dh;
    const hn::Half<hn::Half<DF>> dq;
    const auto half = hn::Add(hn::LowerHalf(dh, sum), hn::UpperHalf(dh, sum));
    hn::StoreU(hn::Add(hn::LowerHalf(dq, half), hn::UpperHalf(dq, half)), dq, out);
  }
#endif
}

// exp's argument d = s - m (or m_old - m_new) kept in [-200, 0]: d itself when it is there, 0 above,
// -200 below and for NaN. No lane reaches an out-of-range float -> int conversion inside Exp,
// and exp(-200) underflows to 0 as exp(d) would for any d < -104. NaN arises only in rows that
// are flagged non-finite (Scratch::bad, or all scores -inf), whose output is NaN anyway; the test
// is explicit because Highway leaves Max / Min of a NaN to the target.
HWY_INLINE VF ExpArgument(VF d) {
  const DF df;
  const VF lo = hn::Set(df, -200.0f);
  return hn::IfThenElse(hn::Ge(d, lo), hn::Min(d, hn::Zero(df)), lo);
}

// Scratch of one thread: float32 tiles, rows padded to whole vectors.
struct Scratch {
  std::vector<float> q, k, v, s, o, m, l;
  // Per row, 1 once a visible score was NaN or +inf (non_finite_scores below), else 0.
  std::vector<float> bad;
  // The transposed form (ScoresTransposed): q as [dim][rows_pad], scores as [key][rows_pad], and
  // per row its visible keys within the tile [j0, j1) and its rescale factor.
  std::vector<float> qt, st, j0, j1, alpha;
  // The transposed form's bf16 scores (scores_bf16_dot_transposed): q as stored, in bf16 pairs
  // [(dim + 1) / 2][rows_pad] of 32-bit lanes.
  std::vector<uint32_t> qt_pairs;
  // ALiBi (alibi true): per row its -slope and its query position; per tile the position minus
  // the tile's first key (float32, exact below 2^24). Pad rows have slope 0.
  bool alibi = false;
  std::vector<float> neg_slope, from;
  std::vector<int64_t> position;
};

// ALiBi on a transposed tile of scores St[j][r]: St[j][r] += neg_slope_r * |position_r - tile - j|
// (AddAlibiRow's arithmetic, SIMD over rows).
HWY_INLINE void AddAlibiTransposed(Scratch& t, int64_t rows_pad, int64_t tile, int64_t tile_keys) {
  const DF df;
  const auto N = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t r = 0; r < rows_pad; ++r) {
    t.from[static_cast<size_t>(r)] = static_cast<float>(t.position[static_cast<size_t>(r)] - tile);
  }
  for (int64_t rb = 0; rb < rows_pad; rb += N) {
    const VF slope = hn::LoadU(df, t.neg_slope.data() + rb), from = hn::LoadU(df, t.from.data() + rb);
    for (int64_t j = 0; j < tile_keys; ++j) {
      float* at = t.st.data() + j * rows_pad + rb;
      const VF distance = hn::Abs(hn::Sub(from, hn::Set(df, static_cast<float>(j))));
      hn::StoreU(hn::MulAdd(slope, distance, hn::LoadU(df, at)), df, at);
    }
  }
}

// The p.v update of a tile for every row with visible keys in it ([j0, j1) in t.j0 / t.j1; row r's
// p_j at p[r * row_stride + j * key_stride]; V rows at v, v_stride floats apart, dv_pad wide),
// up to kBlockRows rows at a time where consecutive rows see the same keys.
template <DType kV = DType::F32>
HWY_INLINE void AccumulateRows(Scratch& t, int64_t rows, const float* p, int64_t row_stride, int64_t key_stride,
                               const void* v, int64_t v_stride, int64_t dv_pad, int64_t ahead = 0, int64_t ahead_end = 0,
                               PrefetchCursor* prefetch = nullptr) {
  for (int64_t r = 0; r < rows;) {
    const auto u = static_cast<size_t>(r);
    const auto j0 = static_cast<int64_t>(t.j0[u]), j1 = static_cast<int64_t>(t.j1[u]);
    if (j0 >= j1) {  // alpha is 1: m did not change
      ++r;
      continue;
    }
    int64_t count = 1;
    while (count < kBlockRows && r + count < rows && t.j0[u + count] == t.j0[u] && t.j1[u + count] == t.j1[u]) ++count;
    float* o = t.o.data() + r * dv_pad;
    const float* alpha = t.alpha.data() + r;
    const float* p_r = p + r * row_stride;
    switch (count) {
      case 1: AccumulateValuesRows<1, kV>(o, dv_pad, alpha, p_r, row_stride, key_stride, v, v_stride, dv_pad, j0, j1, ahead, ahead_end, prefetch); break;
      case 2: AccumulateValuesRows<2, kV>(o, dv_pad, alpha, p_r, row_stride, key_stride, v, v_stride, dv_pad, j0, j1, ahead, ahead_end, prefetch); break;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
      case 3: AccumulateValuesRows<3, kV>(o, dv_pad, alpha, p_r, row_stride, key_stride, v, v_stride, dv_pad, j0, j1, ahead, ahead_end, prefetch); break;
      default: AccumulateValuesRows<4, kV>(o, dv_pad, alpha, p_r, row_stride, key_stride, v, v_stride, dv_pad, j0, j1, ahead, ahead_end, prefetch); break;
#else
      default: break;
#endif
    }
    r += count;
  }
}

// Decode scores of R rows that see the same keys [j0, j1): s_r[j] = <q_r, k_j>, each K vector
// loaded once for the R rows (R x 4 accumulators: 4 K loads and R q loads per 4R FMAs, where a
// row at a time took 5 loads per 4 FMAs). q_r at q + r * dq_pad, K rows at k, k_stride floats
// apart and readable over dq_pad floats (a zero-padded tile, or float32 K in place when the head
// dim is whole vectors), s_r at s + r * s_stride. Per row the arithmetic is a row at a time's:
// one accumulator per key over the vectors in order, SumOfFour per four keys, SumOfLanes for the
// last keys, so grouping rows changes no result bit.
template <int64_t R>
HWY_INLINE void DecodeScores(const float* HWY_RESTRICT q, int64_t dq_pad, const float* HWY_RESTRICT k, int64_t k_stride,
                             int64_t j0, int64_t j1, float* HWY_RESTRICT s, int64_t s_stride,
                             PrefetchCursor* prefetch) {
  const DF df;
  const auto N = static_cast<int64_t>(hn::Lanes(df));
  // The cursor's pacing (prefetch.hpp): after step `step` of dq_pad / N the loop has read that
  // share of four rows' lines; the cursor is moved every other step.
  const int64_t steps = dq_pad / N, block_lines = prefetch != nullptr ? 4 * prefetch->row_lines() : 0;
  const int64_t per_step = steps > 0 ? (block_lines + steps - 1) / steps : 0;  // steps 0: head_dim 0
  int64_t j = j0;
  for (; j + 4 <= j1; j += 4) {
    const float* k0 = k + j * k_stride;
    VF acc[R][4];
    for (int64_t r = 0; r < R; ++r)
      for (int64_t i = 0; i < 4; ++i) acc[r][i] = hn::Zero(df);
    for (int64_t e = 0, step = 1; e < dq_pad; e += N, ++step) {
      if (prefetch != nullptr && (step % 2 == 0 || step == steps)) {
        prefetch->follow(j, std::min(step * per_step, block_lines), 4 * per_step);
      }
      const VF c0 = hn::LoadU(df, k0 + e), c1 = hn::LoadU(df, k0 + k_stride + e);
      const VF c2 = hn::LoadU(df, k0 + 2 * k_stride + e), c3 = hn::LoadU(df, k0 + 3 * k_stride + e);
      for (int64_t r = 0; r < R; ++r) {
        const VF qv = hn::LoadU(df, q + r * dq_pad + e);
        acc[r][0] = hn::MulAdd(qv, c0, acc[r][0]);
        acc[r][1] = hn::MulAdd(qv, c1, acc[r][1]);
        acc[r][2] = hn::MulAdd(qv, c2, acc[r][2]);
        acc[r][3] = hn::MulAdd(qv, c3, acc[r][3]);
      }
    }
    for (int64_t r = 0; r < R; ++r) SumOfFour(acc[r][0], acc[r][1], acc[r][2], acc[r][3], s + r * s_stride + j);
  }
  for (; j < j1; ++j) {
    const float* k_row = k + j * k_stride;
    for (int64_t r = 0; r < R; ++r) {
      VF a = hn::Zero(df);
      for (int64_t e = 0; e < dq_pad; e += N) a = hn::MulAdd(hn::LoadU(df, q + r * dq_pad + e), hn::LoadU(df, k_row + e), a);
      s[r * s_stride + j] = hn::GetLane(hn::SumOfLanes(df, a));
    }
  }
}

// Scores of kRowVecs vectors of rows x kKeys keys: acc[r][j] = sum_e Qt[e][rows r] * K[j][e], all
// accumulators in registers (AVX3 has 32: 4 x 4 = 16 accumulators, 8 loads per 16 FMAs; other
// targets 2 x 4: 6 loads per 8 FMAs).
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr int64_t kScoreRowVecs = 4;
#else
constexpr int64_t kScoreRowVecs = 2;
#endif
template <int64_t kRowVecs, int64_t kKeys>
HWY_INLINE void ScoreBlock(const float* HWY_RESTRICT qt, int64_t rows_pad, const float* HWY_RESTRICT k, int64_t dq_pad,
                           int64_t dq, float* HWY_RESTRICT st) {
  const DF df;
  const auto N = static_cast<int64_t>(hn::Lanes(df));
  VF acc[kRowVecs][kKeys];
  for (int64_t r = 0; r < kRowVecs; ++r)
    for (int64_t j = 0; j < kKeys; ++j) acc[r][j] = hn::Zero(df);
  for (int64_t e = 0; e < dq; ++e) {
    VF q[kRowVecs];
    for (int64_t r = 0; r < kRowVecs; ++r) q[r] = hn::LoadU(df, qt + e * rows_pad + r * N);
    for (int64_t j = 0; j < kKeys; ++j) {
      const VF kj = hn::Set(df, k[j * dq_pad + e]);
      for (int64_t r = 0; r < kRowVecs; ++r) acc[r][j] = hn::MulAdd(q[r], kj, acc[r][j]);
    }
  }
  for (int64_t j = 0; j < kKeys; ++j)
    for (int64_t r = 0; r < kRowVecs; ++r) hn::StoreU(acc[r][j], df, st + j * rows_pad + r * N);
}

// The transposed form (items of rows >= N, SIMD over rows), one tile in three steps:
// TransposedRanges (each row's visible keys of the tile), the scores St[j][r] (ScoresTransposed
// from float32 Qt and the K tile; or, bf16 storage with AVX512_BF16, scores_bf16_dot_transposed
// from bf16 pairs of q and K as stored), then TransposedUpdate (ALiBi, the online softmax per
// vector of rows with each row's visible keys [j0, j1) as a lane mask, o_r += p_jr v_j). Pad rows
// (r >= rows) and keys outside a row's range are computed on finite data and masked out: they
// never reach m, l or o.

// Per row r < rows_pad, its visible keys of the tile in t.j0 / t.j1 (empty for pad rows);
// whether any row sees a key.
HWY_INLINE bool TransposedRanges(Scratch& t, const KeyRange* ranges, int64_t rows, int64_t rows_pad, int64_t tile,
                                 int64_t tile_keys) {
  bool any = false;
  for (int64_t r = 0; r < rows_pad; ++r) {
    int64_t j0 = 0, j1 = 0;
    if (r < rows) {
      j0 = std::max(ranges[r].first, tile) - tile;
      j1 = std::min(ranges[r].last, tile + tile_keys) - tile;
      if (j0 >= j1) j0 = j1 = 0;
      any = any || j0 < j1;
    }
    t.j0[static_cast<size_t>(r)] = static_cast<float>(j0);  // exact: <= kKeyBlock
    t.j1[static_cast<size_t>(r)] = static_cast<float>(j1);
  }
  return any;
}

// St[j][r] = sum_e Qt[e][r] K[j][e] from the float32 tiles (ScoreBlock: no reductions).
HWY_INLINE void ScoresTransposed(Scratch& t, int64_t rows_pad, int64_t tile_keys, int64_t dq, int64_t dq_pad) {
  const DF df;
  const auto N = static_cast<int64_t>(hn::Lanes(df));
  const float* qt = t.qt.data();
  const float* k = t.k.data();
  float* st = t.st.data();
  int64_t rb = 0;
  for (; rb + kScoreRowVecs * N <= rows_pad; rb += kScoreRowVecs * N) {
    int64_t j = 0;
    for (; j + 4 <= tile_keys; j += 4) ScoreBlock<kScoreRowVecs, 4>(qt + rb, rows_pad, k + j * dq_pad, dq_pad, dq, st + j * rows_pad + rb);
    for (; j < tile_keys; ++j) ScoreBlock<kScoreRowVecs, 1>(qt + rb, rows_pad, k + j * dq_pad, dq_pad, dq, st + j * rows_pad + rb);
  }
  for (; rb < rows_pad; rb += N) {
    for (int64_t j = 0; j < tile_keys; ++j) {
      const float* kj = k + j * dq_pad;
      VF a = hn::Zero(df);
      for (int64_t e = 0; e < dq; ++e) a = hn::MulAdd(hn::LoadU(df, qt + e * rows_pad + rb), hn::Set(df, kj[e]), a);
      hn::StoreU(a, df, st + j * rows_pad + rb);
    }
  }
}

// ALiBi, the online softmax update and p.v of a tile whose scores are in t.st.
HWY_INLINE void TransposedUpdate(Scratch& t, int64_t rows, int64_t rows_pad, int64_t tile, int64_t tile_keys,
                                 int64_t dv_pad) {
  const DF df;
  const auto N = static_cast<int64_t>(hn::Lanes(df));
  float* st = t.st.data();
  if (t.alibi) AddAlibiTransposed(t, rows_pad, tile, tile_keys);

  // Online softmax per vector of rows. As in the other form, exp's argument is kept in [-200, 0]
  // (ExpArgument); a row that has seen no key yet (m = -inf) gets alpha = 1 (its o and l are 0).
  // Visible NaN / +inf scores flag their row (Scratch::bad).
  const VF neg_inf = hn::Set(df, -INFINITY), zero = hn::Zero(df);
  const VF pos_inf = hn::Set(df, INFINITY), one = hn::Set(df, 1.0f);
  for (int64_t rb = 0; rb < rows_pad; rb += N) {
    const VF j0 = hn::LoadU(df, t.j0.data() + rb), j1 = hn::LoadU(df, t.j1.data() + rb);
    VF tile_max = neg_inf, bad = hn::LoadU(df, t.bad.data() + rb);
    for (int64_t j = 0; j < tile_keys; ++j) {
      const VF jf = hn::Set(df, static_cast<float>(j));
      const auto visible = hn::And(hn::Ge(jf, j0), hn::Lt(jf, j1));
      const VF score = hn::LoadU(df, st + j * rows_pad + rb);
      tile_max = hn::Max(tile_max, hn::IfThenElse(visible, score, neg_inf));
      bad = hn::IfThenElse(hn::AndNot(hn::Lt(score, pos_inf), visible), one, bad);  // NaN or +inf, visible
    }
    hn::StoreU(bad, df, t.bad.data() + rb);
    const VF m_old = hn::LoadU(df, t.m.data() + rb);
    const VF m_new = hn::Max(m_old, tile_max);
    const auto seen = hn::Gt(m_new, neg_inf);
    const VF alpha = hn::Exp(df, hn::IfThenElseZero(seen, ExpArgument(hn::Sub(m_old, m_new))));
    VF sum = zero;
    for (int64_t j = 0; j < tile_keys; ++j) {
      const VF jf = hn::Set(df, static_cast<float>(j));
      const auto visible = hn::And(hn::Ge(jf, j0), hn::Lt(jf, j1));
      float* at = st + j * rows_pad + rb;
      const VF x = ExpArgument(hn::Sub(hn::LoadU(df, at), m_new));
      const VF p = hn::IfThenElseZero(visible, hn::Exp(df, x));
      hn::StoreU(p, df, at);
      sum = hn::Add(sum, p);
    }
    hn::StoreU(m_new, df, t.m.data() + rb);
    hn::StoreU(hn::MulAdd(alpha, hn::LoadU(df, t.l.data() + rb), sum), df, t.l.data() + rb);
    hn::StoreU(alpha, df, t.alpha.data() + rb);
  }

  AccumulateRows(t, rows, st, 1, rows_pad, t.v.data(), dv_pad, dv_pad);
}

// Prefetches the cache lines of `bytes` bytes of storage from element `index` on.
template <DType kType>
HWY_INLINE void PrefetchRowTyped(const void* base, int64_t index, int64_t bytes) {
  if (bytes <= 0) return;  // a head dim of 0: the view may have no data (null) to point into
  const char* first = static_cast<const char*>(base) + index * static_cast<int64_t>(kType == DType::F32 ? 4 : 2);
  for (int64_t offset = 0; offset < bytes; offset += 64) hwy::Prefetch(first + offset);
}

template <DType kType>
void AttendTyped(const Call& call, int64_t begin, int64_t end) {
  constexpr int64_t kBytes = kType == DType::F32 ? 4 : 2;
  const auto PrefetchRow = [](const void* base, int64_t index, int64_t bytes) { PrefetchRowTyped<kType>(base, index, bytes); };
  const DF df;
  const auto N = static_cast<int64_t>(hn::Lanes(df));
  const Plan& plan = *call.plan;
  const int64_t dq = plan.qk_dim, dv = plan.v_dim;
  const int64_t dq_pad = (dq + N - 1) / N * N, dv_pad = (dv + N - 1) / N * N;
  const int64_t max_rows = plan.group * std::max<int64_t>(1, kTargetRows / plan.group);
  Scratch t;
  t.q.assign(static_cast<size_t>(max_rows * dq_pad), 0.0f);
  t.k.assign(static_cast<size_t>(kKeyBlock * dq_pad), 0.0f);
  t.v.assign(static_cast<size_t>(kKeyBlock * dv_pad), 0.0f);
  const int64_t s_stride = kKeyBlock + N;  // a row of scores and a vector of slack
  t.s.assign(static_cast<size_t>(max_rows * s_stride), 0.0f);
  t.o.assign(static_cast<size_t>(max_rows * dv_pad), 0.0f);
  const int64_t max_rows_pad = (max_rows + N - 1) / N * N;
  t.m.assign(static_cast<size_t>(max_rows_pad), 0.0f);
  t.l.assign(static_cast<size_t>(max_rows_pad), 0.0f);
  t.bad.assign(static_cast<size_t>(max_rows_pad), 0.0f);
  t.qt.assign(static_cast<size_t>(dq * max_rows_pad), 0.0f);
  t.st.assign(static_cast<size_t>(kKeyBlock * max_rows_pad), 0.0f);
  t.j0.assign(static_cast<size_t>(max_rows_pad), 0.0f);
  t.j1.assign(static_cast<size_t>(max_rows_pad), 0.0f);
  t.alpha.assign(static_cast<size_t>(max_rows_pad), 1.0f);
  std::vector<KeyRange> ranges(static_cast<size_t>(max_rows));
  t.alibi = call.alibi_slopes != nullptr;
  if (t.alibi) {
    t.neg_slope.assign(static_cast<size_t>(max_rows_pad), 0.0f);
    t.from.assign(static_cast<size_t>(max_rows_pad), 0.0f);
    t.position.assign(static_cast<size_t>(max_rows_pad), 0);
  }
  // bf16 storage without fused RoPE, on an AVX-512 target of a CPU with AVX512_BF16: both score
  // forms take q and K as stored through vdpbf16ps (bf16_dot.hpp), and K is not widened. The
  // scale is applied to the finished dot products (folding it into q would round scale * q to
  // bf16: docs/attention.md, "AVX512_BF16").
  bool bf16_dot = false;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (kType == DType::BF16) {
    // Not with fused RoPE or an absolute table: q and k are then no longer the stored bf16 values,
    // and rounding them to bf16 again would add an error the float32 path does not have. The
    // transposed form's rows are padded to 16 (scores_bf16_dot_transposed): N is 16 on AVX-512.
    bf16_dot = call.q_rope == nullptr && call.k_rope == nullptr && call.q_add == nullptr && call.k_add == nullptr &&
               N == 16 && dq > 0 && use_avx512_bf16.load(std::memory_order_relaxed) && cpu_has_avx512_bf16();
  }
#endif
  if (bf16_dot) t.qt_pairs.assign(static_cast<size_t>((dq + 1) / 2 * max_rows_pad), 0u);

  // In the decode form, with float32 storage, the scores read K rows where they are (no copy into
  // the tile first) unless they are rotated or have an absolute row added on load; in every storage
  // type p.v reads V rows in place, widened as it loads them (exact: the tile held the same
  // floats). Only when the head dims are whole vectors: the loops run over dq_pad / dv_pad
  // elements, which must then all lie inside the row.
  // Never with a head dim of 0: such a view may have null data, and no row is read anyway.
  const bool f32_k_in_place = kType == DType::F32 && call.k_rope == nullptr && call.k_add == nullptr && dq == dq_pad && dq > 0;
  const bool v_in_place_ok = dv == dv_pad && dv > 0;

  for (int64_t item_index = begin; item_index < end; ++item_index) {
    const Item& item = call.items[item_index];
    const Sequence& seq = plan.sequences[static_cast<size_t>(item.sequence)];
    const int64_t rows = plan.group * item.q_count;
    // Row r = (head g*group + r / q_count, query q_first + r % q_count).
    const int64_t rows_pad = (rows + N - 1) / N * N;
    // Items of at least a vector of rows compute scores with SIMD over rows (no reductions);
    // smaller ones (decode: the group's q heads for one query) with SIMD over the head dim.
    const bool transposed = rows >= N;
    const bool dot_scores = bf16_dot && !transposed, dot_transposed = bf16_dot && transposed;
    const bool k_in_place = f32_k_in_place && !transposed, v_in_place = v_in_place_ok && !transposed;
    if (dot_scores) bf16_dot_items.fetch_add(1, std::memory_order_relaxed);
    if (dot_transposed) bf16_dot_prefill_items.fetch_add(1, std::memory_order_relaxed);
    int64_t first_key = seq.num_keys, last_key = 0;
    std::fill_n(t.bad.begin(), rows_pad, 0.0f);
    for (int64_t r = rows; r < rows_pad; ++r) {
      t.m[static_cast<size_t>(r)] = -INFINITY;
      t.l[static_cast<size_t>(r)] = 0.0f;
      if (t.alibi) {
        t.neg_slope[static_cast<size_t>(r)] = 0.0f;
        t.position[static_cast<size_t>(r)] = 0;
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t head = item.kv_head * plan.group + r / item.q_count;
      const int64_t query = item.q_first + r % item.q_count;
      KeyRange range = visible_keys(plan, seq.query_offset + query, seq.first_key, seq.num_keys);
      // A chunk of a split item sees only its own keys (the merge adds the chunks up).
      range.first = std::max(range.first, item.key_first);
      range.last = std::min(range.last, item.key_last);
      if (range.first > range.last) range.first = range.last;
      ranges[static_cast<size_t>(r)] = range;
      if (t.alibi) {
        t.neg_slope[static_cast<size_t>(r)] = -call.alibi_slopes[head];
        t.position[static_cast<size_t>(r)] = seq.query_offset + query;
      }
      t.m[static_cast<size_t>(r)] = -INFINITY;
      t.l[static_cast<size_t>(r)] = 0.0f;
      std::fill_n(t.o.begin() + r * dv_pad, dv_pad, 0.0f);
      const int64_t q_index = seq.q_base + query * plan.q.stride_seq + head * plan.q.stride_heads;
      if (dot_transposed) {  // q as stored, in bf16 pairs; zeros for a row without keys
        const auto* q_bits = static_cast<const uint16_t*>(call.q) + q_index;
        pack_bf16_pairs(range.first < range.last ? q_bits : nullptr, dq, t.qt_pairs.data(), rows_pad, r);
      }
      if (range.first >= range.last) {
        std::fill_n(t.q.begin() + r * dq_pad, dq_pad, 0.0f);  // its scores are masked, but finite
        continue;
      }
      first_key = std::min(first_key, range.first);
      last_key = std::max(last_key, range.last);
      if (dot_transposed) continue;
      float* q_row = t.q.data() + r * dq_pad;
      LoadRow<kType>(call.q, q_index, dq, q_row);
      if (call.q_rope != nullptr) {
        RotateRow(q_row, call.q_rope[seq.q_token0 + query], call.num_pairs, call.rotary_offset, call.style);
      }
      if (call.q_add != nullptr) AddRow(q_row, call.q_add[seq.q_token0 + query], dq);
      const VF scale = hn::Set(df, call.scale);
      for (int64_t e = 0; e < dq_pad; e += N) hn::StoreU(hn::Mul(hn::LoadU(df, q_row + e), scale), df, q_row + e);
    }

    if (dot_transposed) {
      for (int64_t r = rows; r < rows_pad; ++r) pack_bf16_pairs(nullptr, dq, t.qt_pairs.data(), rows_pad, r);
    } else if (transposed) {
      for (int64_t e = 0; e < dq; ++e) {
        float* column = t.qt.data() + e * rows_pad;
        for (int64_t r = 0; r < rows; ++r) column[r] = t.q[static_cast<size_t>(r * dq_pad + e)];
        for (int64_t r = rows; r < rows_pad; ++r) column[r] = 0.0f;
      }
    }

    // In-place rows are prefetched a tile ahead as the loops read them, past the item's keys into
    // the rows that follow it in the view (a split decode's next chunk, which this thread usually
    // takes next: its first tile is then not read cold), at most a tile further.
    const int64_t prefetch_end = std::max(last_key, std::min(last_key + kKeyBlock, seq.kv_rows));
    // float32: paced cursors (prefetch.hpp), starting a tile in when the previous item of this
    // thread ended where this one starts (its prefetches covered that tile).
    PrefetchCursor k_prefetch, v_prefetch;
    if (first_key < last_key && (k_in_place || (v_in_place && kType == DType::F32))) {
      const Item* previous = item_index > begin ? &call.items[item_index - 1] : nullptr;
      const bool continues = previous != nullptr && previous->sequence == item.sequence && previous->kv_head == item.kv_head &&
                             previous->key_last == first_key;
      const int64_t first_row = std::min(first_key + (continues ? kKeyBlock : 0), prefetch_end);
      if (k_in_place) {
        k_prefetch = PrefetchCursor(static_cast<const char*>(call.k) + (seq.k_base + item.kv_head * plan.k.stride_heads) * kBytes,
                                    plan.k.stride_seq * kBytes, dq * kBytes, first_row, prefetch_end, kKeyBlock);
      }
      if (v_in_place && kType == DType::F32) {
        v_prefetch = PrefetchCursor(static_cast<const char*>(call.v) + (seq.v_base + item.kv_head * plan.v.stride_heads) * kBytes,
                                    plan.v.stride_seq * kBytes, dv * kBytes, first_row, prefetch_end, kKeyBlock);
      }
    }
    for (int64_t tile = first_key; tile < last_key; tile += kKeyBlock) {
      const int64_t tile_keys = std::min(kKeyBlock, last_key - tile);
      k_prefetch.at_tile(tile);
      v_prefetch.at_tile(tile);
      for (int64_t j = 0; j < tile_keys; ++j) {
        const int64_t key = tile + j;
        // The same row of the next tile, ahead of time: an item reads its kv head's rows, a few
        // hundred bytes every heads * head_dim elements, a pattern the hardware prefetchers
        // follow poorly (decode spent half its time waiting on these loads; perf, 2026-11-25).
        if (key + kKeyBlock < last_key) {
          if (!k_in_place && !dot_scores) PrefetchRow(call.k, seq.k_base + (key + kKeyBlock) * plan.k.stride_seq + item.kv_head * plan.k.stride_heads, dq * kBytes);
          if (!v_in_place) PrefetchRow(call.v, seq.v_base + (key + kKeyBlock) * plan.v.stride_seq + item.kv_head * plan.v.stride_heads, dv * kBytes);
        }
        if (!dot_scores && !dot_transposed && !k_in_place) {
          float* k_row = t.k.data() + j * dq_pad;
          LoadRow<kType>(call.k, seq.k_base + key * plan.k.stride_seq + item.kv_head * plan.k.stride_heads, dq, k_row);
          if (call.k_rope != nullptr) {
            RotateRow(k_row, call.k_rope[seq.k_token0 + key], call.num_pairs, call.rotary_offset, call.style);
          }
          if (call.k_add != nullptr) AddRow(k_row, call.k_add[seq.k_token0 + key], dq);
        }
        if (!v_in_place) {
          LoadRow<kType>(call.v, seq.v_base + key * plan.v.stride_seq + item.kv_head * plan.v.stride_heads, dv,
                         t.v.data() + j * dv_pad);
        }
      }
      if (transposed) {
        if (!TransposedRanges(t, ranges.data(), rows, rows_pad, tile, tile_keys)) continue;
        if (dot_transposed) {
          const auto* k_bits = static_cast<const uint16_t*>(call.k) + seq.k_base + tile * plan.k.stride_seq +
                               item.kv_head * plan.k.stride_heads;
          scores_bf16_dot_transposed(t.qt_pairs.data(), rows_pad, k_bits, plan.k.stride_seq, tile_keys, dq, call.scale,
                                     t.st.data());
        } else {
          ScoresTransposed(t, rows_pad, tile_keys, dq, dq_pad);
        }
        TransposedUpdate(t, rows, rows_pad, tile, tile_keys, dv_pad);
        continue;
      }
      // K and V of the tile: float32 rows in place, or the tiles.
      const float* k_tile = t.k.data();
      int64_t k_stride = dq_pad;
      if constexpr (kType == DType::F32) {
        if (k_in_place) {
          k_tile = static_cast<const float*>(call.k) + seq.k_base + tile * plan.k.stride_seq + item.kv_head * plan.k.stride_heads;
          k_stride = plan.k.stride_seq;
        }
      }
      const void* v_rows = v_in_place ? static_cast<const char*>(call.v) +
                                            (seq.v_base + tile * plan.v.stride_seq + item.kv_head * plan.v.stride_heads) * kBytes
                                      : nullptr;
      // 16-bit in-place rows: bursts a tile ahead as the loops go, up to prefetch_end.
      const bool v_bursts = v_in_place && kType != DType::F32;
      const int64_t v_ahead = v_bursts ? kKeyBlock : 0;
      const int64_t ahead_end = prefetch_end - tile;
      PrefetchCursor* k_cursor = k_in_place ? &k_prefetch : nullptr;
      PrefetchCursor* v_cursor = v_in_place && !v_bursts ? &v_prefetch : nullptr;
      for (int64_t r = 0; r < rows; ++r) {
        const KeyRange range = ranges[static_cast<size_t>(r)];
        const int64_t j0 = std::max(range.first, tile) - tile, j1 = std::min(range.last, tile + tile_keys) - tile;
        t.j0[static_cast<size_t>(r)] = static_cast<float>(j0 < j1 ? j0 : 0);  // for the scores and p.v below
        t.j1[static_cast<size_t>(r)] = static_cast<float>(j0 < j1 ? j1 : 0);
      }
      // Scores, for up to kBlockRows consecutive rows that see the same keys at a time.
      for (int64_t r = 0; r < rows;) {
        const auto u = static_cast<size_t>(r);
        const auto j0 = static_cast<int64_t>(t.j0[u]), j1 = static_cast<int64_t>(t.j1[u]);
        if (j0 >= j1) {
          ++r;
          continue;
        }
        int64_t count = 1;
        while (count < kBlockRows && r + count < rows && t.j0[u + count] == t.j0[u] && t.j1[u + count] == t.j1[u]) ++count;
        float* s = t.s.data() + r * s_stride;
        if (dot_scores) {  // q and K as stored (bf16), scale applied to each finished dot product
          const uint16_t* q_bits[4] = {};
          for (int64_t c = 0; c < count; ++c) {
            const int64_t head = item.kv_head * plan.group + (r + c) / item.q_count;
            const int64_t query = item.q_first + (r + c) % item.q_count;
            q_bits[c] = static_cast<const uint16_t*>(call.q) + seq.q_base + query * plan.q.stride_seq + head * plan.q.stride_heads;
          }
          const auto* k_bits = static_cast<const uint16_t*>(call.k) + seq.k_base + (tile + j0) * plan.k.stride_seq +
                               item.kv_head * plan.k.stride_heads;
          scores_bf16_dot_rows(q_bits, count, k_bits, plan.k.stride_seq, j1 - j0, dq, call.scale, s + j0, s_stride,
                               kKeyBlock, ahead_end - j0);
        } else {
          const float* q_rows = t.q.data() + r * dq_pad;
          switch (count) {
            case 1: DecodeScores<1>(q_rows, dq_pad, k_tile, k_stride, j0, j1, s, s_stride, k_cursor); break;
            case 2: DecodeScores<2>(q_rows, dq_pad, k_tile, k_stride, j0, j1, s, s_stride, k_cursor); break;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
            case 3: DecodeScores<3>(q_rows, dq_pad, k_tile, k_stride, j0, j1, s, s_stride, k_cursor); break;
            default: DecodeScores<4>(q_rows, dq_pad, k_tile, k_stride, j0, j1, s, s_stride, k_cursor); break;
#else
            default: break;
#endif
          }
        }
        r += count;
      }
      // Per row: ALiBi, then the online softmax update.
      for (int64_t r = 0; r < rows; ++r) {
        const auto j0 = static_cast<int64_t>(t.j0[static_cast<size_t>(r)]), j1 = static_cast<int64_t>(t.j1[static_cast<size_t>(r)]);
        if (j0 >= j1) continue;
        float* s = t.s.data() + r * s_stride;
        int64_t j = j0;
        if (t.alibi) {
          AddAlibiRow(s, t.neg_slope[static_cast<size_t>(r)], static_cast<float>(t.position[static_cast<size_t>(r)] - tile), j0, j1);
        }
        // The tile's max a vector at a time (a scalar max chain of 64 keys per row was a latency
        // chain in the decode's per-tile work); max is exact, so for finite scores the order
        // changes no bit (a NaN score may or may not reach tile_max; its row is flagged below).
        float tile_max = s[j0];
        j = j0 + 1;
        if (j1 - j0 >= N) {
          VF vmax = hn::LoadU(df, s + j0);
          for (j = j0 + N; j + N <= j1; j += N) vmax = hn::Max(vmax, hn::LoadU(df, s + j));
          tile_max = hn::GetLane(hn::MaxOfLanes(df, vmax));
        }
        for (; j < j1; ++j) tile_max = std::max(tile_max, s[j]);
        float& m = t.m[static_cast<size_t>(r)];
        // m is never NaN: std::max(m, x) keeps m when x is NaN. m = -inf before the first visible
        // key, and while every visible score so far is -inf: alpha = 1 there (o and l are 0), not
        // exp(-inf + inf).
        const float m_new = std::max(m, tile_max);
        const float alpha = m == m_new ? 1.0f : std::exp(m - m_new);
        m = m_new;
        // p_j = exp(s_j - m) over whole vectors from j0; the slack past j1 is computed and unused.
        // Visible NaN / +inf scores flag the row (Scratch::bad; -inf is an ordinary score, weight 0).
        const VF vm = hn::Set(df, m_new), pos_inf = hn::Set(df, INFINITY);
        VF sum = hn::Zero(df);
        auto non_finite = hn::FirstN(df, 0);  // all false
        for (j = j0; j < j1; j += N) {
          const VF score = hn::LoadU(df, s + j);
          const VF p = hn::Exp(df, ExpArgument(hn::Sub(score, vm)));
          hn::StoreU(p, df, s + j);
          const auto flagged = hn::Not(hn::Lt(score, pos_inf));
          if (j + N <= j1) {
            sum = hn::Add(sum, p);
            non_finite = hn::Or(non_finite, flagged);
          } else {
            non_finite = hn::Or(non_finite, hn::And(flagged, hn::FirstN(df, static_cast<size_t>(j1 - j))));
          }
        }
        if (!hn::AllFalse(df, non_finite)) t.bad[static_cast<size_t>(r)] = 1.0f;
        float p_sum = hn::GetLane(hn::SumOfLanes(df, sum));
        for (j = j0 + (j1 - j0) / N * N; j < j1; ++j) p_sum += s[j];
        t.l[static_cast<size_t>(r)] = alpha * t.l[static_cast<size_t>(r)] + p_sum;

        t.alpha[static_cast<size_t>(r)] = alpha;
      }
      if (v_in_place) {
        AccumulateRows<kType>(t, rows, t.s.data(), s_stride, 1, v_rows, plan.v.stride_seq, dv_pad, v_ahead, ahead_end,
                              v_cursor);
      } else {
        AccumulateRows(t, rows, t.s.data(), s_stride, 1, t.v.data(), dv_pad, dv_pad);
      }
    }

    // A chunk of a split item: its rows' m, l and unnormalised o, for attention.cpp's merge; l is
    // NaN for a row flagged non-finite. A chunk whose visible scores are all -inf leaves m = -inf
    // and l = 0, as one that saw no key: the merge decides, over all chunks, whether the row's
    // scores were all -inf.
    if (item.partial_row >= 0) {
      for (int64_t r = 0; r < rows; ++r) {
        const auto row = static_cast<size_t>(item.partial_row + r);
        call.partial_m[row] = t.m[static_cast<size_t>(r)];
        call.partial_l[row] = t.bad[static_cast<size_t>(r)] != 0.0f ? std::numeric_limits<float>::quiet_NaN() : t.l[static_cast<size_t>(r)];
        std::copy_n(t.o.begin() + r * dv_pad, dv, call.partial_o + row * static_cast<size_t>(dv));
      }
      continue;
    }
    // out = o / l, zeros for a row without visible keys, NaN for a row flagged non-finite or whose
    // visible scores were all -inf (m still -inf).
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t head = item.kv_head * plan.group + r / item.q_count;
      const int64_t query = item.q_first + r % item.q_count;
      const int64_t out_index = seq.out_base + query * plan.out.stride_seq + head * plan.out.stride_heads;
      float* o_row = t.o.data() + r * dv_pad;
      const float l = t.l[static_cast<size_t>(r)];
      const KeyRange range = ranges[static_cast<size_t>(r)];
      if (t.bad[static_cast<size_t>(r)] != 0.0f || (range.first < range.last && !(t.m[static_cast<size_t>(r)] > -INFINITY))) {
        std::fill_n(o_row, dv_pad, std::numeric_limits<float>::quiet_NaN());
      } else if (l > 0.0f) {
        const VF vl = hn::Set(df, l);
        for (int64_t e = 0; e < dv_pad; e += N) hn::StoreU(hn::Div(hn::LoadU(df, o_row + e), vl), df, o_row + e);
      }
      int64_t e = 0;
      for (; e + N <= dv; e += N) cpu::StoreF32<kType>(hn::LoadU(df, o_row + e), call.out, out_index + e);
      for (; e < dv; ++e) cpu::StoreOne<kType>(o_row[e], call.out, out_index + e);
    }
  }
}

}  // namespace rotary::attention_internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
