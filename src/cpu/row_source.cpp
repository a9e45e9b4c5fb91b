// src/cpu/row_source.cpp: the rows RowSource computes (row_source.hpp): on-the-fly rows, M-RoPE
// and vision gathers, xPos scaling and the backward sign.
#include "cpu/row_source.hpp"

#include <cmath>

namespace rotary::cpu {

RowSource::RowSource(const CosSinTable& table, Direction direction, int64_t xpos_length)
    : table_(&table),
      num_pairs_(table.num_pairs()),
      streams_(position_streams(table.spec())),
      backward_(direction == Direction::Backward) {
  const RopeSpec& spec = table.spec();
  const bool xpos = spec.xpos.has_value();
  stored_single_ = table.storage() == Storage::Stored && streams_ == 1 && !xpos;
  table_pointers_ = stored_single_ && !backward_;
  if (streams_ > 1) pair_stream_ = pair_streams(spec);
  // xPos (flash-attn RotaryEmbedding, scale_base): zeta_i = (2i + 0.4 d) / (1.4 d),
  // e(p) = (p - L // 2) / scale_base.
  if (xpos) {
    const double d = static_cast<double>(spec.rotary_dim);
    for (int64_t i = 0; i < num_pairs_; ++i) xpos_zeta_.push_back((2.0 * static_cast<double>(i) + 0.4 * d) / (1.4 * d));
    xpos_half_length_ = (xpos_length > 0 ? xpos_length : spec.max_position_embeddings) / 2;
    xpos_scale_base_ = spec.xpos->scale_base;
  }
}

RowScratch::RowScratch(const RowSource& source) {
  const auto num_pairs = static_cast<size_t>(source.num_pairs_);
  const bool xpos = !source.xpos_zeta_.empty();
  if (!source.stored_single_) rows_.resize((xpos ? 6 : 2) * num_pairs);
  if (source.streams_ > 1) stream_rows_.resize(2 * num_pairs * static_cast<size_t>(source.streams_));
  if (source.backward_) negated_sin_.resize((xpos ? 2 : 1) * num_pairs);
}

TokenRows RowSource::computed_rows(std::span<const int64_t> positions, RowScratch& scratch) const {
  const int64_t n = num_pairs_;
  TokenRows rows;
  if (stored_single_) {
    const float* row = table_->stored_row(positions[0]);
    rows = {row, row + n, row, row + n};
  } else {
    float* cos_row = scratch.rows_.data();
    float* sin_row = cos_row + n;
    if (streams_ == 1) {
      table_->row(positions[0], cos_row, sin_row);
    } else {
      // M-RoPE / vision: pair i takes its values from the row of its stream's position.
      float* stream_rows = scratch.stream_rows_.data();
      for (int s = 0; s < streams_; ++s) table_->row(positions[s], stream_rows + 2 * s * n, stream_rows + (2 * s + 1) * n);
      for (int64_t i = 0; i < n; ++i) {
        const int s = pair_stream_[static_cast<size_t>(i)];
        cos_row[i] = stream_rows[(2 * s) * n + i];
        sin_row[i] = stream_rows[(2 * s + 1) * n + i];
      }
    }
    rows = {cos_row, sin_row, cos_row, sin_row};
    if (!xpos_zeta_.empty()) {
      // The scale in double, each product rounded once to float32.
      float* q_cos = sin_row + n;
      float* q_sin = q_cos + n;
      float* k_cos = q_sin + n;
      float* k_sin = k_cos + n;
      const double e = static_cast<double>(positions[0] - xpos_half_length_) / xpos_scale_base_;
      for (int64_t i = 0; i < n; ++i) {
        const double scale = std::pow(xpos_zeta_[static_cast<size_t>(i)], e);
        q_cos[i] = static_cast<float>(cos_row[i] * scale);
        q_sin[i] = static_cast<float>(sin_row[i] * scale);
        k_cos[i] = static_cast<float>(cos_row[i] / scale);
        k_sin[i] = static_cast<float>(sin_row[i] / scale);
      }
      rows = {q_cos, q_sin, k_cos, k_sin};
    }
  }
  if (backward_) {
    float* q_negated = scratch.negated_sin_.data();
    for (int64_t i = 0; i < n; ++i) q_negated[i] = -rows.q_sin[i];
    if (rows.k_sin == rows.q_sin) {
      rows.k_sin = q_negated;  // still shared with q: the kernels' same_rows
    } else {
      float* k_negated = q_negated + n;
      for (int64_t i = 0; i < n; ++i) k_negated[i] = -rows.k_sin[i];
      rows.k_sin = k_negated;
    }
    rows.q_sin = q_negated;
  }
  return rows;
}

}  // namespace rotary::cpu
