// fuzz/attention_case.hpp: a call of rotary::attention built from bytes, for the attention_args
// fuzz target, its seed corpus (fuzz/seed_corpus.cpp) and the replay tests (tests/reliability/).
//
// The bytes first choose a valid call: a layout (BSHD, BHSD, SBHD, THD), a storage type (f32,
// bf16, f16), a small shape (q heads a multiple of kv heads; sometimes enough queries for two
// query blocks and enough keys for several tiles and the split over keys), a mask, a window, a
// scale, per-sequence kv_lengths, query offsets and (read last) kv_starts (THD: cu_seqlens), and
// one position encoding:
// none, fused RoPE (a table from attention_spec's set, partial rotary and a rotary_offset
// included, one position per q and k token), ALiBi slopes (the paper's or random ones), or an
// absolute table. Then up to 8 edits each set one field (a shape entry, a stride, a data offset,
// a dtype, a layout, a span's length or one of its values, the window, the mask, the scale to
// NaN / 0 / negative / past float32, positions past the table, an alias between views, null
// data, a second encoding) to a value that is small, raw, or near a limit (read_value).
//
// Views live in one arena of kAttentionArenaBytes (a view's data is arena + offset_bytes, null
// when null_data is set). Spans are backed as their sizes promise (case_support.hpp backed_span);
// a case with a span count past kMaxArray or negative is not run (spans_backed).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "case_support.hpp"
#include "fuzz_support.hpp"
#include "rotary/attention.hpp"
#include "rotary/encodings.hpp"
#include "rotary/spec.hpp"
#include "rotary/table.hpp"
#include "rotary/tensor.hpp"
#include "tests/support/attention_bound.hpp"
#include "tests/support/elements.hpp"
#include "tests/support/spec_builder.hpp"

