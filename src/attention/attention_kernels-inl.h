// src/attention/attention_kernels-inl.h: blocked online-softmax attention (FlashAttention's
// forward loop, Dao et al. 2022, Algorithm 1; the online normaliser of Milakov & Gimelshein 2018)
// as Highway templates over the storage type. attention_kernels_f32.cpp, _bf16.cpp and _f16.cpp
// include it once per target (Highway's foreach_target.h: one source compiled per SIMD target,
// dispatched at run time) and instantiate their type. AttendTyped, at the end, is the loop over
// items and tiles; each step it calls is a function above it, built from the loops over one tile
// of attention_tiles-inl.h.
//
// One item (kernels.hpp) = the q heads of one kv head x a block of queries, R rows in all. Per row
// r it keeps m_r (running max of the scores), l_r (running sum of exp(s - m_r)) and an
// unnormalised output o_r, in float32. For each tile of kKeyBlock keys:
//   K and V rows are loaded once for the R rows, widened to float32 (and K rotated, fused RoPE,
//   or an absolute encoding's row added);
//   s_rj = <q'_r, k_j> (- slope_r |p_r - j| with ALiBi)   with q' = scale * q (rotated, or with
//   its absolute row added), over the row's visible keys only (bf16 storage with neither, on a
//   CPU with AVX512_BF16: s_rj = scale * <q_r, k_j> from q and K as stored, vdpbf16ps, both
//   forms: bf16_dot.hpp; bf16 prefill on a CPU with AMX: the scores and p.v on tiles, with
//   fused RoPE or an absolute table too, amx_bf16.hpp);
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

#include "hwy/highway.h"
#include "attention/amx_bf16.hpp"
#include "attention/bf16_dot.hpp"
#include "attention/kernels.hpp"
#include "attention/prefetch.hpp"
// The loops over one tile (row loads, scores, p.v, Scratch), and through it the storage loads
// and stores of apply()'s kernels (src/cpu/dtype_io-inl.h).
#include "attention/attention_tiles-inl.h"

HWY_BEFORE_NAMESPACE();
namespace rotary::attention_internal::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace cpu = rotary::cpu::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// ---- AttendTyped and its steps ------------------------------------------------------------------

// What a call's items share: the head dims and their widths padded to whole vectors, and which
// forms the storage, the fused encodings and the CPU allow (PrepareScratch).
struct CallForm {
  int64_t dq = 0, dv = 0, dq_pad = 0, dv_pad = 0;
  int64_t s_stride = 0;  // decode form: a row of scores and a vector of slack
  bool bf16_dot = false;        // bf16 scores from q and K as stored, vdpbf16ps (bf16_dot.hpp)
  bool amx = false;             // bf16's transposed form on AMX tiles, scores and p.v (amx_bf16.hpp)
  bool amx_split = false;       // amx, with q' and k' float32 (fused RoPE or an absolute table)
  bool k_in_place_ok = false;   // decode-form scores may read K rows in place (widened as loaded)
  bool v_in_place_ok = false;   // decode-form p.v may read V rows in place
};

// One item: its rows (padded to whole vectors), its form, and the keys its rows see.
struct ItemForm {
  int64_t rows = 0, rows_pad = 0;
  bool transposed = false;  // SIMD over rows (TransposedRanges ... TransposedUpdate)
  bool dot_scores = false, dot_transposed = false;  // bf16_dot in the decode / transposed form
  bool amx = false;  // the transposed form's scores and p.v on AMX tiles (instead of dot_transposed)
  bool k_in_place = false, v_in_place = false;      // decode form: K / V rows read where they are
  int64_t first_key = 0, last_key = 0;  // the union of the rows' visible keys [first_key, last_key)
  int64_t prefetch_end = 0;             // in-place rows are prefetched up to this row
};

// Tiles of V^T an AMX call keeps per thread (Scratch::amx_v_cache): 16,384 keys, 4 MiB at a
// head dim of 128; tiles further on are packed per use.
constexpr int64_t kAmxValueSlots = 256;

