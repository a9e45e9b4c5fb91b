// src/attention/amx_bf16.hpp: the bf16 prefill's scores and p.v on AMX tiles (internal to
// rotary_attention). Intel's Advanced Matrix Extensions (Sapphire Rapids and later Xeons) hold
// eight 16 x 64-byte tile registers and multiply them with TDPBF16PS: C[m][n] += sum over pairs k
// of A[m][2k] B[k][2n] + A[m][2k+1] B[k][2n+1], bf16 products (exact in float32) added in float32
// with round-to-nearest-even, bf16 subnormal inputs read as zero and subnormal results flushed
// (Intel SDM vol. 2, TDPBF16PS; Intel's AMX programming reference, "Tile configuration"). Highway
// has no AMX, so this is written with inline assembly and AVX-512 intrinsics behind target
// attributes, and runs only where cpu_has_amx_bf16() says the CPU and the OS allow it.
//
// Used by the transposed (prefill) form of the kernels (attention_kernels-inl.h) for bf16
// storage, where the vdpbf16ps scores (bf16_dot.hpp) or the float32 form would otherwise run:
//   scores: q and K as stored, exactly as vdpbf16ps takes them (same error terms); with fused
//           RoPE or an absolute table, q' and k' split into bf16 hi + lo (below);
//   p.v:    each float32 weight p is split into two bf16 values, hi = bf16(p) and
//           lo = bf16(p - hi) (p - hi is exact in float32), so p is carried to 2^-16 relative
//           (|p - hi - lo| <= 2^-8 |p - hi| <= 2^-16 (1 + 2^-8) |p|), and V is taken as stored;
//           hi.v and lo.v are added in float32 by the tile unit. docs/attention.md ("AMX") has
//           the error terms this adds; a weight is never rounded to bf16 alone.
// A V tile that holds NaN or an infinity is refused (pack_values_amx returns false) and the caller
// takes the float32 p.v, which multiplies each row's visible keys only: the tile unit would
// multiply every key of the tile, and 0 * inf is NaN in rows that cannot see that key.
#pragma once

#include <atomic>
#include <cstdint>

