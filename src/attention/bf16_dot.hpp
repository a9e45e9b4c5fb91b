// src/attention/bf16_dot.hpp: the decode's bf16 scores with AVX512_BF16's vdpbf16ps (internal to
// rotary_attention). Highway 1.0.3 has no bf16 ReorderWidenMulAccumulate on its AVX3 target, so
// this is written with intrinsics (bf16_dot.cpp) behind a target attribute and a CPU check.
//
// Used by both score forms of the kernels (attention_kernels-inl.h) for bf16 storage without
// fused RoPE or an absolute table: q and k are then exact bf16 values as stored, the scale is applied to the finished
// dot product, and vdpbf16ps multiplies pairs of bf16 exactly (8-bit significands: a 16-bit
// product fits float32) and adds them in float32 with round-to-nearest-even: no rounding of the
// inputs, the summation error of the float32 path (docs/attention.md, "AVX512_BF16"). The
// instruction treats bf16 subnormal inputs as zero and flushes subnormal results to zero
// whatever MXCSR says; docs/attention.md bounds that term.
#pragma once

#include <atomic>
#include <cstdint>

namespace rotary::attention_internal {

// Whether this CPU has AVX512_BF16 (and AVX-512 F / BW / VL), checked once.
bool cpu_has_avx512_bf16();

// On unless a test or benchmark turns it off to run the float32 fallback on the same CPU.
extern std::atomic<bool> use_avx512_bf16;
// Items whose scores went through scores_bf16_dot since the process started (one relaxed add
// per item): how the tests see that the path ran. The decode form (scores_bf16_dot_rows) and the
// prefill form (scores_bf16_dot_transposed) are counted apart.
extern std::atomic<int64_t> bf16_dot_items;
extern std::atomic<int64_t> bf16_dot_prefill_items;

// s[j] = scale * sum_e q[e] * k_j[e] for keys j in [0, keys), k_j = k + j * k_stride (elements),
// all rows of dim bf16 values (unit stride). Call only when cpu_has_avx512_bf16().
void scores_bf16_dot(const uint16_t* q, const uint16_t* k, int64_t k_stride, int64_t keys, int64_t dim, float scale,
                     float* s);

// The same for `rows` q rows (1 to 4) over the same keys, each K vector loaded once for all of
// them: row r's q at q[r], its scores at s + r * s_stride. Row by row the arithmetic is
// scores_bf16_dot's (one accumulator per key, the dim in order, one reduction, then the scale):
// the same bits. While it goes it prefetches the K rows `ahead` keys later, those below
// ahead_end (0: none).
void scores_bf16_dot_rows(const uint16_t* const* q, int64_t rows, const uint16_t* k, int64_t k_stride, int64_t keys,
                          int64_t dim, float scale, float* s, int64_t s_stride, int64_t ahead, int64_t ahead_end);

// The prefill (transposed) form, SIMD over rows: for keys j < keys and rows r < rows_pad,
//   st[j * rows_pad + r] = scale * sum_e q_r[e] * k_j[e].
// q comes as bf16 pairs (bf16_pairs): qt_pairs[p * rows_pad + r] holds q_r[2p] in its low and
// q_r[2p + 1] in its high 16 bits, (dim + 1) / 2 pairs, zero past dim and for pad rows. K rows
// are read as stored, k_j = k + j * k_stride (elements), dim bf16 values each (unit stride;
// nothing past dim is read: with an odd dim the last pair's high half is taken as zero). Each
// step multiplies a pair of K elements, broadcast as one 32-bit lane, with 16 rows' pairs
// (vdpbf16ps: two exact products added in float32), one accumulator per (row, key) over the
// pairs in order, then the scale: the result of a row does not depend on the rows or keys
// blocked with it. rows_pad: a multiple of 16. Call only when cpu_has_avx512_bf16().
void scores_bf16_dot_transposed(const uint32_t* qt_pairs, int64_t rows_pad, const uint16_t* k, int64_t k_stride,
                                int64_t keys, int64_t dim, float scale, float* st);

// Packs one q row of dim bf16 values (unit stride) into column r of qt_pairs ([pairs][rows_pad]):
// qt_pairs[p * rows_pad + r] = q[2p] | q[2p + 1] << 16, the high half zero past dim. q null: zeros
// (a pad row, or a row that sees no key).
inline void pack_bf16_pairs(const uint16_t* q, int64_t dim, uint32_t* qt_pairs, int64_t rows_pad, int64_t r) {
  const int64_t pairs = (dim + 1) / 2;
  for (int64_t p = 0; p < pairs; ++p) {
    uint32_t lane = 0;
    if (q != nullptr) {
      lane = q[2 * p];
      if (2 * p + 1 < dim) lane |= static_cast<uint32_t>(q[2 * p + 1]) << 16;
    }
    qt_pairs[p * rows_pad + r] = lane;
  }
}

}  // namespace rotary::attention_internal
