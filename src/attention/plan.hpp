// src/attention/plan.hpp: a checked attention call in the form the implementations read (internal
// to rotary_attention). check_attention_arguments (args.cpp) builds it; reference.cpp and the
// fast path (attention.cpp, attention_kernels*) walk it and need not look at layouts again.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "rotary/attention.hpp"

namespace rotary::attention_internal {

// One sequence of the call: where its tokens are and what its queries see.
//   Token i of q is at element q_base + i * q.stride_seq (the heads and dim axes on top); the same
//   for k, v (k_base, v_base) and out (out_base).
//   q_token0 / k_token0: the global index of token 0 in (batch, seq) order (THD: token order),
//   which is where its position is in AttentionRope::q_positions / k_positions.
struct Sequence {
  int64_t q_base = 0, k_base = 0, v_base = 0, out_base = 0;
  int64_t q_token0 = 0, k_token0 = 0;
  int64_t num_queries = 0;
  int64_t num_keys = 0;       // visible length: kv_lengths[b], else the keys the tensor holds
  int64_t query_offset = 0;   // position of query 0
};

struct Plan {
  NamedAxes q, k, v, out;
  DType dtype = DType::F32;
  int64_t num_q_heads = 0, num_kv_heads = 0, group = 1;  // group = q heads per kv head
  int64_t qk_dim = 0, v_dim = 0;
  double scale = 1.0;
  Mask mask = Mask::None;
  int64_t window = 0;
  std::vector<Sequence> sequences;
  // ALiBi: one checked slope per q head (empty = none). Absolute: the checked table (null = none).
  std::span<const float> alibi_slopes;
  const AttentionAbsolute* absolute = nullptr;
};

// Validates (check_attention_arguments) and describes the call.
Plan make_plan(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const AttentionOptions& options, const AttentionRope* rope, bool allow_f64);

// The visible keys of a query at position p in a sequence of num_keys visible keys: the
// half-open range [first, last). Empty (first >= last) when every key is masked.
struct KeyRange {
  int64_t first = 0, last = 0;
};
inline KeyRange visible_keys(const Plan& plan, int64_t position, int64_t num_keys) {
  KeyRange range{0, num_keys};
  // position <= kMaxPosition-ish bounds are checked: p + 1 cannot overflow.
  if (plan.mask == Mask::Causal && position + 1 < range.last) range.last = position + 1;
  if (plan.window > 0) {
    // p - j < window  <=>  j > p - window  <=>  j >= p - window + 1
    const int64_t first = position - plan.window + 1;
    if (first > range.first) range.first = first;
  }
  if (range.first > range.last) range.first = range.last;
  return range;
}

}  // namespace rotary::attention_internal
