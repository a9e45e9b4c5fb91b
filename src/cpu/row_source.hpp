// src/cpu/row_source.hpp: the cos/sin rows one token is rotated by, for q and for k (internal to
// rotary_cpu). apply() uses it per token; a fused attention kernel can use it the same way to
// rotate q and k blocks as it loads them.
//
// What it provides. Given a token's position in each stream (1 stream; 3 for M-RoPE: t, h, w;
// 2 for 2-D vision: row, column), rows() gives num_pairs() float32 cos and sin values for q and
// for k, ready for the kernels (cpu::HeadsArgs::cos / sin):
//   - the table's values, attention scaling included (CosSinTable::row);
//   - M-RoPE / vision: pair i from the row at the position of its stream (pair_streams(spec));
//   - xPos: q's cos and sin times zeta_i^e(p), k's divided by it, e(p) = (p - L // 2) /
//     scale_base from stream 0's position (apply.hpp);
//   - Direction::Backward: sin negated. The kernels rotate one way; the transpose of the scaled
//     rotation is the same rotation with -sin, bit for bit (negation is exact).
// Without xPos, q and k get the same pointers (k_cos == q_cos, k_sin == q_sin): the kernels
// test that to share the rows' loads between q and k (RotateTokenImpl's same_rows).
//
// Cost. A stored table, one stream, no xPos, forward (the common case): a pointer into the
// table, no copy (rows() is inline). Otherwise the values are computed into the caller's
// RowScratch: backward negates sin (one pass over the pairs); an on-the-fly table computes each
// row (CosSinTable::row: about 250 ns for 64 pairs, docs/performance.md); M-RoPE / vision read
// one row per stream and gather the pairs; xPos adds a pow() per pair. Rows a token repeats
// (every head of q and k) are computed once per token, not per head. The pointers stay valid
// until the next rows() call with the same scratch.
//
// Thread safety. A RowSource is immutable after construction and rows() is const: any number of
// threads may call it at once, each with its own RowScratch. Stored tables: every row rows() is
// asked for must be stored first (store_rows(), once, before the threads start): then rows()
// only reads the table and never waits for a writer. The RowSource borrows the table, which
// must outlive it.
//
// Positions are taken as checked (check_apply_arguments): in [0, table.max_position()].
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/table.hpp"

namespace rotary::cpu {

// One token's rows: num_pairs() values each.
struct TokenRows {
  const float* q_cos = nullptr;
  const float* q_sin = nullptr;
  const float* k_cos = nullptr;
  const float* k_sin = nullptr;
};

class RowSource;

// Per-thread working memory for RowSource::rows(): the rows it computes live here.
class RowScratch {
 public:
  explicit RowScratch(const RowSource& source);

 private:
  friend class RowSource;
  std::vector<float> rows_;         // cos and sin; xPos: q's cos and sin, k's cos and sin
  std::vector<float> stream_rows_;  // M-RoPE / vision: cos and sin of each stream's row
  std::vector<float> negated_sin_;  // backward: -sin for q, and for k when xPos gives k its own
};

class RowSource {
 public:
  // xpos_length: L in e(p) (ApplyOptions::xpos_length); 0 = the spec's max_position_embeddings.
  RowSource(const CosSinTable& table, Direction direction, int64_t xpos_length);

  int64_t num_pairs() const { return num_pairs_; }
  int streams() const { return streams_; }  // position_streams(spec)

  // Stores, for a Stored table, the rows of these positions that are not stored yet: the pages
  // holding them, in one CosSinTable::reserve_rows call (no-op for OnTheFly). position_of(t,
  // stream) gives the position of token t in [0, num_tokens) in each stream. Call once, before
  // rows() runs on several threads. Throws what reserve_rows throws (growth past max_bytes).
  template <typename PositionOf>
  void store_rows(int64_t num_tokens, const PositionOf& position_of) const {
    if (table_->storage() != Storage::Stored) return;
    const int64_t stored_prefix = table_->size();  // rows below it are stored: no lookup
    std::vector<int64_t> missing;
    for (int64_t t = 0; t < num_tokens; ++t) {
      for (int s = 0; s < streams_; ++s) {
        const int64_t position = position_of(t, s);
        if (position >= stored_prefix && !table_->is_stored(position)) missing.push_back(position);
      }
    }
    table_->reserve_rows(missing);
  }

  // The rows of a token at these positions (streams() entries, stream order).
  TokenRows rows(std::span<const int64_t> positions, RowScratch& scratch) const {
    if (table_pointers_) {
      const float* row = table_->stored_row(positions[0]);
      return {row, row + num_pairs_, row, row + num_pairs_};
    }
    return computed_rows(positions, scratch);
  }

 private:
  friend class RowScratch;
  TokenRows computed_rows(std::span<const int64_t> positions, RowScratch& scratch) const;

  const CosSinTable* table_;
  int64_t num_pairs_ = 0;
  int streams_ = 1;
  bool backward_ = false;
  bool stored_single_ = false;   // Stored, one stream, no xPos: the row is the table's own
  bool table_pointers_ = false;  // stored_single_ and forward: rows() returns the table's row
  std::vector<int> pair_stream_;  // M-RoPE / vision: the stream of each pair
  // xPos: zeta_i and L // 2 (empty / 0 without xPos).
  std::vector<double> xpos_zeta_;
  int64_t xpos_half_length_ = 0;
  double xpos_scale_base_ = 0.0;
};

}  // namespace rotary::cpu
