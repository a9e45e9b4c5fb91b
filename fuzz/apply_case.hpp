// fuzz/apply_case.hpp: a call of rotary::apply built from bytes, for the apply_args fuzz target,
// its seed corpus (fuzz/seed_corpus.cpp) and the replay tests (tests/reliability/).
//
// The bytes first choose a valid call: a spec from a small set (every position scheme, partial
// and GPT-J pairing, xPos), table options, a layout, dtypes, a small shape, which of k and the
// in-place outputs are present, and a position source with its values. Then up to 8 edits each
// set one field (a shape entry, a stride, a data offset, a dtype, a layout, a position count or
// value, an option, an alias between views) to a value that is small, raw, or one of the values
// near the int64 and position limits. So most inputs are valid calls or valid but for one or two
// fields, and the checks see every rule broken alone and in pairs, with overflowing values too.
//
// Views live in one arena of kArenaBytes: a view's data is arena + offset_bytes (a null
// pointer when null_data is set). Position spans are built from counts that edits may set to
// anything, so a span's size can disagree with the tensors (the checks' business) or be
// negative as an int64 (a size past INT64_MAX as a span's size_t). Their arrays hold exactly as
// many values as the size says, or, when it is past kMaxArray, the span's data is null: a span's
// size is the caller's promise about its array, and this harness keeps it.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/spec.hpp"
#include "rotary/table.hpp"
#include "rotary/tensor.hpp"
#include "case_support.hpp"
#include "tests/support/spec_builder.hpp"

namespace rotary::fuzz {

inline constexpr int64_t kArenaBytes = int64_t{1} << 16;

// The specs a case chooses from: every position scheme and pairing, head_dim 16.
inline RopeSpec case_spec(int choice) {
  RopeSpec spec = test::rope_spec({.name = "fuzz", .head_dim = 16, .max_position_embeddings = 64});
  switch (choice % 8) {
    case 0: break;
    case 1: spec.style = Style::GPTJ; spec.rotary_dim = 8; break;  // partial, interleaved
    case 2: spec.rotary_dim = 12; break;                            // partial, NeoX
    case 3: spec.axes = PositionAxes::MRope; spec.mrope.pairs = {2, 3, 3}; break;
    case 4:
      spec.axes = PositionAxes::MRope;
      spec.mrope.pairs = {4, 2, 2};
      spec.mrope.assignment = MRopeAssignment::Interleaved;
      break;
    case 5: spec.axes = PositionAxes::Vision2D; break;
    case 6: spec.xpos = XPos{}; break;
    case 7:
      spec.scaling.type = ScalingType::Dynamic;
      spec.scaling.factor = 2.0;
      break;
  }
  return spec;
}

struct ApplyCase {
  int table_key = 0;  // the spec and table options below, as one number (for a table cache)
  RopeSpec spec;
  TableOptions table_options;
  std::array<TensorView, 4> views{};  // q, k, q_out, k_out (data bound by bind())
  std::array<int64_t, 4> offset_bytes{};
  std::array<bool, 4> null_data{};
  std::array<bool, 4> absent{};  // TensorView{} (k and k_out: rotate q only)
  // Positions: the source, the counts its spans get in bind() (cu_seqlens: num_sequences + 1
  // values), whether cu_seqlens is given, and the values.
  Positions::Source source = Positions::Source::Arange;
  int64_t per_token_count = 0, num_offsets = 0, num_sequences = 0;
  bool cu_given = false;
  Positions positions;  // set by bind()
  std::vector<int64_t> per_token, offsets, cu_seqlens;
  ApplyOptions options;

  // Points the views into `arena` (kArenaBytes) and the position spans at their arrays, sized to
  // the counts.
  void bind(unsigned char* arena) {
    for (size_t v = 0; v < 4; ++v) {
      if (absent[v]) {
        views[v] = TensorView{};
        continue;
      }
      views[v].data = null_data[v] ? nullptr : arena + offset_bytes[v];
    }
    positions.source = source;
    positions.values = {};
    if (source == Positions::Source::PerToken) positions.values = backed(per_token, per_token_count);
    if (source == Positions::Source::SequenceOffsets) positions.values = backed(offsets, num_offsets);
    // num_sequences + 1 in uint64: INT64_MAX + 1 is a size too, and -1 + 1 = 0 is "not given".
    positions.cu_seqlens =
        cu_given ? backed(cu_seqlens, static_cast<int64_t>(static_cast<uint64_t>(num_sequences) + 1)) : std::span<const int64_t>{};
  }

