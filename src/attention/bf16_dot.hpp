// src/attention/bf16_dot.hpp: the decode's bf16 scores with AVX512_BF16's vdpbf16ps (internal to
// rotary_attention). Highway 1.0.3 has no bf16 ReorderWidenMulAccumulate on its AVX3 target, so
// this is written with intrinsics (bf16_dot.cpp) behind a target attribute and a CPU check.
//
// Used by the decode form of the kernels (attention_kernels-inl.h) for bf16 storage without
// fused RoPE: q and k are then exact bf16 values as stored, the scale is applied to the finished
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
// per item): how the tests see that the path ran.
extern std::atomic<int64_t> bf16_dot_items;

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

}  // namespace rotary::attention_internal
