// src/attention/bf16_dot.cpp: bf16_dot.hpp (the scores of the decode form and of the prefill
// form), with AVX512_BF16 intrinsics behind a function target attribute; elsewhere (non-x86 or
// compilers without the intrinsics) stubs that are never called.
#include "attention/bf16_dot.hpp"

#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define ROTARY_HAVE_BF16_DOT 1
#endif

namespace rotary::attention_internal {

std::atomic<bool> use_avx512_bf16{true};
std::atomic<int64_t> bf16_dot_items{0};
std::atomic<int64_t> bf16_dot_prefill_items{0};

#ifdef ROTARY_HAVE_BF16_DOT

bool cpu_has_avx512_bf16() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  return has;
}

namespace {

// 32 bf16 values from `p`, the first `count` of them (the rest zero: they add nothing).
__attribute__((target("avx512f,avx512bw,avx512bf16"))) inline __m512bh load_bf16(const uint16_t* p, int64_t count) {
  if (count >= 32) return reinterpret_cast<__m512bh>(_mm512_loadu_si512(p));
  const __mmask32 mask = static_cast<__mmask32>((uint64_t{1} << count) - 1);
  return reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, p));
}

// The lane sums of a0..a3, in order, as one 128-bit vector: pairs of vectors interleaved and
// added per 128-bit block (32-bit, then 64-bit lanes), leaving per block the four partial sums in
// order, then the four blocks added. 11 operations for four sums, where four
// _mm512_reduce_add_ps take 32 (each halves its vector four times). The summation order differs
// from reduce_add's; any order is within the error analysis (docs/attention.md).
__attribute__((target("avx512f"))) inline __m128 sum_of_four(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  const __m512 s01 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));  // a0 a1 a0 a1
  const __m512 s23 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));  // a2 a3 a2 a3
  const __m512d d01 = _mm512_castps_pd(s01), d23 = _mm512_castps_pd(s23);
  const __m512 sum = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(d01, d23)),
                                   _mm512_castpd_ps(_mm512_unpackhi_pd(d01, d23)));  // per block: a0 a1 a2 a3
  const __m256 half = _mm256_add_ps(_mm512_castps512_ps256(sum),
                                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sum), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(half), _mm256_extractf128_ps(half, 1));
}

}  // namespace

// Four keys per pass over q (each q vector loaded once for four K rows), one accumulator each;
// q's vectors (head_dim 128: four) are reloaded from L1 per key group.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void scores_bf16_dot(
    const uint16_t* q, const uint16_t* k, int64_t k_stride, int64_t keys, int64_t dim, float scale, float* s) {
  int64_t j = 0;
  for (; j + 4 <= keys; j += 4) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const uint16_t* k0 = k + j * k_stride;
    for (int64_t e = 0; e < dim; e += 32) {
      const __m512bh qv = load_bf16(q + e, dim - e);
      a0 = _mm512_dpbf16_ps(a0, qv, load_bf16(k0 + e, dim - e));
      a1 = _mm512_dpbf16_ps(a1, qv, load_bf16(k0 + k_stride + e, dim - e));
      a2 = _mm512_dpbf16_ps(a2, qv, load_bf16(k0 + 2 * k_stride + e, dim - e));
      a3 = _mm512_dpbf16_ps(a3, qv, load_bf16(k0 + 3 * k_stride + e, dim - e));
    }
    _mm_storeu_ps(s + j, _mm_mul_ps(_mm_set1_ps(scale), sum_of_four(a0, a1, a2, a3)));
  }
  for (; j < keys; ++j) {
    __m512 a = _mm512_setzero_ps();
    for (int64_t e = 0; e < dim; e += 32) a = _mm512_dpbf16_ps(a, load_bf16(q + e, dim - e), load_bf16(k + j * k_stride + e, dim - e));
    s[j] = scale * _mm512_reduce_add_ps(a);
  }
}