// Sizes the thread's scratch for the call's largest item and decides the call's forms.
template <DType kType>
HWY_INLINE CallForm PrepareScratch(const Call& call, Scratch& t) {
  const DF df;
  const auto N = static_cast<int64_t>(hn::Lanes(df));
  const Plan& plan = *call.plan;
  CallForm c;
  c.dq = plan.qk_dim;
  c.dv = plan.v_dim;
  const int64_t dq = c.dq, dv = c.dv;
  c.dq_pad = (dq + N - 1) / N * N;
  c.dv_pad = (dv + N - 1) / N * N;
  const int64_t dq_pad = c.dq_pad, dv_pad = c.dv_pad;
  const int64_t max_rows = plan.group * std::max<int64_t>(1, kTargetRows / plan.group);
  t.q.assign(static_cast<size_t>(max_rows * dq_pad), 0.0f);
  t.k.assign(static_cast<size_t>(kKeyBlock * dq_pad), 0.0f);
  t.v.assign(static_cast<size_t>(kKeyBlock * dv_pad), 0.0f);
  c.s_stride = kKeyBlock + N;
  t.s.assign(static_cast<size_t>(max_rows * c.s_stride), 0.0f);
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
  t.ranges.assign(static_cast<size_t>(max_rows), KeyRange{});
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
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (kType == DType::BF16) {
    // Not with fused RoPE or an absolute table: q and k are then no longer the stored bf16 values,
    // and rounding them to bf16 again would add an error the float32 path does not have. The
    // transposed form's rows are padded to 16 (scores_bf16_dot_transposed): N is 16 on AVX-512.
    const bool stored_values = call.q_rope == nullptr && call.k_rope == nullptr && call.q_add == nullptr &&
                               call.k_add == nullptr;
    const bool bf16_ok = N == 16 && dq > 0 && use_avx512_bf16.load(std::memory_order_relaxed) && cpu_has_avx512_bf16();
    c.bf16_dot = stored_values && bf16_ok;
    // Where the CPU and the OS allow AMX, the transposed form runs its scores and p.v on tiles
    // (amx_bf16.hpp): V as stored, each weight carried as two bf16 values; q and K as stored, or
    // with fused RoPE or an absolute table their float32 values split into bf16 hi + lo.
    c.amx = bf16_ok && use_amx_bf16.load(std::memory_order_relaxed) && cpu_has_amx_bf16();
    c.amx_split = c.amx && !stored_values;
  }
#endif
  if (c.bf16_dot || c.amx) {
    const int64_t pair_rows = c.amx ? amx_pair_rows(dq) : (dq + 1) / 2;  // AMX: whole tiles, zero past the dim
    t.qt_pairs.assign(static_cast<size_t>(pair_rows * max_rows_pad), 0u);
    if (c.amx_split) t.qt_lo.assign(static_cast<size_t>(pair_rows * max_rows_pad), 0u);
  }
  if (c.amx) {
    // K rows padded to whole tiles; split values: hi rows, then lo rows a tile's worth on (AmxKeys)
    t.amx_k.assign(static_cast<size_t>((c.amx_split ? 2 : 1) * kKeyBlock * amx_pair_rows(dq) * 2), 0);
    t.amx_v.assign(static_cast<size_t>(32 * dv_pad), 0u);
    t.amx_p.assign(static_cast<size_t>(64 * max_rows_pad), 0u);
    t.amx_ot.assign(static_cast<size_t>(dv_pad * max_rows_pad), 0.0f);
    int64_t max_keys = 0;
    for (const Sequence& seq : plan.sequences) max_keys = std::max(max_keys, seq.num_keys);
    // The caches are allocated at the first AMX tile (AmxCaches): a decode call never uses them.
    t.amx_slots = std::min(kAmxValueSlots, (max_keys + kKeyBlock - 1) / kKeyBlock);
  }

  // In the decode form the scores read K rows where they are (no copy into the tile first) unless
  // they are rotated or have an absolute row added on load, and p.v reads V rows in place; 16-bit
  // rows are widened as they load (exact: the tile held the same floats). Only when the head dims
  // are whole vectors: the loops run over dq_pad / dv_pad elements, which must then all lie
  // inside the row. Never with a head dim of 0: such a view may have null data, and no row is
  // read anyway.
  c.k_in_place_ok = call.k_rope == nullptr && call.k_add == nullptr && dq == dq_pad && dq > 0 &&
                    (kType == DType::F32 || k_in_place_16bit.load(std::memory_order_relaxed));
  c.v_in_place_ok = dv == dv_pad && dv > 0;
  return c;
}