namespace rotary::fuzz {

inline constexpr int64_t kAttentionArenaBytes = int64_t{1} << 18;
inline constexpr int kAttentionSpecs = 8;
inline constexpr int kAttentionTableOptions = 3;

// The specs the attention and KV-cache targets choose from, head_dim 16: full and partial
// rotation in both pairings, YaRN (attention_scaling != 1), LongRoPE (short / long factors by
// seq_len, switching at 32), dynamic NTK (frequencies change past 32), and two specs that fused
// attention and the cache refuse (M-RoPE, xPos).
inline RopeSpec attention_spec(int choice) {
  RopeSpec spec = test::rope_spec({.name = "fuzz", .head_dim = 16, .max_position_embeddings = 64});
  switch (choice % kAttentionSpecs) {
    case 0: break;
    case 1: spec.style = Style::GPTJ; spec.rotary_dim = 8; spec.partial_rotary_factor = 0.5; break;
    case 2: spec.rotary_dim = 12; spec.partial_rotary_factor = 0.75; break;
    case 3:
      spec.scaling.type = ScalingType::Yarn;
      spec.scaling.factor = 4.0;
      spec.scaling.original_max_position_embeddings = 16;
      break;
    case 4:
      spec.scaling.type = ScalingType::LongRope;
      spec.scaling.original_max_position_embeddings = 32;
      spec.scaling.short_factor = {1.0, 1.1, 1.2, 1.3, 1.5, 1.8, 2.0, 2.5};
      spec.scaling.long_factor = {1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 16.0};
      spec.max_position_embeddings = 128;
      break;
    case 5:
      spec.scaling.type = ScalingType::Dynamic;
      spec.scaling.factor = 2.0;
      spec.max_position_embeddings = 32;
      break;
    case 6: spec.axes = PositionAxes::MRope; spec.mrope.pairs = {2, 3, 3}; break;
    case 7: spec.xpos = XPos{}; break;
  }
  return spec;
}

// Table options by choice: grown on demand, a fixed table of 64 rows (positions past it are
// errors), and frequencies for seq_len 100 (LongRoPE's long factors, dynamic NTK's base for 100).
inline TableOptions attention_table_options(int choice) {
  TableOptions options;
  options.max_bytes = int64_t{4} << 20;  // growth past it is an error, not 8 GiB of memory
  switch (choice % kAttentionTableOptions) {
    case 0: break;
    case 1: options.fixed_positions = 64; break;
    case 2: options.seq_len = 100; break;
  }
  return options;
}

// A float from an edit's value: a few specials (NaN, infinities, past float32, subnormal, 0,
// negative) or value / 16.
inline double special_double(int64_t value) {
  static constexpr double kSpecial[] = {std::numeric_limits<double>::quiet_NaN(), INFINITY, -INFINITY, 0.0, -1.0,
                                        1e39, 3.4e38, 1e30, 1e300, 1e-300, 1e-40, 0x1p-149, 0x1p100, 65536.0};
  const auto choice = static_cast<uint64_t>(value) % 32;
  if (choice < sizeof kSpecial / sizeof kSpecial[0]) return kSpecial[choice];
  return static_cast<double>(value) / 16;
}

struct AttentionCase {
  int spec_choice = 0, options_choice = 0;  // the rope table (attention_spec, attention_table_options)
  std::array<TensorView, 4> views{};        // q, k, v, out (data bound by bind())
  std::array<int64_t, 4> offset_bytes{};
  std::array<bool, 4> null_data{};
  AttentionOptions options;  // spans bound by bind()
  // Per-sequence spans: counts (0 = not given) and values.
  int64_t num_kv_lengths = 0, num_query_offsets = 0, num_cu_q = 0, num_cu_k = 0, num_kv_starts = 0;
  std::vector<int64_t> kv_lengths, query_offsets, cu_q, cu_k, kv_starts;
  // Fused RoPE.
  bool rope_on = false, null_table = false;
  AttentionRope rope;  // table and spans bound by bind()
  int64_t num_rope_q = 0, num_rope_k = 0;
  std::vector<int64_t> rope_q, rope_k;
  // ALiBi.
  int64_t num_slopes = 0;
  std::vector<float> slopes;
  // Absolute table.
  bool absolute_on = false;
  AttentionAbsolute absolute;
  int64_t num_abs_values = 0, num_abs_q = 0, num_abs_k = 0;
  std::vector<float> abs_table;
  std::vector<int64_t> abs_q, abs_k;
  // A non-finite input (read last, so older inputs keep their meaning): 0 none, 1 NaN, 2 +inf,
  // 3 -inf, written into element `special_pick` (modulo its element count) of view
  // `special_view` (q, k or v) of the arena copy a run starts from.
  int special_kind = 0;
  size_t special_view = 0;
  int64_t special_pick = 0;

  // Whether every span can be backed by an array of its size (a count in [0, kMaxArray]). A
  // span's size is the caller's promise about its array, and attention may read all of a span
  // whose size its checks accept (cu_seqlens of any length, positions for 2^40 tokens without
  // elements), so a call with a span this harness cannot back is not made.
  bool spans_backed() const {
    for (const int64_t count : {num_kv_lengths, num_query_offsets, num_cu_q, num_cu_k, num_kv_starts, num_rope_q, num_rope_k, num_slopes,
                                num_abs_values, num_abs_q, num_abs_k}) {
      if (count < 0 || count > kMaxArray) return false;
    }
    return true;
  }

