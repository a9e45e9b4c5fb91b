// include/rotary/attention.hpp: scaled dot-product attention over rotary's tensor views, with
// RoPE fused into the loads. The contract every implementation follows.
//
// For one sequence b, query head h (kv head g = h / (q_heads / kv_heads): MHA when the counts are
// equal, GQA when kv_heads divides q_heads, MQA when kv_heads = 1), query token i, key token j:
//   s_ij  = scale * <q_i, k_j>                                  (Vaswani et al. 2017, eq. 1)
//   o_i   = sum_{j visible} softmax_j(s_ij) v_j
//         = sum_j exp(s_ij - m_i) v_j / sum_j exp(s_ij - m_i),  m_i = max_{j visible} s_ij
// (subtracting m_i changes nothing in exact arithmetic and keeps exp() finite). The fast path
// evaluates the same sums block by block with the online softmax (Milakov & Gimelshein 2018,
// "Online normalizer calculation for softmax"; Dao et al. 2022, FlashAttention, Algorithm 1):
// running m, l = sum exp(s - m) and an unnormalised o, rescaled by exp(m_old - m_new) whenever
// the maximum grows, divided by l at the end.
//
// Visibility (the mask), by positions within the sequence. The query at index i sits at position
// p_i = i + query offset (AttentionOptions::query_offset, or query_offsets[b]); key j at position j.
//   kv_start(b) <= j < kv_length(b)        always (kv_starts[b], or 0; kv_lengths[b], or the
//                                          sequence's key count)
//   j <= p_i                               if mask == Mask::Causal
//   p_i - j < window                       if window > 0 (sliding window: the window - 1 keys
//                                          before the query and the query's own position;
//                                          transformers masking_utils.sliding_window_overlay:
//                                          kv_idx > q_idx - sliding_window; Mistral, the local
//                                          layers of Gemma 2 / 3)
// Causal with offset 0 is "top-left" aligned (flash-attn < 2.1, torch is_causal); a KV cache
// passes query_offset = kv_length - q_len for "bottom-right" (decode, chunked prefill).
// A query that sees no key (all masked) gets an output of zeros — flash-attn's convention; torch
// SDPA returns NaN there — so that padding rows are harmless and never poison a later sum.
//
// Softmax scale: options.scale if set, else 1/sqrt(head_dim) of q. attention_scale(spec, d) gives
// a model's rule (DeepSeek's YaRN mscale_all_dim, below).
//
// Fused RoPE (AttentionRope): q and k are given un-rotated with one position per token, and each
// q and k row is rotated by rotary::apply's formula (apply.hpp) with the table's float32 values as
// it is loaded: the rotated q and k are never written to memory.
//
// Other position encodings, in the same attention (docs/attention.md, "Position encodings"):
//   none (NoPE)   the plain overload without AttentionRope, ALiBi or an absolute table;
//   ALiBi         options.alibi_slopes: one slope per q head; the score of query i (at position
//                 p_i, query offset included) and key j gets the bias -slope_h * |p_i - j|, added
//                 after the softmax scale: s_ij = scale <q_i, k_j> - slope_h |p_i - j| (Press et
//                 al. 2021, arXiv:2108.12409, section 3: -m (i - j) under the causal mask; the
//                 absolute value is flash-attention's alibi_slopes convention,
//                 flash_attn_interface.py: "A bias of (-alibi_slope * |i + seqlen_k - seqlen_q -
//                 j|) is added to the attention score of query i and key j"). alibi_slopes()
//                 (encodings.hpp) gives the paper's slopes;
//   absolute      options.absolute (AttentionAbsolute): a float32 table [rows][head_dim] (a
//                 learned table, or sinusoidal_table(), Vaswani et al. 2017 section 3.5), one
//                 position per q and k token; q_i + P[pos_q(i)] and k_j + P[pos_k(j)] are formed as each row is loaded
//                 (like the fused RoPE rotation: never written to memory), before the scale.
//                 This is the tutorials' form with W_q = W_k = I: a model adds its table to the
//                 residual stream before the projections, and then calls plain attention.
// One encoding per call: RoPE, ALiBi and an absolute table are exclusive (refused, naming the
// option). No published model combines them, and a combination would be a silent guess at what
// was meant.
//
// Implementations: reference::attention (float64, src/attention/reference.cpp) is the definition;
// attention (src/attention/attention.cpp and the Highway kernels) is the fast path, float32 math
// on float32 / bfloat16 / float16 storage, within the bounds of docs/attention.md of it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "rotary/apply.hpp"
#include "rotary/spec.hpp"
#include "rotary/table.hpp"
#include "rotary/tensor.hpp"