// Starts an item: its form; per row its visible keys (t.ranges), m = -inf, l = 0, o = 0, and
// q' = scale * q (rotated, or with its absolute row added) in the float32 q tile, transposed into
// Qt for the transposed form, or q as stored in bf16 pairs for the transposed vdpbf16ps scores.
// Pad rows get m = -inf, l = 0, slope 0 and zero q.
template <DType kType>
HWY_INLINE ItemForm StartItem(const Call& call, const CallForm& c, const Item& item, Scratch& t) {
  const DF df;
  const auto N = static_cast<int64_t>(hn::Lanes(df));
  const Plan& plan = *call.plan;
  const Sequence& seq = plan.sequences[static_cast<size_t>(item.sequence)];
  const int64_t dq = c.dq, dq_pad = c.dq_pad, dv_pad = c.dv_pad;
  ItemForm f;
  const int64_t rows = f.rows = plan.group * item.q_count;
  // Row r = (head g*group + r / q_count, query q_first + r % q_count).
  const int64_t rows_pad = f.rows_pad = (rows + N - 1) / N * N;
  // Items of at least a vector of rows compute scores with SIMD over rows (no reductions);
  // smaller ones (decode: the group's q heads for one query) with SIMD over the head dim.
  f.transposed = rows >= N;
  // The decode form takes vdpbf16ps only where its K rows cannot be read in place: with K in
  // place, widening as it loads was 1-8% faster at decode on an AVX512_BF16 Xeon (4 of 4 pairs,
  // BM_DecodeBf16DotAB; docs/attention.md, "AVX512_BF16"), and exact where vdpbf16ps flushes
  // bf16 subnormals; the dot path stays for head dims that are not whole vectors (no copy of K).
  f.dot_scores = c.bf16_dot && !f.transposed && !c.k_in_place_ok;
  f.amx = c.amx && f.transposed;
  f.dot_transposed = c.bf16_dot && f.transposed && !f.amx;
  const bool stored_pairs = f.dot_transposed || (f.amx && !c.amx_split);  // q packed as stored
  f.k_in_place = c.k_in_place_ok && !f.transposed && !f.dot_scores;
  f.v_in_place = c.v_in_place_ok && !f.transposed;
  if (f.dot_scores) bf16_dot_items.fetch_add(1, std::memory_order_relaxed);
  if (f.dot_transposed) bf16_dot_prefill_items.fetch_add(1, std::memory_order_relaxed);
  if (kType != DType::F32 && f.k_in_place) k_in_place_16bit_items.fetch_add(1, std::memory_order_relaxed);
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
    t.ranges[static_cast<size_t>(r)] = range;
    if (t.alibi) {
      t.neg_slope[static_cast<size_t>(r)] = -call.alibi_slopes[head];
      t.position[static_cast<size_t>(r)] = seq.query_offset + query;
    }
    t.m[static_cast<size_t>(r)] = -INFINITY;
    t.l[static_cast<size_t>(r)] = 0.0f;
    std::fill_n(t.o.begin() + r * dv_pad, dv_pad, 0.0f);
    const int64_t q_index = seq.q_base + query * plan.q.stride_seq + head * plan.q.stride_heads;
    if (stored_pairs) {  // q as stored, in bf16 pairs; zeros for a row without keys
      const auto* q_bits = static_cast<const uint16_t*>(call.q) + q_index;
      pack_bf16_pairs(range.first < range.last ? q_bits : nullptr, dq, t.qt_pairs.data(), rows_pad, r);
    }
    if (range.first >= range.last) {
      std::fill_n(t.q.begin() + r * dq_pad, dq_pad, 0.0f);  // its scores are masked, but finite
      continue;
    }
    first_key = std::min(first_key, range.first);
    last_key = std::max(last_key, range.last);
    if (stored_pairs) continue;
    float* q_row = t.q.data() + r * dq_pad;
    LoadRow<kType>(call.q, q_index, dq, q_row);
    if (call.q_rope != nullptr) {
      RotateRow(q_row, call.q_rope[seq.q_token0 + query], call.num_pairs, call.rotary_offset, call.style);
    }
    if (call.q_add != nullptr) AddRow(q_row, call.q_add[seq.q_token0 + query], dq);
    const VF scale = hn::Set(df, call.scale);
    for (int64_t e = 0; e < dq_pad; e += N) hn::StoreU(hn::Mul(hn::LoadU(df, q_row + e), scale), df, q_row + e);
  }

  if (stored_pairs) {
    for (int64_t r = rows; r < rows_pad; ++r) pack_bf16_pairs(nullptr, dq, t.qt_pairs.data(), rows_pad, r);
  } else if (f.amx) {
    // q' in float32, split into bf16 hi and lo pairs; a NaN or infinite q' element sends the
    // item to the float32 form (amx_bf16.hpp: such a value cannot be split).
    if (!split_pairs_amx(t.q.data(), rows, dq_pad, dq, t.qt_pairs.data(), t.qt_lo.data(), rows_pad)) {
      f.amx = false;
      TransposeQ(t, rows, rows_pad, dq, dq_pad);
    }
  } else if (f.transposed) {
    TransposeQ(t, rows, rows_pad, dq, dq_pad);
  }
  if (f.amx) {
    amx_prefill_items.fetch_add(1, std::memory_order_relaxed);
    std::fill_n(t.amx_ot.begin(), dv_pad * rows_pad, 0.0f);  // o^T (amx_bf16.hpp)
  }
  f.first_key = first_key;
  f.last_key = last_key;
  // In-place rows are prefetched a tile ahead as the loops read them, past the item's keys into
  // the rows that follow it in the view (a split decode's next chunk, which this thread usually
  // takes next: its first tile is then not read cold), at most a tile further.
  f.prefetch_end = std::max(last_key, std::min(last_key + kKeyBlock, seq.kv_rows));
  return f;
}