namespace {

template <int R>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) inline void scores_rows(
    const uint16_t* const* q, const uint16_t* k, int64_t k_stride, int64_t keys, int64_t dim, float scale, float* s,
    int64_t s_stride, int64_t ahead, int64_t ahead_end) {
  int64_t j = 0;
  for (; j + 4 <= keys; j += 4) {
    if (ahead > 0) {
      for (int64_t c = 0; c < 4 && j + c + ahead < ahead_end; ++c) {
        const char* row = reinterpret_cast<const char*>(k + (j + c + ahead) * k_stride);
        for (int64_t offset = 0; offset < dim * 2; offset += 64) _mm_prefetch(row + offset, _MM_HINT_T0);
      }
    }
    __m512 acc[R][4];
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < 4; ++i) acc[r][i] = _mm512_setzero_ps();
    const uint16_t* k0 = k + j * k_stride;
    for (int64_t e = 0; e < dim; e += 32) {
      const __m512bh c0 = load_bf16(k0 + e, dim - e), c1 = load_bf16(k0 + k_stride + e, dim - e);
      const __m512bh c2 = load_bf16(k0 + 2 * k_stride + e, dim - e), c3 = load_bf16(k0 + 3 * k_stride + e, dim - e);
      for (int r = 0; r < R; ++r) {
        const __m512bh qv = load_bf16(q[r] + e, dim - e);
        acc[r][0] = _mm512_dpbf16_ps(acc[r][0], qv, c0);
        acc[r][1] = _mm512_dpbf16_ps(acc[r][1], qv, c1);
        acc[r][2] = _mm512_dpbf16_ps(acc[r][2], qv, c2);
        acc[r][3] = _mm512_dpbf16_ps(acc[r][3], qv, c3);
      }
    }
    const __m128 scale4 = _mm_set1_ps(scale);
    for (int r = 0; r < R; ++r) {
      _mm_storeu_ps(s + r * s_stride + j, _mm_mul_ps(scale4, sum_of_four(acc[r][0], acc[r][1], acc[r][2], acc[r][3])));
    }
  }
  for (int r = 0; r < R; ++r) scores_bf16_dot(q[r], k + j * k_stride, k_stride, keys - j, dim, scale, s + r * s_stride + j);
}

}  // namespace

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void scores_bf16_dot_rows(
    const uint16_t* const* q, int64_t rows, const uint16_t* k, int64_t k_stride, int64_t keys, int64_t dim, float scale,
    float* s, int64_t s_stride, int64_t ahead, int64_t ahead_end) {
  switch (rows) {
    case 1: scores_rows<1>(q, k, k_stride, keys, dim, scale, s, s_stride, ahead, ahead_end); return;
    case 2: scores_rows<2>(q, k, k_stride, keys, dim, scale, s, s_stride, ahead, ahead_end); return;
    case 3: scores_rows<3>(q, k, k_stride, keys, dim, scale, s, s_stride, ahead, ahead_end); return;
    default: scores_rows<4>(q, k, k_stride, keys, dim, scale, s, s_stride, ahead, ahead_end); return;
  }
}

namespace {

// K's pair p of the row at k as one 32-bit lane broadcast to all 16 (unaligned: a row may start at
// any element); `last` (an odd dim's final element) has no partner, its high half is zero and
// nothing past it is read.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) inline __m512bh k_pair(const uint16_t* k, int64_t p) {
  uint32_t pair = 0;
  std::memcpy(&pair, k + 2 * p, sizeof(pair));
  return reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pair)));
}
__attribute__((target("avx512f,avx512bw,avx512bf16"))) inline __m512bh k_last(const uint16_t* k, int64_t dim) {
  return reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(k[dim - 1])));
}