namespace rotary {

enum class Mask { None, Causal };

// An absolute position encoding added to q and k as they are loaded (AttentionOptions::absolute).
// table: rows x dim float32 values, row-major (row p = the encoding of position p), dim = the q/k
// head dim. Positions: one per q and one per k token, in (batch, seq) order (THD: token order), as
// AttentionRope's; each in [0, rows) — a learned table has no row past its length, so a position
// past it is an error naming the argument and the value, never a clamp.
struct AttentionAbsolute {
  std::span<const float> table;
  int64_t rows = 0;
  int64_t dim = 0;
  std::span<const int64_t> q_positions;
  std::span<const int64_t> k_positions;
};

struct AttentionOptions {
  // The softmax scale; unset = 1/sqrt(head_dim). When set: finite, > 0 and at most float32's
  // largest value (the fast path computes in float32).
  std::optional<double> scale;
  Mask mask = Mask::None;
  // Position of query 0 in its sequence, the same for every sequence (chunked prefill: the
  // number of keys already cached). >= 0.
  int64_t query_offset = 0;
  // Per-sequence query offsets (a KV cache with sequences of different lengths): batch values
  // (THD: one per cu_seqlens segment), each >= 0. Empty = query_offset for all; giving both a
  // non-zero query_offset and query_offsets is an error.
  std::span<const int64_t> query_offsets;
  // Sliding window in tokens: 0 = none; > 0 = a query sees keys at positions in
  // (p - window, p]; negative is an error.
  int64_t window = 0;
  // Per-sequence key counts (padded batches, a KV cache): batch values in [0, k's seq]; keys at
  // j >= kv_lengths[b] are invisible. Empty = all keys. Not with THD (cu_seqlens say it).
  std::span<const int64_t> kv_lengths;
  // Per-sequence first visible key (left-padded batches: the padding sits before it): batch
  // values in [0, kv_lengths[b]] (or k's seq); keys at j < kv_starts[b] are invisible. Positions
  // are unchanged (key j stays at position j), so a query sees keys in [kv_starts[b], ...) of its
  // causal / window range. Empty = 0 for all. Not with THD (cu_seqlens say where a sequence
  // starts).
  std::span<const int64_t> kv_starts;
  // THD (packed, variable length; flash-attn varlen): num_sequences + 1 token offsets each,
  // starting at 0, non-decreasing, ending at q's (k's) token count. Required for THD, refused
  // otherwise. Sequence b owns query tokens [cu_seqlens_q[b], cu_seqlens_q[b+1]) and key
  // tokens [cu_seqlens_k[b], cu_seqlens_k[b+1]); indices i and j count from the segment start.
  std::span<const int64_t> cu_seqlens_q;
  std::span<const int64_t> cu_seqlens_k;
  // ALiBi: empty = none; else one slope per q head, finite (alibi_slopes(q_heads) in float32 gives
  // the paper's; flash-attention takes float32 slopes too). Refused with AttentionRope or
  // AttentionAbsolute, and when |slope| times the call's largest query-key distance exceeds 2^100
  // (a bias float32 scores could not hold).
  std::span<const float> alibi_slopes;
  // An absolute position encoding added to q and k as they are loaded: null = none. Refused with
  // AttentionRope and with alibi_slopes.
  const AttentionAbsolute* absolute = nullptr;
};

// RoPE fused into the attention loads (overloads below). Positions are one per token, in
// (batch, seq) order — THD: token order — like apply()'s Positions::per_token for single-stream
// specs. The table's spec gives the style and rotary_dim; the rotated block starts at
// rotary_offset (DeepSeek's q = [nope | rope]). Single-stream specs without xPos only (M-RoPE,
// vision and xPos are refused, naming the spec field). seq_len: as ApplyOptions::seq_len — the
// table must serve the call (kSeqLenFromPositions = the largest position + 1 of q and k).
struct AttentionRope {
  const CosSinTable* table = nullptr;
  std::span<const int64_t> q_positions;
  std::span<const int64_t> k_positions;
  int64_t rotary_offset = 0;
  int64_t seq_len = kSeqLenFromPositions;
};

// The softmax scale a model uses with this spec, for a q.k head dim of qk_head_dim:
//   qk_head_dim^-0.5, times mscale^2 when the spec is scaled (type != Default) and
//   scaling.mscale_all_dim is set and non-zero, with mscale = 0.1 * mscale_all_dim * ln(s) + 1
//   for s = resolved_factor() > 1 (else 1).
// Source: transformers DeepseekV3Attention.__init__ (and DeepseekV2, vLLM / SGLang
// DeepseekV2Attention): `self.scaling = qk_head_dim**-0.5; if mscale_all_dim: mscale =
// yarn_get_mscale(factor, mscale_all_dim); self.scaling *= mscale * mscale`. This is separate from
// the RoPE attention_scaling (mscale / mscale_all_dim, already in the table): docs/formulas.md.
// qk_head_dim is the attention head dim (DeepSeek: qk_nope_head_dim + qk_rope_head_dim = 192),
// not the rotary head_dim. Throws rotary::Error for qk_head_dim < 1.
double attention_scale(const RopeSpec& spec, int64_t qk_head_dim);

// Checks every argument once and throws rotary::Error "attention: <argument> <expected> (got
// <value>)": dtypes (q, k, v, out share one of F32 / BF16 / F16; the reference also takes F64),
// one layout for all four, rank, batch / seq agreement (k and v share every extent but the head
// dim; out has q's shape but v's head dim), q_heads % kv_heads == 0, q and k head dims equal,
// extents >= 0 and their byte spans in int64, unit stride on the head dim, strides >= 0, null or
// misaligned data, out overlapping q / k / v or itself, a negative window or offset, a non-finite
// or non-positive scale or one past float32's range, kv_lengths / kv_starts / query_offsets / cu_seqlens of the wrong length or with values
// out of range, THD without cu_seqlens; with rope: a null table, position counts, positions past
// the table, rotary_offset + rotary_dim past the head dim, a spec the fused path does not serve;
// with ALiBi: a slope count other than q heads, non-finite or too large slopes, ALiBi with RoPE
// or an absolute table; with absolute: a table size other than rows * dim, dim other than the
// head dim, position counts, positions outside [0, rows); a view on another device than q's ("v is
// on cuda:0 but q is on cpu"; no data is read, so the checks hold for any device:
// docs/backends.md). Nothing is written when it throws.
void check_attention_arguments(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                               const AttentionOptions& options, const AttentionRope* rope = nullptr);

// Checks, then runs on the backend of q's device (the CPU's alone in this build; another device is
// a rotary::Error naming it). The fast CPU path: blocked online softmax in float32, Highway SIMD (runtime dispatch; the
// target force_cpu_target() chose), threads over (sequence, kv head, query block) on the pool of
// set_num_threads(). Results do not depend on the thread count.
void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const AttentionOptions& options = {});
// The same with q and k un-rotated: each block is rotated as it is loaded.
void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const AttentionRope& rope, const AttentionOptions& options = {});

namespace reference {

// The float64 definition: plain loops, softmax(s) v in double for every (sequence, head, query),
// rounding once on store. With rope, q and k are rotated in double with the table's float32
// values widened (apply's reference, TableValues::TableFloat32) before the product. With an
// absolute table, its float32 values are widened and added in double; ALiBi's bias is added to
// the score in double with the float32 slopes widened.
void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const AttentionOptions& options = {});
void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const AttentionRope& rope, const AttentionOptions& options = {});

}  // namespace reference
}  // namespace rotary