// float32 rows read in place: paced cursors (prefetch.hpp), starting a tile in when the previous
// item of this thread ended where this one starts (its prefetches covered that tile).
template <DType kType>
HWY_INLINE void StartCursors(const Call& call, const CallForm& c, int64_t item_index, int64_t begin, const ItemForm& f,
                             PrefetchCursor& k_prefetch, PrefetchCursor& v_prefetch) {
  constexpr int64_t kBytes = kType == DType::F32 ? 4 : 2;
  const Plan& plan = *call.plan;
  const Item& item = call.items[item_index];
  const Sequence& seq = plan.sequences[static_cast<size_t>(item.sequence)];
  if (!(f.first_key < f.last_key && (f.k_in_place || (f.v_in_place && kType == DType::F32)))) return;
  const Item* previous = item_index > begin ? &call.items[item_index - 1] : nullptr;
  const bool continues = previous != nullptr && previous->sequence == item.sequence && previous->kv_head == item.kv_head &&
                         previous->key_last == f.first_key;
  const int64_t first_row = std::min(f.first_key + (continues ? kKeyBlock : 0), f.prefetch_end);
  if (f.k_in_place) {
    k_prefetch = PrefetchCursor(static_cast<const char*>(call.k) + (seq.k_base + item.kv_head * plan.k.stride_heads) * kBytes,
                                plan.k.stride_seq * kBytes, c.dq * kBytes, first_row, f.prefetch_end, kKeyBlock);
  }
  if (f.v_in_place && kType == DType::F32) {
    v_prefetch = PrefetchCursor(static_cast<const char*>(call.v) + (seq.v_base + item.kv_head * plan.v.stride_heads) * kBytes,
                                plan.v.stride_seq * kBytes, c.dv * kBytes, first_row, f.prefetch_end, kKeyBlock);
  }
}

// The tile's K and V rows into the float32 tiles, where the item's form reads them from there
// (widened; K rotated or with its absolute row added). No software prefetch of the next tile's
// rows: written as calls through a non-inlined lambda, such a prefetch compiled to no
// instruction at all (GCC 12 dropped the calls), so every timing of these kernels is without it;
// inlined, it adds 13 prefetch instructions to the float32 kernels, a change of speed to measure
// on its own. In-place rows are prefetched by the cursors (StartCursors) and PrefetchAhead.
template <DType kType>
HWY_INLINE void LoadTile(const Call& call, const CallForm& c, const Item& item, const ItemForm& f, int64_t tile,
                         int64_t tile_keys, Scratch& t) {
  const Plan& plan = *call.plan;
  const Sequence& seq = plan.sequences[static_cast<size_t>(item.sequence)];
  const int64_t dq = c.dq, dv = c.dv;
  for (int64_t j = 0; j < tile_keys; ++j) {
    const int64_t key = tile + j;
    if (!f.dot_scores && !f.dot_transposed && !f.amx && !f.k_in_place) {  // AMX: AmxKeys
      float* k_row = t.k.data() + j * c.dq_pad;
      LoadRow<kType>(call.k, seq.k_base + key * plan.k.stride_seq + item.kv_head * plan.k.stride_heads, dq, k_row);
      if (call.k_rope != nullptr) {
        RotateRow(k_row, call.k_rope[seq.k_token0 + key], call.num_pairs, call.rotary_offset, call.style);
      }
      if (call.k_add != nullptr) AddRow(k_row, call.k_add[seq.k_token0 + key], dq);
    }
    if (!f.v_in_place && !f.amx) {  // AMX reads V rows as stored (TransposedTile)
      LoadRow<kType>(call.v, seq.v_base + key * plan.v.stride_seq + item.kv_head * plan.v.stride_heads, dv,
                     t.v.data() + j * c.dv_pad);
    }
  }
}