// kRowVecs vectors of 16 rows x kKeys keys, all accumulators in registers (4 x 4: 16, with 4 q
// vectors and a broadcast, of AVX-512's 32 registers): per pair, kRowVecs q loads and kKeys
// broadcasts for kRowVecs * kKeys vdpbf16ps (each 32 multiply-adds).
template <int kRowVecs, int kKeys>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) inline void transposed_block(
    const uint32_t* qt, int64_t rows_pad, const uint16_t* k, int64_t k_stride, int64_t dim, float scale, float* st) {
  __m512 acc[kRowVecs][kKeys];
  for (int r = 0; r < kRowVecs; ++r)
    for (int j = 0; j < kKeys; ++j) acc[r][j] = _mm512_setzero_ps();
  const int64_t full_pairs = dim / 2;
  for (int64_t p = 0; p < full_pairs; ++p) {
    __m512bh q[kRowVecs];
    for (int r = 0; r < kRowVecs; ++r) q[r] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(qt + p * rows_pad + 16 * r));
    for (int j = 0; j < kKeys; ++j) {
      const __m512bh kj = k_pair(k + j * k_stride, p);
      for (int r = 0; r < kRowVecs; ++r) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], q[r], kj);
    }
  }
  if (dim % 2 != 0) {  // q's pair there has a zero high half too
    __m512bh q[kRowVecs];
    for (int r = 0; r < kRowVecs; ++r) q[r] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(qt + full_pairs * rows_pad + 16 * r));
    for (int j = 0; j < kKeys; ++j) {
      const __m512bh kj = k_last(k + j * k_stride, dim);
      for (int r = 0; r < kRowVecs; ++r) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], q[r], kj);
    }
  }
  const __m512 s = _mm512_set1_ps(scale);
  for (int j = 0; j < kKeys; ++j)
    for (int r = 0; r < kRowVecs; ++r) _mm512_storeu_ps(st + j * rows_pad + 16 * r, _mm512_mul_ps(acc[r][j], s));
}

template <int kRowVecs>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) inline void transposed_keys(
    const uint32_t* qt, int64_t rows_pad, const uint16_t* k, int64_t k_stride, int64_t keys, int64_t dim, float scale,
    float* st) {
  int64_t j = 0;
  for (; j + 4 <= keys; j += 4) transposed_block<kRowVecs, 4>(qt, rows_pad, k + j * k_stride, k_stride, dim, scale, st + j * rows_pad);
  for (; j < keys; ++j) transposed_block<kRowVecs, 1>(qt, rows_pad, k + j * k_stride, k_stride, dim, scale, st + j * rows_pad);
}

}  // namespace

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void scores_bf16_dot_transposed(
    const uint32_t* qt_pairs, int64_t rows_pad, const uint16_t* k, int64_t k_stride, int64_t keys, int64_t dim,
    float scale, float* st) {
  int64_t rb = 0;
  for (; rb + 64 <= rows_pad; rb += 64) transposed_keys<4>(qt_pairs + rb, rows_pad, k, k_stride, keys, dim, scale, st + rb);
  switch ((rows_pad - rb) / 16) {
    case 3: transposed_keys<3>(qt_pairs + rb, rows_pad, k, k_stride, keys, dim, scale, st + rb); return;
    case 2: transposed_keys<2>(qt_pairs + rb, rows_pad, k, k_stride, keys, dim, scale, st + rb); return;
    case 1: transposed_keys<1>(qt_pairs + rb, rows_pad, k, k_stride, keys, dim, scale, st + rb); return;
    default: return;
  }
}

#else

bool cpu_has_avx512_bf16() { return false; }
void scores_bf16_dot_rows(const uint16_t* const*, int64_t, const uint16_t*, int64_t, int64_t, int64_t, float, float*,
                          int64_t, int64_t, int64_t) {}
void scores_bf16_dot(const uint16_t*, const uint16_t*, int64_t, int64_t, int64_t, float, float*) {}
void scores_bf16_dot_transposed(const uint32_t*, int64_t, const uint16_t*, int64_t, int64_t, int64_t, float, float*) {}

#endif

}  // namespace rotary::attention_internal
