// src/attention/attention.cpp: rotary::attention, the fast CPU path: checks the call, cuts it into
// items (kernels.hpp), gathers the cos/sin rows of fused RoPE (or the rows of an absolute table),
// and runs the items on apply()'s thread pool (cpu::parallel_rows) with the dispatched kernels.
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "rotary/attention.hpp"
#include "rotary/error.hpp"
#include "src/attention/kernels.hpp"
#include "src/attention/plan.hpp"
#include "src/cpu/kernels.hpp"
#include "src/cpu/targets.hpp"

namespace rotary {
namespace attention_internal {

void attend(const Call& call, int64_t begin, int64_t end) {
  switch (call.plan->dtype) {
    case DType::F32: attend_f32(call, begin, end); return;
    case DType::BF16: attend_bf16(call, begin, end); return;
    case DType::F16: attend_f16(call, begin, end); return;
    case DType::F64: break;  // refused by make_plan(allow_f64 = false)
  }
  throw Error("attention: internal: no kernel for this dtype");
}

namespace {

// Items in an order whose contiguous halves (quarters, ...) hold similar work: under a causal
// mask query block b of n costs about b + 1 tiles, so blocks are taken from both ends in turn
// (0, n-1, 1, n-2, ...) and parallel_rows' equal contiguous chunks stay balanced.
std::vector<Item> make_items(const Plan& plan, int64_t& work) {
  const int64_t block = std::max<int64_t>(1, kTargetRows / plan.group);
  std::vector<Item> items;
  work = 0;
  if (plan.num_q_heads == 0) return items;  // nothing to compute (and out has no heads to write)
  for (size_t b = 0; b < plan.sequences.size(); ++b) {
    const Sequence& s = plan.sequences[b];
    if (s.num_queries == 0) continue;
    const int64_t blocks = (s.num_queries + block - 1) / block;
    for (int64_t g = 0; g < plan.num_kv_heads; ++g) {
      for (int64_t n = 0; n < blocks; ++n) {
        const int64_t index = n % 2 == 0 ? n / 2 : blocks - 1 - n / 2;
        const int64_t first = index * block;
        items.push_back({static_cast<int64_t>(b), g, first, std::min(block, s.num_queries - first)});
      }
    }
    // Elements the kernels touch, for parallel_rows' "worth a thread" threshold: every K and V
    // element once per query block (saturating: the threshold only needs "large").
    const double estimate = static_cast<double>(blocks) * static_cast<double>(plan.num_kv_heads) *
                            static_cast<double>(s.num_keys) * static_cast<double>(plan.qk_dim + plan.v_dim) +
                            static_cast<double>(s.num_queries) * static_cast<double>(plan.num_q_heads * plan.qk_dim);
    work = estimate > 4e18 - static_cast<double>(work) ? int64_t{4000000000000000000} : work + static_cast<int64_t>(estimate);
  }
  return items;
}

// Per token, a pointer to its 2 * num_pairs cos-then-sin floats: a stored table's own rows, or
// rows computed into `storage` for an on-the-fly table.
std::vector<const float*> rope_rows(const CosSinTable& table, std::span<const int64_t> positions,
                                    std::vector<float>& storage) {
  std::vector<const float*> rows(positions.size());
  const int64_t num_pairs = table.num_pairs();
  if (table.storage() == Storage::Stored) {
    table.reserve_rows(positions);
    for (size_t i = 0; i < positions.size(); ++i) rows[i] = table.stored_row(positions[i]);
  } else {
    storage.resize(positions.size() * static_cast<size_t>(2 * num_pairs));
    for (size_t i = 0; i < positions.size(); ++i) {
      float* row = storage.data() + i * static_cast<size_t>(2 * num_pairs);
      table.row(positions[i], row, row + num_pairs);
      rows[i] = row;
    }
  }
  return rows;
}

// Per token, a pointer to its row of the absolute table (positions checked by make_plan).
std::vector<const float*> absolute_rows(const AttentionAbsolute& absolute, std::span<const int64_t> positions) {
  std::vector<const float*> rows(positions.size());
  for (size_t i = 0; i < positions.size(); ++i) rows[i] = absolute.table.data() + positions[i] * absolute.dim;
  return rows;
}

void run(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
         const AttentionOptions& options, const AttentionRope* rope) {
  const Plan plan = make_plan(q, k, v, out, options, rope, /*allow_f64=*/false);
  cpu::apply_target_from_environment();
  int64_t work = 0;
  const std::vector<Item> items = make_items(plan, work);
  if (items.empty()) return;
  Call call;
  call.plan = &plan;
  call.q = q.data;
  call.k = k.data;
  call.v = v.data;
  call.out = out.data;
  call.items = items.data();
  call.scale = static_cast<float>(plan.scale);
  std::vector<float> q_storage, k_storage;
  std::vector<const float*> q_rows, k_rows;
  if (rope != nullptr && rope->table->num_pairs() > 0) {
    q_rows = rope_rows(*rope->table, rope->q_positions, q_storage);
    k_rows = rope_rows(*rope->table, rope->k_positions, k_storage);
    call.q_rope = q_rows.data();
    call.k_rope = k_rows.data();
    call.num_pairs = rope->table->num_pairs();
    call.rotary_offset = rope->rotary_offset;
    call.style = rope->table->spec().style;
  }
  std::vector<const float*> q_add, k_add;
  if (plan.absolute != nullptr) {
    q_add = absolute_rows(*plan.absolute, plan.absolute->q_positions);
    k_add = absolute_rows(*plan.absolute, plan.absolute->k_positions);
    call.q_add = q_add.data();
    call.k_add = k_add.data();
  }
  if (!plan.alibi_slopes.empty()) call.alibi_slopes = plan.alibi_slopes.data();
  cpu::parallel_rows(static_cast<int64_t>(items.size()), work,
                     [&](int64_t begin, int64_t end) { attend(call, begin, end); });
}

}  // namespace
}  // namespace attention_internal

void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const AttentionOptions& options) {
  attention_internal::run(q, k, v, out, options, nullptr);
}

void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const AttentionRope& rope, const AttentionOptions& options) {
  attention_internal::run(q, k, v, out, options, &rope);
}

}  // namespace rotary