// V^T of an AMX tile (pack_values_amx), from this thread's cache when the items of the same
// sequence and kv head packed it already; null when the tile holds NaN or an infinity.
HWY_INLINE const uint32_t* AmxValues(const Call& call, const CallForm& c, const Item& item, int64_t tile,
                                     int64_t tile_keys, Scratch& t) {
  const Plan& plan = *call.plan;
  const Sequence& seq = plan.sequences[static_cast<size_t>(item.sequence)];
  AmxCaches(t, c.dq, c.dv_pad, c.amx_split);
  const int64_t slot = tile % kKeyBlock == 0 ? tile / kKeyBlock : -1;
  const bool cached = slot >= 0 && slot < static_cast<int64_t>(t.amx_v_tags.size());
  uint32_t* vt = cached ? t.amx_v_cache.get() + slot * 32 * c.dv_pad : t.amx_v.data();
  if (cached) {
    const Scratch::AmxValuesTag& tag = t.amx_v_tags[static_cast<size_t>(slot)];
    if (tag.sequence == item.sequence && tag.kv_head == item.kv_head && tag.keys == tile_keys) {
      return tag.finite ? vt : nullptr;
    }
  }
  const auto* v_bits = static_cast<const uint16_t*>(call.v) + seq.v_base + tile * plan.v.stride_seq +
                       item.kv_head * plan.v.stride_heads;
  const bool finite = pack_values_amx(v_bits, plan.v.stride_seq, tile_keys, c.dv, c.dv_pad, vt);
  if (!finite) amx_value_fallbacks.fetch_add(1, std::memory_order_relaxed);
  if (cached) t.amx_v_tags[static_cast<size_t>(slot)] = {item.sequence, item.kv_head, tile_keys, finite};
  return finite ? vt : nullptr;
}

// k' of an AMX tile with fused RoPE or an absolute table: the K rows widened, rotated (or with
// their absolute rows added) and split into bf16 hi and lo rows (split_rows_amx), hi then lo, a
// tile's worth apart; from this thread's cache when the items of the same sequence and kv head
// made them already (the AmxValues cache's rules). Null when a k' value of the tile is NaN or
// infinite: the float32 rows are then in t.k for the float32 scores.
HWY_INLINE const uint16_t* AmxKeys(const Call& call, const CallForm& c, const Item& item, int64_t tile,
                                   int64_t tile_keys, Scratch& t) {
  const Plan& plan = *call.plan;
  const Sequence& seq = plan.sequences[static_cast<size_t>(item.sequence)];
  const int64_t tile_values = kKeyBlock * amx_pair_rows(c.dq) * 2;
  AmxCaches(t, c.dq, c.dv_pad, c.amx_split);
  const int64_t slot = tile % kKeyBlock == 0 ? tile / kKeyBlock : -1;
  const bool cached = slot >= 0 && slot < static_cast<int64_t>(t.amx_k_tags.size());
  uint16_t* k_hi = cached ? t.amx_k_cache.get() + slot * 2 * tile_values : t.amx_k.data();
  uint16_t* k_lo = k_hi + tile_values;
  bool known = false;
  if (cached) {
    const Scratch::AmxValuesTag& tag = t.amx_k_tags[static_cast<size_t>(slot)];
    known = tag.sequence == item.sequence && tag.kv_head == item.kv_head && tag.keys == tile_keys;
    if (known && tag.finite) return k_hi;
  }
  for (int64_t j = 0; j < tile_keys; ++j) {
    const int64_t key = tile + j;
    float* k_row = t.k.data() + j * c.dq_pad;
    LoadRow<DType::BF16>(call.k, seq.k_base + key * plan.k.stride_seq + item.kv_head * plan.k.stride_heads, c.dq, k_row);
    if (call.k_rope != nullptr) {
      RotateRow(k_row, call.k_rope[seq.k_token0 + key], call.num_pairs, call.rotary_offset, call.style);
    }
    if (call.k_add != nullptr) AddRow(k_row, call.k_add[seq.k_token0 + key], c.dq);
  }
  if (known) return nullptr;  // a tile known to hold a non-finite k': its rows are in t.k again
  const bool finite = split_rows_amx(t.k.data(), tile_keys, c.dq_pad, c.dq, k_hi, k_lo);
  if (cached) t.amx_k_tags[static_cast<size_t>(slot)] = {item.sequence, item.kv_head, tile_keys, finite};
  return finite ? k_hi : nullptr;
}

