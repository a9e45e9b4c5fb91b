// src/attention/reference.cpp: the float64 definition of attention (include/rotary/attention.hpp).
//
// Plain loops, no blocking, no online softmax, no threads: for each query the visible scores
// s_j = scale * <q, k_j> in double, m = max s_j, w_j = exp(s_j - m), o = sum w_j v_j / sum w_j
// (Vaswani et al. 2017, eq. 1; the max subtraction is exact algebra), rounded once on store.
// A query with no visible key stores zeros (the header's rule). With rope, q and k rows are
// rotated first in double by apply()'s formula (apply.hpp; src/cpu/reference.cpp) with the
// table's float32 values widened, so that a fast path's difference from this is its arithmetic.
// The other encodings likewise: an absolute table's float32 row is widened and added to q and k;
// ALiBi's bias -slope |p_i - j| (float32 slope widened) is added to the scaled score.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "rotary/attention.hpp"
#include "rotary/error.hpp"
#include "attention/plan.hpp"
#include "cpu/backends.hpp"
#include "cpu/storage.hpp"

namespace rotary::reference {
namespace {

using attention_internal::Plan;
using attention_internal::Sequence;

// The cos/sin row of a position as doubles (the table's float32 values, widened).
struct RopeRows {
  const AttentionRope* rope = nullptr;
  std::vector<float> cos, sin;
  void rotate(double* row, int64_t position) {
    const CosSinTable& table = *rope->table;
    const int64_t num_pairs = table.num_pairs();
    cos.resize(static_cast<size_t>(num_pairs));
    sin.resize(static_cast<size_t>(num_pairs));
    table.row(position, cos.data(), sin.data());
    const bool neox = table.spec().style == Style::NeoX;
    double* block = row + rope->rotary_offset;
    for (int64_t i = 0; i < num_pairs; ++i) {
      const int64_t first = neox ? i : 2 * i, second = neox ? i + num_pairs : 2 * i + 1;
      const double a = block[first], c = block[second];
      const double C = cos[static_cast<size_t>(i)], S = sin[static_cast<size_t>(i)];
      block[first] = a * C - c * S;  // apply.hpp, forward
      block[second] = c * C + a * S;
    }
  }
};

// Adds the absolute table's row at `position` (float32, widened) to a row of doubles.
void add_absolute(double* row, const AttentionAbsolute& absolute, int64_t position) {
  const float* values = absolute.table.data() + position * absolute.dim;
  for (int64_t e = 0; e < absolute.dim; ++e) row[e] += static_cast<double>(values[e]);
}

void run(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
         const AttentionOptions& options, const AttentionRope* rope) {
  const Plan plan = attention_internal::make_plan(q, k, v, out, options, rope, /*allow_f64=*/true);
  backends::require_cpu(q.device, "attention (reference)", "q");  // make_plan made k, v, out share it
  const AttentionAbsolute* absolute = plan.absolute;
  if (plan.num_q_heads == 0) return;  // no output heads (kv heads may still be given)
  const int64_t dq = plan.qk_dim, dv = plan.v_dim;
  RopeRows rows{rope, {}, {}};
  std::vector<double> keys, values, query(static_cast<size_t>(dq)), scores, output(static_cast<size_t>(dv));
  for (const Sequence& s : plan.sequences) {
    for (int64_t g = 0; g < plan.num_kv_heads; ++g) {
      // This kv head's keys (rotated) and values as doubles.
      keys.assign(static_cast<size_t>(s.num_keys * dq), 0.0);
      values.assign(static_cast<size_t>(s.num_keys * dv), 0.0);
      for (int64_t j = 0; j < s.num_keys; ++j) {
        const int64_t k_row = s.k_base + j * plan.k.stride_seq + g * plan.k.stride_heads;
        const int64_t v_row = s.v_base + j * plan.v.stride_seq + g * plan.v.stride_heads;
        double* key = keys.data() + j * dq;
        for (int64_t e = 0; e < dq; ++e) key[e] = cpu::load_element(k.data, k.dtype, k_row + e * plan.k.stride_dim);
        if (rope != nullptr) rows.rotate(key, rope->k_positions[static_cast<size_t>(s.k_token0 + j)]);
        if (absolute != nullptr) add_absolute(key, *absolute, absolute->k_positions[static_cast<size_t>(s.k_token0 + j)]);
        for (int64_t e = 0; e < dv; ++e) values[static_cast<size_t>(j * dv + e)] = cpu::load_element(v.data, v.dtype, v_row + e * plan.v.stride_dim);
      }
      for (int64_t h = g * plan.group; h < (g + 1) * plan.group; ++h) {
        for (int64_t i = 0; i < s.num_queries; ++i) {
          const int64_t q_row = s.q_base + i * plan.q.stride_seq + h * plan.q.stride_heads;
          const int64_t out_row = s.out_base + i * plan.out.stride_seq + h * plan.out.stride_heads;
          const attention_internal::KeyRange range = attention_internal::visible_keys(plan, s.query_offset + i, s.first_key, s.num_keys);
          std::fill(output.begin(), output.end(), 0.0);
          if (range.first < range.last) {
            for (int64_t e = 0; e < dq; ++e) query[static_cast<size_t>(e)] = cpu::load_element(q.data, q.dtype, q_row + e * plan.q.stride_dim);
            if (rope != nullptr) rows.rotate(query.data(), rope->q_positions[static_cast<size_t>(s.q_token0 + i)]);
            if (absolute != nullptr) add_absolute(query.data(), *absolute, absolute->q_positions[static_cast<size_t>(s.q_token0 + i)]);
            // ALiBi: -slope_h |p_i - j| (attention.hpp), the float32 slope widened.
            const double slope = plan.alibi_slopes.empty() ? 0.0 : static_cast<double>(plan.alibi_slopes[static_cast<size_t>(h)]);
            const int64_t position = s.query_offset + i;
            scores.assign(static_cast<size_t>(range.last - range.first), 0.0);
            double m = -INFINITY;
            for (int64_t j = range.first; j < range.last; ++j) {
              double dot = 0.0;
              for (int64_t e = 0; e < dq; ++e) dot += query[static_cast<size_t>(e)] * keys[static_cast<size_t>(j * dq + e)];
              const double distance = static_cast<double>(position >= j ? position - j : j - position);
              const double score = plan.scale * dot - slope * distance;
              scores[static_cast<size_t>(j - range.first)] = score;
              m = std::max(m, score);
            }
            double l = 0.0;
            for (int64_t j = range.first; j < range.last; ++j) {
              const double w = std::exp(scores[static_cast<size_t>(j - range.first)] - m);
              l += w;
              for (int64_t e = 0; e < dv; ++e) output[static_cast<size_t>(e)] += w * values[static_cast<size_t>(j * dv + e)];
            }
            for (double& o : output) o /= l;
          }
          for (int64_t e = 0; e < dv; ++e) cpu::store_element(out.data, out.dtype, out_row + e * plan.out.stride_dim, output[static_cast<size_t>(e)]);
        }
      }
    }
  }
}

}  // namespace

void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const AttentionOptions& options) {
  run(q, k, v, out, options, nullptr);
}

void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const AttentionRope& rope, const AttentionOptions& options) {
  run(q, k, v, out, options, &rope);
}

}  // namespace rotary::reference