namespace rotary::attention_internal {

// Whether this CPU has AMX-TILE, AMX-BF16 and AVX512_BF16 (with AVX-512 F / BW / VL), the OS
// saves the tile state (XCR0 bits 17 and 18) and, on Linux, grants this process the tile data
// (arch_prctl ARCH_REQ_XCOMP_PERM; Linux 5.16 and later require the request). Checked once, at
// the first bf16 attention call on an AVX-512 target; ROTARY_NO_AMX=1 in the environment makes
// it false without asking.
bool cpu_has_amx_bf16();

// On unless a test or benchmark turns it off to run the vdpbf16ps / float32 path on the same CPU.
extern std::atomic<bool> use_amx_bf16;
// Prefill items that took the AMX path since the process started (one relaxed add per item), and
// V tiles refused for a non-finite value: how the tests see that the path and its fallback ran.
extern std::atomic<int64_t> amx_prefill_items;
extern std::atomic<int64_t> amx_value_fallbacks;

// Loads the tile configuration on this thread (every tile 16 rows of 64 bytes), and releases the
// tile state again. Every other function here runs between the two, on the same thread.
void amx_begin();
void amx_end();

// Pair rows (of 32-bit lanes) the q pairs of the scores need for a head dim: a whole number of
// tiles (16 pairs, 32 bf16 values each). qt_pairs must hold amx_pair_rows(dim) * rows_pad lanes,
// zero past (dim + 1) / 2.
inline int64_t amx_pair_rows(int64_t dim) { return (dim + 31) / 32 * 16; }

// The scores of scores_bf16_dot_transposed (bf16_dot.hpp), same layouts: for keys j < keys (at
// most 64) and rows r < rows_pad (a multiple of 16), st[j * rows_pad + r] = scale * sum_e q_r[e]
// k_j[e], q in bf16 pairs qt_pairs[p * rows_pad + r] (amx_pair_rows(dim) rows, zero past the
// dim), K rows k + j * k_stride (elements) read as stored where dim is a multiple of 32 and 16
// keys are whole; otherwise through k_pad (64 x round_up(dim, 32) values). Rows of st past keys,
// up to the next multiple of 16, are written too (st must have 64 rows).
void scores_amx_transposed(const uint32_t* qt_pairs, int64_t rows_pad, const uint16_t* k, int64_t k_stride, int64_t keys,
                           int64_t dim, float scale, float* st, uint16_t* k_pad);

// With fused RoPE or an absolute table, q' (rotated, scaled) and k' (rotated) are float32 values
// that bf16 cannot hold: each is split into bf16 hi = bf16(x) and lo = bf16(x - hi), and the
// scores take three tile products, k_hi q_hi + k_lo q_hi + k_hi q_lo (docs/attention.md, "Error
// analysis", step 7). An infinite value cannot be split (inf - inf is NaN) and its products with
// the other factor's lo half would give NaN where the float32 form gives +-inf (an -inf score is
// weight 0 there, not a NaN row): both functions say whether every value was finite, and the
// kernels take the float32 scores for an item whose q' is not, or a tile whose k' is not.
//
// K rows x + j * stride (float32, dim values; rows < `rows`) as bf16 hi and lo rows of
// amx_pair_rows(dim) * 2 values (zero past the dim), up to the next multiple of 16 rows (zero
// rows past `rows`): hi and lo hold 64 such rows.
bool split_rows_amx(const float* x, int64_t rows, int64_t stride, int64_t dim, uint16_t* hi, uint16_t* lo);
// q rows x + r * stride (float32, dim values; rows < `rows`, zero rows up to rows_pad) as bf16
// pairs [pair][row]: hi_pairs and lo_pairs, amx_pair_rows(dim) * rows_pad lanes each.
bool split_pairs_amx(const float* x, int64_t rows, int64_t stride, int64_t dim, uint32_t* hi_pairs, uint32_t* lo_pairs,
                     int64_t rows_pad);
// st[j * rows_pad + r] = <k'_j, q'_r> from the split values, for j < keys (at most 64; rows of st
// up to the next multiple of 16 are written) and r < rows_pad. No scale: q' carries it.
void scores_amx_split(const uint32_t* q_hi, const uint32_t* q_lo, int64_t rows_pad, const uint16_t* k_hi,
                      const uint16_t* k_lo, int64_t keys, int64_t dim, float* st);

// p.v runs transposed, o^T = V^T p^T, so that the weights enter as they lie after the softmax
// ([key][row], no transpose per tile) and V^T, packed once per tile of keys, can be kept and
// reused by every block of queries that reads the tile (the kernels cache it per thread).
//
// V^T of one tile of `keys` keys (at most 64) in pairs of keys:
//   vt_pairs[(h * o_stride + e) * 16 + i] = v_{2k}[e] | v_{2k+1}[e] << 16,  k = 16 h + i,
// for h < 2, e < o_stride (a multiple of 16, >= dv), zero past the keys and dv; v_j = v + j *
// v_stride (elements), dv bf16 values each. 32 * o_stride lanes. Returns false when a value of
// the tile's V rows is NaN or infinite (the caller then takes the float32 p.v).
bool pack_values_amx(const uint16_t* v, int64_t v_stride, int64_t keys, int64_t dv, int64_t o_stride, uint32_t* vt_pairs);

// For rows r < rows and values e < o_stride, with ot = o^T ([e][r], rows_pad a row):
//   ot[e * rows_pad + r] = alpha[r] * ot[e * rows_pad + r] + sum_{j < keys} p_jr v_j[e],
// p_jr = p[j * rows_pad + r] (float32 weights, zero for the keys a row does not see), each split
// into bf16 hi + lo; vt_pairs from pack_values_amx. Scratch: p_pairs 64 * rows_pad lanes.
void values_amx(const float* p, int64_t rows, int64_t rows_pad, int64_t keys, const uint32_t* vt_pairs,
                const float* alpha, float* ot, int64_t o_stride, uint32_t* p_pairs);

// o[r * o_stride + e] = ot[e * rows_pad + r] for r < rows, e < o_stride: the item's output rows
// back in the kernels' layout.
void untranspose_amx(const float* ot, int64_t rows, int64_t rows_pad, int64_t o_stride, float* o);
// And the other way: ot[e * rows_pad + r] = o[r * o_stride + e] (rows past `rows` get zeros).
void transpose_rows_amx(const float* o, int64_t rows, int64_t rows_pad, int64_t o_stride, float* ot);

}  // namespace rotary::attention_internal