// A tile of the transposed form: the rows' visible keys, the scores St (float32 tiles, or bf16
// as stored through vdpbf16ps), then ALiBi, the online softmax and p.v (TransposedUpdate). On AMX
// (f.amx) the scores and p.v run on tiles from K and V as stored; a V tile holding NaN or an
// infinity is widened instead and takes the float32 p.v over each row's visible keys.
HWY_INLINE void TransposedTile(const Call& call, const CallForm& c, const Item& item, const ItemForm& f, int64_t tile,
                               int64_t tile_keys, Scratch& t) {
  const Plan& plan = *call.plan;
  const Sequence& seq = plan.sequences[static_cast<size_t>(item.sequence)];
  if (!TransposedRanges(t, t.ranges.data(), f.rows, f.rows_pad, tile, tile_keys)) return;
  if (f.amx && c.amx_split) {  // k' split into bf16 hi and lo (AmxKeys)
    const uint16_t* k_hi = AmxKeys(call, c, item, tile, tile_keys, t);
    const int64_t tile_values = kKeyBlock * amx_pair_rows(c.dq) * 2;
    if (k_hi != nullptr) {
      scores_amx_split(t.qt_pairs.data(), t.qt_lo.data(), f.rows_pad, k_hi, k_hi + tile_values, tile_keys, c.dq,
                       t.st.data());
    } else {  // a non-finite k': the float32 scores, as the float32 form computes them
      TransposeQ(t, f.rows, f.rows_pad, c.dq, c.dq_pad);
      ScoresTransposed(t, f.rows_pad, tile_keys, c.dq, c.dq_pad);
    }
  } else if (f.amx) {
    const auto* k_bits = static_cast<const uint16_t*>(call.k) + seq.k_base + tile * plan.k.stride_seq +
                         item.kv_head * plan.k.stride_heads;
    scores_amx_transposed(t.qt_pairs.data(), f.rows_pad, k_bits, plan.k.stride_seq, tile_keys, c.dq, call.scale,
                          t.st.data(), t.amx_k.data());
  }
  if (f.amx) {
    TransposedSoftmax(t, f.rows_pad, tile, tile_keys);
    const uint32_t* vt = AmxValues(call, c, item, tile, tile_keys, t);
    if (vt != nullptr) {
      values_amx(t.st.data(), f.rows, f.rows_pad, tile_keys, vt, t.alpha.data(), t.amx_ot.data(), c.dv_pad,
                 t.amx_p.data());
      return;
    }
    // A non-finite value in the tile: the float32 p.v, on o in the kernels' layout for the while.
    const int64_t v_first = seq.v_base + tile * plan.v.stride_seq + item.kv_head * plan.v.stride_heads;
    for (int64_t j = 0; j < tile_keys; ++j) {
      LoadRow<DType::BF16>(call.v, v_first + j * plan.v.stride_seq, c.dv, t.v.data() + j * c.dv_pad);
    }
    untranspose_amx(t.amx_ot.data(), f.rows, f.rows_pad, c.dv_pad, t.o.data());
    AccumulateRows(t, f.rows, t.st.data(), 1, f.rows_pad, t.v.data(), c.dv_pad, c.dv_pad);
    transpose_rows_amx(t.o.data(), f.rows, f.rows_pad, c.dv_pad, t.amx_ot.data());
    return;
  }
  if (f.dot_transposed) {
    const auto* k_bits = static_cast<const uint16_t*>(call.k) + seq.k_base + tile * plan.k.stride_seq +
                         item.kv_head * plan.k.stride_heads;
    scores_bf16_dot_transposed(t.qt_pairs.data(), f.rows_pad, k_bits, plan.k.stride_seq, tile_keys, c.dq, call.scale,
                               t.st.data());
  } else {
    ScoresTransposed(t, f.rows_pad, tile_keys, c.dq, c.dq_pad);
  }
  TransposedUpdate(t, f.rows, f.rows_pad, tile, tile_keys, c.dv_pad);
}

// DecodeScores for `count` rows (1 to kBlockRows), K rows of type kK.
template <DType kK>
HWY_INLINE void DecodeScoresRows(int64_t count, const float* HWY_RESTRICT q_rows, int64_t dq_pad, const void* k,
                                 int64_t k_stride, int64_t j0, int64_t j1, float* HWY_RESTRICT s, int64_t s_stride,
                                 PrefetchCursor* k_cursor) {
  switch (count) {
    case 1: DecodeScores<1, kK>(q_rows, dq_pad, k, k_stride, j0, j1, s, s_stride, k_cursor); break;
    case 2: DecodeScores<2, kK>(q_rows, dq_pad, k, k_stride, j0, j1, s, s_stride, k_cursor); break;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    case 3: DecodeScores<3, kK>(q_rows, dq_pad, k, k_stride, j0, j1, s, s_stride, k_cursor); break;
    default: DecodeScores<4, kK>(q_rows, dq_pad, k, k_stride, j0, j1, s, s_stride, k_cursor); break;
#else
    default: break;
#endif
  }
}

