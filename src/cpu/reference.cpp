// src/cpu/reference.cpp: the float64 definition of apply() (include/rotary/apply.hpp).
//
// Plain scalar loops in float64 that mirror the math of apply.hpp line for line: no SIMD, no
// threads, no shortcuts: it is the oracle. Every fast path is tested against this file, so
// it favours being obviously right over being fast.
//
// Per token: its position in each stream, the table row(s) at those positions, then for every
// head of q (and k) the whole head is read first and written after, so that in-place calls
// (q_out == q) read no value they already wrote.
//
// Sources of the math:
//   rotation:   RoFormer (Su et al. 2021, arXiv:2104.09864), the 2-D rotation per pair: a' = a cos - c sin,
//               c' = c cos + a sin for the pair (a, c) at angle p * theta_i;
//   NeoX pairs: HF apply_rotary_pos_emb with rotate_half(x) = cat(-x2, x1): pair i = (x[i], x[i + d/2]);
//   GPT-J:      Meta llama apply_rotary_emb, view_as_complex(x) * freqs_cis: pair i = (x[2i], x[2i+1]),
//               (a + i c) * (cos + i sin) = (a cos - c sin) + i (c cos + a sin), the same rotation;
//   backward:   the transpose R(p)^T = R(-p): sin -> -sin (flash-attn `conjugate`, ggml sin_sign);
//               with attention scaling or xPos it is the transpose of the scaled rotation, i.e.
//               the gradient, which is the inverse only when the scale is 1;
//   M-RoPE:     HF apply_multimodal_rotary_pos_emb (Qwen2-VL, chunked) and Qwen3-VL's interleaved
//               assignment: pair i reads the position of stream pair_streams(spec)[i];
//   2-D vision: HF Qwen2-VL apply_rotary_pos_emb_vision: rotate_half over cat(row, column) freqs;
//               pairs [0, d/4) read the row, [d/4, d/2) the column;
//   xPos:       Sun et al. 2022 (arXiv:2212.10554) as flash-attn's RotaryEmbedding(scale_base):
//               scale = (arange(0, d, 2) + 0.4 d) / (1.4 d), power = (p - L // 2) / scale_base,
//               cos_q = cos * scale^power, cos_k = cos / scale^power (likewise sin).
//
// Storage (src/cpu/storage.hpp, load_element / store_element): values load exactly as double and
// are rounded once on store: float32 by the IEEE conversion, bf16 / f16 by double_to_bf16 /
// double_to_f16 (tensor.hpp: round to nearest even from the double itself; double -> float ->
// bf16 would round twice).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/error.hpp"
#include "cpu/backends.hpp"
#include "cpu/storage.hpp"

