// src/attention/attention_tiles-inl.h: the loops over one tile of keys that attention's kernel
// (attention_kernels-inl.h, AttendTyped and its steps; the algorithm is described there) is built
// from, as Highway templates: rows loaded from storage into float32 tiles (and rotated, or with an
// absolute row added), the scores of both forms (decode: SIMD over the head dim; transposed: SIMD
// over rows), the transposed form's online softmax, p.v, and the scratch they work in. Included
// once per target through attention_kernels-inl.h (foreach_target, the usual -inl.h guard below).
#if defined(ROTARY_SRC_ATTENTION_ATTENTION_TILES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ROTARY_SRC_ATTENTION_ATTENTION_TILES_INL_H_
#undef ROTARY_SRC_ATTENTION_ATTENTION_TILES_INL_H_
#else
#define ROTARY_SRC_ATTENTION_ATTENTION_TILES_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "hwy/cache_control.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "attention/amx_bf16.hpp"
#include "attention/kernels.hpp"
#include "attention/prefetch.hpp"
// The storage loads and stores (widening; round-to-nearest-even narrowing) of apply()'s kernels.
#include "cpu/dtype_io-inl.h"

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
  // The AMX form (amx_bf16.hpp): zero-padded copies of K rows, V^T of a tile in pairs of keys,
  // the weights as bf16 pairs, and the item's o transposed ([value][row]).
  std::vector<uint16_t> amx_k;
  std::vector<uint32_t> qt_lo;  // q's lo pairs where q' is split into bf16 hi + lo
  std::vector<uint32_t> amx_v, amx_p;
  std::vector<float> amx_ot;
  // V^T of the tiles that start at a multiple of kKeyBlock, kept while the items of one
  // (sequence, kv head) run on this thread: every query block reads the same tiles, and packing
  // them again per block cost more than the p.v itself. Slot i holds the tile at key 64 i; its
  // tag says for which sequence, kv head and key count, and whether the tile was finite.
  struct AmxValuesTag {
    int64_t sequence = -1, kv_head = -1, keys = -1;
    bool finite = false;
  };
  int64_t amx_slots = 0;  // tiles the caches hold (PrepareScratch; allocated by AmxCaches)
  std::unique_ptr<uint32_t[]> amx_v_cache;
  std::vector<AmxValuesTag> amx_v_tags;
  // The same for k' split into bf16 hi and lo rows (fused RoPE or an absolute table: each K row is
  // rotated, or has its row added, and split once per tile instead of once per query block).
  std::unique_ptr<uint16_t[]> amx_k_cache;
  std::vector<AmxValuesTag> amx_k_tags;
  // ALiBi (alibi true): per row its -slope and its query position; per tile the position minus
  // the tile's first key (float32, exact below 2^24). Pad rows have slope 0.
  bool alibi = false;
  std::vector<float> neg_slope, from;
  std::vector<int64_t> position;
  // Per row of the item its visible keys (StartItem: the split chunk's share of them).
  std::vector<KeyRange> ranges;
};

// The float32 q tile transposed into Qt ([dim][rows_pad], zero pad rows) for the transposed
// form's float32 scores (ScoresTransposed).
HWY_INLINE void TransposeQ(Scratch& t, int64_t rows, int64_t rows_pad, int64_t dq, int64_t dq_pad) {
  for (int64_t e = 0; e < dq; ++e) {
    float* column = t.qt.data() + e * rows_pad;
    for (int64_t r = 0; r < rows; ++r) column[r] = t.q[static_cast<size_t>(r * dq_pad + e)];
    for (int64_t r = rows; r < rows_pad; ++r) column[r] = 0.0f;
  }
}