// Scores of a decode-form tile: per row its visible keys of the tile (t.j0 / t.j1, empty as
// [0, 0)) and s_r[j] = <q'_r, k_j> over them into t.s, up to kBlockRows consecutive rows that see
// the same keys at a time: DecodeScores from the float32 q tile and K rows at k_tile, k_stride
// elements apart (kType rows in place, f.k_in_place, else the float32 tile); or, dot_scores, q
// and K as stored (bf16), the scale applied to each finished dot product.
template <DType kType>
HWY_INLINE void TileScores(const Call& call, const CallForm& c, const Item& item, const ItemForm& f, int64_t tile,
                           int64_t tile_keys, const void* k_tile, int64_t k_stride, int64_t ahead_end,
                           PrefetchCursor* k_cursor, Scratch& t) {
  const Plan& plan = *call.plan;
  const Sequence& seq = plan.sequences[static_cast<size_t>(item.sequence)];
  const int64_t rows = f.rows, dq_pad = c.dq_pad, s_stride = c.s_stride;
  for (int64_t r = 0; r < rows; ++r) {
    const KeyRange range = t.ranges[static_cast<size_t>(r)];
    const int64_t j0 = std::max(range.first, tile) - tile, j1 = std::min(range.last, tile + tile_keys) - tile;
    t.j0[static_cast<size_t>(r)] = static_cast<float>(j0 < j1 ? j0 : 0);  // for the scores and p.v below
    t.j1[static_cast<size_t>(r)] = static_cast<float>(j0 < j1 ? j1 : 0);
  }
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
    if (f.dot_scores) {  // q and K as stored (bf16), scale applied to each finished dot product
      const uint16_t* q_bits[4] = {};
      for (int64_t n = 0; n < count; ++n) {
        const int64_t head = item.kv_head * plan.group + (r + n) / item.q_count;
        const int64_t query = item.q_first + (r + n) % item.q_count;
        q_bits[n] = static_cast<const uint16_t*>(call.q) + seq.q_base + query * plan.q.stride_seq + head * plan.q.stride_heads;
      }
      const auto* k_bits = static_cast<const uint16_t*>(call.k) + seq.k_base + (tile + j0) * plan.k.stride_seq +
                           item.kv_head * plan.k.stride_heads;
      scores_bf16_dot_rows(q_bits, count, k_bits, plan.k.stride_seq, j1 - j0, c.dq, call.scale, s + j0, s_stride,
                           kKeyBlock, ahead_end - j0);
    } else {
      const float* q_rows = t.q.data() + r * dq_pad;
      if (f.k_in_place) {
        DecodeScoresRows<kType>(count, q_rows, dq_pad, k_tile, k_stride, j0, j1, s, s_stride, k_cursor);
      } else {
        DecodeScoresRows<DType::F32>(count, q_rows, dq_pad, k_tile, k_stride, j0, j1, s, s_stride, k_cursor);
      }
    }
    r += count;
  }
}

// The online softmax update of a decode-form tile, per row with visible keys [j0, j1): ALiBi,
// then m' = max(m, the tile's max), alpha = exp(m - m'), p_j = exp(s_j - m') in place of the
// scores, l = alpha * l + sum_j p_j, t.alpha = alpha for p.v, and the row flagged (Scratch::bad)
// for a visible NaN or +inf score.
HWY_INLINE void SoftmaxUpdate(Scratch& t, int64_t rows, int64_t s_stride, int64_t tile) {
  const DF df;
  const auto N = static_cast<int64_t>(hn::Lanes(df));
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
}

// p.v of a decode-form tile: o_r = alpha_r * o_r + sum_j p_rj v_j, from V rows read in place
// (v_rows, widened as they load; 16-bit rows in bursts `ahead` keys ahead, float32 rows by the
// paced cursor) or from the float32 V tile.
template <DType kType>
HWY_INLINE void AccumulateTile(const Call& call, const CallForm& c, const ItemForm& f, const void* v_rows, int64_t v_ahead,
                               int64_t ahead_end, PrefetchCursor* v_cursor, Scratch& t) {
  if (f.v_in_place) {
    AccumulateRows<kType>(t, f.rows, t.s.data(), c.s_stride, 1, v_rows, call.plan->v.stride_seq, c.dv_pad, v_ahead,
                          ahead_end, v_cursor);
  } else {
    AccumulateRows(t, f.rows, t.s.data(), c.s_stride, 1, t.v.data(), c.dv_pad, c.dv_pad);
  }
}