 private:
  static std::span<const int64_t> backed(std::vector<int64_t>& values, int64_t count) { return backed_span(values, count); }
};

inline ApplyCase decode_apply_case(const uint8_t* data, size_t size) {
  ByteReader in(data, size);
  ApplyCase c;
  const int spec_choice = in.u8() % 8;
  const int precision = in.u8() % 2;
  const int storage = in.u8() % 2;
  const int fixed = in.u8() % 4;
  const int seq_len = in.u8() % 3;
  c.table_key = (((spec_choice * 2 + precision) * 2 + storage) * 4 + fixed) * 3 + seq_len;
  c.spec = case_spec(spec_choice);
  c.table_options.precision = precision == 0 ? Precision::Exact : Precision::HFCompat;
  c.table_options.storage = storage == 0 ? Storage::Stored : Storage::OnTheFly;
  static constexpr int64_t kFixed[] = {0, 8, 64, 4096};
  c.table_options.fixed_positions = kFixed[fixed];
  static constexpr int64_t kSeqLen[] = {0, 100, 5000};
  c.table_options.seq_len = kSeqLen[seq_len];
  c.table_options.max_bytes = int64_t{4} << 20;  // growth past it is an error, not 8 GiB of memory

  const auto layout = static_cast<Layout>(in.u8() % 4);
  std::array<DType, 4> dtypes{};
  for (DType& dtype : dtypes) dtype = static_cast<DType>(in.u8() % 4);
  const int64_t batch = in.u8() % 4;
  const int64_t seq = in.u8() % 7;
  const int64_t heads_q = in.u8() % 5;
  const int64_t heads_k = in.u8() % 5;
  const int64_t extra_q = in.u8() % 5;
  const int64_t extra_k = in.u8() % 5;
  const uint8_t flags = in.u8();
  const bool has_k = (flags & 1) != 0;
  const bool q_in_place = (flags & 2) != 0;
  const bool k_in_place = (flags & 4) != 0;
  c.options.direction = (flags & 8) != 0 ? Direction::Backward : Direction::Forward;
  c.options.rotary_offset = in.u8() % (std::min(extra_q, extra_k) + 1);
  // Outputs of in-place tensors share the input's dtype; others usually do.
  if (q_in_place || (flags & 16) == 0) dtypes[2] = dtypes[0];
  if (k_in_place || (flags & 32) == 0) dtypes[3] = dtypes[1];

  const bool thd = layout == Layout::THD;
  const int64_t tokens = thd ? seq : batch * seq;
  auto shape_of = [&](int64_t heads, int64_t dim) { return shape_in_layout(layout, batch, seq, heads, dim); };
  const int64_t dim_q = c.spec.rotary_dim + extra_q;
  const int64_t dim_k = c.spec.rotary_dim + extra_k;
  // Inputs first, then outputs, each at a 64-byte boundary; in place = the input's offset.
  int64_t next = 0;
  auto place = [&](int v, int64_t heads, int64_t dim) {
    c.views[v] = contiguous_view(nullptr, dtypes[v], layout, shape_of(heads, dim));
    c.offset_bytes[v] = next;
    next += (tokens * heads * dim * dtype_size(dtypes[v]) + 63) / 64 * 64;
  };
  place(0, heads_q, dim_q);
  place(1, heads_k, dim_k);
  place(2, heads_q, dim_q);
  place(3, heads_k, dim_k);
  if (q_in_place) c.offset_bytes[2] = c.offset_bytes[0];
  if (k_in_place) c.offset_bytes[3] = c.offset_bytes[1];
  c.absent[1] = c.absent[3] = !has_k;

  // Positions: none, per token, or per sequence; values scaled to reach every table regime.
  static constexpr int64_t kScale[] = {1, 7, 1000, int64_t{1} << 22};
  const int64_t scale = kScale[in.u8() % 4];
  const int streams = position_streams(c.spec);
  int64_t num_sequences = batch;
  if (thd) {
    num_sequences = 1 + in.u8() % 3;
    c.cu_given = true;
    c.num_sequences = num_sequences;
    c.cu_seqlens = {0};
    for (int64_t n = 1; n < num_sequences; ++n) c.cu_seqlens.push_back(std::min<int64_t>(tokens, in.u8() % (tokens + 1)));
    c.cu_seqlens.push_back(tokens);
    std::sort(c.cu_seqlens.begin(), c.cu_seqlens.end());
  }
  switch (in.u8() % 3) {
    case 0: break;
    case 1:
      c.source = Positions::Source::PerToken;
      c.per_token_count = tokens * streams;
      for (int64_t i = 0; i < tokens * streams; ++i) c.per_token.push_back(in.u8() * scale);
      break;
    case 2:
      c.source = Positions::Source::SequenceOffsets;
      c.num_offsets = num_sequences;
      for (int64_t n = 0; n < num_sequences; ++n) c.offsets.push_back(in.u8() * scale);
      break;
  }

  // The edits.
  const int num_edits = in.u8() % 9;
  for (int e = 0; e < num_edits; ++e) {
    const uint8_t kind = in.u8();
    const uint8_t target = in.u8();
    const size_t v = target % 4;
    const size_t axis = (target >> 2) % 4;
    const int64_t value = read_value(in);
    auto element_of = [&](std::vector<int64_t>& values) -> int64_t* {
      return values.empty() ? nullptr : &values[static_cast<size_t>(target) % values.size()];
    };
    switch (kind % 19) {
      case 0: c.views[v].shape[axis] = value; break;
      case 1: c.views[v].stride_elems[axis] = value; break;
      case 2: c.offset_bytes[v] = static_cast<int64_t>(static_cast<uint64_t>(value) % static_cast<uint64_t>(kArenaBytes)); break;
      case 3: c.views[v].dtype = static_cast<DType>(static_cast<uint64_t>(value) % 6); break;   // 4, 5: invalid
      case 4: c.views[v].layout = static_cast<Layout>(static_cast<uint64_t>(value) % 6); break;  // 4, 5: invalid
      case 5: c.null_data[v] = !c.null_data[v]; break;
      case 6: c.absent[v] = !c.absent[v]; break;
      case 7: c.per_token_count = value; c.source = Positions::Source::PerToken; break;
      case 8: if (int64_t* p = element_of(c.per_token)) *p = value; break;
      case 9: c.num_offsets = value; c.source = Positions::Source::SequenceOffsets; break;
      case 10: if (int64_t* p = element_of(c.offsets)) *p = value; break;
      case 11: c.num_sequences = value; c.cu_given = true; break;
      case 12: if (int64_t* p = element_of(c.cu_seqlens)) *p = value; break;
      case 13: c.options.rotary_offset = value; break;
      case 14: c.options.xpos_length = value; break;
      case 15: c.options.direction = static_cast<Direction>(static_cast<uint64_t>(value) % 4); break;
      case 16: c.offset_bytes[v] = c.offset_bytes[axis]; break;  // alias view v onto view `axis`
      case 17: {  // view v becomes a copy of view `axis`, shifted by a few elements
        c.views[v] = c.views[axis];
        c.offset_bytes[v] = (c.offset_bytes[axis] + (value & 63) * dtype_size(c.views[axis].dtype)) % kArenaBytes;
        break;
      }
      case 18: {  // switch a source on or off (back to arange), or cu_seqlens; 255: no valid source
        using Source = Positions::Source;
        if (target == 255) c.source = static_cast<Source>(3);
        else if (target % 3 == 0) c.source = c.source == Source::PerToken ? Source::Arange : Source::PerToken;
        else if (target % 3 == 1) c.source = c.source == Source::SequenceOffsets ? Source::Arange : Source::SequenceOffsets;
        else c.cu_given = !c.cu_given;
        break;
      }
    }
  }
  return c;
}

}  // namespace rotary::fuzz