// The per-thread V^T (and split K) caches, allocated uninitialised at the call's first AMX tile
// (their tags say which slots hold a tile), for t.amx_slots tiles; split: K's too.
HWY_INLINE void AmxCaches(Scratch& t, int64_t dq, int64_t dv_pad, bool split) {
  if (!t.amx_v_tags.empty() || t.amx_slots == 0) return;
  const auto slots = static_cast<size_t>(t.amx_slots);
  t.amx_v_cache = std::make_unique_for_overwrite<uint32_t[]>(slots * 32 * static_cast<size_t>(dv_pad));
  t.amx_v_tags.assign(slots, Scratch::AmxValuesTag{});
  if (split) {
    t.amx_k_cache = std::make_unique_for_overwrite<uint16_t[]>(
        slots * 2 * static_cast<size_t>(kKeyBlock * amx_pair_rows(dq) * 2));
    t.amx_k_tags.assign(slots, Scratch::AmxValuesTag{});
  }
}

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
// row at a time took 5 loads per 4 FMAs). q_r at q + r * dq_pad, K rows of type kK at k,
// k_stride elements apart and readable over dq_pad elements (a zero-padded float32 tile, or K in
// place in its storage type when the head dim is whole vectors: 16-bit rows are widened as they
// load, exactly, so the scores are those of the widened tile bit for bit and the conversion
// rides under the memory stream instead of a pass of its own), s_r at s + r * s_stride. Per row
// the arithmetic is a row at a time's: one accumulator per key over the vectors in order,
// SumOfFour per four keys, SumOfLanes for the last keys, so grouping rows changes no result bit.
template <int64_t R, DType kK>
HWY_INLINE void DecodeScores(const float* HWY_RESTRICT q, int64_t dq_pad, const void* HWY_RESTRICT k, int64_t k_stride,
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
    const int64_t k0 = j * k_stride;
    VF acc[R][4];
    for (int64_t r = 0; r < R; ++r)
      for (int64_t i = 0; i < 4; ++i) acc[r][i] = hn::Zero(df);
    for (int64_t e = 0, step = 1; e < dq_pad; e += N, ++step) {
      if (prefetch != nullptr && (step % 2 == 0 || step == steps)) {
        prefetch->follow(j, std::min(step * per_step, block_lines), 4 * per_step);
      }
      const VF c0 = cpu::LoadF32<kK>(k, k0 + e), c1 = cpu::LoadF32<kK>(k, k0 + k_stride + e);
      const VF c2 = cpu::LoadF32<kK>(k, k0 + 2 * k_stride + e), c3 = cpu::LoadF32<kK>(k, k0 + 3 * k_stride + e);
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
    const int64_t k_row = j * k_stride;
    for (int64_t r = 0; r < R; ++r) {
      VF a = hn::Zero(df);
      for (int64_t e = 0; e < dq_pad; e += N) {
        a = hn::MulAdd(hn::LoadU(df, q + r * dq_pad + e), cpu::LoadF32<kK>(k, k_row + e), a);
      }
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

// TransposedSoftmax's update for the vector of rows at rb when each of them sees every key of the
// tile: the masked loops' results, bit for bit, with the masks all true.
HWY_INLINE void TransposedSoftmaxWhole(Scratch& t, int64_t rows_pad, int64_t rb, int64_t tile_keys) {
  const DF df;
  float* st = t.st.data();
  const VF neg_inf = hn::Set(df, -INFINITY), pos_inf = hn::Set(df, INFINITY), one = hn::Set(df, 1.0f);
  VF tile_max = neg_inf;
  auto finite = hn::Lt(neg_inf, pos_inf);  // all true; false once a lane's score is NaN or +inf
  for (int64_t j = 0; j < tile_keys; ++j) {
    const VF score = hn::LoadU(df, st + j * rows_pad + rb);
    tile_max = hn::Max(tile_max, score);
    finite = hn::And(finite, hn::Lt(score, pos_inf));
  }
  hn::StoreU(hn::IfThenElse(finite, hn::LoadU(df, t.bad.data() + rb), one), df, t.bad.data() + rb);
  const VF m_old = hn::LoadU(df, t.m.data() + rb);
  const VF m_new = hn::Max(m_old, tile_max);
  const auto seen = hn::Gt(m_new, neg_inf);
  const VF alpha = hn::Exp(df, hn::IfThenElseZero(seen, ExpArgument(hn::Sub(m_old, m_new))));
  VF sum = hn::Zero(df);
  for (int64_t j = 0; j < tile_keys; ++j) {
    float* at = st + j * rows_pad + rb;
    const VF p = hn::Exp(df, ExpArgument(hn::Sub(hn::LoadU(df, at), m_new)));
    hn::StoreU(p, df, at);
    sum = hn::Add(sum, p);
  }
  hn::StoreU(m_new, df, t.m.data() + rb);
  hn::StoreU(hn::MulAdd(alpha, hn::LoadU(df, t.l.data() + rb), sum), df, t.l.data() + rb);
  hn::StoreU(alpha, df, t.alpha.data() + rb);
}

// ALiBi and the online softmax update of a tile whose scores are in t.st: the weights p in their
// place (zero for keys a row does not see), and per row m, l and alpha.
HWY_INLINE void TransposedSoftmax(Scratch& t, int64_t rows_pad, int64_t tile, int64_t tile_keys) {
  const DF df;
  const auto N = static_cast<int64_t>(hn::Lanes(df));
  float* st = t.st.data();
  if (t.alibi) AddAlibiTransposed(t, rows_pad, tile, tile_keys);

  // Online softmax per vector of rows. As in the other form, exp's argument is kept in [-200, 0]
  // (ExpArgument); a row that has seen no key yet (m = -inf) gets alpha = 1 (its o and l are 0).
  // Visible NaN / +inf scores flag their row (Scratch::bad).
  const VF neg_inf = hn::Set(df, -INFINITY), zero = hn::Zero(df);
  const VF pos_inf = hn::Set(df, INFINITY), one = hn::Set(df, 1.0f);
  const VF all_keys = hn::Set(df, static_cast<float>(tile_keys));
  for (int64_t rb = 0; rb < rows_pad; rb += N) {
    const VF j0 = hn::LoadU(df, t.j0.data() + rb), j1 = hn::LoadU(df, t.j1.data() + rb);
    // Every row of the vector sees the whole tile (a causal prefill's tiles before the diagonal):
    // the same arithmetic without the per-key visibility masks.
    if (hn::AllTrue(df, hn::And(hn::Eq(j0, zero), hn::Eq(j1, all_keys)))) {
      TransposedSoftmaxWhole(t, rows_pad, rb, tile_keys);
      continue;
    }
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
}

// ALiBi, the online softmax update and p.v of a tile whose scores are in t.st.
HWY_INLINE void TransposedUpdate(Scratch& t, int64_t rows, int64_t rows_pad, int64_t tile, int64_t tile_keys,
                                 int64_t dv_pad) {
  TransposedSoftmax(t, rows_pad, tile, tile_keys);
  AccumulateRows(t, rows, t.st.data(), 1, rows_pad, t.v.data(), dv_pad, dv_pad);
}

}  // namespace rotary::attention_internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ROTARY_SRC_ATTENTION_ATTENTION_TILES_INL_H_ per target