// Ends an item. A chunk of a split item hands its rows' m, l and unnormalised o to attention.cpp's
// merge; l is NaN for a row flagged non-finite. A chunk whose visible scores are all -inf leaves
// m = -inf and l = 0, as one that saw no key: the merge decides, over all chunks, whether the
// row's scores were all -inf. Otherwise out = o / l, rounded once to the storage type: zeros for
// a row without visible keys, NaN for a row flagged non-finite or whose visible scores were all
// -inf (m still -inf).
template <DType kType>
HWY_INLINE void FinishRows(const Call& call, const CallForm& c, const Item& item, const ItemForm& f, Scratch& t) {
  const DF df;
  const auto N = static_cast<int64_t>(hn::Lanes(df));
  const Plan& plan = *call.plan;
  const Sequence& seq = plan.sequences[static_cast<size_t>(item.sequence)];
  const int64_t rows = f.rows, dv = c.dv, dv_pad = c.dv_pad;
  if (item.partial_row >= 0) {
    for (int64_t r = 0; r < rows; ++r) {
      const auto row = static_cast<size_t>(item.partial_row + r);
      call.partial_m[row] = t.m[static_cast<size_t>(r)];
      call.partial_l[row] = t.bad[static_cast<size_t>(r)] != 0.0f ? std::numeric_limits<float>::quiet_NaN() : t.l[static_cast<size_t>(r)];
      std::copy_n(t.o.begin() + r * dv_pad, dv, call.partial_o + row * static_cast<size_t>(dv));
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t head = item.kv_head * plan.group + r / item.q_count;
    const int64_t query = item.q_first + r % item.q_count;
    const int64_t out_index = seq.out_base + query * plan.out.stride_seq + head * plan.out.stride_heads;
    float* o_row = t.o.data() + r * dv_pad;
    const float l = t.l[static_cast<size_t>(r)];
    const KeyRange range = t.ranges[static_cast<size_t>(r)];
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

// The items [begin, end) of a call, one after another on this thread: per item its rows
// (StartItem), then per tile of kKeyBlock keys the K / V rows (LoadTile) and either the transposed
// form's steps (TransposedTile) or the decode form's: scores (TileScores), the online softmax
// update (SoftmaxUpdate) and p.v (AccumulateTile); last the rows' output or, for a chunk of a
// split item, its part of the merge (FinishRows).
template <DType kType>
void AttendTyped(const Call& call, int64_t begin, int64_t end) {
  constexpr int64_t kBytes = kType == DType::F32 ? 4 : 2;
  const Plan& plan = *call.plan;
  Scratch t;
  const CallForm c = PrepareScratch<kType>(call, t);
  for (int64_t item_index = begin; item_index < end; ++item_index) {
    const Item& item = call.items[item_index];
    const Sequence& seq = plan.sequences[static_cast<size_t>(item.sequence)];
    const ItemForm f = StartItem<kType>(call, c, item, t);
    if (f.amx) amx_begin();  // the tile configuration, on this thread, until amx_end below
    PrefetchCursor k_prefetch, v_prefetch;
    StartCursors<kType>(call, c, item_index, begin, f, k_prefetch, v_prefetch);
    for (int64_t tile = f.first_key; tile < f.last_key; tile += kKeyBlock) {
      const int64_t tile_keys = std::min(kKeyBlock, f.last_key - tile);
      k_prefetch.at_tile(tile);
      v_prefetch.at_tile(tile);
      LoadTile<kType>(call, c, item, f, tile, tile_keys, t);
      if (f.transposed) {
        TransposedTile(call, c, item, f, tile, tile_keys, t);
        continue;
      }
      // K and V of the tile: rows in place (in their storage type), or the float32 tiles.
      const void* k_tile = t.k.data();
      int64_t k_stride = c.dq_pad;
      if (f.k_in_place) {
        k_tile = static_cast<const char*>(call.k) +
                 (seq.k_base + tile * plan.k.stride_seq + item.kv_head * plan.k.stride_heads) * kBytes;
        k_stride = plan.k.stride_seq;
      }
      const void* v_rows = f.v_in_place ? static_cast<const char*>(call.v) +
                                              (seq.v_base + tile * plan.v.stride_seq + item.kv_head * plan.v.stride_heads) * kBytes
                                        : nullptr;
      // 16-bit in-place rows: bursts a tile ahead as the loops go, up to prefetch_end.
      const bool v_bursts = f.v_in_place && kType != DType::F32;
      const int64_t v_ahead = v_bursts ? kKeyBlock : 0;
      const int64_t ahead_end = f.prefetch_end - tile;
      PrefetchCursor* k_cursor = f.k_in_place ? &k_prefetch : nullptr;
      PrefetchCursor* v_cursor = f.v_in_place && !v_bursts ? &v_prefetch : nullptr;
      TileScores<kType>(call, c, item, f, tile, tile_keys, k_tile, k_stride, ahead_end, k_cursor, t);
      SoftmaxUpdate(t, f.rows, c.s_stride, tile);
      AccumulateTile<kType>(call, c, f, v_rows, v_ahead, ahead_end, v_cursor, t);
    }
    if (f.amx) {
      amx_end();
      untranspose_amx(t.amx_ot.data(), f.rows, f.rows_pad, c.dv_pad, t.o.data());
    }
    FinishRows<kType>(call, c, item, f, t);
  }
}

}  // namespace rotary::attention_internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
