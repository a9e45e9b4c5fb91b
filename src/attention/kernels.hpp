// src/attention/kernels.hpp: the SIMD attention kernels behind rotary::attention (internal to
// rotary_attention). Plain wrappers only: no Highway type leaks out (callers stay free of SIMD headers). The
// kernels (attention_kernels-inl.h) are compiled once per Highway target in
// attention_kernels_f32.cpp, _bf16.cpp and _f16.cpp and picked at run time
// (HWY_DYNAMIC_DISPATCH), so force_cpu_target() chooses them as it chooses apply()'s.
#pragma once

#include <atomic>
#include <cstdint>

#include "rotary/spec.hpp"
#include "attention/plan.hpp"

namespace rotary::attention_internal {

// One unit of work: queries [q_first, q_first + q_count) of one sequence, for all q heads of one
// kv head (the group shares every K and V tile it loads), over the keys [key_first, key_last)
// (every key unless the item is one chunk of a split over keys, plan.hpp key_split).
//   partial_row < 0: the item writes its normalised result to out.
//   partial_row >= 0: a chunk; it writes its rows' m, l and unnormalised o (Call::partial_*) at
//   rows partial_row, partial_row + 1, ... (row r = its r-th (head, query) row), and
//   attention.cpp merges the chunks in their order.
struct Item {
  int64_t sequence = 0;
  int64_t kv_head = 0;
  int64_t q_first = 0;
  int64_t q_count = 0;
  int64_t key_first = 0;
  int64_t key_last = INT64_MAX;
  int64_t partial_row = -1;
};

// Keys per K / V tile, and the number of (head, query) rows an item aims for.
constexpr int64_t kKeyBlock = 64;
constexpr int64_t kTargetRows = 64;

// A checked call (make_plan) in the kernels' terms. q / k / v / out point at element 0 of their
// views; every offset the plan gives is inside the checked spans.
struct Call {
  const Plan* plan = nullptr;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  const Item* items = nullptr;
  float scale = 1.0f;  // the plan's scale rounded to float32 (docs/attention.md counts it)
  // Fused RoPE (null without): for each q (k) token in global order, 2 * num_pairs float32
  // values, cos then sin (CosSinTable::stored_row's layout), scaling included.
  const float* const* q_rope = nullptr;
  const float* const* k_rope = nullptr;
  int64_t num_pairs = 0;
  int64_t rotary_offset = 0;
  Style style = Style::NeoX;
  // Absolute encoding (null without): for each q (k) token in global order, the table's row of
  // qk_dim float32 values, added to the row as it is loaded.
  const float* const* q_add = nullptr;
  const float* const* k_add = nullptr;
  // ALiBi (null without): per q head its slope; the score of a key at distance t gets -slope * t.
  const float* alibi_slopes = nullptr;
  // The chunks' results (items with partial_row >= 0): per partial row, m and l (float32, the
  // scores' units: scale folded in) and o, v_dim floats at partial_o + row * v_dim.
  float* partial_m = nullptr;
  float* partial_l = nullptr;
  float* partial_o = nullptr;
};

// Runs items [begin, end) with the current target's kernels for the call's dtype.
void attend(const Call& call, int64_t begin, int64_t end);
void attend_f32(const Call& call, int64_t begin, int64_t end);
void attend_bf16(const Call& call, int64_t begin, int64_t end);
void attend_f16(const Call& call, int64_t begin, int64_t end);

// Decode-form items of 16-bit storage whose scores read K rows in place, widened as they load,
// since the process started (one relaxed add per item): how the tests see that the path ran.
extern std::atomic<int64_t> k_in_place_16bit_items;
// On unless a benchmark turns it off to time the same 16-bit decode with K widened into the tile
// first (bench/attention_bench.cpp, BM_Decode16BitKInPlaceAB). Not an option: the bits are equal.
extern std::atomic<bool> k_in_place_16bit;

}  // namespace rotary::attention_internal
