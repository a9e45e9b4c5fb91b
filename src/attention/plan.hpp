// src/attention/plan.hpp: a checked attention call in the form the implementations read (internal
// to rotary_attention). check_attention_arguments (args.cpp) builds it; reference.cpp and the
// fast path (attention.cpp, attention_kernels*) walk it and need not look at layouts again.
#pragma once

#include <algorithm>
#include <atomic>
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
  int64_t first_key = 0;      // first visible key: kv_starts[b], else 0 (<= num_keys)
  int64_t query_offset = 0;   // position of query 0
  // K and V rows that exist from k_base / v_base on (the views' seq extent from this sequence's
  // first token; >= num_keys): how far a prefetch may run past the visible keys.
  int64_t kv_rows = 0;
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

// The visible keys of a query at position p in a sequence whose keys [first_key, num_keys) are
// visible: the half-open range [first, last). Empty (first >= last) when every key is masked.
struct KeyRange {
  int64_t first = 0, last = 0;
};
inline KeyRange visible_keys(const Plan& plan, int64_t position, int64_t first_key, int64_t num_keys) {
  KeyRange range{first_key, num_keys};
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

// Flash-decoding (Dao et al. 2023, "Flash-Decoding for long-context inference"; vLLM's paged
// attention v2 and llama.cpp's split-K decode do the same): the keys of one item are cut into
// chunks that run as separate items, each giving (m, l, unnormalised o), merged at the end in
// chunk order. A decode step has only (sequences x kv heads) items — 8 for one Llama-3-8B
// sequence — each a long serial walk over its keys; chunks let more threads share a kv head and
// keep each item's loads short. The cut is a function of the call's shapes only, never of the
// thread count, so results stay bitwise identical for any number of threads.
//   kBusyItems       items a call should have; fewer unsplit items are cut into enough chunks
//                    (a fixed number, above the thread counts this library is run with).
//   kLongChunkKeys   a longer visible range is cut into chunks of at most this many keys. 1024
//                    (it was 4096): a batch of 8 float32 sequences decoding over 4,096 keys in
//                    one call (64 items, so none was cut for threads) took 9.7-10.4 ms on one
//                    thread (medians), 8.2 ms cut at 1,024 (the EPYC AVX-512 machine); one sequence
//                    over 32,768 keys measured the same either way (docs/performance.md).
//   kMinChunkKeys    no chunk shorter: below it the merge and the item's set-up cost more than
//                    the extra parallelism gives.
constexpr int64_t kBusyItems = 32;
constexpr int64_t kLongChunkKeys = 1024;
constexpr int64_t kMinChunkKeys = 512;
constexpr int64_t kSplitKeyAlign = 64;  // chunk lengths are whole key tiles (kernels.hpp kKeyBlock)

// On unless a benchmark turns it off to time the same call unsplit (bench/attention_bench.cpp,
// BM_DecodeSplitAB). Not an option of the library: results differ only within the error bound.
extern std::atomic<bool> split_over_keys;

struct KeySplit {
  int64_t chunk_keys = 0;  // keys per chunk (the last may be shorter); 0 = not split
  int64_t chunks = 1;
};
// How the `keys` visible keys of one item (the union of its rows' ranges) are cut, when the call
// has `unsplit_items` items in all and the item is its sequence's only query block (prefill
// items, many per kv head, are never cut).
inline KeySplit key_split(int64_t unsplit_items, int64_t keys) {
  if (unsplit_items <= 0 || keys <= kMinChunkKeys) return {};
  const int64_t for_threads = (kBusyItems + unsplit_items - 1) / unsplit_items;
  const int64_t for_length = (keys + kLongChunkKeys - 1) / kLongChunkKeys;
  const int64_t wanted = std::max(for_threads, for_length);
  if (wanted <= 1) return {};
  int64_t chunk_keys = (keys + wanted - 1) / wanted;
  chunk_keys = (chunk_keys + kSplitKeyAlign - 1) / kSplitKeyAlign * kSplitKeyAlign;
  chunk_keys = std::max(chunk_keys, kMinChunkKeys);
  const int64_t chunks = (keys + chunk_keys - 1) / chunk_keys;
  if (chunks <= 1) return {};
  return {chunk_keys, chunks};
}

}  // namespace rotary::attention_internal