namespace rotary::reference {
namespace {

// ---- one head -------------------------------------------------------------------------------

// The per-pair values one token uses, already including attention scaling (the table's) and,
// for xPos, zeta_i^(+-e(p)).
struct PairValues {
  std::vector<double> cos;
  std::vector<double> sin;
};

// Rotates one head: element offsets in_base + j * in_stride (j < head_dim) to out_base + j *
// out_stride. Reads the whole head before writing any of it (in-place safety).
//
// Pair i with partner elements (a, c) and C = values.cos[i], S = values.sin[i]:
//   NeoX:  a = x[o + i],  c = x[o + i + d/2]      GPT-J:  a = x[o + 2i],  c = x[o + 2i + 1]
//   forward:   a' = a*C - c*S,  c' = c*C + a*S   (RoFormer; HF q*cos + rotate_half(q)*sin)
//   backward:  a' = a*C + c*S,  c' = c*C - a*S   (the transpose: sin -> -sin)
// Elements outside [o, o + d) are copied (converted to the output dtype).
// a*C - c*S is two products and a difference in double; a compiler allowed to contract it into
// an FMA (-ffp-contract=fast with FMA hardware) rounds once less, which every stated tolerance
// covers (they all allow at least two double roundings of |a C| + |c S|).
void rotate_head(const TensorView& in, int64_t in_base, int64_t in_stride, const TensorView& out, int64_t out_base,
                 int64_t out_stride, int64_t head_dim, const PairValues& values, Style style, Direction direction,
                 int64_t rotary_offset, int64_t rotary_dim, std::vector<double>& x, std::vector<double>& y) {
  for (int64_t j = 0; j < head_dim; ++j) {
    x[static_cast<size_t>(j)] = cpu::load_element(in.data, in.dtype, in_base + j * in_stride);
  }
  y = x;  // pass-through elements keep their value
  const int64_t num_pairs = rotary_dim / 2;
  for (int64_t i = 0; i < num_pairs; ++i) {
    const int64_t index_a = style == Style::NeoX ? rotary_offset + i : rotary_offset + 2 * i;
    const int64_t index_c = style == Style::NeoX ? rotary_offset + i + num_pairs : rotary_offset + 2 * i + 1;
    const double a = x[static_cast<size_t>(index_a)];
    const double c = x[static_cast<size_t>(index_c)];
    const double cos_value = values.cos[static_cast<size_t>(i)];
    const double sin_value = values.sin[static_cast<size_t>(i)];
    if (direction == Direction::Forward) {
      y[static_cast<size_t>(index_a)] = a * cos_value - c * sin_value;
      y[static_cast<size_t>(index_c)] = c * cos_value + a * sin_value;
    } else {
      y[static_cast<size_t>(index_a)] = a * cos_value + c * sin_value;
      y[static_cast<size_t>(index_c)] = c * cos_value - a * sin_value;
    }
  }
  for (int64_t j = 0; j < head_dim; ++j) {
    cpu::store_element(out.data, out.dtype, out_base + j * out_stride, y[static_cast<size_t>(j)]);
  }
}

// ---- the call's steps -----------------------------------------------------------------------

// The sequences: batch rows of length seq, or THD segments of cu_seqlens. A token's index in
// per-token order is first_token + s; its tensor coordinates are (batch_index, seq_index).
struct Sequence {
  int64_t first_token, length, batch_index, first_seq_index;
};

std::vector<Sequence> call_sequences(const NamedAxes& q_axes, const Positions& positions, bool thd) {
  std::vector<Sequence> sequences;
  if (thd) {
    const std::span<const int64_t> cu = positions.cu_seqlens;
    for (size_t n = 0; n + 1 < cu.size(); ++n) sequences.push_back({cu[n], cu[n + 1] - cu[n], 0, cu[n]});
  } else {
    for (int64_t b = 0; b < q_axes.batch; ++b) sequences.push_back({b * q_axes.seq, q_axes.seq, b, 0});
  }
  return sequences;
}

// The position of token s of sequence n in `stream`: per-token values are stream-major
// [streams][tokens]; sequence offsets give offset[n] + s; arange gives s.
int64_t position_of(const Positions& positions, const std::vector<Sequence>& sequences, int64_t tokens, size_t n,
                    int64_t s, int stream) {
  switch (positions.source) {
    case Positions::Source::PerToken:
      return positions.values[static_cast<size_t>(stream * tokens + sequences[n].first_token + s)];
    case Positions::Source::SequenceOffsets: return positions.values[n] + s;
    case Positions::Source::Arange: break;
  }
  return s;
}

// A stored table whose rows are read (float32 values; every precision but Exact widens them in
// row_f64) stores the rows of this call, once, before anything is written: growth can fail (past
// TableOptions::max_bytes), and a call that throws must leave the outputs as they were.
void store_rows_first(const CosSinTable& table, TableValues values, const Positions& positions,
                      const std::vector<Sequence>& sequences, int64_t tokens, int streams) {
  const bool reads_stored_rows = table.storage() == Storage::Stored &&
                                 (values == TableValues::TableFloat32 || table.precision() != Precision::Exact);
  if (!reads_stored_rows) return;
  const int64_t stored_prefix = table.size();  // rows below it are stored: no lookup
  std::vector<int64_t> missing;
  for (size_t n = 0; n < sequences.size(); ++n) {
    for (int64_t s = 0; s < sequences[n].length; ++s) {
      for (int stream = 0; stream < streams; ++stream) {
        const int64_t position = position_of(positions, sequences, tokens, n, s, stream);
        if (position >= stored_prefix && !table.is_stored(position)) missing.push_back(position);
      }
    }
  }
  table.reserve_rows(missing);
}

// xPos (flash-attn RotaryEmbedding, scale_base): zeta_i = (2i + 0.4 d) / (1.4 d),
// e(p) = (p - L // 2) / scale_base with L = options.xpos_length, else max_position_embeddings.
struct Xpos {
  bool on = false;
  std::vector<double> zeta;
  int64_t half_length = 0;
  double scale_base = 0;
};

Xpos xpos_terms(const RopeSpec& spec, const ApplyOptions& options, int64_t num_pairs) {
  Xpos xpos;
  xpos.on = spec.xpos.has_value();
  if (!xpos.on) return xpos;
  const auto d = static_cast<double>(2 * num_pairs);
  xpos.zeta.resize(static_cast<size_t>(num_pairs));
  for (int64_t i = 0; i < num_pairs; ++i) xpos.zeta[static_cast<size_t>(i)] = (2.0 * static_cast<double>(i) + 0.4 * d) / (1.4 * d);
  const int64_t length = options.xpos_length > 0 ? options.xpos_length : spec.max_position_embeddings;
  xpos.half_length = length / 2;
  xpos.scale_base = spec.xpos->scale_base;
  return xpos;
}

// One token's table rows, per stream, in double ([streams][num_pairs]): the exact values, or the
// table's float32 values widened.
void token_rows(const CosSinTable& table, TableValues values, const std::vector<int64_t>& token_positions,
                int64_t num_pairs, std::vector<double>& row_cos, std::vector<double>& row_sin,
                std::vector<float>& row_cos_f32, std::vector<float>& row_sin_f32) {
  for (size_t stream = 0; stream < token_positions.size(); ++stream) {
    double* cos_out = &row_cos[stream * static_cast<size_t>(num_pairs)];
    double* sin_out = &row_sin[stream * static_cast<size_t>(num_pairs)];
    if (values == TableValues::Exact64) {
      table.row_f64(token_positions[stream], cos_out, sin_out);
      continue;
    }
    table.row(token_positions[stream], row_cos_f32.data(), row_sin_f32.data());
    for (int64_t i = 0; i < num_pairs; ++i) {
      cos_out[i] = row_cos_f32[static_cast<size_t>(i)];
      sin_out[i] = row_sin_f32[static_cast<size_t>(i)];
    }
  }
}

// Pair i: C and S at the position of its stream; xPos multiplies q's by zeta_i^e(p) and divides
// k's by it (e(p) from the first stream's position).
void token_pair_values(const std::vector<double>& row_cos, const std::vector<double>& row_sin,
                       const std::vector<int>& stream_of_pair, size_t num_pairs, const Xpos& xpos, int64_t position,
                       PairValues& q_values, PairValues& k_values) {
  const double xpos_power = xpos.on ? static_cast<double>(position - xpos.half_length) / xpos.scale_base : 0.0;
  for (size_t pair = 0; pair < num_pairs; ++pair) {
    const auto stream = static_cast<size_t>(stream_of_pair[pair]);
    const double cos_value = row_cos[stream * num_pairs + pair];
    const double sin_value = row_sin[stream * num_pairs + pair];
    if (xpos.on) {
      const double scale = std::pow(xpos.zeta[pair], xpos_power);
      q_values.cos[pair] = cos_value * scale;
      q_values.sin[pair] = sin_value * scale;
      k_values.cos[pair] = cos_value / scale;
      k_values.sin[pair] = sin_value / scale;
    } else {
      q_values.cos[pair] = k_values.cos[pair] = cos_value;
      q_values.sin[pair] = k_values.sin[pair] = sin_value;
    }
  }
}

// Every head of one tensor at one token (batch b, sequence index seq_index).
void rotate_token_heads(const TensorView& in, const NamedAxes& in_axes, const TensorView& out, const NamedAxes& out_axes,
                        int64_t b, int64_t seq_index, const PairValues& values, Style style, const ApplyOptions& options,
                        int64_t rotary_dim, std::vector<double>& x, std::vector<double>& y) {
  for (int64_t h = 0; h < in_axes.heads; ++h) {
    rotate_head(in, b * in_axes.stride_batch + seq_index * in_axes.stride_seq + h * in_axes.stride_heads,
                in_axes.stride_dim, out, b * out_axes.stride_batch + seq_index * out_axes.stride_seq + h * out_axes.stride_heads,
                out_axes.stride_dim, in_axes.dim, values, style, options.direction, options.rotary_offset, rotary_dim, x, y);
  }
}

}  // namespace

void apply(const TensorView& q, const TensorView& k, const TensorView& q_out, const TensorView& k_out,
           const Positions& positions, const CosSinTable& table, const ApplyOptions& options, TableValues values) {
  check_apply_arguments(q, k, q_out, k_out, positions, table, options);
  backends::require_cpu(q.device, "apply (reference)", "q");  // the checks made the other views share it

  const RopeSpec& spec = table.spec();
  const int streams = position_streams(spec);
  const std::vector<int> stream_of_pair = pair_streams(spec);
  const int64_t num_pairs = table.num_pairs();
  const int64_t rotary_dim = 2 * num_pairs;
  const bool has_k = k.data != nullptr || k_out.data != nullptr;  // checked: both given or neither

  const NamedAxes q_axes = named_axes(q);
  const NamedAxes q_out_axes = named_axes(q_out);
  const NamedAxes k_axes = has_k ? named_axes(k) : NamedAxes{};
  const NamedAxes k_out_axes = has_k ? named_axes(k_out) : NamedAxes{};
  const int64_t tokens = q_axes.batch * q_axes.seq;
  // No tokens, or no elements in any token: nothing to do (and a batch of 2^40 empty sequences,
  // or 2^59 tokens of 0 heads, must not become a loop or a list of that length).
  // (Tested without multiplying: with 0 tokens, heads x dim may overflow, and the checks allow it.)
  const bool q_has_elements = q_axes.heads > 0 && q_axes.dim > 0;
  const bool k_has_elements = has_k && k_axes.heads > 0 && k_axes.dim > 0;
  if (tokens == 0 || !(q_has_elements || k_has_elements)) return;

  const std::vector<Sequence> sequences = call_sequences(q_axes, positions, q.layout == Layout::THD);
  store_rows_first(table, values, positions, sequences, tokens, streams);
  const Xpos xpos = xpos_terms(spec, options, num_pairs);

  // Table rows of one token, per stream, in double.
  std::vector<double> row_cos(static_cast<size_t>(streams * num_pairs));
  std::vector<double> row_sin(static_cast<size_t>(streams * num_pairs));
  std::vector<float> row_cos_f32(static_cast<size_t>(num_pairs));
  std::vector<float> row_sin_f32(static_cast<size_t>(num_pairs));
  PairValues q_values{std::vector<double>(static_cast<size_t>(num_pairs)), std::vector<double>(static_cast<size_t>(num_pairs))};
  PairValues k_values = q_values;
  std::vector<int64_t> token_positions(static_cast<size_t>(streams));
  // Scratch for one head, of a tensor that has heads: one without heads may state any head_dim
  // (its data is never read), 2^40 included.
  int64_t head_dim_max = q_axes.heads > 0 ? q_axes.dim : 0;
  if (has_k && k_axes.heads > 0 && k_axes.dim > head_dim_max) head_dim_max = k_axes.dim;
  std::vector<double> x(static_cast<size_t>(head_dim_max));
  std::vector<double> y(static_cast<size_t>(head_dim_max));

  for (size_t n = 0; n < sequences.size(); ++n) {
    const Sequence& sequence = sequences[n];
    for (int64_t s = 0; s < sequence.length; ++s) {
      for (int stream = 0; stream < streams; ++stream) {
        token_positions[static_cast<size_t>(stream)] = position_of(positions, sequences, tokens, n, s, stream);
      }
      token_rows(table, values, token_positions, num_pairs, row_cos, row_sin, row_cos_f32, row_sin_f32);
      token_pair_values(row_cos, row_sin, stream_of_pair, static_cast<size_t>(num_pairs), xpos, token_positions[0], q_values,
                        k_values);
      const int64_t seq_index = sequence.first_seq_index + s;
      rotate_token_heads(q, q_axes, q_out, q_out_axes, sequence.batch_index, seq_index, q_values, spec.style, options,
                         rotary_dim, x, y);
      if (has_k) {
        rotate_token_heads(k, k_axes, k_out, k_out_axes, sequence.batch_index, seq_index, k_values, spec.style,
                           options, rotary_dim, x, y);
      }
    }
  }
}

}  // namespace rotary::reference
