// src/attention/attention.cpp: rotary::attention, the fast CPU path: checks the call, cuts it into
// items (kernels.hpp), gathers the cos/sin rows of fused RoPE (or the rows of an absolute table),
// and runs the items on apply()'s thread pool (cpu::parallel_rows) with the dispatched kernels.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "rotary/attention.hpp"
#include "rotary/error.hpp"
#include "attention/backends.hpp"
#include "attention/kernels.hpp"
#include "attention/plan.hpp"
#include "cpu/kernels.hpp"
#include "cpu/storage.hpp"
#include "cpu/targets.hpp"

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

std::atomic<bool> split_over_keys{true};
std::atomic<int64_t> k_in_place_16bit_items{0};
std::atomic<bool> k_in_place_16bit{true};

namespace {

// A query block whose keys are cut into chunks (key_split): its chunks' partial rows start at
// first_partial_row, chunk c's at first_partial_row + c * rows.
struct SplitBlock {
  int64_t sequence = 0, kv_head = 0, q_first = 0, q_count = 0;
  int64_t first_partial_row = 0, chunks = 0;
};

// The call cut into items (kernels.hpp), with the work estimate parallel_rows takes.
struct Items {
  std::vector<Item> items;
  std::vector<SplitBlock> splits;
  int64_t partial_rows = 0;
  int64_t work = 0;
};

// Items in an order whose contiguous halves (quarters, ...) hold similar work: under a causal
// mask query block b of n costs about b + 1 tiles, so blocks are taken from both ends in turn
// (0, n-1, 1, n-2, ...) and parallel_rows' equal contiguous chunks stay balanced. A sequence
// whose queries fit in one block (decode) may have its keys cut into chunks (key_split): one
// item per chunk, all of a similar size.
Items make_items(const Plan& plan) {
  const int64_t block = std::max<int64_t>(1, kTargetRows / plan.group);
  Items cut;
  if (plan.num_q_heads == 0) return cut;  // nothing to compute (and out has no heads to write)
  int64_t unsplit_items = 0;
  for (const Sequence& s : plan.sequences) unsplit_items += (s.num_queries + block - 1) / block * plan.num_kv_heads;
  for (size_t b = 0; b < plan.sequences.size(); ++b) {
    const Sequence& s = plan.sequences[b];
    if (s.num_queries == 0) continue;
    const int64_t blocks = (s.num_queries + block - 1) / block;
    // The keys the block's queries see, together: ranges move right with the position.
    const KeyRange head = visible_keys(plan, s.query_offset, s.first_key, s.num_keys);
    const KeyRange tail = visible_keys(plan, s.query_offset + s.num_queries - 1, s.first_key, s.num_keys);
    const int64_t keys_first = head.first, keys_last = std::max(head.last, tail.last);
    const KeySplit split =
        blocks == 1 && split_over_keys.load(std::memory_order_relaxed) ? key_split(unsplit_items, keys_last - keys_first)
                                                                        : KeySplit{};
    for (int64_t g = 0; g < plan.num_kv_heads; ++g) {
      if (split.chunks > 1) {
        const int64_t rows = plan.group * s.num_queries;
        cut.splits.push_back({static_cast<int64_t>(b), g, 0, s.num_queries, cut.partial_rows, split.chunks});
        for (int64_t c = 0; c < split.chunks; ++c) {
          const int64_t first = keys_first + c * split.chunk_keys;
          cut.items.push_back({static_cast<int64_t>(b), g, 0, s.num_queries, first,
                               std::min(first + split.chunk_keys, keys_last), cut.partial_rows + c * rows});
        }
        cut.partial_rows += split.chunks * rows;
        continue;
      }
      for (int64_t n = 0; n < blocks; ++n) {
        const int64_t index = n % 2 == 0 ? n / 2 : blocks - 1 - n / 2;
        const int64_t first = index * block;
        cut.items.push_back({static_cast<int64_t>(b), g, first, std::min(block, s.num_queries - first)});
      }
    }
    // Elements the kernels touch, for parallel_rows' "worth a thread" threshold: every K and V
    // element once per query block (saturating: the threshold only needs "large").
    const double estimate = static_cast<double>(blocks) * static_cast<double>(plan.num_kv_heads) *
                            static_cast<double>(s.num_keys) * static_cast<double>(plan.qk_dim + plan.v_dim) +
                            static_cast<double>(s.num_queries) * static_cast<double>(plan.num_q_heads * plan.qk_dim);
    cut.work = estimate > 4e18 - static_cast<double>(cut.work) ? int64_t{4000000000000000000}
                                                                : cut.work + static_cast<int64_t>(estimate);
  }
  return cut;
}

// Merges the chunks of each split block in chunk order (flash-decoding's reduction): per row
//   m = max_c m_c,  beta_c = exp(m_c - m),  l = sum_c beta_c l_c,  o = sum_c beta_c o_c,
// then out = o / l rounded once to the storage type: zeros when the row sees no key, NaN when a
// chunk flagged it non-finite (l_c NaN) or when it sees keys but no chunk had a score above -inf
// (the float64 reference's exp(-inf + inf); attention_kernels-inl.h). One pass over rows x v_dim
// floats per block, after every item: cheap next to the items.
void merge_chunks(const Plan& plan, const Items& cut, const Call& call) {
  const int64_t dv = plan.v_dim;
  std::vector<float> o(static_cast<size_t>(dv));
  for (const SplitBlock& split : cut.splits) {
    const Sequence& seq = plan.sequences[static_cast<size_t>(split.sequence)];
    const int64_t rows = plan.group * split.q_count;
    for (int64_t r = 0; r < rows; ++r) {
      float m = -INFINITY;
      bool non_finite = false;
      for (int64_t c = 0; c < split.chunks; ++c) {
        const auto row = static_cast<size_t>(split.first_partial_row + c * rows + r);
        if (std::isnan(call.partial_l[row])) non_finite = true;
        if (call.partial_l[row] > 0.0f) m = std::max(m, call.partial_m[row]);
      }
      float l = 0.0f;
      std::fill(o.begin(), o.end(), 0.0f);
      for (int64_t c = 0; c < split.chunks && m > -INFINITY; ++c) {
        const auto row = static_cast<size_t>(split.first_partial_row + c * rows + r);
        if (!(call.partial_l[row] > 0.0f)) continue;  // the chunk saw no key of this row
        const float beta = std::exp(call.partial_m[row] - m);
        l += beta * call.partial_l[row];
        const float* o_c = call.partial_o + row * static_cast<size_t>(dv);
        for (int64_t e = 0; e < dv; ++e) o[static_cast<size_t>(e)] += beta * o_c[e];
      }
      const int64_t head = split.kv_head * plan.group + r / split.q_count;
      const int64_t query = split.q_first + r % split.q_count;
      if (!non_finite && !(l > 0.0f)) {  // no chunk contributed: no visible key, or all scored -inf
        const KeyRange range = visible_keys(plan, seq.query_offset + query, seq.first_key, seq.num_keys);
        non_finite = range.first < range.last;
      }
      const int64_t out_index = seq.out_base + query * plan.out.stride_seq + head * plan.out.stride_heads;
      for (int64_t e = 0; e < dv; ++e) {
        const float value = non_finite ? std::numeric_limits<float>::quiet_NaN() : l > 0.0f ? o[static_cast<size_t>(e)] / l : 0.0f;
        cpu::store_element(call.out, plan.dtype, out_index + e, value);  // round to nearest even, once
      }
    }
  }
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

// The CPU backend's attention: a checked call (its plan).
void run(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out, const Plan& plan,
         const AttentionRope* rope) {
  cpu::apply_target_from_environment();
  const Items cut = make_items(plan);
  if (cut.items.empty()) return;
  Call call;
  call.plan = &plan;
  call.q = q.data;
  call.k = k.data;
  call.v = v.data;
  call.out = out.data;
  call.items = cut.items.data();
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
  std::vector<float> partial_m(static_cast<size_t>(cut.partial_rows)), partial_l(partial_m.size());
  std::vector<float> partial_o(partial_m.size() * static_cast<size_t>(plan.v_dim));
  call.partial_m = partial_m.data();
  call.partial_l = partial_l.data();
  call.partial_o = partial_o.data();
  cpu::parallel_rows(static_cast<int64_t>(cut.items.size()), cut.work,
                     [&](int64_t begin, int64_t end) { attend(call, begin, end); });
  merge_chunks(plan, cut, call);
}

// The checks (device-neutral; make_plan made every view share q's device), then the backend of
// q's device.
void check_and_dispatch(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                        const AttentionOptions& options, const AttentionRope* rope) {
  const Plan plan = make_plan(q, k, v, out, options, rope, /*allow_f64=*/false);
  backends::backend_for(backends::attention_backends(), q.device, "attention", "q").attention(q, k, v, out, plan, rope);
}

}  // namespace
}  // namespace attention_internal

namespace backends {

// The attention backends this build has (src/attention/backends.hpp).
const std::array<AttentionBackend, 1>& attention_backends() {
  static constexpr std::array<AttentionBackend, 1> kBackends{{
      {"cpu", DeviceKind::CPU, &attention_internal::run},
  }};
  return kBackends;
}

}  // namespace backends

void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const AttentionOptions& options) {
  attention_internal::check_and_dispatch(q, k, v, out, options, nullptr);
}

void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const AttentionRope& rope, const AttentionOptions& options) {
  attention_internal::check_and_dispatch(q, k, v, out, options, &rope);
}

}  // namespace rotary