  // Points the views into `arena` and every span at its array, sized to its count.
  void bind(unsigned char* arena, const CosSinTable* table) {
    for (size_t v = 0; v < 4; ++v) views[v].data = null_data[v] ? nullptr : arena + offset_bytes[v];
    options.kv_lengths = backed_span(kv_lengths, num_kv_lengths);
    options.kv_starts = backed_span(kv_starts, num_kv_starts);
    options.query_offsets = backed_span(query_offsets, num_query_offsets);
    options.cu_seqlens_q = backed_span(cu_q, num_cu_q);
    options.cu_seqlens_k = backed_span(cu_k, num_cu_k);
    options.alibi_slopes = backed_span(slopes, num_slopes);
    rope.table = null_table ? nullptr : table;
    rope.q_positions = backed_span(rope_q, num_rope_q);
    rope.k_positions = backed_span(rope_k, num_rope_k);
    absolute.table = backed_span(abs_table, num_abs_values);
    absolute.q_positions = backed_span(abs_q, num_abs_q);
    absolute.k_positions = backed_span(abs_k, num_abs_k);
    options.absolute = absolute_on ? &absolute : nullptr;
  }
};

inline AttentionCase decode_attention_case(const uint8_t* data, size_t size) {
  ByteReader in(data, size);
  AttentionCase c;
  const auto layout = static_cast<Layout>(in.u8() % 4);
  const auto dtype = static_cast<DType>(in.u8() % 3);
  const bool thd = layout == Layout::THD;
  const int64_t batch = thd ? 1 : in.u8() % 4;
  // Short sequences mostly; a high bit asks for two query blocks / several key tiles and the
  // split over keys (64-key tiles, attention plan.hpp).
  const uint8_t q_byte = in.u8(), k_byte = in.u8();
  const int64_t q_seq = (q_byte & 0x80) != 0 ? (q_byte & 0x7f) % 80 : q_byte % 7;
  const int64_t k_seq = (k_byte & 0x80) != 0 ? (k_byte & 0x7f) % 200 : k_byte % 9;
  const int64_t kv_heads = 1 + in.u8() % 3;
  const int64_t q_heads = kv_heads * (1 + in.u8() % 3);
  const int encoding = in.u8() % 4;  // none, RoPE, ALiBi, absolute
  c.rope_on = encoding == 1;
  c.absolute_on = encoding == 3;
  c.spec_choice = in.u8() % kAttentionSpecs;
  c.options_choice = in.u8() % kAttentionTableOptions;
  const RopeSpec spec = attention_spec(c.spec_choice);
  const int64_t qk_dim = c.rope_on ? 16 + in.u8() % 5 : 1 + in.u8() % 20;
  const int64_t v_dim = 1 + in.u8() % 12;
  c.options.mask = in.u8() % 2 == 0 ? Mask::None : Mask::Causal;
  c.options.window = in.u8() % 5;
  switch (in.u8() % 4) {
    case 0: break;
    case 1: c.options.scale = 0.25; break;
    case 2: c.options.scale = 1.0; break;
    default: c.options.scale = 0.01 + in.u8() / 32.0; break;
  }

  // Sequences: THD cuts its tokens into 1-3 segments (cu_seqlens), the others may give kv_lengths.
  int64_t num_sequences = batch;
  if (thd) {
    num_sequences = 1 + in.u8() % 3;
    for (auto [cu, tokens] : {std::pair{&c.cu_q, q_seq}, std::pair{&c.cu_k, k_seq}}) {
      cu->assign(1, 0);
      for (int64_t n = 1; n < num_sequences; ++n) cu->push_back(in.u8() % (tokens + 1));
      cu->push_back(tokens);
      std::sort(cu->begin(), cu->end());
    }
    c.num_cu_q = c.num_cu_k = num_sequences + 1;
  } else if (in.u8() % 2 == 1) {
    c.num_kv_lengths = num_sequences;
    for (int64_t b = 0; b < num_sequences; ++b) c.kv_lengths.push_back(in.u8() % (k_seq + 1));
  }
  switch (in.u8() % 3) {
    case 0: break;
    case 1: c.options.query_offset = in.u8() % 10; break;
    case 2:
      c.num_query_offsets = num_sequences;
      for (int64_t b = 0; b < num_sequences; ++b) c.query_offsets.push_back(in.u8() % 10);
      break;
  }

  const int64_t q_tokens = thd ? q_seq : batch * q_seq, k_tokens = thd ? k_seq : batch * k_seq;
  if (c.rope_on) {
    static constexpr int64_t kScale[] = {1, 3, 7, 1000};
    const int64_t scale = kScale[in.u8() % 4];
    const int64_t rotary_dim = spec.rotary_dim;
    c.rope.rotary_offset = in.u8() % (qk_dim - rotary_dim + 1);
    c.num_rope_q = q_tokens;
    c.num_rope_k = k_tokens;
    for (int64_t i = 0; i < q_tokens; ++i) c.rope_q.push_back(in.u8() * scale);
    for (int64_t i = 0; i < k_tokens; ++i) c.rope_k.push_back(in.u8() * scale);
  }
  if (encoding == 2) {
    c.num_slopes = q_heads;
    if (in.u8() % 2 == 0) {
      for (const double slope : alibi_slopes(q_heads)) c.slopes.push_back(static_cast<float>(slope));
    } else {
      for (int64_t h = 0; h < q_heads; ++h) c.slopes.push_back(static_cast<float>(static_cast<int8_t>(in.u8())) / 128.0f);
    }
  }
  if (c.absolute_on) {
    c.absolute.rows = 1 + in.u8() % 40;
    c.absolute.dim = qk_dim;
    c.num_abs_values = c.absolute.rows * qk_dim;
    for (int64_t i = 0; i < std::min<int64_t>(c.num_abs_values, 64); ++i) {
      c.abs_table.push_back(static_cast<float>(static_cast<int8_t>(in.u8())) / 64.0f);
    }
    c.num_abs_q = q_tokens;
    c.num_abs_k = k_tokens;
    for (int64_t i = 0; i < q_tokens; ++i) c.abs_q.push_back(in.u8() % c.absolute.rows);
    for (int64_t i = 0; i < k_tokens; ++i) c.abs_k.push_back(in.u8() % c.absolute.rows);
  }

  // The views, each at a 64-byte boundary of the arena.
  int64_t next = 0;
  auto place = [&](size_t v, int64_t seq, int64_t tokens, int64_t heads, int64_t dim) {
    c.views[v] = contiguous_view(nullptr, dtype, layout, shape_in_layout(layout, batch, seq, heads, dim));
    c.offset_bytes[v] = next;
    next += (tokens * heads * dim * dtype_size(dtype) + 63) / 64 * 64;
  };
  place(0, q_seq, q_tokens, q_heads, qk_dim);
  place(1, k_seq, k_tokens, kv_heads, qk_dim);
  place(2, k_seq, k_tokens, kv_heads, v_dim);
  place(3, q_seq, q_tokens, q_heads, v_dim);

  // The edits.
  const int num_edits = in.u8() % 9;
  for (int e = 0; e < num_edits; ++e) {
    const Edit edit = read_edit(in);
    const uint8_t kind = edit.kind, target = edit.target;
    const size_t v = edit.view, axis = edit.axis;
    const int64_t value = edit.value;
    auto set_element = [&](auto& values) {
      if (!values.empty()) values[static_cast<size_t>(target) % values.size()] = static_cast<typename std::decay_t<decltype(values)>::value_type>(value);
    };
    switch (kind % 34) {
      case 0: c.views[v].shape[axis] = value; break;
      case 1: c.views[v].stride_elems[axis] = value; break;
      case 2: c.offset_bytes[v] = static_cast<int64_t>(static_cast<uint64_t>(value) % static_cast<uint64_t>(kAttentionArenaBytes)); break;
      case 3: c.views[v].dtype = static_cast<DType>(static_cast<uint64_t>(value) % 6); break;    // 3: F64; 4, 5: invalid
      case 4: c.views[v].layout = static_cast<Layout>(static_cast<uint64_t>(value) % 6); break;  // 4, 5: invalid
      case 5: c.null_data[v] = !c.null_data[v]; break;
      case 6: c.offset_bytes[v] = c.offset_bytes[axis]; break;  // alias view v onto view `axis`
      case 7:  // view v becomes a copy of view `axis`, shifted by a few elements
        c.views[v] = c.views[axis];
        c.offset_bytes[v] = (c.offset_bytes[axis] + (value & 63) * dtype_size(c.views[axis].dtype)) % kAttentionArenaBytes;
        break;
      case 8: c.num_kv_lengths = value; break;
      case 9: set_element(c.kv_lengths); break;
      case 10: c.num_query_offsets = value; break;
      case 11: set_element(c.query_offsets); break;
      case 12: c.options.query_offset = value; break;
      case 13: c.num_cu_q = value; break;
      case 14: set_element(c.cu_q); break;
      case 15: c.num_cu_k = value; break;
      case 16: set_element(c.cu_k); break;
      case 17: c.options.window = value; break;
      case 18: c.options.mask = static_cast<Mask>(static_cast<uint64_t>(value) % 3); break;  // 2: invalid
      case 19: c.options.scale = special_double(value); break;
      case 20:  // switch an encoding on or off (two at once are refused)
        if (target % 3 == 0) c.rope_on = !c.rope_on;
        else if (target % 3 == 1) c.num_slopes = c.num_slopes == 0 ? static_cast<int64_t>(std::max<size_t>(c.slopes.size(), 1)) : 0;
        else c.absolute_on = !c.absolute_on;
        break;
      case 21: c.null_table = !c.null_table; break;
      case 22: c.num_rope_q = value; break;
      case 23: set_element(c.rope_q); break;
      case 24: c.num_rope_k = value; break;
      case 25: set_element(c.rope_k); break;
      case 26: c.rope.rotary_offset = value; break;
      case 27: c.rope.seq_len = value; break;
      case 28: c.num_slopes = value; break;
      case 29:
        if (!c.slopes.empty()) c.slopes[target % c.slopes.size()] = static_cast<float>(special_double(value));
        break;
      case 30: c.absolute.rows = value; break;
      case 31: c.absolute.dim = value; break;
      case 32: c.num_abs_values = value; break;
      case 33:
        if (target % 2 == 0) c.num_abs_q = value;
        else set_element(c.abs_k);
        break;
    }
  }
  // kv_starts (left padding), read after everything else, so that an input which ends before
  // them (every input written before they existed) gives none: 1 = a first key per sequence in
  // [0, its keys]; 3 = a count off by one and raw byte values, for the checks.
  const uint8_t starts = in.u8() % 4;
  if (starts == 1 || starts == 3) {
    c.num_kv_starts = starts == 1 ? num_sequences : std::max<int64_t>(0, num_sequences + (in.u8() % 2 == 1 ? 1 : -1));
    for (int64_t b = 0; b < c.num_kv_starts; ++b) {
      const int64_t keys = static_cast<size_t>(b) < c.kv_lengths.size() ? c.kv_lengths[static_cast<size_t>(b)] : k_seq;
      c.kv_starts.push_back(starts == 1 ? in.u8() % (std::max<int64_t>(keys, 0) + 1) : static_cast<int8_t>(in.u8()));
    }
  }
  // Degenerate head dims and a non-finite input, read after everything else (older inputs end
  // before them and keep their meaning): 1 = q and k head dim 0 (every score the empty sum 0),
  // 2 = v and out head dim 0 (nothing to write); then a special value's kind, view and element.
  const uint8_t degenerate = in.u8() % 4;
  const size_t dim_axis = static_cast<size_t>(layout_rank(layout) - 1);
  if (degenerate == 1) c.views[0].shape[dim_axis] = c.views[1].shape[dim_axis] = 0;
  if (degenerate == 2) c.views[2].shape[dim_axis] = c.views[3].shape[dim_axis] = 0;
  const uint8_t special = in.u8();
  c.special_kind = special % 4;
  c.special_view = static_cast<size_t>(special / 4 % 3);
  c.special_pick = in.u8() | (in.u8() << 8);
  return c;
}

// Visits every element of `view` (its element index from data).
template <typename Visit>
void for_each_element(const TensorView& view, Visit&& visit) {
  const int rank = layout_rank(view.layout);
  std::array<int64_t, 4> extent{1, 1, 1, 1}, stride{0, 0, 0, 0};
  for (int axis = 0; axis < rank; ++axis) {
    extent[static_cast<size_t>(axis)] = view.shape[static_cast<size_t>(axis)];
    stride[static_cast<size_t>(axis)] = view.stride_elems[static_cast<size_t>(axis)];
  }
  for (int64_t i0 = 0; i0 < extent[0]; ++i0)
    for (int64_t i1 = 0; i1 < extent[1]; ++i1)
      for (int64_t i2 = 0; i2 < extent[2]; ++i2)
        for (int64_t i3 = 0; i3 < extent[3]; ++i3) visit(i0 * stride[0] + i1 * stride[1] + i2 * stride[2] + i3 * stride[3]);
}

// The largest |element| of `view` with its data at `base`.
inline double max_abs(const TensorView& view, const void* base) {
  double largest = 0;
  for_each_element(view, [&](int64_t index) { largest = std::max(largest, std::abs(test::load_element(base, view.dtype, index))); });
  return largest;
}

// The largest finite |element| of a view (its non-finite elements skipped: the bounds of a call
// with a NaN or inf written into it are judged on the rest).
inline double max_abs_finite(const TensorView& view, const void* base) {
  double largest = 0;
  for_each_element(view, [&](int64_t index) {
    const double value = std::abs(test::load_element(base, view.dtype, index));
    if (std::isfinite(value)) largest = std::max(largest, value);
  });
  return largest;
}

// With a non-finite input: every element of `out` is non-finite in the fast path exactly where it
// is in the reference (attention_kernels-inl.h: NaN and infinities propagate as IEEE arithmetic
// does in the float64 reference), NaN where the reference is NaN, and infinite only as the
// reference's infinity. A fast NaN may stand for a reference infinity: a weight that underflows
// in float32 (exp below -104) but not in float64 turns inf * weight into 0 * inf. Returns the
// number of elements.
inline int64_t require_same_finiteness(const TensorView& out, const void* fast_base, const void* ref_base) {
  int64_t compared = 0;
  for_each_element(out, [&](int64_t index) {
    const double f = test::load_element(fast_base, out.dtype, index);
    const double r = test::load_element(ref_base, out.dtype, index);
    const std::string where = "element " + std::to_string(index) + ": fast " + std::to_string(f) + ", reference " + std::to_string(r);
    require(std::isfinite(f) == std::isfinite(r), "with a non-finite input, the output is non-finite exactly where the reference's is", where);
    if (std::isnan(r)) require(std::isnan(f), "NaN where the reference is NaN", where);
    if (std::isinf(f)) require(f == r, "an infinite output is the reference's infinity", where);
    ++compared;
  });
  return compared;
}

// Requires every element of `out` (the fast path's at fast_base, the reference's at ref_base,
// both stored in out's dtype) to be finite and within `arithmetic` (attention_arithmetic_bound)
// plus the storage of both results: 2u max(|fast|, |ref|) for float32, two units of bfloat16 /
// float16 (the fast path's rounding and the reference's). Returns the number of elements.
inline int64_t require_within_attention_bound(const TensorView& out, const void* fast_base, const void* ref_base, double arithmetic) {
  int64_t compared = 0;
  for_each_element(out, [&](int64_t index) {
    const double f = test::load_element(fast_base, out.dtype, index);
    const double r = test::load_element(ref_base, out.dtype, index);
    require(std::isfinite(f), "attention's output is finite for finite inputs",
            "element " + std::to_string(index) + ": fast " + std::to_string(f) + ", reference " + std::to_string(r));
    const double larger = std::max(std::abs(f), std::abs(r));
    const double storage = out.dtype == DType::F32 ? 2 * test::kUnitRoundoff32 * larger : 2 * test::storage_ulp(out.dtype, larger);
    require(std::abs(f - r) <= arithmetic + storage, "attention is within the error bound of reference::attention",
            "element " + std::to_string(index) + ": fast " + std::to_string(f) + ", reference " + std::to_string(r) +
                ", tolerance " + std::to_string(arithmetic + storage));
    ++compared;
  });
  return compared;
}

}  // namespace rotary::fuzz
